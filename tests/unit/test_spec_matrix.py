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


def build(base: dict[str, Any], **edits: Any) -> NodeClass:
    """A copy of `base` with dotted-path edits (`driver__branch="550"`), schema-validated."""
    data = copy.deepcopy(base)
    for dotted, value in edits.items():
        *parents, leaf = dotted.split("__")
        target = data
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = value
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
    # No userland pin and a 5.15 kernel: inside every branch's range.
    data = copy.deepcopy(_NVIDIA)
    data["userland"] = {}
    nc = build(data, driver__branch=branch, driver__version=f"{branch}.1.01-1",
               kernel__abi="5.15.0-125-generic")
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
