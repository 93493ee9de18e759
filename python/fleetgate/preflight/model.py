"""What a scan found: artifacts, each with the evidence that ties it to a GPU vendor.

Evidence classes, strongest first. The first five mean the artifact *needs* (or carries) the
vendor's stack; the last two only that it *may use* it, and count against `--backend` only
with `--strict`:

- DT_NEEDED: an ELF file links against a vendor library; the loader fails without it.
- provides: an ELF file *is* a vendor library (by soname or file name): the artifact ships it.
- Requires-Dist: the distribution depends on a vendor distribution (nvidia-*-cu12, ...).
- version-tag: a local version tag such as +cu121 or +rocm6.1 (file name or METADATA).
- distribution: the distribution's own name is a vendor one (nvidia-cuda-runtime-cu12).
- Requires-Dist-extra: as Requires-Dist, but only under an optional extra.
- dlopen-string: an ELF file's .rodata names a vendor soname, the usual sign of a dlopen that
  the program may survive failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA = "fleetgate.preflight.deps/v1"

EvidenceClass = Literal["DT_NEEDED", "provides", "Requires-Dist", "version-tag", "distribution",
                        "Requires-Dist-extra", "dlopen-string"]
WEAK_CLASSES: frozenset[str] = frozenset({"Requires-Dist-extra", "dlopen-string"})
ArtifactKind = Literal["wheel", "distribution", "deb-package", "path"]


@dataclass(frozen=True, order=True)
class Evidence:
    backend: str
    evidence_class: EvidenceClass
    file: str
    detail: str  # the needed soname, the metadata line, the string found

    @property
    def strong(self) -> bool:
        return self.evidence_class not in WEAK_CLASSES

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "class": self.evidence_class, "file": self.file,
                "detail": self.detail, "strength": "needs" if self.strong else "may-use"}


@dataclass(frozen=True, order=True)
class Unreadable:
    file: str
    reason: str


@dataclass
class Artifact:
    name: str
    kind: ArtifactKind
    version: str | None = None
    location: str | None = None  # the wheel, dist-info directory or file, in the target
    platform_tags: list[str] = field(default_factory=list)
    evidence: set[Evidence] = field(default_factory=set)
    unreadable: set[Unreadable] = field(default_factory=set)
    elf_files: int = 0

    def needs(self) -> set[str]:
        return {e.backend for e in self.evidence if e.strong}

    def may_use(self) -> set[str]:
        return {e.backend for e in self.evidence if not e.strong} - self.needs()

    def violations(self, allowed: frozenset[str], *, strict: bool) -> set[str]:
        wanted = self.needs() | (self.may_use() if strict else set())
        return wanted - allowed

    def worth_reporting(self) -> bool:
        """Wheels and distributions always are (their tags matter); a file or a Debian package
        only when there is something to say about it."""
        return self.kind in ("wheel", "distribution") or bool(self.evidence or self.unreadable)

    def to_json(self, allowed: frozenset[str], *, strict: bool) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "version": self.version,
            "location": self.location,
            "platform_tags": sorted(self.platform_tags),
            "needs": sorted(self.needs()), "may_use": sorted(self.may_use()),
            "violations": sorted(self.violations(allowed, strict=strict)),
            "elf_files": self.elf_files,
            "evidence": [e.to_json() for e in sorted(self.evidence)],
            "unreadable": [{"file": u.file, "reason": u.reason} for u in sorted(self.unreadable)],
        }


@dataclass
class ScanStats:
    files: int = 0
    elf_files: int = 0
    bytes: int = 0
    elf_bytes: int = 0

    def add(self, other: ScanStats) -> None:
        self.files += other.files
        self.elf_files += other.elf_files
        self.bytes += other.bytes
        self.elf_bytes += other.elf_bytes


@dataclass
class ScanResult:
    target: str
    target_kind: str
    artifacts: list[Artifact]
    stats: ScanStats
    table_sources: tuple[str, ...] = ()
    wall_s: float = 0.0
    jobs: int = 1

    def violating(self, allowed: frozenset[str], *, strict: bool) -> list[Artifact]:
        return [a for a in self.artifacts if a.violations(allowed, strict=strict)]

    def to_json(self, backend: str, allowed: frozenset[str], *, strict: bool) -> dict[str, Any]:
        bad = self.violating(allowed, strict=strict)
        shown = [a for a in self.artifacts if a.worth_reporting()]
        return {
            "schema": SCHEMA,
            "target": self.target,
            "target_kind": self.target_kind,
            "backend": backend,
            "allowed_vendors": sorted(allowed),
            "strict": strict,
            "verdict": "fail" if bad else "pass",
            "vendor_tables": list(self.table_sources),
            "summary": {
                "artifacts": len(self.artifacts),
                "violating_artifacts": len(bad),
                "files": self.stats.files,
                "elf_files": self.stats.elf_files,
                "bytes": self.stats.bytes,
                "unreadable_files": sum(len(a.unreadable) for a in self.artifacts),
                "wall_s": round(self.wall_s, 3),
                "jobs": self.jobs,
            },
            "artifacts": [a.to_json(allowed, strict=strict)
                          for a in sorted(shown, key=lambda a: (a.kind, a.name))],
        }
