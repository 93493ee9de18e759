"""Lab hosts as podman containers: a Debian base from mmdebstrap running `sshd -D` on loopback.

Each container gets its own host key (bind-mounted read-only) and the lab's client key as
root's authorized_keys. The image carries no host keys of its own.
"""

from __future__ import annotations

from fleetgate.lab.keys import host_key
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import IMAGE_ID_FILE, LabHost
from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import LABEL, Podman
from fleetgate.system.recipes import container_recipe, import_base


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


def remove_containers(podman: Podman, paths: LabPaths) -> list[str]:
    names = podman.containers_with_label(paths.lab_id)
    if names:
        podman("rm", "--force", "--time", "0", *names, timeout=180)
    return names
