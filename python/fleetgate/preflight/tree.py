"""Attribute the files of a tree (a venv, a site-packages, a rootfs, an image tar) to artifacts.

A file belongs to the distribution whose dist-info RECORD lists it; failing that to the
Debian package whose dpkg file list names it; failing that it is its own artifact (its path).
The tree is seen once, in any order (a tar streams), so facts are collected first and
attributed at the end.
"""

from __future__ import annotations

import csv
import io
import posixpath
import re
from dataclasses import dataclass, field

from fleetgate.preflight.elf_scan import ElfFacts
from fleetgate.preflight.evidence import elf_evidence
from fleetgate.preflight.model import Artifact, Evidence, ScanStats, Unreadable
from fleetgate.preflight.vendor_table import VendorTable
from fleetgate.preflight.wheel_meta import (
    DistInfo,
    metadata_evidence,
    read_metadata,
    read_wheel_file,
)

_DIST_INFO_FILE_RE = re.compile(
    r"^(?P<dir>(?:.*/)?[^/]+\.dist-info)/(?P<file>METADATA|WHEEL|RECORD)$")
_DPKG_LIST_RE = re.compile(r"^var/lib/dpkg/info/(?P<pkg>[^/:]+)(?::[^/]+)?\.list$")
DPKG_STATUS = "var/lib/dpkg/status"
# Metadata files are small; one that is not has been tampered with or is not metadata.
TEXT_CAP = 16 << 20


def normalize(path: str) -> str:
    """A tree-relative POSIX path: no leading `./` or `/`, no `..` that stays inside."""
    return posixpath.normpath(path.lstrip("/")).removeprefix("./")


def wants_text(path: str) -> bool:
    """Whether the collector needs this file's text (read it whole, it is small)."""
    return bool(_DIST_INFO_FILE_RE.match(path) or _DPKG_LIST_RE.match(path)
                or path == DPKG_STATUS)


def _dpkg_versions(text: str) -> dict[str, str]:
    versions: dict[str, str] = {}
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if "Package" in fields and "Version" in fields:
            versions[fields["Package"]] = fields["Version"]
    return versions


@dataclass
class _FileFacts:
    evidence: set[Evidence]
    unreadable: Unreadable | None


@dataclass
class TreeCollector:
    table: VendorTable
    stats: ScanStats = field(default_factory=ScanStats)
    _elf: dict[str, _FileFacts] = field(default_factory=dict)
    _dists: dict[str, DistInfo] = field(default_factory=dict)
    _records: dict[str, str] = field(default_factory=dict)
    _dpkg_owner: dict[str, str] = field(default_factory=dict)
    _dpkg_versions: dict[str, str] = field(default_factory=dict)

    def add_file(self, path: str, size: int) -> None:
        self.stats.files += 1
        self.stats.bytes += size

    def add_elf(self, path: str, size: int, facts: ElfFacts) -> None:
        self.stats.elf_files += 1
        self.stats.elf_bytes += size
        unreadable = Unreadable(path, facts.error) if facts.error else None
        self._elf[path] = _FileFacts(elf_evidence(path, facts, self.table), unreadable)

    def add_text(self, path: str, data: bytes) -> None:
        text = data.decode("utf-8", errors="replace")
        m = _DIST_INFO_FILE_RE.match(path)
        if m:
            dist_dir, name = m.group("dir"), m.group("file")
            info = self._dists.setdefault(dist_dir, DistInfo())
            if name == "METADATA":
                read_metadata(info, text, path)
            elif name == "WHEEL":
                read_wheel_file(info, text)
            else:
                self._read_record(dist_dir, text)
            return
        m = _DPKG_LIST_RE.match(path)
        if m:
            for line in text.splitlines():
                if line.strip():
                    self._dpkg_owner.setdefault(normalize(line), m.group("pkg"))
        elif path == DPKG_STATUS:
            self._dpkg_versions = _dpkg_versions(text)

    def _read_record(self, dist_dir: str, text: str) -> None:
        base = posixpath.dirname(dist_dir)
        for row in csv.reader(io.StringIO(text)):
            if row and row[0]:
                path = posixpath.normpath(posixpath.join(base, row[0]))
                if not path.startswith("../"):
                    self._records[path] = dist_dir

    def _deb_owner(self, path: str) -> str | None:
        # With merged /usr, dpkg lists say /lib/... for what lies in /usr/lib/...
        return self._dpkg_owner.get(path) or (
            self._dpkg_owner.get(path.removeprefix("usr/")) if path.startswith("usr/") else None)

    def artifacts(self) -> list[Artifact]:
        by_key: dict[tuple[str, str], Artifact] = {}
        for dist_dir, info in self._dists.items():
            artifact = Artifact(name=info.name or posixpath.basename(dist_dir),
                                kind="distribution", version=info.version,
                                platform_tags=sorted(info.tags), location=dist_dir)
            artifact.evidence |= metadata_evidence(info, self.table,
                                                   where=f"{dist_dir}/METADATA")
            by_key["distribution", dist_dir] = artifact
        for path, facts in self._elf.items():
            owner = self._records.get(path)
            if owner is not None and owner in self._dists:
                artifact = by_key["distribution", owner]
            elif (pkg := self._deb_owner(path)) is not None:
                artifact = by_key.setdefault(("deb-package", pkg), Artifact(
                    pkg, "deb-package", version=self._dpkg_versions.get(pkg)))
            else:
                artifact = by_key.setdefault(("path", path), Artifact(path, "path",
                                                                      location=path))
            artifact.elf_files += 1
            artifact.evidence |= facts.evidence
            if facts.unreadable:
                artifact.unreadable.add(facts.unreadable)
        return list(by_key.values())
