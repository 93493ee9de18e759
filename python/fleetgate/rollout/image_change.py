"""A change that is a golden image: `change: {image: CLASS:VERSION}` in a plan.

Planning looks the image up in the image store and pins it: its name, the sha256 of its
artifact (checked against its sha256sums now, and again whenever the artifact is loaded), and
the digest of the node manifest it carries. The hosts' target is derived from that manifest,
never written a second time: afterwards a host must say it runs this image
(/etc/fleetgate/image-id, which the re-imaging provider writes, as a cloud's metadata names an
instance's AMI) and its /etc/fleetgate/manifest.json must be the image's own, to the byte of
its canonical JSON. Any drift from the image is a failed verification.

The rollout runs playbooks/reimage.yml with the pin; rollback re-images each host to the image
it ran before the change, which the controller reads from the host before the change starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.image import store
from fleetgate.image.manifest import manifest_digest, node_part
from fleetgate.image.naming import ImageRef, parse_dir_name, parse_ref
from fleetgate.image.store import image_id, verify_sums
from fleetgate.rollout import hoststate
from fleetgate.rollout.plan import Target

IMAGE_ID_FILE = "/etc/fleetgate/image-id"


def pin(ref_text: str, node_class: str | None, *, source: Path | str, field: str,
        images_root: Path | None = None) -> dict[str, Any]:
    """The store's image for `ref_text`, checked: it exists, is of the plan's class, and its
    artifact matches its sha256sums. Returns the pin the artifact records."""
    try:
        ref = parse_ref(ref_text, source=str(source))
    except BadInput as exc:
        raise BadInput(exc.reason, source=source, field=field) from None
    if ref.version is None:
        raise BadInput("name the image's version (CLASS:VERSION): a rollout pins one image",
                       source=source, field=field)
    if node_class is None:
        raise BadInput("an image change needs targets.class, the class its hosts are",
                       source=source, field=field)
    if ref.node_class != node_class:
        raise BadInput(f"image {ref} is of class {ref.node_class}, but the plan's hosts are "
                       f"class {node_class}", source=source, field=field)
    root = store.images_dir(images_root)
    try:
        img = store.find_image(root, ref)
    except BadInput as exc:
        raise BadInput(exc.reason.replace("no such image", f"no such image {ref}", 1),
                       source=source, field=field) from None
    try:
        verify_sums(img, [img.artifact.name])
    except BadInput as exc:
        raise BadInput(f"image {img.name}: {exc.reason}", source=source, field=field) from None
    return {"name": img.name,
            "artifact_sha256": str(img.manifest["image"]["artifact_sha256"]),
            "manifest_sha256": manifest_digest(node_part(img.manifest))}


def target_of(pinned: dict[str, Any]) -> Target:
    """The target a host re-imaged to `pinned` must show: its image id, and the image's own
    manifest (class and version, which the image's name carries, named too, so that a
    mismatch reads plainly)."""
    ref = _ref(pinned)
    return Target(files={IMAGE_ID_FILE: image_id(pinned["name"], pinned["artifact_sha256"])},
                  manifest={"class": ref.node_class, "class_version": ref.version or 0},
                  manifest_sha256=pinned["manifest_sha256"])


def previous_pin(host_image_id: str | None, *,
                 images_root: Path | None = None) -> dict[str, Any] | None:
    """The pin of the image a host said it ran before the change, when the store still holds
    that very artifact; None when there is nothing to go back to."""
    if not host_image_id or ":" not in host_image_id:
        return None
    name, sha = host_image_id.rsplit(":", 1)
    ref = parse_dir_name(name)
    if ref is None:
        return None
    img = store.read_image(store.images_dir(images_root) / name)
    if img is None or img.manifest.get("image", {}).get("artifact_sha256") != sha:
        return None
    return {"name": name, "artifact_sha256": sha,
            "manifest_sha256": manifest_digest(node_part(img.manifest))}


def _ref(pinned: dict[str, Any]) -> ImageRef:
    ref = parse_dir_name(pinned["name"])
    assert ref is not None  # the plan's pattern for a pin's name
    return ref


def ref_of(pinned: dict[str, Any]) -> str:
    return str(_ref(pinned))


def reimage_vars(pinned: dict[str, Any]) -> dict[str, Any]:
    """What playbooks/reimage.yml is given: the image to put on the host and the id the host
    must then report."""
    return {"fleetgate_image": ref_of(pinned),
            "fleetgate_image_id": image_id(pinned["name"], pinned["artifact_sha256"])}


def rollback_gaps(inventory: Path, hosts: list[str], *, runs_base: Path) -> list[str]:
    """For `rollout plan`, before anything runs: each host an image change could not roll
    back, because it reports no image or one the store no longer holds. Asking is a read-only
    probe; a host that cannot be asked is named too."""
    states, why = hoststate.probe(inventory, hosts, [Target(files={IMAGE_ID_FILE: "-"})],
                                  runs_base=runs_base)
    out: list[str] = []
    for h in hosts:
        st = states.get(h)
        if st is None:
            out.append(f"{h}: could not be asked which image it runs ({why.get(h)}); if its "
                       "change fails it cannot be re-imaged back")
            continue
        said = (st.get("files") or {}).get(IMAGE_ID_FILE)
        if previous_pin(said) is None:
            what = f"runs image {said}, which the image store does not hold" if said else \
                f"reports no image ({IMAGE_ID_FILE})"
            out.append(f"{h}: {what}; if its change fails it cannot be re-imaged back")
    return out
