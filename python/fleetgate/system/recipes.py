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
