"""The compatibility matrix: data rows (compat_matrix.yml) and the rules that read them.

A rule returns Violations that name the rule, the class field and the values involved, so an
operator sees *which* published constraint a class breaks, not just that it is "invalid".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fleetgate.spec.schema import DOTTED_VERSION_RE, NVIDIA_BRANCH_RE, NodeClass

Series = Annotated[str, StringConstraints(pattern=r"^[0-9]+\.[0-9]+$")]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class NvidiaBranch(_Row):
    branch: Annotated[str, StringConstraints(pattern=NVIDIA_BRANCH_RE)]
    max_cuda: Annotated[str, StringConstraints(pattern=DOTTED_VERSION_RE)]
    kernel_min: Series
    kernel_max: Series


class Generation(_Row):
    name: str
    compute_capabilities: list[str]


class RocmRelease(_Row):
    release: Series
    kernels: list[Series] = Field(min_length=1)


class Matrix(_Row):
    nvidia_branches: list[NvidiaBranch]
    nvidia_generations: list[Generation]
    open_modules_min_generation: str
    open_modules_required_generations: list[str]
    rocm_releases: list[RocmRelease]

    def branch(self, branch: str) -> NvidiaBranch | None:
        return next((b for b in self.nvidia_branches if b.branch == branch), None)

    def generation_index(self, compute_capability: str) -> tuple[int, str] | None:
        for i, gen in enumerate(self.nvidia_generations):
            if compute_capability in gen.compute_capabilities:
                return i, gen.name
        return None

    def rocm(self, release: str) -> RocmRelease | None:
        return next((r for r in self.rocm_releases if r.release == release), None)


@dataclass(frozen=True)
class Violation:
    rule: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: matrix rule {self.rule}: {self.message}"


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _newer(version: str, limit: str) -> bool:
    """True if `version` is past the `limit` series: with limit 12.2, 12.2.2 is not newer."""
    lim = _vkey(limit)
    return _vkey(version)[: len(lim)] > lim


@lru_cache(maxsize=1)
def load_matrix() -> Matrix:
    text = resources.files("fleetgate.spec").joinpath("compat_matrix.yml").read_text()
    return Matrix.model_validate(yaml.safe_load(text))


def check(nc: NodeClass, matrix: Matrix | None = None) -> list[Violation]:
    m = matrix or load_matrix()
    if nc.driver.vendor == "nvidia":
        return _check_nvidia(nc, m)
    if nc.driver.vendor == "amd":
        return _check_amd(nc, m)
    return []


def _check_nvidia(nc: NodeClass, m: Matrix) -> list[Violation]:
    out: list[Violation] = []
    drv = nc.driver
    assert drv.branch is not None and drv.version is not None  # guaranteed by the schema
    row = m.branch(drv.branch)
    if row is None:
        known = ", ".join(b.branch for b in m.nvidia_branches)
        return [Violation("nvidia-branch-known", "driver.branch",
                          f"branch {drv.branch} is not in the matrix (known: {known})")]
    if drv.version.split(".")[0] != drv.branch:
        out.append(Violation("nvidia-version-in-branch", "driver.version",
                             f"version {drv.version} is not on branch {drv.branch}"))
    cuda = nc.userland.cuda
    if cuda is not None and _newer(cuda, row.max_cuda):
        out.append(Violation(
            "nvidia-userland-cuda", "userland.cuda",
            f"CUDA {cuda} userland is newer than driver branch {drv.branch} supports "
            f"(max CUDA {row.max_cuda})"))
    series = nc.kernel_series
    if not _vkey(row.kernel_min) <= _vkey(series) <= _vkey(row.kernel_max):
        out.append(Violation(
            "nvidia-kernel-series", "kernel.abi",
            f"kernel series {series} is outside {row.kernel_min}..{row.kernel_max} that driver "
            f"branch {drv.branch} is known to build on"))
    cc = nc.accelerator.compute_capability
    gen = m.generation_index(cc) if cc else None
    if cc is not None and gen is None:
        out.append(Violation("nvidia-compute-capability-known", "accelerator.compute_capability",
                             f"compute capability {cc} maps to no known NVIDIA generation"))
    if gen is not None:
        idx, name = gen
        min_open = next(i for i, g in enumerate(m.nvidia_generations)
                        if g.name == m.open_modules_min_generation)
        if drv.flavour == "open" and idx < min_open:
            out.append(Violation(
                "nvidia-open-modules-generation", "driver.flavour",
                f"open kernel modules need {m.open_modules_min_generation} or newer; "
                f"{nc.accelerator.model} is {name} (compute capability {cc})"))
        if drv.flavour == "proprietary" and name in m.open_modules_required_generations:
            out.append(Violation(
                "nvidia-open-modules-required", "driver.flavour",
                f"{name} GPUs run only on the open kernel modules; flavour is proprietary"))
    return out


def _check_amd(nc: NodeClass, m: Matrix) -> list[Violation]:
    out: list[Violation] = []
    release = nc.driver.branch
    assert release is not None
    row = m.rocm(release)
    if row is None:
        known = ", ".join(r.release for r in m.rocm_releases)
        return [Violation("rocm-release-known", "driver.branch",
                          f"ROCm release {release} is not in the matrix (known: {known})")]
    if nc.kernel_series not in row.kernels:
        out.append(Violation(
            "rocm-kernel-series", "kernel.abi",
            f"kernel series {nc.kernel_series} is not supported by ROCm {release} "
            f"(supported: {', '.join(row.kernels)})"))
    rocm = nc.userland.rocm
    if rocm is not None and _newer(rocm, release):
        out.append(Violation(
            "rocm-userland", "userland.rocm",
            f"ROCm {rocm} userland is newer than the ROCm {release} driver stack"))
    return out
