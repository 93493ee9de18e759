"""Pure logic of golden-image builds: names, the store's refusal rules, manifest assembly,
Packer output parsing, vendored-package indexes, build-only variables."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from fleetgate.errors import BadInput
from fleetgate.image import manifest as mf
from fleetgate.image import store
from fleetgate.image.build import build_vars
from fleetgate.image.naming import ImageRef, image_name, parse_dir_name, parse_ref
from fleetgate.image.packer_run import BuildTracker, parse_machine_line, strip_prefix, ui_lines
from fleetgate.image.preflight import apt_error, kernel_packages, simulate_script
from fleetgate.image.provenance import parse_sha256sums, sha256sums, template_sha256
from fleetgate.image.vendor import stanza
from fleetgate.spec.loader import load_class
from tests.conftest import REPO, fleetgate

CLASSES = REPO / "inventory" / "classes"
LAB_VM = load_class(CLASSES / "lab-vm.yml")
LAB_CPU = load_class(CLASSES / "lab-cpu.yml")
H100 = load_class(CLASSES / "nvidia-h100-535.yml")


# --- names -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "ref"), [
    ("lab-cpu", ImageRef("lab-cpu")),
    ("lab-cpu:3", ImageRef("lab-cpu", 3)),
    ("nvidia-h100-535:12", ImageRef("nvidia-h100-535", 12)),
])
def test_parse_ref(text: str, ref: ImageRef) -> None:
    assert parse_ref(text) == ref
    assert str(ref) == text


@pytest.mark.parametrize("text", ["", "lab-cpu:", "lab-cpu:x", ":1", "Lab-CPU:1", "a:b:1",
                                  "lab-cpu:1;rm", "lab-cpu:0", "../etc:1"])
def test_parse_ref_rejects(text: str) -> None:
    with pytest.raises(BadInput):
        parse_ref(text)


def test_dir_names_round_trip_even_when_the_class_ends_in_digits() -> None:
    assert image_name("nvidia-h100-535", 2) == "nvidia-h100-535-2"
    assert parse_dir_name("nvidia-h100-535-2") == ImageRef("nvidia-h100-535", 2)
    assert parse_dir_name("lab-vm-1") == ImageRef("lab-vm", 1)


@pytest.mark.parametrize("name", [".lab-cpu-1.partial-abc", "lab-cpu", "lab-cpu-0",
                                  ".lab-cpu-1.replaced-1234", "lab-cpu-1x"])
def test_dir_names_that_are_not_images(name: str) -> None:
    assert parse_dir_name(name) is None


# --- the store: immutability, atomic publish ---------------------------------------------

def _fake_image(root: Path, cls: str, version: int, **image: Any) -> Path:
    d = root / image_name(cls, version)
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"class": cls, "image": image}))
    return d


def test_existing_version_is_refused_without_force(tmp_path: Path) -> None:
    _fake_image(tmp_path, "lab-cpu", 1)
    with pytest.raises(BadInput, match="immutable"):
        store.target_dir(tmp_path, "lab-cpu", 1, force=False)
    assert store.target_dir(tmp_path, "lab-cpu", 1, force=True) == tmp_path / "lab-cpu-1"
    assert store.target_dir(tmp_path, "lab-cpu", 2, force=False) == tmp_path / "lab-cpu-2"


def test_publish_replaces_atomically_and_leaves_nothing_else(tmp_path: Path) -> None:
    final = _fake_image(tmp_path, "lab-cpu", 1, artifact="old")
    staging = store.new_staging_dir(tmp_path, "lab-cpu-1")
    (staging / "manifest.json").write_text(json.dumps({"class": "lab-cpu",
                                                       "image": {"artifact": "new"}}))
    store.publish(staging, final)
    assert [p.name for p in tmp_path.iterdir()] == ["lab-cpu-1"]
    assert json.loads((final / "manifest.json").read_text())["image"]["artifact"] == "new"
    assert oct(final.stat().st_mode & 0o777) == "0o755"


def test_list_and_find_skip_partials_and_pick_the_newest(tmp_path: Path) -> None:
    _fake_image(tmp_path, "lab-cpu", 1)
    _fake_image(tmp_path, "lab-cpu", 10)
    _fake_image(tmp_path, "lab-vm", 2)
    store.new_staging_dir(tmp_path, "lab-cpu-11")
    (tmp_path / "lab-cpu-3").mkdir()  # no manifest: not an image
    names = [i.name for i in store.list_images(tmp_path)]
    assert names == ["lab-cpu-1", "lab-cpu-10", "lab-vm-2"]
    assert store.find_image(tmp_path, ImageRef("lab-cpu")).version == 10
    assert store.find_image(tmp_path, ImageRef("lab-cpu", 1)).version == 1
    with pytest.raises(BadInput, match="no such image"):
        store.find_image(tmp_path, ImageRef("lab-cpu", 3))


def test_output_dir_must_be_a_writable_directory(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(BadInput, match="not a directory"):
        store.check_writable(afile)
    with pytest.raises(BadInput, match="not writable"):
        store.check_writable(afile / "sub")
    store.check_writable(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir()
    assert list((tmp_path / "new" / "dir").iterdir()) == []


# --- manifest ----------------------------------------------------------------------------

def _node_manifest(nc: Any, *, dkms_status: str = "installed", pkgs: str = "a=1\nb=2\n",
                   packages: dict[str, str | None] | None = None) -> dict[str, Any]:
    abi = nc.kernel.abi
    return {
        "schema": 1, "class": nc.name,
        "expected": {"kernel": {"abi": abi, "package_version": nc.kernel.package_version}},
        "verified": {
            "kernel": {"abi": abi, "package_version": nc.kernel.package_version,
                       "default_boot": abi, "running": "6.18.0", "previous": None},
            "packages": packages or {},
            "dkms": [{"name": m.name, "version": m.version, "kernel": abi, "arch": "x86_64",
                      "status": dkms_status} for m in nc.dkms],
            "modinfo": {m.name: m.version for m in nc.dkms},
        },
        "package_list_sha256": mf.package_list_sha256(pkgs),
        "drift": [], "updated_at": "2026-01-01T00:00:00Z",
    }


def test_package_list_hash_is_node_manifests_definition() -> None:
    text = "b=2\na=1\n"
    expected = hashlib.sha256(b"a=1\nb=2\n").hexdigest()  # sorted Package=Version lines
    assert mf.package_list_sha256(text) == expected
    assert mf.package_list_sha256("a=1\nb=2") == expected


def test_components_for_a_dkms_class() -> None:
    rows = mf.components(LAB_VM, _node_manifest(LAB_VM))
    assert [(r["component"], r["status"]) for r in rows] == [
        ("kernel", "ok"), ("kernel-default-boot", "ok"), ("dkms", "ok")]
    assert rows[2]["expected"] == "0.1 installed" == rows[2]["verified"]
    built_only = mf.components(LAB_VM, _node_manifest(LAB_VM, dkms_status="built"))
    assert built_only[2]["status"] == "drift"
    assert built_only[2]["verified"] == "0.1 built"


def test_components_for_a_gpu_class_and_an_omitted_toolkit() -> None:
    pkgs: dict[str, str | None] = {p: H100.driver.version for p in H100.driver.packages}
    pkgs["containerd"] = H100.runtime.version
    pkgs["nvidia-container-toolkit"] = None
    nm = _node_manifest(H100, packages=pkgs)
    rows = {r["name"]: r for r in mf.components(H100, nm, ("gpu-toolkit",))}
    assert rows["nvidia-driver"]["verified"] == "535.261.03-1" and \
        rows["nvidia-driver"]["status"] == "ok"
    assert rows["nvidia-current for 6.1.0-55-amd64"]["status"] == "ok"
    assert rows["containerd"]["status"] == "ok"
    assert rows["nvidia-container-toolkit"]["status"] == "omitted"
    not_omitted = {r["name"]: r for r in mf.components(H100, nm)}
    assert not_omitted["nvidia-container-toolkit"]["status"] == "drift"


def test_check_image_catches_a_stale_package_list_and_drift() -> None:
    nm = _node_manifest(LAB_VM)
    rows = mf.components(LAB_VM, nm)
    mf.check_image(nm, "b=2\na=1\n", LAB_VM, rows)
    with pytest.raises(mf.ImageCheckFailed, match="package list hash"):
        mf.check_image(nm, "a=1\nb=3\n", LAB_VM, rows)
    with pytest.raises(mf.ImageCheckFailed, match="drift"):
        mf.check_image({**nm, "drift": [{"field": "x"}]}, "a=1\nb=2\n", LAB_VM, rows)
    with pytest.raises(mf.ImageCheckFailed, match="class"):
        mf.check_image(nm, "a=1\nb=2\n", LAB_CPU, rows)
    bad = mf.components(LAB_VM, _node_manifest(LAB_VM, dkms_status="built"))
    with pytest.raises(mf.ImageCheckFailed, match="vpoll"):
        mf.check_image(nm, "a=1\nb=2\n", LAB_VM, bad)


def test_assembled_manifest_keeps_the_node_manifest_intact() -> None:
    nm = _node_manifest(LAB_VM)
    full = mf.assemble(nm, image={"name": "lab-vm-1"}, build={"git_revision": "abc"}, rows=[])
    assert full["class"] == "lab-vm" and full["image"]["name"] == "lab-vm-1"
    assert mf.node_part(full) == nm


# --- Packer output -----------------------------------------------------------------------

def test_machine_readable_lines() -> None:
    ml = parse_machine_line(
        "1700000000,,ui,message,    docker.rootfs: ok: [default] =>"
        " (item=a%!(PACKER_COMMA) b)\\n    docker.rootfs: next\n")
    assert ml is not None and ml.kind == "ui"
    assert ui_lines(ml) == [("message", "    docker.rootfs: ok: [default] => (item=a, b)"),
                            ("message", "    docker.rootfs: next")]
    assert parse_machine_line("not machine readable") is None
    assert strip_prefix("==> docker.rootfs: Exporting the container") == \
        "Exporting the container"


def _feed(tracker: BuildTracker, *lines: str, level: str = "message") -> None:
    for line in lines:
        tracker.feed(level, f"    docker.rootfs: {line}")


def test_tracker_names_the_failed_task_and_its_message() -> None:
    t = BuildTracker()
    t.feed("say", "==> docker.rootfs: Provisioning with Ansible...")
    _feed(t, "PLAY [Build a golden image for a node class] ****",
          "TASK [dkms_modules : Install dkms and the module packages] ****",
          "ok: [default]",
          "TASK [dkms_modules : Build and install every module for every pinned kernel] ****",
          "fatal: [default]: FAILED! =>",
          "    changed: false",
          "    msg: 'fgbroken/1.0 failed to build for kernel 6.1.0-57-cloud-amd64: make'")
    t.feed("error", "Build 'docker.rootfs' errored after 2 minutes: Error executing Ansible: "
                    "Non-zero exit status: exit status 2")
    assert t.stage == "running Ansible" and t.tasks_done == 2
    reason = t.reason()
    assert "dkms_modules : Build and install every module" in reason
    assert "fgbroken/1.0 failed to build for kernel 6.1.0-57-cloud-amd64" in reason
    assert t.packer_error.startswith("Error executing Ansible")


def test_tracker_ignores_ignored_failures_and_reads_json_and_block_messages() -> None:
    t = BuildTracker()
    _feed(t, "TASK [probe] ***", 'fatal: [default]: FAILED! => {"msg": "nope"}', "...ignoring",
          "TASK [real] ***", "fatal: [default]: FAILED! =>", "    msg: |-", "    the reason")
    assert t.failed_task == "real" and t.failure == "the reason"
    t2 = BuildTracker()
    _feed(t2, "TASK [x] ***", 'fatal: [default]: FAILED! => {"changed": false, "msg": "boom"}')
    assert t2.failure == "boom"
    t3 = BuildTracker()
    t3.feed("error", "Build 'docker.rootfs' errored after 1 second: Error creating container")
    assert t3.reason() == "Error creating container"
    t4 = BuildTracker()
    t4.feed("error", "==> qemu.disk: install: cannot stat 'x': Not a directory")
    t4.feed("error", "Build 'qemu.disk' errored after 38 seconds: Script exited with non-zero "
                     "exit status: 1")
    assert t4.reason() == ("Script exited with non-zero exit status: 1: "
                           "install: cannot stat 'x': Not a directory")


# --- preflight, vendored packages, build-only vars, provenance ---------------------------

def test_kernel_packages_and_simulate_script() -> None:
    assert kernel_packages(LAB_CPU) == ["linux-image-6.1.0-55-cloud-amd64=6.1.192-1"]
    assert kernel_packages(LAB_VM) == ["linux-image-6.1.0-55-cloud-amd64=6.1.192-1",
                                       "linux-headers-6.1.0-55-cloud-amd64=6.1.192-1"]
    script = simulate_script(["linux-image-x=1", "it's"])
    assert "apt-get install --simulate --no-install-recommends linux-image-x=1 'it'\"'\"'s'" \
        in script
    assert apt_error("W: x\nE: Version '9' for 'linux-image-y' was not found\n") == \
        "Version '9' for 'linux-image-y' was not found"


def test_packages_stanza() -> None:
    text = stanza("Package: fgbroken-dkms\nVersion: 1.0-1\nArchitecture: all\n",
                  "fgbroken-dkms_1.0-1_all.deb", 123, "ab" * 32)
    assert text == ("Package: fgbroken-dkms\nVersion: 1.0-1\nArchitecture: all\n"
                    "Filename: ./fgbroken-dkms_1.0-1_all.deb\nSize: 123\nSHA256: " + "ab" * 32
                    + "\n")


def test_build_vars_only_for_known_omissions() -> None:
    assert build_vars(LAB_CPU, ()) == {}
    v = build_vars(H100, ("gpu-toolkit",))
    assert v["container_runtime_gpu_toolkit"] == "none"
    assert v["container_runtime_cdi"] is False
    assert v["node_manifest_expected_runtime"]["gpu_toolkit"] == "none"
    assert v["node_manifest_expected_runtime"]["version"] == H100.runtime.version
    with pytest.raises(BadInput, match="no GPU toolkit"):
        build_vars(LAB_CPU, ("gpu-toolkit",))
    with pytest.raises(BadInput, match="cannot omit"):
        build_vars(H100, ("kernel",))


def test_template_hash_and_sums(tmp_path: Path) -> None:
    (tmp_path / "b.pkr.hcl").write_text("b")
    (tmp_path / "a.pkr.hcl").write_text("a")
    (tmp_path / "README.md").write_text("not part of the template")
    listing = "".join(f"{hashlib.sha256(c.encode()).hexdigest()}  {c}.pkr.hcl\n" for c in "ab")
    assert template_sha256(tmp_path) == hashlib.sha256(listing.encode()).hexdigest()
    sums = sha256sums(tmp_path, ["b.pkr.hcl", "a.pkr.hcl"])
    assert list(parse_sha256sums(sums)) == ["a.pkr.hcl", "b.pkr.hcl"]
    assert template_sha256(REPO / "packer") == template_sha256(REPO / "packer")


# --- lab hosts from images: which --image goes where ---------------------------------------

def test_lab_image_refusals(tmp_path: Path) -> None:
    from fleetgate.image.lab_images import resolve_lab_images

    _fake_image(tmp_path, "lab-cpu", 1, source="docker", lab_kind="container")
    _fake_image(tmp_path, "lab-vm", 1, source="docker", lab_kind="vm")
    _fake_image(tmp_path, "lab-vm", 2, source="qemu", lab_kind="vm")
    podman: Any = None  # every refusal happens before podman is needed

    def refuse(refs: list[str], containers: int, vms: int, match: str) -> None:
        with pytest.raises(BadInput, match=match):
            resolve_lab_images(refs, podman, images_root=tmp_path, containers=containers,
                               vms=vms)

    refuse(["lab-vm:2"], 0, 1, "qemu image")
    refuse(["lab-cpu:1"], 0, 1, "--containers is 0")
    refuse(["lab-vm:1"], 2, 0, "--vms is 0")
    refuse(["lab-cpu:7"], 2, 0, "no such image")
    refuse(["lab-cpu:x"], 2, 0, "CLASS:VERSION")


def test_image_list_and_show_piped_cut_nothing(tmp_path: Path) -> None:
    rev = "0123456789abcdef0123456789abcdef01234567"
    kernel = "6.1.0-57-cloud-amd64-with-a-long-local-suffix"
    d = _fake_image(tmp_path, "lab-cpu", 12, artifact="rootfs.tar", source="docker")
    doc = json.loads((d / "manifest.json").read_text())
    doc.update({"build": {"git_revision": rev, "git_dirty": True},
                "expected": {"kernel": {"abi": kernel}},
                "components": [{"component": "kernel", "name": "linux-image-" + kernel,
                                "expected": kernel, "verified": kernel, "status": "ok"}]})
    (d / "manifest.json").write_text(json.dumps(doc))
    env = {"COLUMNS": "40"}
    listed = fleetgate("image", "list", "--out", str(tmp_path), env=env)
    assert listed.returncode == 0, listed.stderr
    row = next(x for x in listed.stdout.splitlines() if x.startswith("lab-cpu-12 "))
    assert f"{rev}+dirty" in row.split(), row
    shown = fleetgate("image", "show", "lab-cpu:12", "--out", str(tmp_path), "-o", "wide",
                      env=env)
    assert shown.returncode == 0, shown.stderr
    assert any(x.split() == ["kernel", "linux-image-" + kernel, kernel, kernel, "ok"]
               for x in shown.stdout.splitlines()), shown.stdout
    both = fleetgate("image", "list", "--out", str(tmp_path), "--json", "-o", "wide")
    assert both.returncode == 2 and "--json is -o json" in both.stderr


def test_plain_build_progress_prints_steps_tasks_and_errors_and_beats_when_quiet(
        capsys: pytest.CaptureFixture[str]) -> None:
    from fleetgate.image.progress import PlainReporter

    r = PlainReporter(heartbeat_s=0.2)
    r.begin("building image lab-cpu-1")
    t = BuildTracker()
    task = "TASK [dkms_modules : Build and install every module for every pinned kernel] ****"
    for level, text in [
        ("say", "==> docker.lab: Creating a temporary directory"),
        ("message", "    docker.lab: Reading package lists..."),
        ("message", f"    docker.lab: {task}"),
        ("error", "Build 'docker.lab' errored after 3 minutes: boom"),
    ]:
        t.feed(level, text)
        r.packer_line(level, text, t)
    time.sleep(0.8)  # nothing from Packer: the compile runs
    r.end()
    lines = capsys.readouterr().out.splitlines()
    text = [x.split("] ", 1)[1] for x in lines]
    assert text[:4] == [
        "building image lab-cpu-1",
        "==> Creating a temporary directory",
        "TASK [dkms_modules : Build and install every module for every pinned kernel]",
        "ERROR: Build 'docker.lab' errored after 3 minutes: boom"]
    # apt's chatter is only in the log; the quiet minutes get a line naming the task, whole.
    assert not any("Reading package lists" in x for x in text)
    beats = [x for x in text[4:] if x.startswith("still building: ")]
    assert beats and ("task dkms_modules : Build and install every module for every pinned "
                      "kernel, 1 tasks done") in beats[0], text
