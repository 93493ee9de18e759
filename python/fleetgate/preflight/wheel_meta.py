"""Wheel and dist-info metadata: names, versions, platform tags, and the vendor evidence in them.

Parsing is `packaging`'s (the same code pip uses); a malformed line degrades to what can still
be read from it rather than failing the scan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.parser import HeaderParser

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from fleetgate.preflight.model import Evidence
from fleetgate.preflight.vendor_table import VendorTable

_LEADING_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER_RE = re.compile(r"\bextra\b")


@dataclass
class DistInfo:
    """What METADATA, WHEEL and a wheel's file name say about one distribution."""

    name: str | None = None
    version: str | None = None
    requires_dist: list[str] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    metadata_file: str | None = None


def read_metadata(info: DistInfo, text: str, file: str) -> None:
    raw, _unparsed = parse_email(text)
    info.name = raw.get("name") or info.name
    info.version = raw.get("version") or info.version
    info.requires_dist = list(raw.get("requires_dist") or [])
    info.metadata_file = file


def read_wheel_file(info: DistInfo, text: str) -> None:
    """The `Tag:` lines of a .dist-info/WHEEL file (python-abi-platform)."""
    info.tags.update(t.strip() for t in HeaderParser().parsestr(text).get_all("Tag") or [])


def read_wheel_filename(info: DistInfo, filename: str) -> None:
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return  # METADATA and WHEEL still say what the name would have
    info.name = info.name or str(name)
    info.version = info.version or str(version)
    info.tags.update(str(t) for t in tags)


def local_version(version: str) -> str | None:
    """`2.5.1+cu121` -> `cu121`; `None` when there is no local part."""
    try:
        return Version(version).local
    except InvalidVersion:
        return version.partition("+")[2] or None


def _requirement_name(line: str) -> tuple[str | None, bool]:
    """(distribution name, whether only an extra pulls it in)."""
    try:
        req = Requirement(line)
    except InvalidRequirement:
        m = _LEADING_NAME_RE.match(line)
        return (m.group(1) if m else None), bool(_EXTRA_MARKER_RE.search(line.partition(";")[2]))
    return req.name, req.marker is not None and bool(_EXTRA_MARKER_RE.search(str(req.marker)))


def metadata_evidence(info: DistInfo, table: VendorTable, *, where: str) -> set[Evidence]:
    """Vendor evidence in a distribution's name, version and Requires-Dist lines; `where` is
    the file reported for the name and version (a wheel file name, or its METADATA)."""
    found: set[Evidence] = set()
    meta_file = info.metadata_file or where
    if info.name is not None:
        vendor = table.distribution_vendor(info.name)
        if vendor is not None:
            found.add(Evidence(vendor, "distribution", meta_file,
                               f"Name: {canonicalize_name(info.name)}"))
    local = local_version(info.version) if info.version else None
    if local is not None:
        vendor = table.local_version_vendor(local)
        if vendor is not None:
            found.add(Evidence(vendor, "version-tag", where, f"Version: {info.version}"))
    for line in info.requires_dist:
        name, optional = _requirement_name(line)
        vendor = table.distribution_vendor(name) if name else None
        if vendor is not None:
            found.add(Evidence(vendor, "Requires-Dist-extra" if optional else "Requires-Dist",
                               meta_file, f"Requires-Dist: {' '.join(line.split())}"))
    return found
