"""Lab hosts as podman containers: a Debian base from mmdebstrap running `sshd -D` on loopback.

Each container gets its own host key (bind-mounted read-only) and the lab's client key as
root's authorized_keys. The image carries no host keys of its own.
"""

from __future__ import annotations

from fleetgate.lab.keys import host_key
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.podman import LABEL, Podman
from fleetgate.lab.rootfs import RootfsRecipe, rootfs_tar
from fleetgate.lab.state import LabHost
from fleetgate.spec.schema import NodeClass

SSHD_HOOKS = (
    'rm -f "$1"/etc/ssh/ssh_host_*',
    'mkdir -p "$1"/run/sshd "$1"/root/.ssh',
    'printf "PasswordAuthentication no\\nKbdInteractiveAuthentication no\\n"'
    ' > "$1"/etc/ssh/sshd_config.d/fleetgate-lab.conf',
)

CONTAINER_PACKAGES = (
    "openssh-server", "python3", "python3-apt", "iproute2", "procps", "ca-certificates",
)


def base_recipe(nc: NodeClass, *, with_kernel: bool = True) -> RootfsRecipe:
    # Lab hosts get the class's pinned kernel image with the base, as a host built from the
    # previous golden image has it: containers never boot it, and unpacking it (and its
    # initramfs) into every container on every apply-class is most of what a lab rollout
    # would time. A golden image build starts without it: installing it is what it proves.
    k = nc.kernel
    kernel = (f"linux-image-{k.abi}={k.package_version}",) if with_kernel else ()
    return RootfsRecipe(suite=nc.os.release, packages=(*CONTAINER_PACKAGES, *kernel),
                        hooks=SSHD_HOOKS)


def ensure_base_image(podman: Podman, nc: NodeClass) -> str:
    recipe = base_recipe(nc)
    ref = f"localhost/fleetgate-lab-base:{recipe.key()}"
    if not podman.image_exists(ref):
        tar = rootfs_tar(recipe)
        podman("import", "--change", 'CMD ["/usr/sbin/sshd", "-D", "-e"]', str(tar), ref,
               timeout=300)
    return ref


def container_name(paths: LabPaths, host: str) -> str:
    return f"fg{paths.lab_id}-{host}"


def start_container(podman: Podman, paths: LabPaths, host: LabHost) -> None:
    key = host_key(paths, host.name)
    pub = paths.ssh_key.with_suffix(".pub")
    podman(
        "run", "--detach", "--init",
        "--name", host.runtime_name,
        "--hostname", host.name,
        "--label", f"{LABEL}={paths.lab_id}",
        "--publish", f"127.0.0.1:{host.port}:22",
        "--volume", f"{key}:/etc/ssh/ssh_host_ed25519_key:ro",
        "--volume", f"{key}.pub:/etc/ssh/ssh_host_ed25519_key.pub:ro",
        "--volume", f"{pub}:/root/.ssh/authorized_keys:ro",
        host.image,
        "/bin/sh", "-c", "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e",
    )


def remove_containers(podman: Podman, paths: LabPaths) -> list[str]:
    names = podman.containers_with_label(paths.lab_id)
    if names:
        podman("rm", "--force", "--time", "0", *names, timeout=180)
    return names
