"""The Debian base recipes a lab host and a golden image both start from.

One recipe per host kind, with or without the class's pinned kernel: lab hosts get it with
the base (as a host built from the previous golden image has it); a golden image build starts
without it, since installing it is what the build proves. Equal recipes share one cached
rootfs and one podman import, so a lab and an image build never make the same base twice.
"""

from __future__ import annotations

from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import Podman
from fleetgate.system.procs import SLOW_STEP_TIMEOUT_S
from fleetgate.system.rootfs import RootfsRecipe, rootfs_tar

BASE_REPO = "localhost/fleetgate-lab-base"  # lab and image bases alike: one import per recipe
SSHD_CMD = 'CMD ["/usr/sbin/sshd", "-D", "-e"]'

SSHD_HOOKS = (
    'rm -f "$1"/etc/ssh/ssh_host_*',
    'mkdir -p "$1"/run/sshd "$1"/root/.ssh',
    'printf "PasswordAuthentication no\\nKbdInteractiveAuthentication no\\n"'
    ' > "$1"/etc/ssh/sshd_config.d/fleetgate-lab.conf',
)

CONTAINER_PACKAGES = (
    "openssh-server", "python3", "python3-apt", "iproute2", "procps", "ca-certificates",
)

# Debian's Slurm 22.05 and its MUNGE authentication, for lab hosts that form a Slurm cluster
# (`lab up --slurm`): one slurmctld, a slurmd per host. Baked into a base of their own (cached
# like every recipe) because apt inside each container would cost minutes per lab.
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")

# An execution node (`lab up --execution-nodes N`): no kernel, no probes, but ansible-runner
# and ansible-core at the controller's pins (requirements.lock; tests/unit keep them equal),
# installed from PyPI once when the base is built, never per lab. An SSH client too: its
# Ansible reaches the lab hosts itself.
ANSIBLE_CORE_VERSION = "2.19.14"
ANSIBLE_RUNNER_VERSION = "2.4.3"
RUNNER_VENV = "/opt/fleetgate-runner"
# What the smoke suite needs beside them when it runs on the node (`smoke run
# --execution-node`, or a rollout's gates with an `execution` section): pytest, testinfra,
# pydantic and PyYAML, with the dependencies they pull, at the lock's versions too. fleetgate
# itself is not installed: each smoke job carries the controller's own suite (smoke/remote.py).
SMOKE_RUNTIME = ("pytest==9.2.0", "pluggy==1.7.0", "iniconfig==2.3.1", "packaging==26.4",
                 "Pygments==2.21.0", "pytest-testinfra==10.2.2", "pydantic==2.14.4",
                 "pydantic_core==2.50.5", "annotated-types==0.8.0", "typing_extensions==4.16.0",
                 "typing-inspection==0.4.5", "PyYAML==6.0.4")
EXEC_NODE_PACKAGES = ("python3-venv", "openssh-client")
EXEC_NODE_HOOKS = (
    *SSHD_HOOKS,
    f'chroot "$1" python3 -m venv {RUNNER_VENV}',
    # A clean environment: the build machine's pip settings (a local wheel mirror, a
    # constraints file) are not part of the recipe and must not shape the image. Only its
    # trust comes in, for the download and not into the image: the CA bundle that verifies
    # PyPI from here (a site's TLS proxy signs with its own CA).
    'cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$1"/tmp/fg-build-ca.crt',
    f'chroot "$1" env -i PATH=/usr/bin:/bin HOME=/root {RUNNER_VENV}/bin/pip install -q'
    " --no-cache-dir --disable-pip-version-check --cert /tmp/fg-build-ca.crt"
    f" ansible-core=={ANSIBLE_CORE_VERSION} ansible-runner=={ANSIBLE_RUNNER_VERSION}"
    f" {' '.join(SMOKE_RUNTIME)}",
    'rm -f "$1"/tmp/fg-build-ca.crt',

    # On the PATH of a non-interactive SSH session, where the controller's ssh runs the worker.
    f'for t in ansible-runner ansible-playbook ansible ansible-inventory; do'
    f' ln -s {RUNNER_VENV}/bin/$t "$1"/usr/local/bin/$t; done',
)

VM_HOOKS = (
    'rm -f "$1"/etc/ssh/ssh_host_*',
    'mkdir -p "$1"/root/.ssh "$1"/etc/systemd/network',
    'printf "PasswordAuthentication no\\nKbdInteractiveAuthentication no\\n"'
    ' > "$1"/etc/ssh/sshd_config.d/fleetgate-lab.conf',
    'printf "[Match]\\nName=eth0\\n\\n[Network]\\nDHCP=ipv4\\n"'
    ' > "$1"/etc/systemd/network/10-eth0.network',
    'printf "nameserver 10.0.2.3\\n" > "$1"/etc/resolv.conf',
    'printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\\n" > "$1"/etc/fstab',
    'chroot "$1" systemctl enable systemd-networkd ssh',
)

VM_BASE_PACKAGES = (
    "systemd-sysv", "udev", "kmod", "dbus", "initramfs-tools", "openssh-server", "python3",
    "python3-apt", "iproute2", "procps", "ca-certificates", "e2fsprogs",
)


def container_recipe(nc: NodeClass, *, with_kernel: bool = True) -> RootfsRecipe:
    # Containers never boot the kernel; it is in the lab base because unpacking it (and its
    # initramfs) into every container on every apply-class is most of what a lab rollout
    # would time.
    k = nc.kernel
    kernel = (f"linux-image-{k.abi}={k.package_version}",) if with_kernel else ()
    return RootfsRecipe(suite=nc.os.release, packages=(*CONTAINER_PACKAGES, *kernel),
                        hooks=SSHD_HOOKS)


def slurm_recipe(nc: NodeClass) -> RootfsRecipe:
    """The class's container base plus Slurm: the same host, able to join the lab's cluster."""
    base = container_recipe(nc)
    return RootfsRecipe(suite=base.suite, packages=(*base.packages, *SLURM_PACKAGES),
                        hooks=base.hooks)


def execution_node_recipe(nc: NodeClass) -> RootfsRecipe:
    return RootfsRecipe(suite=nc.os.release,
                        packages=(*CONTAINER_PACKAGES, *EXEC_NODE_PACKAGES),
                        hooks=EXEC_NODE_HOOKS)


def vm_recipe(nc: NodeClass, *, with_kernel: bool = True) -> RootfsRecipe:
    k = nc.kernel
    packages = list(VM_BASE_PACKAGES)
    if not with_kernel:
        return RootfsRecipe(suite=nc.os.release, packages=tuple(packages), hooks=VM_HOOKS)
    packages.append(f"linux-image-{k.abi}={k.package_version}")
    if nc.dkms:
        # DKMS needs the headers of every kernel it builds for; the lab image carries them so
        # roles under test spend their time building modules, not unpacking gcc under TCG.
        packages += [f"linux-headers-{k.abi}={k.package_version}", "dkms"]
    return RootfsRecipe(suite=nc.os.release, packages=tuple(packages), hooks=VM_HOOKS)


def base_ref(recipe: RootfsRecipe) -> str:
    return f"{BASE_REPO}:{recipe.key()}"


def import_base(podman: Podman, recipe: RootfsRecipe) -> str:
    """The recipe's rootfs as a podman image running sshd, built and imported once."""
    ref = base_ref(recipe)
    if not podman.image_exists(ref):
        podman("import", "--change", SSHD_CMD, str(rootfs_tar(recipe)), ref,
               timeout=SLOW_STEP_TIMEOUT_S)
    return ref
