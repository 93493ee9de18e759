"""The vendor table: the shipped YAML, soname stems, lookups, extra tables and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.errors import BadInput
from fleetgate.preflight.vendor_table import default_table_path, load_table, soname_stem

TABLE = load_table()

REQUIRED = {
    "nvidia": ["libcuda", "libcudart", "libcublas", "libcublasLt", "libcudnn", "libnccl",
               "libnvrtc", "libnvidia-ml", "libcufft", "libcusparse", "libnvJitLink"],
    "amd": ["libamdhip64", "librocblas", "libMIOpen", "librccl", "libhsa-runtime64",
            "libhipblaslt"],
    "intel": ["libze_loader", "libsycl"],
}


@pytest.mark.parametrize(("vendor", "stem"),
                         [(v, s) for v, stems in REQUIRED.items() for s in stems])
def test_shipped_table_knows_the_vendor_libraries(vendor: str, stem: str) -> None:
    assert TABLE.library_vendor(stem) == vendor


@pytest.mark.parametrize(("name", "stem"), [
    ("libcudart.so.12", "libcudart"),
    ("libcudart.so", "libcudart"),
    ("libcublasLt.so.12.4.5.8", "libcublasLt"),
    ("libcudart.faf08d9a.so.13", "libcudart"),          # auditwheel, current
    ("libcudart-9335f6a2.so.12.0.107", "libcudart"),    # auditwheel, older
    ("nvidia/cu13/lib/libcupti.so.13", "libcupti"),
    ("libhsa-runtime64.so.1", "libhsa-runtime64"),
    ("libnvidia-ml.so.1", "libnvidia-ml"),
    ("_C.cpython-311-x86_64-linux-gnu.so", "_C.cpython-311-x86_64-linux-gnu"),
    ("python3.11", "python3.11"),
])
def test_soname_stem(name: str, stem: str) -> None:
    assert soname_stem(name) == stem


@pytest.mark.parametrize("stem", ["libc", "libstdc++", "libtorch_cuda", "libc10_cuda",
                                  "libcudart_static", "libcudaX", "libgomp", "libopenblas"])
def test_near_misses_are_not_vendor_libraries(stem: str) -> None:
    assert TABLE.library_vendor(stem) is None


def test_globs_match_whole_stems() -> None:
    assert TABLE.library_vendor("libcudnn_ops") == "nvidia"
    assert TABLE.library_vendor("libnppig") == "nvidia"
    assert TABLE.library_vendor("libcudnn_") is None


@pytest.mark.parametrize(("name", "vendor"), [
    ("nvidia-cublas-cu12", "nvidia"),
    ("NVIDIA_CUDNN_CU12", "nvidia"),      # compared by canonical name
    ("cupy-cuda12x", "nvidia"),
    ("jax-cuda12-plugin", "nvidia"),
    ("cuda-bindings", "nvidia"),
    ("pytorch-triton-rocm", "amd"),
    ("intel-sycl-rt", "intel"),
    ("torch", None),
    ("triton", None),
    ("numpy", None),
])
def test_distribution_vendor(name: str, vendor: str | None) -> None:
    assert TABLE.distribution_vendor(name) == vendor


@pytest.mark.parametrize(("local", "vendor"), [
    ("cu121", "nvidia"), ("rocm6.1", "amd"), ("ROCM6.1", "amd"), ("xpu", "intel"),
    ("cpu", None), ("local.build", None),
])
def test_local_version_vendor(local: str, vendor: str | None) -> None:
    assert TABLE.local_version_vendor(local) == vendor


def test_dlopen_regex_finds_whole_sonames_only() -> None:
    blob = (b"\x00libcuda.so.1\x00/opt/rocm/lib/libamdhip64.so.6\x00libcudart_static.so"
            b"\x00notlibcuda.so\x00libcublasLt.so.12\x00")
    found = {m.group().decode() for m in TABLE.dlopen_regex.finditer(blob)
             if blob[m.start() - 1] in b"\x00/"}
    assert found == {"libcuda.so.1", "libamdhip64.so.6", "libcublasLt.so.12"}


@pytest.mark.parametrize(("backend", "allowed"), [
    ("cpu", set()), ("none", set()), ("nvidia", {"nvidia"}), ("amd", {"amd"}),
])
def test_allowed_vendors(backend: str, allowed: set[str]) -> None:
    assert TABLE.allowed_vendors(backend) == allowed


def test_unknown_backend_is_bad_input() -> None:
    with pytest.raises(BadInput) as err:
        TABLE.allowed_vendors("cuda")
    assert err.value.one_line().startswith("--backend: cuda: unknown backend (known: cpu, none")


def test_shipped_table_is_package_data() -> None:
    assert default_table_path().name == "vendor_libs.yml" and default_table_path().is_file()
    assert TABLE.sources == (str(default_table_path()),)


def test_extra_table_adds_vendor_and_names(tmp_path: Path) -> None:
    extra = tmp_path / "extra.yml"
    extra.write_text("vendors:\n"
                     "  habana:\n    libraries: [libhl-thunk, libsynapse]\n"
                     "    distributions: [habana-*]\n"
                     "  nvidia:\n    libraries: [libcuda, libnvperf_host]\n")
    table = load_table([extra])
    assert table.library_vendor("libsynapse") == "habana"
    assert table.library_vendor("libnvperf_host") == "nvidia"
    assert table.library_vendor("libcudart") == "nvidia"  # the shipped table still applies
    assert table.distribution_vendor("habana-torch-plugin") == "habana"
    assert table.allowed_vendors("habana") == {"habana"}
    assert "habana" in table.backends() and table.sources[-1] == str(extra)
    assert table.dlopen_regex.search(b"libhl-thunk.so")


@pytest.mark.parametrize(("text", "field", "fragment"), [
    ("vendors:\n  amd:\n    libraries: [libcudart]\n", "vendors.amd.libraries[0]",
     "already listed under nvidia"),
    ("vendors:\n  nvidia:\n    libraries: [cuda]\n", "vendors.nvidia.libraries[0]",
     "is not allowed"),
    ("vendors:\n  nvidia:\n    libraries: [libcuda.so.1]\n", "vendors.nvidia.libraries[0]",
     "is not allowed"),
    ("vendors:\n  nvidia:\n    libs: [libcuda]\n", "vendors.nvidia.libs", "unknown key"),
    ("vendors:\n  cpu:\n    libraries: [libfoo]\n", "vendors.cpu", "not a vendor"),
    ("vendors:\n  Bad Name:\n    libraries: [libfoo]\n", "vendors.'Bad Name'.'[key]'",
     "is not allowed"),
    ("- libcuda\n", "(top level)", "YAML mapping"),
    ("vendors: [\n", "line 2 col 1", "YAML syntax error"),
    ("vendors:\n  nvidia: {}\n  nvidia: {}\n", "line 3 col 3", "duplicate key"),
])
def test_malformed_table_is_one_bad_input_line(tmp_path: Path, text: str, field: str,
                                               fragment: str) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(text)
    with pytest.raises(BadInput) as err:
        load_table([bad])
    assert err.value.source == str(bad)
    assert err.value.field == field, err.value.one_line()
    assert fragment in err.value.reason and "\n" not in err.value.one_line()


def test_missing_table_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file"):
        load_table([tmp_path / "absent.yml"])
