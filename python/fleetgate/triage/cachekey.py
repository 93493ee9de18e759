"""The cache key engine and compile caches must use (story 2: engines reused across GPU
steppings turned p99 into a nightmare).

key = "fg1-" + the first 20 hex digits of sha256 over the canonical JSON of the components:
backend, device model, PCI ID, compute capability, driver, the CUDA/ROCm runtime and the
engine name=version pairs. Two hosts share a cache exactly when every component is equal;
anything that changes an engine's code generation changes the key. The VBIOS is not part of
it (a VBIOS does not change generated code; `fleet drift` flags mixed VBIOS separately).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.spec.schema import NodeClass
from fleetgate.triage.identity import Device

SCHEME = 1
KEY_HEX = 20  # 80 bits: collisions need ~10^12 distinct stacks
ENGINE_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
ENGINE_VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}$")
RUNTIME_RE = re.compile(r"^(cuda|rocm)=[0-9]+(\.[0-9]+){1,2}$|^none$")


def parse_engines(pairs: list[str]) -> dict[str, str]:
    """`--engine tensorrt=10.3` (repeatable) -> {"tensorrt": "10.3"}."""
    if not pairs:
        raise BadInput("at least one --engine NAME=VERSION is required (e.g. tensorrt=10.3, "
                       "torch=2.4.1, triton=3.0.0)", source="--engine")
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, version = pair.partition("=")
        name = name.strip().lower()
        if not sep or not ENGINE_NAME_RE.fullmatch(name):
            raise BadInput("expected NAME=VERSION with NAME in [a-z0-9_.-]", source="--engine",
                           field=repr(pair))
        if not ENGINE_VERSION_RE.fullmatch(version):
            raise BadInput("version has characters outside [0-9A-Za-z.+_-]", source="--engine",
                           field=repr(pair))
        if name in out:
            raise BadInput("engine given twice", source="--engine", field=name)
        out[name] = version
    return out


def runtime_of(nc: NodeClass, override: str | None) -> str:
    """`cuda=12.4` / `rocm=6.2` / `none`: --runtime if given, else the class's userland pin."""
    if override is not None:
        if not RUNTIME_RE.fullmatch(override):
            raise BadInput("expected cuda=X.Y, rocm=X.Y or none", source="--runtime",
                           field=repr(override))
        return override
    if nc.userland.cuda:
        return f"cuda={nc.userland.cuda}"
    if nc.userland.rocm:
        return f"rocm={nc.userland.rocm}"
    if nc.accelerator.backend in ("nvidia", "amd"):
        raise BadInput(f"class {nc.name} pins no userland runtime; give --runtime "
                       "cuda=X.Y or rocm=X.Y", source="--runtime")
    return "none"


@dataclass
class CacheKey:
    key: str
    components: dict[str, Any]


def cache_key(backend: str, device: Device, runtime: str, engines: dict[str, str]) -> CacheKey:
    components: dict[str, Any] = {
        "scheme": SCHEME,
        "backend": backend,
        "device_model": device.model,
        "pci_id": device.pci_id,
        "compute_capability": device.compute_capability,
        "driver": device.driver,
        "runtime": runtime,
        "engines": dict(sorted(engines.items())),
    }
    blob = json.dumps(components, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(blob.encode()).hexdigest()[:KEY_HEX]
    return CacheKey(f"fg{SCHEME}-{digest}", components)
