"""Lab hosts as podman containers: a Debian base from mmdebstrap running `sshd -D` on loopback.

Each container gets its own host key (bind-mounted read-only) and the lab's client key as
root's authorized_keys. The image carries no host keys of its own.
"""

from __future__ import annotations

import re

from fleetgate.lab.keys import host_key
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import IMAGE_ID_FILE, LabHost
from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import LABEL, Podman
from fleetgate.system.recipes import container_recipe, execution_node_recipe, import_base

# The lab keeps its SSH multiplexing sockets in a mkdtemp dir (lab/keys.py), which the
# inventory names in ControlPath; an execution node's Ansible needs the same path to exist.
CONTROL_DIR_RE = re.compile(r"^/tmp/fgcp-[A-Za-z0-9_]{1,32}$")


def ensure_base_image(podman: Podman, nc: NodeClass) -> str:
    return import_base(podman, container_recipe(nc))


def container_name(paths: LabPaths, host: str) -> str:
    return f"fg{paths.lab_id}-{host}"


def start_container(podman: Podman, paths: LabPaths, host: LabHost) -> str:
    """Start the host's container; returns podman's id of it."""
    key = host_key(paths, host.name)
    pub = paths.ssh_key.with_suffix(".pub")
    image_id: list[str] = []
    if host.image_id is not None:
        # Outside the container, so that a re-imaged host still says what it runs, and
        # read-only: the host cannot claim another image.
        record = paths.host_dir(host.name) / "image-id"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(host.image_id + "\n")
        image_id = ["--volume", f"{record}:{IMAGE_ID_FILE}:ro"]
    out = podman(
        "run", "--detach", "--init",
        "--name", host.runtime_name,
        "--hostname", host.name,
        "--label", f"{LABEL}={paths.lab_id}",
        "--publish", f"127.0.0.1:{host.port}:22",
        "--volume", f"{key}:/etc/ssh/ssh_host_ed25519_key:ro",
        "--volume", f"{key}.pub:/etc/ssh/ssh_host_ed25519_key.pub:ro",
        "--volume", f"{pub}:/root/.ssh/authorized_keys:ro",
        *image_id,
        host.image,
        "/bin/sh", "-c", "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e",
    )
    return out.stdout.strip()


def ensure_execution_node_image(podman: Podman, nc: NodeClass) -> str:
    return import_base(podman, execution_node_recipe(nc))


def start_execution_node(podman: Podman, paths: LabPaths, node: LabHost,
                         control_dir: str | None) -> str:
    """An execution node: sshd on 127.0.0.1:PORT in the machine's own network namespace, so
    its Ansible reaches the lab hosts at the same 127.0.0.1 ports the controller does, with
    the lab's trust (its client key and known_hosts, read-only, at the paths the inventory
    names). Nothing is published beyond loopback: sshd listens there only."""
    key = host_key(paths, node.name)
    pub = paths.ssh_key.with_suffix(".pub")
    ssh_dir = paths.ssh_key.parent
    mkdirs = "/run/sshd"
    if control_dir:
        if not CONTROL_DIR_RE.fullmatch(control_dir):
            raise ValueError(f"lab control dir {control_dir!r} is not a lab mkdtemp dir")
        mkdirs += f" {control_dir}"
    out = podman(
        "run", "--detach", "--init", "--network", "host",
        "--name", node.runtime_name,
        "--label", f"{LABEL}={paths.lab_id}",
        "--volume", f"{key}:/etc/ssh/ssh_host_ed25519_key:ro",
        "--volume", f"{key}.pub:/etc/ssh/ssh_host_ed25519_key.pub:ro",
        "--volume", f"{pub}:/root/.ssh/authorized_keys:ro",
        "--volume", f"{ssh_dir}:{ssh_dir}:ro",
        node.image,
        "/bin/sh", "-c", f"mkdir -p -m 0700 {mkdirs} && exec /usr/sbin/sshd -D -e "
        f"-p {int(node.port)} -o ListenAddress=127.0.0.1",
    )
    return out.stdout.strip()


def remove_containers(podman: Podman, paths: LabPaths) -> list[str]:
    names = podman.containers_with_label(paths.lab_id)
    if names:
        podman("rm", "--force", "--time", "0", *names, timeout=180)
    return names
