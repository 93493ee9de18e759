"""A change that is a golden image: `change: {image: CLASS:VERSION}` in a plan.

Planning looks the image up in the image store and pins it: its name, the sha256 of its
artifact (checked against its sha256sums now, and again whenever the artifact is loaded), the
digest of the node manifest it carries, and the AMIs it was published as (image.ec2_amis, the
ec2 provider's source). The hosts' target is derived from that manifest, never written a
second time: afterwards a host must say it runs this image (/etc/fleetgate/image-id, which
the re-imaging provider writes, or on EC2 the image's boot from the instance's tag, as a
cloud's metadata names an instance's AMI) and its /etc/fleetgate/manifest.json must be the
image's own, to the byte of its canonical JSON. Any drift from the image is a failed
verification.

The rollout runs playbooks/reimage.yml with the pin; rollback re-images each host to the image
it ran before the change, which the controller reads from the host before the change starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput, validated
from fleetgate.image import store
from fleetgate.image.manifest import manifest_digest, node_part
from fleetgate.image.naming import ImageRef, parse_dir_name, parse_ref
from fleetgate.image.store import MANIFEST, StoredImage, image_id, verify_sums
from fleetgate.rollout import hoststate
from fleetgate.rollout.plan import ImagePin
from fleetgate.rollout.target import Target

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
    return _pin_of(img)


def _pin_of(img: StoredImage) -> dict[str, Any]:
    """The pin a stored image's manifest gives, validated as the plan will hold it: a manifest
    field that is not what a pin allows (an AMI map a hand or a broken build wrote) is bad
    input naming that field of the manifest file, before it could reach a command."""
    image = img.manifest.get("image", {})
    recorded = {k: image[k] for k in ("artifact_sha256", "ec2_amis") if k in image}
    return validated(ImagePin, {"name": img.name, **recorded,
                                "manifest_sha256": manifest_digest(node_part(img.manifest))},
                     img.path / MANIFEST, prefix="image").model_dump()


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
    that very artifact; None when there is nothing to go back to, a stored image whose
    manifest is bad input included (rollback_gaps names it at planning; a rollback under way
    holds the host rather than stop the controller)."""
    try:
        return _stored_pin(host_image_id, images_root)
    except BadInput:
        return None


def _stored_pin(host_image_id: str | None, images_root: Path | None) -> dict[str, Any] | None:
    if not host_image_id or ":" not in host_image_id:
        return None
    name, sha = host_image_id.rsplit(":", 1)
    ref = parse_dir_name(name)
    if ref is None:
        return None
    img = store.read_image(store.images_dir(images_root) / name)
    if img is None or img.manifest.get("image", {}).get("artifact_sha256") != sha:
        return None
    return _pin_of(img)


def _ref(pinned: dict[str, Any]) -> ImageRef:
    ref = parse_dir_name(pinned["name"])
    assert ref is not None  # the plan's pattern for a pin's name
    return ref


def ref_of(pinned: dict[str, Any]) -> str:
    return str(_ref(pinned))


def reimage_vars(pinned: dict[str, Any]) -> dict[str, Any]:
    """What playbooks/reimage.yml is given: the image to put on the host, the id the host
    must then report, and the image's AMIs by region where it was published to EC2 (the
    ec2 provider's source; a lab image has none, and its run is given none)."""
    out: dict[str, Any] = {
        "fleetgate_image": ref_of(pinned),
        "fleetgate_image_id": image_id(pinned["name"], pinned["artifact_sha256"])}
    if pinned.get("ec2_amis"):
        out["fleetgate_image_ec2_amis"] = dict(pinned["ec2_amis"])
    return out


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
        try:
            prev = _stored_pin(said, None)
        except BadInput as exc:
            out.append(f"{h}: runs image {said}, whose stored manifest is bad input ({exc}); "
                       "if its change fails it cannot be re-imaged back")
            continue
        if prev is None:
            what = f"runs image {said}, which the image store does not hold" if said else \
                f"reports no image ({IMAGE_ID_FILE})"
            out.append(f"{h}: {what}; if its change fails it cannot be re-imaged back")
    return out
