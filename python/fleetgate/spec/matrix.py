"""The compatibility matrix: data rows (compat_matrix.yml) and the rules that read them.

A rule returns Violations that name the rule, the class field, the values involved and the
published source of the constraint (the data file's `sources`), so an operator sees *which*
documented constraint a class breaks, not just that it is "invalid".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from fleetgate.spec.schema import (
    CODENAME_RE,
    COMPUTE_CAP_RE,
    DOTTED_VERSION_RE,
    NVIDIA_BRANCH_RE,
    NodeClass,
)

Series = Annotated[str, StringConstraints(pattern=r"^[0-9]+\.[0-9]+$")]
Branch = Annotated[str, StringConstraints(pattern=NVIDIA_BRANCH_RE)]

VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}
# Every rule check() applies; compat_matrix.yml must cite a source for each.
RULES = (
    "os-release-known", "os-codename", "kernel-package-version", "pci-vendor-id",
    "gpu-model-vendor", "gpu-model-compute-capability", "amd-gfx-target",
    "nvidia-branch-known", "nvidia-version-in-branch", "nvidia-compute-capability-known",
    "nvidia-branch-generation", "nvidia-userland-cuda", "nvidia-kernel-series",
    "nvidia-open-modules-generation", "nvidia-open-modules-required", "nvidia-dkms-version",
    "rocm-release-known", "rocm-kernel-series", "rocm-userland",
)


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class NvidiaBranch(_Row):
    branch: Branch
    max_cuda: Annotated[str, StringConstraints(pattern=DOTTED_VERSION_RE)]
    kernel_min: Series
    kernel_max: Series


class Generation(_Row):
    name: str
    compute_capabilities: list[str]
    min_branch: Branch | None = None
    max_branch: Branch | None = None


class RocmRelease(_Row):
    release: Series
    kernels: list[Series] = Field(min_length=1)


class GpuModel(_Row):
    token: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]+$")]
    vendor: Literal["nvidia", "amd"]
    compute_capability: Annotated[str, StringConstraints(pattern=COMPUTE_CAP_RE)]

    def matches(self, model: str) -> bool:
        # A whole word: H100 is in "NVIDIA H100 80GB HBM3" and "H100-SXM5", not in "GH100".
        return re.search(rf"(?<![A-Za-z0-9]){re.escape(self.token)}(?![A-Za-z0-9])", model,
                         re.IGNORECASE) is not None


class OsRelease(_Row):
    family: Literal["debian", "ubuntu"]
    version: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,2}(\.[0-9]{2})?$")]
    codename: Annotated[str, StringConstraints(pattern=CODENAME_RE)]

    def has_version(self, version: str) -> bool:
        """12 and 12.5 are Debian 12; 22.04 and 22.04.4 are Ubuntu 22.04."""
        return version == self.version or version.startswith(f"{self.version}.")


class Matrix(_Row):
    nvidia_branches: list[NvidiaBranch]
    nvidia_generations: list[Generation]
    open_modules_min_generation: str
    open_modules_required_generations: list[str]
    rocm_releases: list[RocmRelease]
    gpu_models: list[GpuModel]
    pci_vendor_ids: dict[Literal["nvidia", "amd"], Annotated[
        str, StringConstraints(pattern=r"^[0-9a-f]{4}$")]]
    nvidia_driver_dkms_re: str
    os_releases: list[OsRelease]
    kernel_package_schemes: dict[Literal["debian", "ubuntu"], Literal["series", "abi"]]
    sources: dict[str, Annotated[str, StringConstraints(min_length=10)]]

    @model_validator(mode="after")
    def _every_rule_cited(self) -> Matrix:
        missing = [r for r in RULES if r not in self.sources]
        if missing:
            raise ValueError(f"rules without a source: {', '.join(missing)}")
        if set(self.kernel_package_schemes) != {"debian", "ubuntu"}:
            raise ValueError("kernel_package_schemes needs every OS family the schema allows")
        if set(self.pci_vendor_ids) != {"nvidia", "amd"}:
            raise ValueError("pci_vendor_ids needs every accelerator vendor")
        re.compile(self.nvidia_driver_dkms_re)
        return self

    def branch(self, branch: str) -> NvidiaBranch | None:
        return next((b for b in self.nvidia_branches if b.branch == branch), None)

    def generation_index(self, compute_capability: str) -> tuple[int, str] | None:
        for i, gen in enumerate(self.nvidia_generations):
            if compute_capability in gen.compute_capabilities:
                return i, gen.name
        return None

    def rocm(self, release: str) -> RocmRelease | None:
        return next((r for r in self.rocm_releases if r.release == release), None)

    def gpu_model(self, model: str) -> GpuModel | None:
        """The part a model name names; of several (`MI250X/MI250`), the longest token."""
        found = [g for g in self.gpu_models if g.matches(model)]
        return max(found, key=lambda g: len(g.token)) if found else None

    def violation(self, rule: str, field: str, message: str) -> Violation:
        return Violation(rule, field, message, self.sources[rule])


@dataclass(frozen=True)
class Violation:
    rule: str
    field: str
    message: str
    source: str = ""

    @property
    def reason(self) -> str:
        """The rule, what is wrong, and where the constraint is published: one line."""
        cited = f" (source: {self.source})" if self.source else ""
        return f"matrix rule {self.rule}: {self.message}{cited}"

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _newer(version: str, limit: str) -> bool:
    """True if `version` is past the `limit` series: with limit 12.2, 12.2.2 is not newer."""
    lim = _vkey(limit)
    return _vkey(version)[: len(lim)] > lim


def upstream_version(package_version: str) -> str:
    """A Debian package version without its epoch and revision: 1:535.261.03-1 -> 535.261.03."""
    without_epoch = re.sub(r"^[0-9]+:", "", package_version)
    return without_epoch.rsplit("-", 1)[0] if "-" in without_epoch else without_epoch


@lru_cache(maxsize=1)
def load_matrix() -> Matrix:
    text = resources.files("fleetgate.spec").joinpath("compat_matrix.yml").read_text()
    return Matrix.model_validate(yaml.safe_load(text))


def check(nc: NodeClass, matrix: Matrix | None = None) -> list[Violation]:
    """Every rule the class breaks, the most fundamental first (the loader reports the first):
    what the host is (OS, kernel package, device), then the driver stack on it."""
    m = matrix or load_matrix()
    out = [*_check_os(nc, m), *_check_kernel_package(nc, m), *_check_device(nc, m)]
    if nc.driver.vendor == "nvidia":
        out += _check_nvidia(nc, m)
    elif nc.driver.vendor == "amd":
        out += _check_amd(nc, m)
    return out


def _check_os(nc: NodeClass, m: Matrix) -> list[Violation]:
    os_ = nc.os
    rows = [r for r in m.os_releases if r.family == os_.family]
    by_version = next((r for r in rows if r.has_version(os_.version)), None)
    by_name = next((r for r in rows if r.codename == os_.release), None)
    if by_version is None and by_name is None:
        known = ", ".join(f"{r.version} {r.codename}" for r in rows)
        return [m.violation("os-release-known", "os.version",
                            f"{os_.family} {os_.version} ({os_.release}) is not in the matrix "
                            f"(known: {known})")]
    if by_version is not None and by_version.codename != os_.release:
        return [m.violation("os-codename", "os.release",
                            f"{os_.family} {os_.version} is {by_version.codename}, "
                            f"not {os_.release}")]
    if by_name is not None and by_version is None:
        return [m.violation("os-codename", "os.version",
                            f"{os_.release} is {os_.family} {by_name.version}, "
                            f"not {os_.version}")]
    return []


def _check_kernel_package(nc: NodeClass, m: Matrix) -> list[Violation]:
    abi, version = nc.kernel.abi, nc.kernel.package_version
    numeric = re.match(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9]+)?", abi)
    assert numeric is not None  # guaranteed by KERNEL_ABI_RE
    if m.kernel_package_schemes[nc.os.family] == "series":
        expected = f"{nc.kernel_series}.<patch>-<revision>"
        ok = upstream_version(version).startswith(f"{nc.kernel_series}.")
    else:
        prefix = numeric.group(0)
        expected = f"{prefix}.<upload>" if numeric.group(1) else f"{prefix}<...>"
        ok = version.startswith(f"{prefix}." if numeric.group(1) else prefix)
    if ok:
        return []
    return [m.violation("kernel-package-version", "kernel.package_version",
                        f"{version} is not a version of {nc.os.family}'s "
                        f"linux-image-{abi}, which is versioned {expected}")]


def _check_device(nc: NodeClass, m: Matrix) -> list[Violation]:
    acc = nc.accelerator
    if acc.vendor == "none":
        return []
    out: list[Violation] = []
    vendor_id = m.pci_vendor_ids[acc.vendor]
    name = VENDOR_NAMES[acc.vendor]
    for i, pci in enumerate(acc.pci_ids):
        if pci.split(":")[0] != vendor_id:
            out.append(m.violation(
                "pci-vendor-id", f"accelerator.pci_ids[{i}]",
                f"{pci} is not an {name} device: {name}'s PCI vendor id is {vendor_id}"))
    cc = acc.compute_capability
    if acc.vendor == "amd" and cc is not None and not cc.startswith("gfx"):
        out.append(m.violation(
            "amd-gfx-target", "accelerator.compute_capability",
            f"an AMD accelerator's compute_capability is its gfx target (e.g. gfx942), "
            f"not {cc}"))
    row = m.gpu_model(acc.model)
    if row is None:
        return out
    if row.vendor != acc.vendor:
        out.append(m.violation("gpu-model-vendor", "accelerator.model",
                               f"{acc.model} is an {VENDOR_NAMES[row.vendor]} part, the class "
                               f"says vendor {acc.vendor}"))
    elif cc is not None and cc != row.compute_capability and (
            row.vendor == "amd" or m.generation_index(cc) is not None):
        # (an NVIDIA capability of no known generation is nvidia-compute-capability-known's)
        rule = "amd-gfx-target" if row.vendor == "amd" else "gpu-model-compute-capability"
        what = "gfx target" if row.vendor == "amd" else "compute capability"
        out.append(m.violation(rule, "accelerator.compute_capability",
                               f"{row.token} is {what} {row.compute_capability}, not {cc}"))
    return out


def _check_nvidia(nc: NodeClass, m: Matrix) -> list[Violation]:
    out: list[Violation] = []
    drv = nc.driver
    assert drv.branch is not None and drv.version is not None  # guaranteed by the schema
    row = m.branch(drv.branch)
    if row is None:
        known = ", ".join(b.branch for b in m.nvidia_branches)
        return [m.violation("nvidia-branch-known", "driver.branch",
                            f"branch {drv.branch} is not in the matrix (known: {known})")]
    if drv.version.split(".")[0] != drv.branch:
        out.append(m.violation("nvidia-version-in-branch", "driver.version",
                               f"version {drv.version} is not on branch {drv.branch}"))
    cc = nc.accelerator.compute_capability
    gen = m.generation_index(cc) if cc else None
    if cc is not None and gen is None:
        out.append(m.violation("nvidia-compute-capability-known",
                               "accelerator.compute_capability",
                               f"compute capability {cc} maps to no known NVIDIA generation"))
    if gen is not None:
        out += _branch_runs_generation(nc, m, m.nvidia_generations[gen[0]])
    cuda = nc.userland.cuda
    if cuda is not None and _newer(cuda, row.max_cuda):
        out.append(m.violation(
            "nvidia-userland-cuda", "userland.cuda",
            f"CUDA {cuda} userland is newer than driver branch {drv.branch} supports "
            f"(max CUDA {row.max_cuda})"))
    series = nc.kernel_series
    if not _vkey(row.kernel_min) <= _vkey(series) <= _vkey(row.kernel_max):
        out.append(m.violation(
            "nvidia-kernel-series", "kernel.abi",
            f"kernel series {series} is outside {row.kernel_min}..{row.kernel_max} that driver "
            f"branch {drv.branch} is known to build on"))
    if gen is not None:
        idx, name = gen
        min_open = next(i for i, g in enumerate(m.nvidia_generations)
                        if g.name == m.open_modules_min_generation)
        if drv.flavour == "open" and idx < min_open:
            out.append(m.violation(
                "nvidia-open-modules-generation", "driver.flavour",
                f"open kernel modules need {m.open_modules_min_generation} or newer; "
                f"{nc.accelerator.model} is {name} (compute capability {cc})"))
        if drv.flavour == "proprietary" and name in m.open_modules_required_generations:
            out.append(m.violation(
                "nvidia-open-modules-required", "driver.flavour",
                f"{name} GPUs run only on the open kernel modules; flavour is proprietary"))
    out += _dkms_matches_driver(nc, m)
    return out


def _branch_runs_generation(nc: NodeClass, m: Matrix, gen: Generation) -> list[Violation]:
    branch = nc.driver.branch
    assert branch is not None
    what = f"{nc.accelerator.model} ({gen.name})"
    if gen.min_branch is not None and int(branch) < int(gen.min_branch):
        return [m.violation("nvidia-branch-generation", "driver.branch",
                            f"{what} needs driver branch {gen.min_branch} or newer; "
                            f"branch is {branch}")]
    if gen.max_branch is not None and int(branch) > int(gen.max_branch):
        return [m.violation("nvidia-branch-generation", "driver.branch",
                            f"{what} is supported up to driver branch {gen.max_branch}; "
                            f"branch is {branch}")]
    return []


def _dkms_matches_driver(nc: NodeClass, m: Matrix) -> list[Violation]:
    assert nc.driver.version is not None
    driver = upstream_version(nc.driver.version)
    return [m.violation("nvidia-dkms-version", f"dkms[{i}].version",
                        f"DKMS module {mod.name} {mod.version} is not the driver's own "
                        f"module: driver.version {nc.driver.version} builds {mod.name} "
                        f"{driver}")
            for i, mod in enumerate(nc.dkms)
            if re.fullmatch(m.nvidia_driver_dkms_re, mod.name) and mod.version != driver]


def _check_amd(nc: NodeClass, m: Matrix) -> list[Violation]:
    out: list[Violation] = []
    release = nc.driver.branch
    assert release is not None
    row = m.rocm(release)
    if row is None:
        known = ", ".join(r.release for r in m.rocm_releases)
        return [m.violation("rocm-release-known", "driver.branch",
                            f"ROCm release {release} is not in the matrix (known: {known})")]
    if nc.kernel_series not in row.kernels:
        out.append(m.violation(
            "rocm-kernel-series", "kernel.abi",
            f"kernel series {nc.kernel_series} is not supported by ROCm {release} "
            f"(supported: {', '.join(row.kernels)})"))
    rocm = nc.userland.rocm
    if rocm is not None and _newer(rocm, release):
        out.append(m.violation(
            "rocm-userland", "userland.rocm",
            f"ROCm {rocm} userland is newer than the ROCm {release} driver stack"))
    return out
