"""The node-class schema: one YAML file pins everything that must move together on a host.

Every string that can end up in a command line, a package spec or a file path is matched
against a strict pattern here, so shell metacharacters are rejected at the door rather than
quoted later. Version fields must be YAML strings: `cuda: 12.10` would otherwise silently
become the float 12.1.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

# Patterns. Anchored, ASCII only, no whitespace except where a human name needs it.
CLASS_NAME_RE = r"^[a-z0-9][a-z0-9-]{0,62}$"
DEB_PACKAGE_RE = r"^[a-z0-9][a-z0-9+.-]{1,99}$"
# Debian/RPM version characters: digits, letters, . + ~ : - (an epoch uses ':').
PKG_VERSION_RE = r"^[0-9][A-Za-z0-9.+~:-]{0,99}$"
KERNEL_ABI_RE = r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9]+)?([._-][A-Za-z0-9_]+)*$"
DOTTED_VERSION_RE = r"^[0-9]+(\.[0-9]+){1,2}$"
NVIDIA_BRANCH_RE = r"^[0-9]{3}$"
MODULE_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,62}$"
CODENAME_RE = r"^[a-z][a-z0-9]{1,31}$"
PCI_ID_RE = r"^[0-9a-f]{4}:[0-9a-f]{4}$"
COMPUTE_CAP_RE = r"^([0-9]{1,2}\.[0-9]|gfx[0-9a-f]{3,4})$"
MODEL_RE = r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$"
# No query strings, no shell-active characters; file:// for air-gapped mirrors.
URL_RE = r"^(https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|file://)(/[A-Za-z0-9._~%+-]*)*/?$"
APT_COMPONENT_RE = r"^[a-z][a-z0-9-]{0,31}$"

ClassName = Annotated[str, StringConstraints(pattern=CLASS_NAME_RE)]
PackageName = Annotated[str, StringConstraints(pattern=DEB_PACKAGE_RE)]
PackageVersion = Annotated[str, StringConstraints(pattern=PKG_VERSION_RE)]
KernelAbi = Annotated[str, StringConstraints(pattern=KERNEL_ABI_RE)]
DottedVersion = Annotated[str, StringConstraints(pattern=DOTTED_VERSION_RE)]
ModuleName = Annotated[str, StringConstraints(pattern=MODULE_NAME_RE)]
Codename = Annotated[str, StringConstraints(pattern=CODENAME_RE)]
PciId = Annotated[str, StringConstraints(pattern=PCI_ID_RE)]
ComputeCapability = Annotated[str, StringConstraints(pattern=COMPUTE_CAP_RE)]
ModelName = Annotated[str, StringConstraints(pattern=MODEL_RE)]
Url = Annotated[str, StringConstraints(pattern=URL_RE)]
AptComponent = Annotated[str, StringConstraints(pattern=APT_COMPONENT_RE)]

Backend = Literal["nvidia", "amd", "cpu", "none"]
Vendor = Literal["nvidia", "amd", "none"]


class _Strict(BaseModel):
    # strict: no "8" -> 8 or 12.1 -> "12.1" coercion; forbid: a typo'd key is an error, not a no-op;
    # no inf/nan: YAML's `.inf` is a float, and a floor no host can reach is not a floor.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class OsSpec(_Strict):
    family: Literal["debian", "ubuntu"]
    release: Codename
    # One pattern, not a union: a union's error path would read `os.version.constrained-str`.
    version: Annotated[
        str, StringConstraints(pattern=r"^([0-9]{1,2}|[0-9]+(\.[0-9]+){1,2})$")]


class KernelSpec(_Strict):
    abi: KernelAbi
    package_version: PackageVersion
    headers: bool = True


class DriverSource(_Strict):
    kind: Literal["debian-non-free", "cuda-repo", "rocm-repo", "none"]
    url: Url | None = None
    key_url: Url | None = None
    suite: Codename | None = None
    components: list[AptComponent] = Field(default_factory=list)

    @model_validator(mode="after")
    def _url_for_vendor_repos(self) -> DriverSource:
        if self.kind in ("cuda-repo", "rocm-repo") and (self.url is None or self.key_url is None):
            raise ValueError(f"source kind {self.kind} needs both url and key_url")
        return self


class DriverSpec(_Strict):
    vendor: Vendor
    branch: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}(\.[0-9]{1,2})?$")] | None = None
    version: PackageVersion | None = None
    flavour: Literal["open", "proprietary"] | None = None
    source: DriverSource = DriverSource(kind="none")
    packages: list[PackageName] = Field(default_factory=list)
    persistence: bool = False

    @model_validator(mode="after")
    def _pins_match_vendor(self) -> DriverSpec:
        if self.vendor == "none":
            if self.branch or self.version or self.flavour or self.packages:
                raise ValueError("vendor none must not pin branch, version, flavour or packages")
            return self
        missing = [k for k in ("branch", "version", "flavour") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"vendor {self.vendor} needs {', '.join(missing)}")
        if self.source.kind == "none":
            raise ValueError(f"vendor {self.vendor} needs a source other than none")
        if not self.packages:
            raise ValueError(f"vendor {self.vendor} needs at least one package")
        return self


class DkmsModule(_Strict):
    name: ModuleName
    version: PackageVersion
    package: PackageName


# The Debian package that carries each container engine (Debian ships Docker as docker.io).
# Written only here: roles read it as fleetgate_engine_packages (spec/derive.py), Python imports it.
ENGINE_PACKAGES: dict[str, str] = {"containerd": "containerd", "docker": "docker.io",
                                   "podman": "podman"}


class RuntimeSpec(_Strict):
    engine: Literal["containerd", "docker", "podman", "none"]
    version: PackageVersion | None = None
    gpu_toolkit: Literal["nvidia-container-toolkit", "amd-container-toolkit", "none"] = "none"
    gpu_toolkit_version: PackageVersion | None = None
    cdi: bool = False

    @model_validator(mode="after")
    def _versions_pinned(self) -> RuntimeSpec:
        if self.engine != "none" and self.version is None:
            raise ValueError(f"engine {self.engine} needs a pinned version")
        if self.gpu_toolkit != "none" and self.gpu_toolkit_version is None:
            raise ValueError(f"gpu_toolkit {self.gpu_toolkit} needs gpu_toolkit_version")
        return self


class UserlandSpec(_Strict):
    cuda: DottedVersion | None = None
    rocm: DottedVersion | None = None
    # Which BLAS backs Debian's libblas.so.3 alternative (numpy, scipy and friends link it):
    # a silent swap to the reference BLAS is a 20x GEMM cliff that no functional test sees.
    blas: Literal["openblas", "reference"] | None = None


class AcceleratorSpec(_Strict):
    vendor: Vendor
    model: ModelName
    count: Annotated[int, Field(ge=0, le=64)]
    pci_ids: list[PciId] = Field(default_factory=list)
    compute_capability: ComputeCapability | None = None
    backend: Backend

    @model_validator(mode="after")
    def _backend_matches_vendor(self) -> AcceleratorSpec:
        if self.backend in ("nvidia", "amd") and self.vendor != self.backend:
            raise ValueError(
                f"backend {self.backend} needs vendor {self.backend}, not {self.vendor}")
        if self.vendor != "none":
            if self.count < 1:
                raise ValueError(f"a {self.vendor} accelerator needs count >= 1")
            if not self.pci_ids or self.compute_capability is None:
                raise ValueError(
                    f"a {self.vendor} accelerator needs pci_ids and compute_capability")
        return self


# A floor or ceiling the class sets: finite (see _Strict) and positive, since 0 would check
# nothing. None leaves it to thresholds.yml.
Limit = Annotated[float, Field(gt=0)]


class GemmThresholds(_Strict):
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] = "bf16"
    size: Annotated[int, Field(ge=64, le=65536)] = 8192
    tflops_min: Limit | None = None


class CommsThresholds(_Strict):
    busbw_gbps_min: Limit | None = None


class InferenceThresholds(_Strict):
    p99_ms_max: Limit | None = None
    cold_start_s_max: Limit | None = None


class SmokeSpec(_Strict):
    """Placeholders until the smoke suite lands; floors stay None where nothing is measured."""

    gemm: GemmThresholds = GemmThresholds()
    comms: CommsThresholds = CommsThresholds()
    inference: InferenceThresholds = InferenceThresholds()
    relative_margin: Annotated[float, Field(gt=0, le=1)] = 0.93


class LabSpec(_Strict):
    kind: Literal["container", "vm"]


class NodeClass(_Strict):
    name: ClassName
    # Bumped whenever the pins change; golden images are named <name>-<version> and immutable.
    version: Annotated[int, Field(ge=1, le=100000)] = 1
    description: Annotated[str, StringConstraints(max_length=200)] = ""
    os: OsSpec
    kernel: KernelSpec
    driver: DriverSpec
    dkms: list[DkmsModule] = Field(default_factory=list)
    runtime: RuntimeSpec
    userland: UserlandSpec = UserlandSpec()
    accelerator: AcceleratorSpec
    smoke: SmokeSpec = SmokeSpec()
    lab: LabSpec

    @model_validator(mode="after")
    def _stack_is_one_vendor(self) -> NodeClass:
        if self.accelerator.vendor != self.driver.vendor:
            raise ValueError(
                f"accelerator vendor {self.accelerator.vendor} "
                f"but driver vendor {self.driver.vendor}"
            )
        if self.userland.cuda and self.driver.vendor != "nvidia":
            raise ValueError("userland.cuda needs an nvidia driver")
        if self.userland.rocm and self.driver.vendor != "amd":
            raise ValueError("userland.rocm needs an amd driver")
        names = [m.name for m in self.dkms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"dkms module listed twice: {', '.join(dupes)}")
        return self

    @property
    def kernel_series(self) -> str:
        major, minor = self.kernel.abi.split(".")[:2]
        return f"{major}.{minor}"
