"""The image store: a directory of immutable `<class>-<version>/` image directories.

A build writes into a hidden staging directory beside its final place and renames it into
place only once everything in it was verified, so a failed or interrupted build leaves no
image directory behind, and an existing version is replaced only when asked (`--force`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.image.naming import ImageRef, image_name, parse_dir_name
from fleetgate.image.provenance import parse_sha256sums, sha256_file
from fleetgate.site import current_site

MANIFEST = "manifest.json"
SUMS = "sha256sums"
PARTIAL_MARK = ".partial-"


def images_dir(override: Path | None = None) -> Path:
    if override is not None:
        return override.resolve()
    return current_site().images_dir


@dataclass(frozen=True)
class StoredImage:
    name: str
    node_class: str
    version: int
    path: Path
    manifest: dict[str, Any]

    @property
    def artifact(self) -> Path:
        return self.path / str(self.manifest.get("image", {}).get("artifact", "rootfs.tar"))

    @property
    def source(self) -> str:
        return str(self.manifest.get("image", {}).get("source", "?"))

    @property
    def image_id(self) -> str:
        return image_id(self.name, str(self.manifest["image"]["artifact_sha256"]))


def image_id(name: str, artifact_sha256: str) -> str:
    """What a host made from an image reports at /etc/fleetgate/image-id: the image's name and
    its artifact's digest, so a version rebuilt with --force is never taken for another."""
    return f"{name}:{artifact_sha256}"


def read_image(path: Path) -> StoredImage | None:
    ref = parse_dir_name(path.name)
    mfile = path / MANIFEST
    if ref is None or ref.version is None or not mfile.is_file():
        return None
    try:
        manifest = json.loads(mfile.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("class") != ref.node_class:
        return None
    return StoredImage(path.name, ref.node_class, ref.version, path, manifest)


def list_images(root: Path) -> list[StoredImage]:
    if not root.is_dir():
        return []
    found = (read_image(p) for p in root.iterdir() if p.is_dir())
    return sorted((i for i in found if i is not None), key=lambda i: (i.node_class, i.version))


def find_image(root: Path, ref: ImageRef) -> StoredImage:
    matches = [i for i in list_images(root) if i.node_class == ref.node_class
               and (ref.version is None or i.version == ref.version)]
    if not matches:
        have = ", ".join(f"{i.node_class}:{i.version}" for i in list_images(root)) or "none"
        raise BadInput(f"no such image in {root} (images: {have})", source="IMAGE",
                       field=str(ref))
    return matches[-1]


def verify_sums(image: StoredImage, names: list[str] | None = None) -> None:
    """Refuse an image whose files no longer match its sha256sums."""
    sums = parse_sha256sums((image.path / SUMS).read_text())
    for n in names or sorted(sums):
        if n not in sums:
            raise BadInput(f"{n} is not listed in sha256sums", source=str(image.path))
        if sha256_file(image.path / n) != sums[n]:
            raise BadInput(f"{n} does not match its sha256sums entry", source=str(image.path))



def check_writable(root: Path) -> None:
    """The output directory exists (or can be made) and accepts a file: one line otherwise."""
    if root.exists() and not root.is_dir():
        raise BadInput("output directory is not a directory", source="--out", field=str(root))
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".fleetgate-write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BadInput(f"output directory is not writable: {reason}", source="--out",
                       field=str(root)) from None


def target_dir(root: Path, node_class: str, version: int, *, force: bool) -> Path:
    """Where the image goes; an existing version is refused unless force."""
    final = root / image_name(node_class, version)
    if final.exists() and not force:
        raise BadInput(
            f"image {image_name(node_class, version)} already exists and image versions are "
            f"immutable: bump the class version, or pass --force to rebuild it",
            source="--out", field=str(final))
    return final


def new_staging_dir(root: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{name}{PARTIAL_MARK}", dir=root))


def publish(staging: Path, final: Path) -> None:
    """Move a finished staging directory into place; a replaced version is removed after."""
    old: Path | None = None
    if final.exists():
        old = final.with_name(f".{final.name}.replaced-{uuid.uuid4().hex[:8]}")
        os.replace(final, old)
    os.replace(staging, final)
    os.chmod(final, 0o755)  # noqa: S103 - mkdtemp made it 0700; images are world-readable
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
