"""An image as a rollout's change: what planning pins, the target it derives from the image's
own manifest, and every bad image plan refused in one line before anything runs.

The image store here is a real one on disk (the layout `fleetgate image build` publishes: a
rootfs tar, its sha256sums, the manifest), holding tiny artifacts.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.image.manifest import manifest_digest
from fleetgate.rollout import hoststate, image_change
from fleetgate.rollout.plan import load_plan
from fleetgate.rollout.target import Target

NODE_MANIFEST: dict[str, Any] = {
    "class": "lab-cpu", "class_version": 2, "drift": [],
    "verified": {"kernel": {"default_boot": "6.1.0-55-cloud-amd64"},
                 "packages": {"openssh-server": "1:9.2p1-2+deb12u7"}}}


def put_image(root: Path, cls: str, version: int, content: bytes = b"rootfs") -> str:
    d = root / f"{cls}-{version}"
    d.mkdir(parents=True)
    (d / "rootfs.tar").write_bytes(content)
    sha = hashlib.sha256(content).hexdigest()
    (d / "sha256sums").write_text(f"{sha}  rootfs.tar\n")
    node = {**NODE_MANIFEST, "class": cls, "class_version": version}
    (d / "manifest.json").write_text(json.dumps({
        **node, "image_manifest_schema": 1,
        "image": {"artifact": "rootfs.tar", "artifact_sha256": sha, "source": "docker"},
        "build": {}, "components": []}))
    return sha


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "images"
    put_image(root, "lab-cpu", 1, b"version one")
    put_image(root, "lab-cpu", 2, b"version two")
    put_image(root, "lab-vm", 1, b"a vm")
    monkeypatch.setenv("FLEETGATE_IMAGES_DIR", str(root))
    return root


def write_plan(tmp_path: Path, **change: Any) -> Path:
    doc = {"name": "reimage-unit",
           "targets": {"inventory": "inventory.yml", "class": "lab-cpu"},
           "change": change or {"image": "lab-cpu:2"},
           "waves": {"steps": [1, "100%"]}, "on_failure": "rollback"}
    path = tmp_path / "plan.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_planning_pins_the_image_and_derives_the_target_from_its_manifest(
        store: Path, tmp_path: Path) -> None:
    plan = load_plan(write_plan(tmp_path))
    c = plan.change
    sha = hashlib.sha256(b"version two").hexdigest()
    assert c.run_playbook == "playbooks/reimage.yml" and plan.rollback is None
    assert c.image_pin is not None and c.image_pin.name == "lab-cpu-2"
    assert c.image_pin.artifact_sha256 == sha
    assert c.target.files == {"/etc/fleetgate/image-id": f"lab-cpu-2:{sha}"}
    assert c.target.manifest == {"class": "lab-cpu", "class_version": 2}
    node = {**NODE_MANIFEST, "class_version": 2}
    assert c.target.manifest_sha256 == manifest_digest(node)
    assert image_change.reimage_vars(c.image_pin.model_dump()) == {
        "fleetgate_image": "lab-cpu:2", "fleetgate_image_id": f"lab-cpu-2:{sha}"}


def test_an_artifact_re_checked_finds_the_same_pin_or_refuses_a_rebuilt_image(
        store: Path, tmp_path: Path) -> None:
    from fleetgate.rollout.plan import check_plan

    path = write_plan(tmp_path)
    plan = load_plan(path)
    assert check_plan(plan, path) == plan
    # Rebuilt with --force since planning: same name, another artifact.
    d = store / "lab-cpu-2"
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    put_image(store, "lab-cpu", 2, b"version two, rebuilt")
    with pytest.raises(BadInput) as exc:
        check_plan(plan, path)
    assert exc.value.field == "change.image_pin" and "not the one planned" in exc.value.reason


@pytest.mark.parametrize(("change", "field", "needle"), [
    ({"image": "lab-cpu:9"}, "change.image", "no such image"),
    ({"image": "lab-vm:1"}, "change.image", "is of class lab-vm, but the plan's hosts are"),
    ({"image": "lab-cpu"}, "change", "should match pattern"),
    ({"image": "lab-cpu:2", "playbook": "playbooks/apply-class.yml"}, "change",
     "not both"),
    ({"extra_vars": {"a": "b"}}, "change", "not neither"),
    ({"image": "lab-cpu:2", "target": {"files": {"/etc/x": "1"}}}, "change",
     "takes its target from the image's manifest"),
    ({"image": "lab-cpu:2", "classes": "examples/kernel-update/classes"}, "change",
     "takes its target from the image's manifest"),
])
def test_bad_image_changes_are_refused_in_one_line(
        store: Path, tmp_path: Path, change: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(BadInput) as exc:
        load_plan(write_plan(tmp_path, **change))
    line = str(exc.value)
    assert "\n" not in line and needle in line, line
    assert (exc.value.field or "").startswith(field), exc.value.field


def test_an_image_whose_artifact_fails_its_sha256sums_is_refused(
        store: Path, tmp_path: Path) -> None:
    (store / "lab-cpu-2" / "rootfs.tar").write_bytes(b"tampered")
    with pytest.raises(BadInput) as exc:
        load_plan(write_plan(tmp_path))
    assert exc.value.field == "change.image"
    assert "rootfs.tar does not match its sha256sums entry" in exc.value.reason


def test_an_image_change_takes_no_rollback_section(store: Path, tmp_path: Path) -> None:
    path = write_plan(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["rollback"] = {"playbook": "playbooks/rollback.yml"}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInput) as exc:
        load_plan(path)
    assert "rolls each host back to the image it ran before" in str(exc.value)


def test_the_host_manifest_must_be_the_images_own() -> None:
    target = Target(manifest_sha256=manifest_digest(NODE_MANIFEST))
    reordered = json.loads(json.dumps(NODE_MANIFEST, sort_keys=True))
    assert hoststate.mismatches(target, {"manifest": reordered}) == []
    drifted = {**NODE_MANIFEST, "drift": [{"component": "package", "name": "openssh-server"}]}
    [why] = hoststate.mismatches(target, {"manifest": drifted})
    assert why.startswith("manifest is not its image's: sha256 ")
    assert hoststate.mismatches(target, {"manifest": None}) == [
        "manifest is not its image's: (no manifest)"]


def test_the_previous_image_is_the_stored_artifact_the_host_named(store: Path) -> None:
    sha1 = hashlib.sha256(b"version one").hexdigest()
    prev = image_change.previous_pin(f"lab-cpu-1:{sha1}")
    assert prev is not None and prev["name"] == "lab-cpu-1"
    assert image_change.ref_of(prev) == "lab-cpu:1"
    # Nothing recorded, an id of no stored image, or a stored name with another artifact:
    # there is nothing to go back to.
    for said in (None, "", "lab-cpu-1", f"lab-cpu-7:{sha1}", f"lab-cpu-1:{'0' * 64}",
                 f"../etc:{sha1}"):
        assert image_change.previous_pin(said) is None, said


def test_the_image_example_judges_exactly_as_the_in_place_one() -> None:
    """examples/bad-blas/reimage.yml is the same rollout as rollout.yml, by image: its waves,
    budgets, gates and canary thresholds must not drift apart."""
    from tests.conftest import REPO

    example = REPO / "examples" / "bad-blas"
    by_image = yaml.safe_load((example / "reimage.yml").read_text())
    in_place = yaml.safe_load((example / "rollout.yml").read_text())
    own = {"name", "description", "change", "rollback", "drain"}
    assert {k: v for k, v in by_image.items() if k not in own} == {
        k: v for k, v in in_place.items() if k not in own}
    assert by_image["change"] == {"image": "lab-cpu:2"}
