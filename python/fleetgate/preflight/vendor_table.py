"""The vendor table: which library stems, distributions and version tags belong to which vendor.

The shipped table is `vendor_libs.yml` next to this module; `--table EXTRA.yml` files add to it.
A name listed under two vendors is refused: the scan could not say which backend it needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Annotated

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from fleetgate.errors import BadInput, validation_error
from fleetgate.spec.loader import read_yaml

# `--backend` values that allow no GPU vendor at all; a table may not define a vendor so named.
NO_GPU_BACKENDS = ("cpu", "none")

# A dot would make the stem ambiguous (libfoo.so.1 -> libfoo), so stems never carry one.
LIB_STEM_RE = r"^lib[A-Za-z0-9_+*-]{1,100}$"
DIST_PATTERN_RE = r"^[a-z0-9*][a-z0-9*._-]{0,99}$"
LOCAL_PATTERN_RE = r"^[a-z0-9*][a-z0-9*.]{0,31}$"
VENDOR_RE = r"^[a-z][a-z0-9-]{0,31}$"

# libcudart.so.12, libcudart.so, and auditwheel's renamed copies: libcudart.faf08d9a.so.13 and
# libcudart-3f4b2c1d.so.11.0 (an 8-hex-digit hash between stem and `.so`).
_SONAME_RE = re.compile(r"^(?P<stem>.+?)(?:[-.][0-9a-f]{8})?\.so(?:\.[0-9][0-9A-Za-z.]*)?$")
# What `*` stands for inside a library stem (no dot, no slash).
_STEM_CHARS = "[A-Za-z0-9_+-]"


def soname_stem(name: str) -> str:
    """`libcudart.so.12` -> `libcudart`; a name that is not a shared-object name comes back
    unchanged (minus any directory)."""
    base = name.rsplit("/", 1)[-1]
    m = _SONAME_RE.match(base)
    return m.group("stem") if m else base


LibStem = Annotated[str, StringConstraints(pattern=LIB_STEM_RE)]
DistPattern = Annotated[str, StringConstraints(pattern=DIST_PATTERN_RE)]
LocalPattern = Annotated[str, StringConstraints(pattern=LOCAL_PATTERN_RE)]
VendorName = Annotated[str, StringConstraints(pattern=VENDOR_RE)]


class VendorEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    libraries: list[LibStem] = []
    distributions: list[DistPattern] = []
    local_versions: list[LocalPattern] = []


class TableFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    vendors: dict[VendorName, VendorEntry]


def _glob_to_regex(stem: str) -> str:
    return "".join(f"{_STEM_CHARS}+" if part == "*" else re.escape(part)
                   for part in re.split(r"(\*)", stem) if part)


@dataclass(frozen=True)
class _Rule:
    pattern: str
    vendor: str


class VendorTable:
    """Vendor lookups for library stems, distribution names and local version tags."""

    def __init__(self, sources: Sequence[str], libraries: Sequence[_Rule],
                 distributions: Sequence[_Rule], local_versions: Sequence[_Rule]):
        self.sources = tuple(sources)
        self.vendors = tuple(sorted({r.vendor for r in (*libraries, *distributions,
                                                         *local_versions)}))
        self._lib_exact = {r.pattern: r.vendor for r in libraries if "*" not in r.pattern}
        self._lib_globs = [(re.compile(_glob_to_regex(r.pattern)), r.vendor)
                           for r in libraries if "*" in r.pattern]
        self._dists = tuple(distributions)
        self._locals = tuple(local_versions)
        alternatives = sorted((_glob_to_regex(r.pattern) for r in libraries), key=len,
                              reverse=True)
        # The pattern starts with a literal so `re` can skip ahead to candidates; the byte before
        # a match is checked by the caller (a lookbehind here would defeat that skipping).
        self.dlopen_pattern = (rb"(?:" + "|".join(alternatives).encode()
                               + rb")(?:[-.][0-9a-f]{8})?\.so(?:\.[0-9]+)*")
        self.dlopen_regex = re.compile(self.dlopen_pattern)

    def library_vendor(self, stem: str) -> str | None:
        vendor = self._lib_exact.get(stem)
        if vendor is not None:
            return vendor
        for rx, glob_vendor in self._lib_globs:
            if rx.fullmatch(stem):
                return glob_vendor
        return None

    def distribution_vendor(self, name: str) -> str | None:
        canonical = canonicalize_name(name)
        return next((r.vendor for r in self._dists if fnmatchcase(canonical, r.pattern)), None)

    def local_version_vendor(self, local: str) -> str | None:
        lowered = local.lower()
        return next((r.vendor for r in self._locals if fnmatchcase(lowered, r.pattern)), None)

    def backends(self) -> tuple[str, ...]:
        return (*NO_GPU_BACKENDS, *self.vendors)

    def allowed_vendors(self, backend: str) -> frozenset[str]:
        """The vendors a pool of this backend may carry; BadInput for an unknown backend."""
        if backend in NO_GPU_BACKENDS:
            return frozenset()
        if backend in self.vendors:
            return frozenset({backend})
        raise BadInput(f"unknown backend (known: {', '.join(self.backends())})",
                       source="--backend", field=backend)


def _parse(data: object, source: Path) -> TableFile:
    if not isinstance(data, dict):
        raise BadInput("a vendor table must be a YAML mapping with `vendors:`", source=source,
                       field="(top level)")
    try:
        table = TableFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source) from None
    for vendor in table.vendors:
        if vendor in NO_GPU_BACKENDS:
            raise BadInput(f"{vendor!r} is a backend without a GPU vendor, not a vendor",
                           source=source, field=f"vendors.{vendor}")
    return table


def _merge(tables: Iterable[tuple[Path, TableFile]]) -> VendorTable:
    kinds: dict[str, list[_Rule]] = {"libraries": [], "distributions": [], "local_versions": []}
    owner: dict[tuple[str, str], str] = {}
    sources = []
    for source, table in tables:
        sources.append(str(source))
        for vendor, entry in table.vendors.items():
            for kind, rules in kinds.items():
                for i, pattern in enumerate(getattr(entry, kind)):
                    seen = owner.setdefault((kind, pattern), vendor)
                    if seen != vendor:
                        raise BadInput(f"{pattern!r} is already listed under {seen}",
                                       source=source, field=f"vendors.{vendor}.{kind}[{i}]")
                    rules.append(_Rule(pattern, vendor))
    return VendorTable(sources, kinds["libraries"], kinds["distributions"],
                       kinds["local_versions"])


def default_table_path() -> Path:
    return Path(str(resources.files("fleetgate.preflight").joinpath("vendor_libs.yml")))


def load_table(extra: Sequence[Path] = ()) -> VendorTable:
    """The shipped table plus any extra tables, in order."""
    paths = [default_table_path(), *extra]
    return _merge((path, _parse(read_yaml(path), path)) for path in paths)
