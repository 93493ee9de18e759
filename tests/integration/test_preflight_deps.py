"""`fleetgate preflight deps` on real artifacts: the machine's CPU torch wheel, real CUDA wheels
fetched once with `pip download --no-deps` into the fleetgate cache, virtualenvs, the lab's
lab-cpu rootfs tarball, and image tars made of real binaries.

CUDA wheels used (the smallest real ones that show each kind of evidence):
- torchvision 0.29.1 (7 MB, the CUDA 13 build): DT_NEEDED libcudart.so.13, ships libcudart.
- nvidia-cuda-runtime-cu12 12.9.79 (3.5 MB): *is* libcudart.so.12, a vendor distribution.
- torch 2.14.1 (the CUDA build, 555 MB; on this machine's disk): Requires-Dist
  nvidia-cudnn-cu13 and DT_NEEDED libcublas.so.13.
- polars 2.1.0 (0.9 MB, pure Python): only an optional extra on cudf-polars-cu12.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Literal

import pytest
from elftools.elf.elffile import ELFFile
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from fleetgate.image.base import base_recipe
from fleetgate.preflight import elf_scan, load_table, members, scan_target
from fleetgate.preflight.elf_scan import scan_elf
from fleetgate.spec.loader import load_class
from fleetgate.system.cache import cache_dir
from fleetgate.system.rootfs import extract, rootfs_tar
from tests.conftest import REPO, fleetgate

TABLE = load_table()
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def _cached_wheel(spec: str, glob: str) -> Path:
    """The wheel for `spec`, downloaded once into the fleetgate cache and reused after."""
    cache = cache_dir() / "wheels"
    hits = sorted(cache.glob(glob))
    if not hits:
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--only-binary", ":all:", "-d", str(cache), spec],
                              capture_output=True, text=True, timeout=1200, check=False)
        hits = sorted(cache.glob(glob))
        if proc.returncode != 0 or not hits:
            pytest.fail(f"pip download {spec} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return hits[0]


def _pip_find_links() -> list[Path]:
    """The find-links directories pip is configured with (pip.conf, PIP_FIND_LINKS)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                          text=True, timeout=60, check=False)
    dirs = []
    for m in re.finditer(r"find-links='([^']*)'", proc.stdout):
        dirs += [Path(d.removeprefix("file://")) for d in m.group(1).split()]
    return [d for d in dirs if d.is_dir()]


@pytest.fixture(scope="module")
def torch_cpu_wheel() -> Path:
    """The CPU torch wheel that pip on this machine installs from its find-links, in place."""
    ours = set(sys_tags())
    for directory in _pip_find_links():
        for wheel in sorted(directory.glob("torch-*+cpu-*.whl")):
            if parse_wheel_filename(wheel.name)[3] & ours:
                return wheel
    pytest.skip("no CPU torch wheel in pip's find-links on this machine "
                f"({', '.join(map(str, _pip_find_links())) or 'none configured'})")


@pytest.fixture(scope="module")
def torchvision_wheel() -> Path:
    return _cached_wheel("torchvision==0.29.1", "torchvision-0.29.1-*.whl")


@pytest.fixture(scope="module")
def cudart_wheel() -> Path:
    return _cached_wheel("nvidia-cuda-runtime-cu12==12.9.79",
                         "nvidia_cuda_runtime_cu12-12.9.79-*.whl")


@pytest.fixture(scope="module")
def polars_wheel() -> Path:
    """Pure Python; its `gpu` extra pulls cudf-polars-cu12: weak evidence only."""
    return _cached_wheel("polars==2.1.0", "polars-2.1.0-*.whl")


@pytest.fixture(scope="module")
def torch_cuda_wheel() -> Path:
    return _cached_wheel("torch==2.14.1", "torch-2.14.1-*.whl")


def _deps(target: Path | str, backend: str, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = fleetgate("preflight", "deps", str(target), "--backend", backend, "--json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "fleetgate.preflight.deps/v1" and doc["backend"] == backend
    assert doc["verdict"] == ("fail" if proc.returncode else "pass")
    return proc.returncode, doc


def _evidence(doc: dict[str, Any], name: str) -> set[tuple[str, str, str, str]]:
    (artifact,) = [a for a in doc["artifacts"] if a["name"] == name]
    return {(e["backend"], e["class"], e["file"], e["detail"]) for e in artifact["evidence"]}


def _member(wheel: Path, name: str, dest: Path) -> Path:
    dest.write_bytes(_read(wheel, name))
    return dest


def test_cpu_torch_wheel_is_clean_for_cpu(torch_cpu_wheel: Path) -> None:
    rc, doc = _deps(torch_cpu_wheel, "cpu")
    assert rc == 0
    (torch,) = doc["artifacts"]
    assert (torch["name"], torch["kind"], torch["evidence"]) == ("torch", "wheel", [])
    assert torch["version"].endswith("+cpu") and torch["platform_tags"]
    assert torch["elf_files"] > 50  # it did read libtorch_cpu.so and friends
    assert doc["summary"]["unreadable_files"] == 0


def test_cuda_wheel_needs_nvidia(torchvision_wheel: Path) -> None:
    for backend in ("cpu", "none", "amd"):
        rc, doc = _deps(torchvision_wheel, backend)
        assert rc == 1 and doc["summary"]["violating_artifacts"] == 1
    found = _evidence(doc, "torchvision")
    assert ("nvidia", "DT_NEEDED", "torchvision/_C_stable.so", "libcudart.so.13") in found
    # auditwheel renamed the copy it bundled; the stem still names the library
    assert ("nvidia", "DT_NEEDED", "torchvision/image_stable.so",
            "libcudart.faf08d9a.so.13") in found
    assert ("nvidia", "provides", "torchvision.libs/libcudart.faf08d9a.so.13",
            "libcudart.so.13") in found
    rc, doc = _deps(torchvision_wheel, "nvidia")
    assert rc == 0 and doc["artifacts"][0]["needs"] == ["nvidia"]


def test_table_output_names_the_evidence(torchvision_wheel: Path) -> None:
    proc = fleetgate("preflight", "deps", str(torchvision_wheel), "--backend", "cpu")
    assert proc.returncode == 1
    assert "DT_NEEDED" in proc.stdout and "libcudart.so.13" in proc.stdout
    assert "FAIL: 1 artifact(s) need a backend that --backend cpu does not have: torchvision " \
           "(nvidia)" in proc.stdout


def test_cuda_torch_wheel_metadata_and_cublas(torch_cuda_wheel: Path) -> None:
    rc, doc = _deps(torch_cuda_wheel, "cpu")
    assert rc == 1
    found = _evidence(doc, "torch")
    meta = "torch-2.14.1.dist-info/METADATA"
    assert ("nvidia", "Requires-Dist", meta,
            'Requires-Dist: nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"') in found
    assert ("nvidia", "DT_NEEDED", "torch/lib/libtorch_cuda.so", "libcublas.so.13") in found
    (torch,) = doc["artifacts"]
    strengths = {e["strength"] for e in torch["evidence"] if e["class"] == "Requires-Dist"}
    assert strengths == {"needs"}


def test_wheel_that_is_a_vendor_library(cudart_wheel: Path) -> None:
    rc, doc = _deps(cudart_wheel, "amd")
    assert rc == 1
    found = _evidence(doc, "nvidia-cuda-runtime-cu12")
    assert ("nvidia", "provides", "nvidia/cuda_runtime/lib/libcudart.so.12",
            "libcudart.so.12") in found
    assert any(cls == "distribution" for _, cls, _, _ in found)


def test_optional_extra_fails_only_when_strict(polars_wheel: Path) -> None:
    rc, doc = _deps(polars_wheel, "cpu")
    assert rc == 0
    (polars,) = doc["artifacts"]
    assert (polars["needs"], polars["may_use"], polars["violations"]) == ([], ["nvidia"], [])
    assert {(e["class"], e["strength"]) for e in polars["evidence"]} == {
        ("Requires-Dist-extra", "may-use")}
    rc, doc = _deps(polars_wheel, "cpu", "--strict")
    assert rc == 1 and doc["strict"] and doc["artifacts"][0]["violations"] == ["nvidia"]
    assert _deps(polars_wheel, "nvidia", "--strict")[0] == 0


def test_directory_of_wheels(tmp_path: Path, torchvision_wheel: Path,
                             cudart_wheel: Path) -> None:
    for wheel in (torchvision_wheel, cudart_wheel):
        (tmp_path / wheel.name).symlink_to(wheel)
    rc, doc = _deps(tmp_path, "nvidia")
    assert rc == 0 and doc["target_kind"] == "wheel-dir"
    assert sorted(a["name"] for a in doc["artifacts"]) == ["nvidia-cuda-runtime-cu12",
                                                          "torchvision"]
    assert _deps(tmp_path, "cpu")[1]["summary"]["violating_artifacts"] == 2


def test_venv_built_from_the_wheels(tmp_path: Path, torchvision_wheel: Path,
                                    cudart_wheel: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-index", str(torchvision_wheel),
                    str(cudart_wheel)], check=True, timeout=300)
    rc, doc = _deps(venv, "cpu")
    assert rc == 1 and doc["target_kind"] == "venv"
    # Files are attributed to the distribution whose RECORD lists them.
    site = next((venv / "lib").glob("python3*/site-packages")).relative_to(venv)
    assert ("nvidia", "DT_NEEDED", f"{site}/torchvision/_C_stable.so",
            "libcudart.so.13") in _evidence(doc, "torchvision")
    assert ("nvidia", "provides", f"{site}/nvidia/cuda_runtime/lib/libcudart.so.12",
            "libcudart.so.12") in _evidence(doc, "nvidia-cuda-runtime-cu12")
    assert not [a for a in doc["artifacts"] if a["kind"] == "path"]
    assert _deps(venv, "nvidia")[0] == 0
    # The same through site-packages alone.
    rc, doc = _deps(venv / site, "cpu")
    assert rc == 1 and doc["target_kind"] == "site-packages"
    assert ("nvidia", "DT_NEEDED", "torchvision/_C_stable.so",
            "libcudart.so.13") in _evidence(doc, "torchvision")


def test_project_venv_is_clean_for_cpu() -> None:
    rc, doc = _deps(sys.prefix, "cpu")
    assert rc == 0 and doc["target_kind"] == "venv"
    assert doc["summary"]["elf_files"] > 100
    numpy = [a for a in doc["artifacts"] if a["name"] == "numpy"]
    assert numpy and numpy[0]["elf_files"] > 0 and numpy[0]["platform_tags"]


def test_pool_and_serial_scans_agree() -> None:
    serial = scan_target(Path(sys.prefix), TABLE, jobs=1)
    pooled = scan_target(Path(sys.prefix), TABLE, jobs=2)
    none: frozenset[str] = frozenset()

    def strip(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k != "summary"} | {
            "counts": {k: doc["summary"][k] for k in ("files", "elf_files", "bytes")}}
    assert strip(serial.to_json("cpu", none, strict=True)) == strip(
        pooled.to_json("cpu", none, strict=True))


@pytest.fixture(scope="module")
def lab_cpu_rootfs() -> Path:
    """The lab's lab-cpu rootfs tarball (mmdebstrap), built or reused from the cache."""
    return rootfs_tar(base_recipe(load_class(REPO / "inventory" / "classes" / "lab-cpu.yml")))


def _assert_debs_own_their_files(target: Path) -> None:
    """ELF files belong to the Debian packages whose dpkg lists name them (/lib/... in the
    lists, usr/lib/... on a merged-/usr Debian)."""
    result = scan_target(target, TABLE)
    debs = {a.name: a for a in result.artifacts if a.kind == "deb-package"}
    assert debs["libc6"].elf_files > 5 and debs["libc6"].version
    assert debs["openssh-server"].elf_files > 0
    unowned = [a.name for a in result.artifacts if a.kind == "path"]
    assert len(unowned) < len(debs), unowned


def test_lab_cpu_rootfs_tar_is_clean_for_cpu(lab_cpu_rootfs: Path) -> None:
    rc, doc = _deps(lab_cpu_rootfs, "cpu")
    assert rc == 0 and doc["target_kind"] == "tar"
    assert doc["summary"]["elf_files"] > 100 and doc["summary"]["unreadable_files"] == 0
    _assert_debs_own_their_files(lab_cpu_rootfs)


def test_unpacked_rootfs_is_clean_for_cpu(tmp_path: Path, lab_cpu_rootfs: Path) -> None:
    tree = tmp_path / "rootfs"
    extract(lab_cpu_rootfs, tree)
    rc, doc = _deps(tree, "cpu")
    assert rc == 0 and doc["target_kind"] == "rootfs"
    tar_doc = _deps(lab_cpu_rootfs, "cpu")[1]
    # The same files either way; the tree walk must not follow /lib -> usr/lib twice.
    assert doc["summary"]["elf_files"] == tar_doc["summary"]["elf_files"]
    _assert_debs_own_their_files(tree)


TarMode = Literal["w", "w:gz", "w:xz"]


CUDART_LIB = "usr/lib/x86_64-linux-gnu/libcudart.so.12.9.79"
CUDART_LIST = "var/lib/dpkg/info/libcudart12:amd64.list"


def _write_tar(path: Path, files: dict[str, bytes], mode: TarMode) -> Path:
    with tarfile.open(path, mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _read(wheel: Path, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member)


def _image_tar(path: Path, torchvision_wheel: Path, cudart_wheel: Path, mode: TarMode) -> None:
    _write_tar(path, {
        CUDART_LIB: _read(cudart_wheel, "nvidia/cuda_runtime/lib/libcudart.so.12"),
        "opt/app/_C_stable.so": _read(torchvision_wheel, "torchvision/_C_stable.so"),
        CUDART_LIST: f"/.\n/{CUDART_LIB}\n".encode(),
        "var/lib/dpkg/status": b"Package: libcudart12\nVersion: 12.9.79-1\n",
    }, mode)


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:xz"])
def test_image_tar_with_vendor_binaries(tmp_path: Path, torchvision_wheel: Path,
                                        cudart_wheel: Path, mode: TarMode) -> None:
    image = tmp_path / "image.tar"
    _image_tar(image, torchvision_wheel, cudart_wheel, mode)
    rc, doc = _deps(image, "cpu")
    assert rc == 1 and doc["target_kind"] == "tar"
    (deb,) = [a for a in doc["artifacts"] if a["kind"] == "deb-package"]
    assert (deb["name"], deb["version"], deb["needs"]) == ("libcudart12", "12.9.79-1",
                                                           ["nvidia"])
    assert ("nvidia", "DT_NEEDED", "opt/app/_C_stable.so",
            "libcudart.so.13") in _evidence(doc, "opt/app/_C_stable.so")


def test_big_members_spool_to_disk_with_the_same_result(
        tmp_path: Path, torchvision_wheel: Path, cudart_wheel: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    image = tmp_path / "image.tar.gz"
    _image_tar(image, torchvision_wheel, cudart_wheel, "w:gz")
    none: frozenset[str] = frozenset()
    in_memory = scan_target(image, TABLE).to_json("cpu", none, strict=False)["artifacts"]
    monkeypatch.setattr(members, "MEMORY_CAP", 0)
    spooled = scan_target(image, TABLE).to_json("cpu", none, strict=False)["artifacts"]
    assert spooled == in_memory and in_memory


@pytest.mark.parametrize("layout", ["docker-archive", "oci-archive"])
def test_image_archive_layers_read_as_one_tree(tmp_path: Path, cudart_wheel: Path,
                                               lab_cpu_rootfs: Path, layout: str) -> None:
    """`podman save` layouts: the lab-cpu rootfs as the base layer, libcudart added in a
    second layer, its dpkg list in a third (gzip'd in the OCI layout, as registries ship)."""
    base = lab_cpu_rootfs
    mode: TarMode = "w:gz" if layout == "oci-archive" else "w"
    lib = _write_tar(tmp_path / "lib.tar", {
        CUDART_LIB: _read(cudart_wheel, "nvidia/cuda_runtime/lib/libcudart.so.12")}, mode)
    dpkg = _write_tar(tmp_path / "dpkg.tar", {CUDART_LIST: f"/{CUDART_LIB}\n".encode()}, mode)
    image = tmp_path / "image.tar"
    with tarfile.open(image, "w") as tf:
        names = [f"blobs/sha256/{i:064x}" if layout == "oci-archive" else f"{i:064x}.tar"
                 for i in range(3)]
        for layer, name in zip((base, lib, dpkg), names, strict=True):
            tf.add(layer, name)
        manifest = json.dumps([{"Layers": names}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tf.addfile(info, io.BytesIO(manifest))
    rc, doc = _deps(image, "cpu")
    assert rc == 1 and doc["target_kind"] == "tar"
    assert [(a["name"], a["kind"], a["needs"]) for a in doc["artifacts"]] == [
        ("libcudart12", "deb-package", ["nvidia"])]
    debs = {a.name: a for a in scan_target(image, TABLE).artifacts if a.kind == "deb-package"}
    assert debs["libc6"].elf_files > 5 and debs["libc6"].version  # from the base layer


@pytest.mark.parametrize("cut", [0, 1, 7, 11, 12])
def test_rodata_chunk_boundaries_lose_nothing(tmp_path: Path, cudart_wheel: Path,
                                              monkeypatch: pytest.MonkeyPatch, cut: int) -> None:
    """A chunk boundary `cut` bytes into "libcuda.so.1" still yields the whole string once."""
    lib = _member(cudart_wheel, "nvidia/cuda_runtime/lib/libcudart.so.12", tmp_path / "lib.so")
    with lib.open("rb") as f:
        whole = scan_elf(f, TABLE.dlopen_regex)
        section = ELFFile(f).get_section_by_name(".rodata")
        assert section is not None
        rodata = section.data()
    assert "libcuda.so.1" in whole.dlopen
    monkeypatch.setattr(elf_scan, "RODATA_CHUNK", rodata.index(b"libcuda.so.1") + cut)
    with lib.open("rb") as f:
        assert scan_elf(f, TABLE.dlopen_regex) == whole


def test_broken_elf_files_are_reported_not_fatal(tmp_path: Path,
                                                 torchvision_wheel: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    good = _member(torchvision_wheel, "torchvision/_C_stable.so", tree / "good.so")
    data = good.read_bytes()
    (tree / "truncated.so").write_bytes(data[: len(data) // 2])
    (tree / "bad-shoff.so").write_bytes(data[:0x28] + b"\xff" * 8 + data[0x30:])
    rc, doc = _deps(tree, "cpu")
    assert rc == 1  # the intact file still counts
    unreadable = {u["file"] for a in doc["artifacts"] for u in a["unreadable"]}
    assert unreadable == {"truncated.so", "bad-shoff.so"}
    # The same inside a wheel: the member is reported, the scan goes on.
    wheel = tmp_path / "broken-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("broken/_ext.so", data[:4096])
        zf.write(good, "broken/_ok.so")
    rc, doc = _deps(wheel, "cpu")
    assert rc == 1
    assert [u["file"] for u in doc["artifacts"][0]["unreadable"]] == ["broken/_ext.so"]


def test_extra_table_extends_the_vendors(tmp_path: Path, torchvision_wheel: Path) -> None:
    table = tmp_path / "acme.yml"
    table.write_text("vendors:\n  acme:\n    libraries: [libjpeg]\n")
    rc, doc = _deps(torchvision_wheel, "nvidia", "--table", str(table))
    assert rc == 1
    (tv,) = doc["artifacts"]
    assert tv["violations"] == ["acme"] and tv["needs"] == ["acme", "nvidia"]
    assert ("acme", "DT_NEEDED", "torchvision/image_stable.so",
            "libjpeg.67fb65bd.so.8") in _evidence(doc, "torchvision")
    assert doc["vendor_tables"][-1] == str(table)
