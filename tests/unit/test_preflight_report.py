"""Attribution of tree files to artifacts, verdicts, the JSON schema, and bad input through the
real CLI (one line on stderr, exit 2). No ELF parsing here: ElfFacts stand for what a binary
said; the binaries themselves are scanned in tests/integration/test_preflight_deps.py."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from fleetgate.preflight.elf_scan import ElfFacts
from fleetgate.preflight.model import SCHEMA, Artifact, Evidence, ScanResult, ScanStats
from fleetgate.preflight.tree import TreeCollector, normalize, wants_text
from fleetgate.preflight.vendor_table import load_table
from tests.conftest import fleetgate

TABLE = load_table()
NONE: frozenset[str] = frozenset()
NVIDIA = frozenset({"nvidia"})

RECORD = """\
torchvision/_C_stable.so,sha256=abc,123
torchvision.libs/libcudart.faf08d9a.so.13,sha256=def,456
../../../bin/tv-tool,,
torchvision-0.29.1.dist-info/RECORD,,
"""


def _venv_like() -> TreeCollector:
    c = TreeCollector(TABLE)
    site = "lib/python3.11/site-packages"
    c.add_text(f"{site}/torchvision-0.29.1.dist-info/METADATA",
               b"Name: torchvision\nVersion: 0.29.1\nRequires-Dist: torch>=2.14.0\n")
    c.add_text(f"{site}/torchvision-0.29.1.dist-info/WHEEL",
               b"Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_28_x86_64\n")
    c.add_text(f"{site}/torchvision-0.29.1.dist-info/RECORD", RECORD.encode())
    c.add_elf(f"{site}/torchvision/_C_stable.so", 100,
              ElfFacts(needed=("libc10.so", "libcudart.so.13", "libc.so.6")))
    c.add_elf(f"{site}/torchvision.libs/libcudart.faf08d9a.so.13", 100,
              ElfFacts(needed=("libc.so.6",), dlopen=("libcuda.so.1",)))
    c.add_elf("bin/tv-tool", 10, ElfFacts(dlopen=("libamdhip64.so.6",)))
    c.add_elf(f"{site}/stray/_broken.so", 10, ElfFacts(error="ELFError: truncated"))
    return c


def test_record_attributes_files_to_their_distribution() -> None:
    arts = {a.name: a for a in _venv_like().artifacts()}
    assert set(arts) == {"torchvision", "lib/python3.11/site-packages/stray/_broken.so"}
    tv = arts["torchvision"]
    assert (tv.kind, tv.version, tv.platform_tags) == (
        "distribution", "0.29.1", ["cp311-cp311-manylinux_2_28_x86_64"])
    assert tv.elf_files == 3  # bin/tv-tool too: RECORD paths are relative to site-packages
    assert {(e.evidence_class, e.detail) for e in tv.evidence} == {
        ("DT_NEEDED", "libcudart.so.13"), ("provides", "libcudart.faf08d9a.so.13"),
        ("dlopen-string", "libcuda.so.1"), ("dlopen-string", "libamdhip64.so.6")}
    assert tv.needs() == {"nvidia"} and tv.may_use() == {"amd"}


def test_unreadable_file_is_kept_not_fatal() -> None:
    arts = {a.name: a for a in _venv_like().artifacts()}
    broken = arts["lib/python3.11/site-packages/stray/_broken.so"]
    assert broken.kind == "path" and [u.reason for u in broken.unreadable] == [
        "ELFError: truncated"]
    assert not broken.needs()


def test_dpkg_lists_attribute_rootfs_files_with_merged_usr() -> None:
    c = TreeCollector(TABLE)
    c.add_text("var/lib/dpkg/info/libcudart12:amd64.list",
               b"/.\n/lib\n/lib/x86_64-linux-gnu/libcudart.so.12.0.146\n")
    c.add_text("var/lib/dpkg/status", b"Package: libcudart12\nStatus: install ok installed\n"
                                      b"Version: 12.0.146~12.0.1-4\n\nPackage: bash\n"
                                      b"Version: 5.2.15-2+b2\n")
    c.add_elf("usr/lib/x86_64-linux-gnu/libcudart.so.12.0.146", 10, ElfFacts())
    c.add_elf("usr/bin/bash", 10, ElfFacts(needed=("libc.so.6",)))
    arts = {a.name: a for a in c.artifacts()}
    assert arts["libcudart12"].kind == "deb-package"
    assert arts["libcudart12"].version == "12.0.146~12.0.1-4"
    assert arts["libcudart12"].needs() == {"nvidia"}
    assert arts["usr/bin/bash"].kind == "path" and not arts["usr/bin/bash"].evidence


@pytest.mark.parametrize(("path", "wanted"), [
    ("usr/lib/python3/dist-packages/six-1.16.0.dist-info/METADATA", True),
    ("foo-1.0.dist-info/RECORD", True),
    ("foo-1.0.dist-info/LICENSE", False),
    ("var/lib/dpkg/info/libc6:amd64.list", True),
    ("var/lib/dpkg/info/libc6:amd64.md5sums", False),
    ("var/lib/dpkg/status", True),
    ("usr/lib/libcuda.so.1", False),
])
def test_wants_text(path: str, wanted: bool) -> None:
    assert wants_text(path) is wanted


@pytest.mark.parametrize(("raw", "norm"), [
    ("./usr/lib/x", "usr/lib/x"), ("/etc/passwd", "etc/passwd"), ("a/b/../c", "a/c"),
])
def test_normalize(raw: str, norm: str) -> None:
    assert normalize(raw) == norm


def _artifact(*evidence: Evidence) -> Artifact:
    a = Artifact(name="x", kind="wheel")
    a.evidence |= set(evidence)
    return a


def test_weak_evidence_fails_only_when_strict() -> None:
    weak = _artifact(Evidence("nvidia", "dlopen-string", "x.so", "libcuda.so.1"))
    assert weak.violations(NONE, strict=False) == set()
    assert weak.violations(NONE, strict=True) == {"nvidia"}
    assert weak.violations(NVIDIA, strict=True) == set()


def test_strong_evidence_of_another_vendor_fails() -> None:
    both = _artifact(Evidence("nvidia", "DT_NEEDED", "a.so", "libcudart.so.12"),
                     Evidence("amd", "Requires-Dist", "M", "Requires-Dist: pytorch-triton-rocm"))
    assert both.violations(NVIDIA, strict=False) == {"amd"}
    assert both.violations(frozenset({"amd"}), strict=False) == {"nvidia"}


def test_json_schema() -> None:
    clean = Artifact(name="numpy", kind="distribution", version="2.0")
    dep = Artifact(name="libfoo", kind="deb-package")  # clean: left out of the artifact list
    bad = _artifact(Evidence("nvidia", "DT_NEEDED", "a.so", "libcudart.so.12"))
    result = ScanResult("t", "venv", [clean, dep, bad], ScanStats(files=3, elf_files=1))
    doc = json.loads(json.dumps(result.to_json("cpu", NONE, strict=False)))
    assert doc["schema"] == SCHEMA == "fleetgate.preflight.deps/v1"
    assert (doc["verdict"], doc["backend"], doc["allowed_vendors"]) == ("fail", "cpu", [])
    assert doc["summary"]["artifacts"] == 3 and doc["summary"]["violating_artifacts"] == 1
    assert [a["name"] for a in doc["artifacts"]] == ["numpy", "x"]
    (ev,) = doc["artifacts"][1]["evidence"]
    assert ev == {"backend": "nvidia", "class": "DT_NEEDED", "file": "a.so",
                  "detail": "libcudart.so.12", "strength": "needs"}
    assert result.to_json("nvidia", NVIDIA, strict=False)["verdict"] == "pass"


def _one_line_exit_2(*args: str) -> str:
    proc = fleetgate("preflight", "deps", *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return proc.stderr


def test_missing_target(tmp_path: Path) -> None:
    err = _one_line_exit_2(str(tmp_path / "nope.whl"), "--backend", "cpu")
    assert err == f"fleetgate: {tmp_path / 'nope.whl'}: no such file or directory\n"


def test_unknown_backend(tmp_path: Path) -> None:
    err = _one_line_exit_2(str(tmp_path), "--backend", "cuda")
    assert err.startswith("fleetgate: --backend: cuda: unknown backend (known: cpu, none, ")


def test_missing_backend(tmp_path: Path) -> None:
    assert "--backend" in _one_line_exit_2(str(tmp_path))


def test_malformed_table(tmp_path: Path) -> None:
    table = tmp_path / "extra.yml"
    table.write_text("vendors:\n  amd:\n    libraries: [libcuda]\n")
    err = _one_line_exit_2(str(tmp_path), "--backend", "cpu", "--table", str(table))
    assert err == (f"fleetgate: {table}: vendors.amd.libraries[0]: 'libcuda' is already listed "
                   "under nvidia\n")


def test_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "image.tar"
    junk.write_bytes(b"this is not a tar archive\n" * 40)
    assert "not a wheel, a tar archive or a directory" in _one_line_exit_2(
        str(junk), "--backend", "cpu")


def test_corrupt_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.5.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK\x03\x04 truncated")
    assert "not a readable wheel (zip)" in _one_line_exit_2(str(wheel), "--backend", "cpu")


def test_truncated_tar_gz(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for i in range(50):  # incompressible, so the cut lands inside member data
            data = bytes(range(256)) * 64 + i.to_bytes(4, "big") * 4096
            info = tarfile.TarInfo(f"usr/lib/file{i}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    tgz = tmp_path / "rootfs.tar.gz"
    tgz.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    err = _one_line_exit_2(str(tgz), "--backend", "cpu")
    assert err.startswith(f"fleetgate: {tgz}: usr/lib/file") and "truncated" in err


def test_empty_directory_is_clean(tmp_path: Path) -> None:
    proc = fleetgate("preflight", "deps", str(tmp_path), "--backend", "none", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["verdict"], doc["target_kind"], doc["summary"]["files"]) == (
        "pass", "directory", 0)
