"""The base disk of a qemu build here: the VM base rootfs with Debian's stock cloud kernel.

In production the qemu source starts from a cloud image (`qemu_base_image`, with cloud-init
or a prepared key). Here it starts from what the lab boots: an ext4 disk made by
`mkfs.ext4 -d`, with no bootloader, so Packer boots it the way the lab's VM supervisor does,
with the kernel and initrd named by the disk's /vmlinuz and /initrd.img links (qemu -kernel).
The build VM boots the stock kernel; kernel_pin installs the class's kernel and re-points the
links, so the finished disk boots the pin.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.image.provenance import sha256_file
from fleetgate.spec.schema import NodeClass
from fleetgate.system.procs import SLOW_STEP_TIMEOUT_S, require_tool, run
from fleetgate.system.recipes import VM_BASE_PACKAGES, VM_HOOKS
from fleetgate.system.rootfs import RootfsRecipe, extract, rootfs_tar

STOCK_KERNEL = "linux-image-cloud-amd64"
DISK_SIZE_MB = 6144
KERNEL_APPEND = "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=5"


@dataclass(frozen=True)
class QemuBase:
    disk: Path
    disk_sha256: str
    kernel: Path
    initrd: Path
    key: Path
    recipe: RootfsRecipe

    def packer_vars(self, accelerator: str) -> dict[str, Any]:
        return {
            "qemu_base_image": str(self.disk),
            "qemu_base_checksum": f"sha256:{self.disk_sha256}",
            "qemu_format": "raw",
            "qemu_disk_size": f"{DISK_SIZE_MB}M",
            "accelerator": accelerator,
            "qemu_memory": 1536,
            "qemu_cpus": 1,
            "qemu_args": [["-kernel", str(self.kernel)], ["-initrd", str(self.initrd)],
                          ["-append", KERNEL_APPEND]],
            "ssh_username": "root",
            "ssh_private_key_file": str(self.key),
        }

    def record(self) -> dict[str, Any]:
        return {"recipe_key": self.recipe.key(), "packages": sorted(self.recipe.packages),
                "disk_sha256": self.disk_sha256, "boot": "direct kernel boot (/vmlinuz)"}


def qemu_recipe(nc: NodeClass) -> RootfsRecipe:
    return RootfsRecipe(suite=nc.os.release, packages=(*VM_BASE_PACKAGES, STOCK_KERNEL),
                        hooks=VM_HOOKS)


def _link_target(root: Path, link: str) -> Path:
    target = os.readlink(root / link)
    return root / target.lstrip("/")


def make_qemu_base(nc: NodeClass, workdir: Path) -> QemuBase:
    recipe = qemu_recipe(nc)
    tar = rootfs_tar(recipe)
    staging = workdir / "rootfs"
    extract(tar, staging)
    keygen = require_tool("ssh-keygen", "openssh-client")
    key = workdir / "build_key"
    run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "fleetgate-image-build", "-f",
         str(key)], timeout=30)
    # The build VM's own host key; sysprep removes every host key before the disk is final.
    host_key = staging / "etc" / "ssh" / "ssh_host_ed25519_key"
    run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], timeout=30)
    auth = staging / "root" / ".ssh" / "authorized_keys"
    auth.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(f"{key}.pub", auth)
    os.chmod(auth, 0o600)
    kernel, initrd = workdir / "vmlinuz", workdir / "initrd.img"
    shutil.copy2(_link_target(staging, "vmlinuz"), kernel)
    shutil.copy2(_link_target(staging, "initrd.img"), initrd)
    disk = workdir / "base.raw"
    run([require_tool("mkfs.ext4", "e2fsprogs"), "-q", "-F", "-L", "fleetgate-root", "-d",
         str(staging), str(disk), f"{DISK_SIZE_MB}M"], timeout=SLOW_STEP_TIMEOUT_S)
    shutil.rmtree(staging, ignore_errors=True)
    return QemuBase(disk, sha256_file(disk), kernel, initrd, key, recipe)
