"""Compatibility matrix: the data file, and each rule on both sides of its boundary.

Classes are built from the shipped valid classes by dict edits (re-validated by the schema) or
`model_copy(update=...)`, so every case differs from a known-good class in exactly one way.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.spec import matrix
from fleetgate.spec.matrix import Violation, check, load_matrix
from fleetgate.spec.schema import DOTTED_VERSION_RE, NodeClass, UserlandSpec

CLASSES = Path(__file__).resolve().parents[2] / "inventory" / "classes"

# Every NVIDIA Linux driver branch from 470 to 580, each with the newest CUDA it runs.
NVIDIA_MAX_CUDA = {
    "470": "11.4", "495": "11.5", "510": "11.6", "515": "11.7", "520": "11.8", "525": "12.0",
    "530": "12.1", "535": "12.2", "545": "12.3", "550": "12.4", "555": "12.5", "560": "12.6",
    "565": "12.7", "570": "12.8", "575": "12.9", "580": "13.0",
}


def _raw(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CLASSES / f"{name}.yml").read_text())
    assert isinstance(data, dict)
    return data


_NVIDIA = _raw("nvidia-h100-535")
_AMD = _raw("amd-mi300x-rocm")


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split("__")
    target = data
    for key in parents:
        target = target.setdefault(key, {})
    target[leaf] = value


def build(base: dict[str, Any], **edits: Any) -> NodeClass:
    """A copy of `base` with dotted-path edits (`driver__branch="550"`), schema-validated.

    Pins that the matrix ties together follow an edit unless the edit names them too, so a
    case still differs in one way: a new kernel ABI gets a package version of its series, a
    new driver version its own DKMS module, and a new compute capability a model name that
    names no known part (an H100 that is not 9.0 is a case of its own)."""
    data = copy.deepcopy(base)
    for dotted, value in edits.items():
        _set(data, dotted, value)
    if "kernel__abi" in edits and "kernel__package_version" not in edits:
        major, minor = edits["kernel__abi"].split(".")[:2]
        _set(data, "kernel__package_version", f"{major}.{minor}.1-1")
    if "driver__version" in edits and "dkms" not in edits:
        upstream = edits["driver__version"].rsplit("-", 1)[0]
        data["dkms"] = [{**m, "version": upstream} if m["name"].startswith("nvidia") else m
                        for m in data.get("dkms", [])]
    if "accelerator__compute_capability" in edits and "accelerator__model" not in edits:
        _set(data, "accelerator__model",
             f"Test part cc {edits['accelerator__compute_capability']}")
    return NodeClass.model_validate(data)


def nvidia(**edits: Any) -> NodeClass:
    return build(_NVIDIA, **edits)


def amd(**edits: Any) -> NodeClass:
    return build(_AMD, **edits)


def rules(nc: NodeClass) -> list[str]:
    return [v.rule for v in check(nc)]


def fires(nc: NodeClass, rule: str) -> Violation:
    found = [v for v in check(nc) if v.rule == rule]
    assert found, f"{rule} did not fire: {check(nc)}"
    assert rule in str(found[0])
    assert f"matrix rule {rule}" in str(found[0])
    assert "\n" not in str(found[0])
    return found[0]


# --- the data file -------------------------------------------------------------------------

def test_matrix_loads() -> None:
    m = load_matrix()
    assert m.nvidia_branches and m.nvidia_generations and m.rocm_releases


def test_every_nvidia_branch_present_with_max_cuda() -> None:
    m = load_matrix()
    for branch, max_cuda in NVIDIA_MAX_CUDA.items():
        row = m.branch(branch)
        assert row is not None, f"branch {branch} missing from compat_matrix.yml"
        assert re.match(DOTTED_VERSION_RE, row.max_cuda)
        assert row.max_cuda == max_cuda, branch


def test_nvidia_rows_are_consistent() -> None:
    m = load_matrix()
    branches = [int(b.branch) for b in m.nvidia_branches]
    assert branches == sorted(branches)
    assert len(set(branches)) == len(branches)
    cudas = [matrix._vkey(b.max_cuda) for b in m.nvidia_branches]
    assert cudas == sorted(cudas), "a newer branch must not support an older CUDA"
    for row in m.nvidia_branches:
        assert matrix._vkey(row.kernel_min) <= matrix._vkey(row.kernel_max), row.branch


def test_generations_are_consistent() -> None:
    m = load_matrix()
    names = [g.name for g in m.nvidia_generations]
    assert m.open_modules_min_generation in names
    assert set(m.open_modules_required_generations) <= set(names)
    ccs = [cc for g in m.nvidia_generations for cc in g.compute_capabilities]
    assert len(ccs) == len(set(ccs)), "a compute capability maps to two generations"
    assert names.index("volta") < names.index("turing") < names.index("blackwell")


def test_rocm_rows_are_consistent() -> None:
    m = load_matrix()
    releases = [r.release for r in m.rocm_releases]
    assert len(set(releases)) == len(releases)
    assert all(r.kernels for r in m.rocm_releases)


def test_shipped_classes_pass_matrix() -> None:
    for f in sorted(CLASSES.glob("*.yml")):
        nc = NodeClass.model_validate(yaml.safe_load(f.read_text()))
        assert check(nc) == [], f.name


def test_vendor_none_is_not_checked() -> None:
    nc = NodeClass.model_validate(_raw("lab-cpu"))
    assert check(nc) == []


# --- nvidia-branch-known ---------------------------------------------------------------------

def test_unknown_branch_fires_alone() -> None:
    nc = nvidia(driver__branch="999", driver__version="999.1.2-1")
    assert rules(nc) == ["nvidia-branch-known"]
    assert fires(nc, "nvidia-branch-known").field == "driver.branch"


@pytest.mark.parametrize("branch", sorted(NVIDIA_MAX_CUDA))
def test_every_known_branch_passes(branch: str) -> None:
    # No userland pin, a 5.15 kernel and an A100 (Ampere, from R450 on): inside every
    # branch's range.
    data = copy.deepcopy(_NVIDIA)
    data["userland"] = {}
    nc = build(data, driver__branch=branch, driver__version=f"{branch}.1.01-1",
               kernel__abi="5.15.0-125-generic", accelerator__model="NVIDIA A100-SXM4-80GB",
               accelerator__compute_capability="8.0", accelerator__pci_ids=["10de:20b2"])
    assert rules(nc) == []


# --- nvidia-version-in-branch ----------------------------------------------------------------

def test_version_off_branch_fires() -> None:
    v = fires(nvidia(driver__version="550.163.01-1"), "nvidia-version-in-branch")
    assert v.field == "driver.version"


def test_version_on_branch_passes() -> None:
    assert rules(nvidia(driver__version="535.54.03-1")) == []


# --- nvidia-userland-cuda --------------------------------------------------------------------

@pytest.mark.parametrize("cuda", ["11.8", "12.0", "12.2", "12.2.2"])
def test_cuda_at_or_below_branch_max_passes(cuda: str) -> None:
    assert rules(nvidia(userland__cuda=cuda)) == []


@pytest.mark.parametrize("cuda", ["12.3", "12.4", "12.10", "13.0"])
def test_cuda_above_branch_max_fires(cuda: str) -> None:
    v = fires(nvidia(userland__cuda=cuda), "nvidia-userland-cuda")
    assert v.field == "userland.cuda"
    assert "max CUDA 12.2" in v.message


def test_cuda_compares_numerically_not_as_text() -> None:
    # "12.10" sorts before "12.2" as text; 580 runs 13.0, so 12.10 passes there.
    base = _raw("nvidia-h200-580")
    assert rules(build(base, userland__cuda="12.10")) == []
    assert rules(build(base, userland__cuda="13.1")) == ["nvidia-userland-cuda"]


def test_cuda_rule_via_model_copy() -> None:
    ok = nvidia()
    bad = ok.model_copy(update={"userland": UserlandSpec(cuda="12.3")})
    assert rules(ok) == []
    assert rules(bad) == ["nvidia-userland-cuda"]


# --- nvidia-kernel-series --------------------------------------------------------------------

@pytest.mark.parametrize("abi", ["6.8.0-45-generic", "3.10.0-1160-el7", "6.1.0-55-amd64"])
def test_kernel_inside_branch_range_passes(abi: str) -> None:
    assert rules(nvidia(kernel__abi=abi)) == []


@pytest.mark.parametrize("abi", ["6.9.0-1-amd64", "6.10.0-1-amd64", "6.11.0-29-generic",
                                 "3.9.0-1-amd64"])
def test_kernel_outside_branch_range_fires(abi: str) -> None:
    v = fires(nvidia(kernel__abi=abi), "nvidia-kernel-series")
    assert v.field == "kernel.abi"
    assert "3.10..6.8" in v.message


def test_kernel_lower_bound_from_560() -> None:
    data = copy.deepcopy(_NVIDIA)
    data["userland"] = {}
    edits = {"driver__branch": "560", "driver__version": "560.35.03-1"}
    assert rules(build(data, kernel__abi="4.15.0-213-generic", **edits)) == []
    assert rules(build(data, kernel__abi="4.14.0-1-amd64", **edits)) == ["nvidia-kernel-series"]


# --- nvidia-compute-capability-known ---------------------------------------------------------

def test_unknown_compute_capability_fires() -> None:
    v = fires(nvidia(accelerator__compute_capability="9.9"), "nvidia-compute-capability-known")
    assert v.field == "accelerator.compute_capability"


# --- nvidia-open-modules-generation ----------------------------------------------------------

@pytest.mark.parametrize("cc", ["7.5", "8.0", "8.9", "9.0"])
def test_open_modules_on_turing_or_newer_pass(cc: str) -> None:
    assert rules(nvidia(driver__flavour="open", accelerator__compute_capability=cc)) == []


@pytest.mark.parametrize(("cc", "gen"), [("7.0", "volta"), ("7.2", "volta"), ("6.1", "pascal"),
                                         ("5.2", "maxwell"), ("3.7", "kepler")])
def test_open_modules_before_turing_fire(cc: str, gen: str) -> None:
    v = fires(nvidia(driver__flavour="open", accelerator__compute_capability=cc),
              "nvidia-open-modules-generation")
    assert v.field == "driver.flavour"
    assert gen in v.message


@pytest.mark.parametrize("cc", ["7.0", "6.1"])
def test_proprietary_on_old_generations_passes(cc: str) -> None:
    assert rules(nvidia(accelerator__compute_capability=cc)) == []


# --- nvidia-open-modules-required ------------------------------------------------------------

def _blackwell(flavour: str) -> NodeClass:
    return nvidia(driver__branch="570", driver__version="570.172.08-1", driver__flavour=flavour,
                  userland__cuda="12.8", accelerator__compute_capability="10.0")


def test_proprietary_on_blackwell_fires() -> None:
    v = fires(_blackwell("proprietary"), "nvidia-open-modules-required")
    assert v.field == "driver.flavour"


def test_open_on_blackwell_passes() -> None:
    assert rules(_blackwell("open")) == []


def test_proprietary_on_hopper_passes() -> None:
    assert rules(nvidia(driver__flavour="proprietary")) == []


# --- ROCm ------------------------------------------------------------------------------------

def test_unknown_rocm_release_fires_alone() -> None:
    nc = amd(driver__branch="5.7", userland__rocm="5.7")
    assert rules(nc) == ["rocm-release-known"]
    assert fires(nc, "rocm-release-known").field == "driver.branch"


@pytest.mark.parametrize("abi", ["6.1.0-55-amd64", "5.15.0-125-generic", "6.11.0-29-generic"])
def test_rocm_supported_kernel_passes(abi: str) -> None:
    assert rules(amd(kernel__abi=abi)) == []


@pytest.mark.parametrize("abi", ["6.5.0-45-generic", "6.2.0-39-generic", "6.12.12-amd64"])
def test_rocm_unsupported_kernel_fires(abi: str) -> None:
    v = fires(amd(kernel__abi=abi), "rocm-kernel-series")
    assert v.field == "kernel.abi"


@pytest.mark.parametrize("rocm", ["6.3", "6.4", "6.4.1", "5.7"])
def test_rocm_userland_at_or_below_release_passes(rocm: str) -> None:
    assert rules(amd(userland__rocm=rocm)) == []


@pytest.mark.parametrize(("release", "rocm"), [("6.3", "6.4"), ("6.2", "6.3.1"), ("6.0", "7.0")])
def test_rocm_userland_newer_than_release_fires(release: str, rocm: str) -> None:
    nc = amd(driver__branch=release, userland__rocm=rocm, kernel__abi="5.15.0-125-generic")
    v = fires(nc, "rocm-userland")
    assert v.field == "userland.rocm"
    assert rules(nc) == ["rocm-userland"]


def test_violation_str_names_rule_and_field() -> None:
    v = Violation("nvidia-userland-cuda", "userland.cuda", "too new")
    assert str(v) == "userland.cuda: matrix rule nvidia-userland-cuda: too new"


# --- every rule cites its source -------------------------------------------------------------

def test_every_rule_has_a_source_in_the_data() -> None:
    m = load_matrix()
    assert set(matrix.RULES) <= set(m.sources)
    for rule in matrix.RULES:
        assert len(m.sources[rule]) >= 10 and "\n" not in m.sources[rule], rule


def test_violation_names_its_source() -> None:
    v = fires(nvidia(userland__cuda="12.3"), "nvidia-userland-cuda")
    assert v.source == load_matrix().sources["nvidia-userland-cuda"]
    assert str(v).endswith(f"(source: {v.source})")
    assert "docs.nvidia.com" in str(v)


# --- accelerator models ----------------------------------------------------------------------

def test_model_rows_are_consistent() -> None:
    m = load_matrix()
    tokens = [g.token for g in m.gpu_models]
    assert len(tokens) == len(set(tokens))
    for g in m.gpu_models:
        if g.vendor == "nvidia":
            assert m.generation_index(g.compute_capability) is not None, g.token
        else:
            assert g.compute_capability.startswith("gfx"), g.token


def test_shipped_accelerators_are_known_models() -> None:
    m = load_matrix()
    for name in ("nvidia-h100-535", "nvidia-h200-580", "amd-mi300x-rocm"):
        acc = _raw(name)["accelerator"]
        row = m.gpu_model(acc["model"])
        assert row is not None and row.compute_capability == acc["compute_capability"], name


@pytest.mark.parametrize(("model", "token"), [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100-SXM5", "H100"), ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI250X/MI250", "MI250X"),  # both match: the longer token is the part
])
def test_model_tokens_match_whole_words(model: str, token: str) -> None:
    row = load_matrix().gpu_model(model)
    assert row is not None and row.token == token


@pytest.mark.parametrize("model", ["NVIDIA GH100 engineering sample", "NVIDIA A1000",
                                   "NVIDIA A10G", "Radeon RX 6700 XT"])
def test_unknown_models_match_no_row(model: str) -> None:
    assert load_matrix().gpu_model(model) is None


@pytest.mark.parametrize(("model", "cc"), [
    ("NVIDIA H200", "9.0"), ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA L40S", "8.9"),
    ("Tesla T4", "7.5"), ("Tesla V100-SXM2-32GB", "7.0"),
])
def test_model_with_its_compute_capability_passes(model: str, cc: str) -> None:
    nc = nvidia(accelerator__model=model, accelerator__compute_capability=cc)
    assert "gpu-model-compute-capability" not in rules(nc)


@pytest.mark.parametrize(("model", "cc", "right"), [
    ("NVIDIA H200", "8.0", "9.0"), ("NVIDIA H100 80GB HBM3", "8.9", "9.0"),
    ("NVIDIA A100-SXM4-80GB", "9.0", "8.0"), ("NVIDIA L40S", "8.6", "8.9"),
])
def test_model_with_another_compute_capability_fires(model: str, cc: str, right: str) -> None:
    v = fires(nvidia(accelerator__model=model, accelerator__compute_capability=cc),
              "gpu-model-compute-capability")
    assert v.field == "accelerator.compute_capability"
    assert f"is compute capability {right}, not {cc}" in v.message


@pytest.mark.parametrize(("cc", "expected"), [("10.0", []),
                                               ("9.0", ["gpu-model-compute-capability"])])
def test_b200_is_compute_capability_10(cc: str, expected: list[str]) -> None:
    nc = nvidia(driver__branch="570", driver__version="570.172.08-1", driver__flavour="open",
                userland__cuda="12.8", accelerator__model="NVIDIA B200",
                accelerator__compute_capability=cc)
    assert rules(nc) == expected


def test_amd_model_on_an_nvidia_class_fires() -> None:
    v = fires(nvidia(accelerator__model="AMD Instinct MI300X"), "gpu-model-vendor")
    assert v.field == "accelerator.model"


@pytest.mark.parametrize(("model", "gfx"), [("AMD Instinct MI300X", "gfx942"),
                                             ("AMD Instinct MI250X", "gfx90a"),
                                             ("AMD Instinct MI210", "gfx90a"),
                                             ("AMD Instinct MI100", "gfx908")])
def test_amd_model_with_its_gfx_target_passes(model: str, gfx: str) -> None:
    assert rules(amd(accelerator__model=model, accelerator__compute_capability=gfx)) == []


@pytest.mark.parametrize("gfx", ["gfx803", "gfx90a", "gfx1100"])
def test_mi300x_with_another_gfx_target_fires(gfx: str) -> None:
    v = fires(amd(accelerator__model="AMD Instinct MI300X", accelerator__compute_capability=gfx),
              "amd-gfx-target")
    assert v.field == "accelerator.compute_capability"
    assert f"gfx942, not {gfx}" in v.message


def test_amd_compute_capability_must_be_a_gfx_target() -> None:
    nc = amd(accelerator__model="AMD Instinct test part", accelerator__compute_capability="9.0")
    assert fires(nc, "amd-gfx-target").field == "accelerator.compute_capability"
    assert rules(amd(accelerator__model="AMD Instinct test part",
                     accelerator__compute_capability="gfx1100")) == []


# --- pci-vendor-id ---------------------------------------------------------------------------

def test_nvidia_pci_id_on_amd_fires() -> None:
    v = fires(amd(accelerator__pci_ids=["10de:74a1"]), "pci-vendor-id")
    assert v.field == "accelerator.pci_ids[0]" and "1002" in v.message


def test_amd_pci_id_on_nvidia_fires_per_entry() -> None:
    v = fires(nvidia(accelerator__pci_ids=["10de:2330", "1002:2330"]), "pci-vendor-id")
    assert v.field == "accelerator.pci_ids[1]" and "10de" in v.message
    assert rules(nvidia(accelerator__pci_ids=["10de:2330", "10de:2324"])) == []


# --- nvidia-branch-generation ----------------------------------------------------------------

def _on_branch(branch: str, model: str, cc: str, flavour: str = "proprietary") -> NodeClass:
    row = load_matrix().branch(branch)
    assert row is not None
    return nvidia(driver__branch=branch, driver__version=f"{branch}.10.01-1",
                  driver__flavour=flavour, userland__cuda=row.max_cuda,
                  accelerator__model=model, accelerator__compute_capability=cc,
                  kernel__abi="5.15.0-125-generic")


@pytest.mark.parametrize("branch", ["470", "495", "510", "515", "520"])
def test_h100_before_525_fires(branch: str) -> None:
    v = fires(_on_branch(branch, "NVIDIA H100 80GB HBM3", "9.0"), "nvidia-branch-generation")
    assert v.field == "driver.branch"
    assert f"needs driver branch 525 or newer; branch is {branch}" in v.message


@pytest.mark.parametrize(("branch", "model", "cc"), [
    ("525", "NVIDIA H100 80GB HBM3", "9.0"), ("525", "NVIDIA L40S", "8.9"),
    ("470", "NVIDIA A100-SXM4-80GB", "8.0"), ("570", "NVIDIA B200", "10.0"),
    ("470", "Tesla K80", "3.7"),
])
def test_branch_at_the_generation_bound_passes(branch: str, model: str, cc: str) -> None:
    flavour = "open" if cc == "10.0" else "proprietary"  # Blackwell runs only the open ones
    assert rules(_on_branch(branch, model, cc, flavour)) == []


def test_b200_before_570_fires() -> None:
    v = fires(_on_branch("565", "NVIDIA B200", "10.0"), "nvidia-branch-generation")
    assert "570 or newer" in v.message


def test_kepler_after_470_fires() -> None:
    v = fires(_on_branch("535", "Tesla K80", "3.7"), "nvidia-branch-generation")
    assert "up to driver branch 470; branch is 535" in v.message


# --- nvidia-dkms-version ---------------------------------------------------------------------

def test_dkms_module_of_another_driver_release_fires() -> None:
    nc = nvidia(dkms=[{"name": "nvidia-current", "version": "535.247.01",
                       "package": "nvidia-kernel-dkms"}])
    v = fires(nc, "nvidia-dkms-version")
    assert v.field == "dkms[0].version" and "535.261.03" in v.message


def test_dkms_modules_with_versions_of_their_own_pass() -> None:
    nc = nvidia(dkms=[{"name": "nvidia-current", "version": "535.261.03",
                       "package": "nvidia-kernel-dkms"},
                      {"name": "nvidia-fs", "version": "2.20.5", "package": "nvidia-fs-dkms"}])
    assert rules(nc) == []


@pytest.mark.parametrize(("package", "upstream"), [
    ("535.261.03-1", "535.261.03"), ("1:6.12.12.60400-2147987.22.04", "6.12.12.60400"),
    ("580.95.05", "580.95.05"), ("535.216.03-1~deb12u1", "535.216.03"),
])
def test_upstream_version(package: str, upstream: str) -> None:
    assert matrix.upstream_version(package) == upstream


# --- kernel-package-version ------------------------------------------------------------------

@pytest.mark.parametrize("version", ["6.12.38-1", "6.10.1-1", "5.10.237-1"])
def test_debian_package_of_another_series_fires(version: str) -> None:
    v = fires(nvidia(kernel__package_version=version), "kernel-package-version")
    assert v.field == "kernel.package_version" and "6.1.<patch>" in v.message


def test_debian_package_of_the_series_passes() -> None:
    assert rules(nvidia(kernel__package_version="6.1.140-1")) == []


def _noble(**edits: Any) -> NodeClass:
    return nvidia(os={"family": "ubuntu", "release": "noble", "version": "24.04"},
                  **{"kernel__abi": "6.8.0-45-generic", **edits})


def test_ubuntu_package_carrying_the_abi_passes() -> None:
    assert rules(_noble(kernel__package_version="6.8.0-45.45")) == []


@pytest.mark.parametrize("version", ["6.8.0-44.44", "6.8.12-1", "6.8.0-451.1"])
def test_ubuntu_package_without_the_abi_fires(version: str) -> None:
    v = fires(_noble(kernel__package_version=version), "kernel-package-version")
    assert "6.8.0-45.<upload>" in v.message


# --- os-codename, os-release-known -----------------------------------------------------------

def _lab_cpu_on(family: str, version: str, release: str) -> NodeClass:
    kernel = ({"abi": "6.8.0-45-generic", "package_version": "6.8.0-45.45", "headers": False}
              if family == "ubuntu" else _raw("lab-cpu")["kernel"])
    return NodeClass.model_validate({**_raw("lab-cpu"), "kernel": kernel, "os": {
        "family": family, "release": release, "version": version}})


@pytest.mark.parametrize(("family", "version", "release"), [
    ("debian", "12", "bookworm"), ("debian", "13", "trixie"), ("debian", "12.5", "bookworm"),
    ("ubuntu", "22.04", "jammy"), ("ubuntu", "24.04.1", "noble"),
])
def test_os_version_with_its_codename_passes(family: str, version: str, release: str) -> None:
    assert rules(_lab_cpu_on(family, version, release)) == []


@pytest.mark.parametrize(("family", "version", "release", "field"), [
    ("debian", "12", "trixie", "os.release"), ("ubuntu", "22.04", "noble", "os.release"),
    ("debian", "14", "trixie", "os.version"), ("ubuntu", "24.04", "bookworm", "os.release"),
])
def test_os_codename_of_another_release_fires(family: str, version: str, release: str,
                                               field: str) -> None:
    # vendor none: the OS rules apply to every class, not only GPU ones
    assert fires(_lab_cpu_on(family, version, release), "os-codename").field == field


def test_unknown_os_release_fires() -> None:
    v = fires(_lab_cpu_on("debian", "14", "forky"), "os-release-known")
    assert v.field == "os.version" and "12 bookworm" in v.message
