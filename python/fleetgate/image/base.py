"""The base a golden image starts from: the shared mmdebstrap rootfs, imported into podman.

Container classes start from the container base (sshd, python3); every other class from
the VM base without a kernel (systemd, udev, initramfs-tools, sshd, networkd), so that
kernel_pin installs the class's kernel itself and the result boots. Both come from the shared
rootfs cache, keyed by recipe: a warm build skips mmdebstrap and the import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetgate.image.provenance import sha256_file
from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import Podman
from fleetgate.system.recipes import container_recipe, import_base, vm_recipe
from fleetgate.system.rootfs import RootfsRecipe, rootfs_tar


@dataclass(frozen=True)
class BaseImage:
    ref: str
    recipe: RootfsRecipe
    tar: Path
    tar_sha256: str

    def record(self) -> dict[str, object]:
        return {"ref": self.ref, "recipe_key": self.recipe.key(), "suite": self.recipe.suite,
                "variant": self.recipe.variant, "packages": sorted(self.recipe.packages),
                "rootfs_sha256": self.tar_sha256}


def base_recipe(nc: NodeClass) -> RootfsRecipe:
    if nc.lab.kind == "container":
        return container_recipe(nc, with_kernel=False)
    return vm_recipe(nc, with_kernel=False)


def ensure_base_image(podman: Podman, nc: NodeClass) -> BaseImage:
    recipe = base_recipe(nc)
    tar = rootfs_tar(recipe)
    return BaseImage(import_base(podman, recipe), recipe, tar, sha256_file(tar))
