"""Lab hosts from a built image version: `lab up --image CLASS:VERSION` on the CLI.

A container class's image (rootfs tar) is imported into podman under a tag that carries the
artifact's hash, so a rebuilt version (--force) can never be confused with the old one. A VM
class's image is the root filesystem the lab turns into each VM's ext4 disk; the VM then boots
the kernel the image's own /vmlinuz names. Either way the artifact must still match its
sha256sums, and the lab injects host keys and authorized_keys itself, so an image whose host
keys sysprep removed works as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from fleetgate.errors import BadInput
from fleetgate.image import store
from fleetgate.image.naming import parse_ref
from fleetgate.image.store import verify_sums
from fleetgate.spec.loader import resolve_class
from fleetgate.system.podman import LABEL, Podman
from fleetgate.system.procs import SLOW_STEP_TIMEOUT_S
from fleetgate.system.recipes import SSHD_CMD

IMAGE_REPO = "localhost/fleetgate-image"
IMAGE_LABEL = "io.fleetgate.image"


@dataclass(frozen=True)
class LabImages:
    container_image: str | None = None  # podman image ref for container hosts
    container_class: str | None = None
    container_image_id: str | None = None  # `<name>:<artifact sha256>`, what the hosts report
    vm_rootfs: Path | None = None  # rootfs tar the VM disks are made from
    vm_class: str | None = None
    vm_image: str | None = None  # `<class>-<version>@<sha12>`, recorded per host
    vm_image_id: str | None = None


def podman_ref(img: store.StoredImage) -> str:
    digest = str(img.manifest["image"]["artifact_sha256"])[:12]
    return f"{IMAGE_REPO}-{img.node_class}:{img.version}-{digest}"


def import_image(podman: Podman, img: store.StoredImage) -> str:
    ref = podman_ref(img)
    if not podman.image_exists(ref):
        podman("import", "--change", SSHD_CMD, "--change", f"LABEL {IMAGE_LABEL}={img.name}",
               "--change", f"LABEL {LABEL}=image", str(img.artifact), ref,
               timeout=SLOW_STEP_TIMEOUT_S)
    return ref


def resolve_lab_images(refs: list[str], podman: Podman, *, images_root: Path | None,
                       containers: int, vms: int, as_kind: str | None = None) -> LabImages:
    """Each --image goes to the host kind its class's lab.kind names (or `as_kind`, when the
    operator says so: a rootfs serves either kind); one image per kind."""
    out = LabImages()
    root = store.images_dir(images_root)
    for text in refs:
        img = store.find_image(root, parse_ref(text, source="--image"))
        if img.source != "docker":
            raise BadInput(f"image {img.name} is a {img.source} image; the lab starts hosts "
                           "from rootfs (docker source) images", source="--image", field=text)
        kind = as_kind or img.manifest.get("image", {}).get("lab_kind") \
            or _class_kind(img.node_class)
        if kind == "container":
            if out.container_image is not None:
                raise BadInput("only one image for container hosts", source="--image", field=text)
            if containers == 0:
                raise BadInput(f"{img.name} is for container hosts but --containers is 0",
                               source="--image", field=text)
            verify_sums(img, [img.artifact.name])
            out = replace(out, container_image=import_image(podman, img),
                          container_class=img.node_class, container_image_id=img.image_id)
        else:
            if out.vm_rootfs is not None:
                raise BadInput("only one image for VM hosts", source="--image", field=text)
            if vms == 0:
                raise BadInput(f"{img.name} is for VM hosts but --vms is 0", source="--image",
                               field=text)
            verify_sums(img, [img.artifact.name])
            digest = str(img.manifest["image"]["artifact_sha256"])[:12]
            out = replace(out, vm_rootfs=img.artifact, vm_class=img.node_class,
                          vm_image=f"{img.name}@{digest}", vm_image_id=img.image_id)
    return out



def _class_kind(node_class: str) -> str:
    """Images built before lab_kind was recorded: the class file says."""
    _, nc = resolve_class(node_class)
    return nc.lab.kind


def reimage_source(ref_text: str, podman: Podman, *, images_root: Path | None, kind: str
                   ) -> tuple[str, str, Path | None]:
    """(podman ref or VM image key, image id, VM rootfs tar) of a built image, for re-imaging
    a lab host of `kind`; its artifact must still match its sha256sums."""
    img = store.find_image(store.images_dir(images_root), parse_ref(ref_text, source="--image"))
    if img.source != "docker":
        raise BadInput(f"image {img.name} is a {img.source} image; a lab host is re-imaged from "
                       "a rootfs (docker source) image", source="--image", field=ref_text)
    verify_sums(img, [img.artifact.name])
    if kind == "vm":
        digest = str(img.manifest["image"]["artifact_sha256"])[:12]
        return f"{img.name}@{digest}", img.image_id, img.artifact
    return import_image(podman, img), img.image_id, None
