"""Wheel and dist-info metadata: names, versions, tags, and the vendor evidence they carry."""

from __future__ import annotations

import pytest

from fleetgate.preflight.vendor_table import load_table
from fleetgate.preflight.wheel_meta import (
    DistInfo,
    local_version,
    metadata_evidence,
    read_metadata,
    read_wheel_file,
    read_wheel_filename,
)

TABLE = load_table()

# The header lines of torch 2.14.1's METADATA (the CUDA build on PyPI), trimmed.
TORCH_CUDA_METADATA = """\
Metadata-Version: 2.4
Name: torch
Version: 2.14.1
Requires-Dist: filelock
Requires-Dist: cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"
Requires-Dist: nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"
Requires-Dist: triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"
Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"

The long description.
"""


def _info(text: str) -> DistInfo:
    info = DistInfo()
    read_metadata(info, text, "torch-2.14.1.dist-info/METADATA")
    return info


def test_read_metadata() -> None:
    info = _info(TORCH_CUDA_METADATA)
    assert (info.name, info.version) == ("torch", "2.14.1")
    assert len(info.requires_dist) == 5
    assert info.metadata_file == "torch-2.14.1.dist-info/METADATA"


def test_requires_dist_on_vendor_distributions_is_strong_evidence() -> None:
    found = metadata_evidence(_info(TORCH_CUDA_METADATA), TABLE, where="torch.whl")
    assert {(e.backend, e.evidence_class, e.strong) for e in found} == {
        ("nvidia", "Requires-Dist", True)}
    assert sorted(e.detail for e in found) == [
        'Requires-Dist: cuda-bindings<14,>=13.0.3; platform_system == "Linux" and '
        'python_version < "3.15"',
        'Requires-Dist: nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"']


def test_requires_dist_behind_an_extra_is_weak() -> None:
    info = _info("Name: jax\nVersion: 0.6.0\n"
                 "Requires-Dist: jax-cuda12-plugin[with-cuda]==0.6.0; extra == 'cuda12'\n"
                 "Requires-Dist: jax-rocm60-plugin; extra == 'rocm' and sys_platform == 'linux'\n")
    found = metadata_evidence(info, TABLE, where="jax.whl")
    assert {(e.backend, e.evidence_class, e.strong) for e in found} == {
        ("nvidia", "Requires-Dist-extra", False), ("amd", "Requires-Dist-extra", False)}


def test_unparsable_requirement_still_names_its_distribution() -> None:
    info = _info("Name: odd\nVersion: 1\nRequires-Dist: nvidia-nccl-cu12 (>=2.18 ; bad marker\n")
    (found,) = metadata_evidence(info, TABLE, where="odd.whl")
    assert (found.backend, found.evidence_class) == ("nvidia", "Requires-Dist")


@pytest.mark.parametrize(("version", "local"), [
    ("2.5.1+cu121", "cu121"), ("2.4.0+rocm6.1", "rocm6.1"), ("2.13.0+cpu", "cpu"),
    ("1.0", None), ("not a version+cu118", "cu118"),
])
def test_local_version(version: str, local: str | None) -> None:
    assert local_version(version) == local


@pytest.mark.parametrize(("version", "backend"), [
    ("2.5.1+cu121", "nvidia"), ("2.4.0+rocm6.1", "amd"), ("2.13.0+cpu", None), ("2.5.1", None),
])
def test_version_tag_evidence(version: str, backend: str | None) -> None:
    info = DistInfo(name="torch", version=version)
    found = metadata_evidence(info, TABLE, where="torch.whl")
    assert {e.backend for e in found} == ({backend} if backend else set())
    assert all(e.evidence_class == "version-tag" and e.file == "torch.whl" for e in found)


def test_vendor_distribution_name_is_evidence() -> None:
    info = DistInfo(name="nvidia_cuda_runtime_cu12", version="12.9.79")
    (found,) = metadata_evidence(info, TABLE, where="x.whl")
    assert (found.evidence_class, found.detail) == ("distribution",
                                                    "Name: nvidia-cuda-runtime-cu12")


def test_wheel_filename_gives_name_version_and_tags() -> None:
    info = DistInfo()
    read_wheel_filename(info, "torch-2.5.1+cu121-cp311-cp311-linux_x86_64.whl")
    assert (info.name, info.version, info.tags) == ("torch", "2.5.1+cu121",
                                                    {"cp311-cp311-linux_x86_64"})
    found = metadata_evidence(info, TABLE, where="torch-2.5.1+cu121-cp311-cp311-linux_x86_64.whl")
    assert {(e.backend, e.evidence_class) for e in found} == {("nvidia", "version-tag")}


def test_compressed_tag_sets_expand() -> None:
    info = DistInfo()
    read_wheel_filename(info, "nvidia_nvtx-13.0.85-py3-none-manylinux1_x86_64."
                              "manylinux_2_5_x86_64.whl")
    assert info.tags == {"py3-none-manylinux1_x86_64", "py3-none-manylinux_2_5_x86_64"}


def test_bad_wheel_filename_leaves_metadata_to_speak() -> None:
    info = DistInfo()
    read_wheel_filename(info, "not-a-wheel.whl")
    assert (info.name, info.version, info.tags) == (None, None, set())


def test_wheel_file_tags() -> None:
    info = DistInfo()
    read_wheel_file(info, "Wheel-Version: 1.0\nGenerator: setuptools (81.0.0)\n"
                          "Root-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_28_x86_64\n"
                          "Tag: cp311-cp311-manylinux_2_17_x86_64\n\n")
    assert info.tags == {"cp311-cp311-manylinux_2_28_x86_64",
                         "cp311-cp311-manylinux_2_17_x86_64"}
