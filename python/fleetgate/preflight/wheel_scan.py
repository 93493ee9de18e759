"""Scan one wheel in place: its file name, its dist-info METADATA and WHEEL, and its ELF members.

Members are read through zipfile one at a time; only the first four bytes of a non-ELF member
are inflated.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path

from fleetgate.errors import BadInput
from fleetgate.preflight.elf_scan import describe_error, maybe_elf
from fleetgate.preflight.evidence import elf_evidence
from fleetgate.preflight.members import probe_stream
from fleetgate.preflight.model import Artifact, ScanStats, Unreadable
from fleetgate.preflight.vendor_table import VendorTable
from fleetgate.preflight.wheel_meta import (
    DistInfo,
    metadata_evidence,
    read_metadata,
    read_wheel_file,
    read_wheel_filename,
)

# Only the wheel's own top-level dist-info: a vendored package's METADATA is not the wheel's.
_WHEEL_META_RE = re.compile(r"^[^/]+\.dist-info/(?P<file>METADATA|WHEEL)$")
_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError)


def scan_wheel(path: Path, table: VendorTable, *, location: str) -> tuple[Artifact, ScanStats]:
    """BadInput if the file is not a readable zip; a bad member is only reported."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadInput(f"not a readable wheel (zip): {exc}", source=path) from None
    info = DistInfo()
    read_wheel_filename(info, path.name)
    stats = ScanStats()
    artifact = Artifact(name=path.name, kind="wheel", location=location)
    with zf:
        for member in zf.infolist():
            if member.is_dir():
                continue
            stats.files += 1
            stats.bytes += member.file_size
            try:
                meta = _WHEEL_META_RE.match(member.filename)
                if meta:
                    text = zf.read(member).decode("utf-8", errors="replace")
                    if meta.group("file") == "METADATA":
                        read_metadata(info, text, member.filename)
                    else:
                        read_wheel_file(info, text)
                    continue
                if not maybe_elf(member.filename, member.file_size):
                    continue
                with zf.open(member) as stream:
                    facts = probe_stream(stream, member.file_size, table.dlopen_regex,
                                         seekable=False)
            except _MEMBER_ERRORS as exc:
                artifact.unreadable.add(Unreadable(member.filename, describe_error(exc)))
                continue
            if facts is None:
                continue
            stats.elf_files += 1
            stats.elf_bytes += member.file_size
            artifact.elf_files += 1
            artifact.evidence |= elf_evidence(member.filename, facts, table)
            if facts.error:
                artifact.unreadable.add(Unreadable(member.filename, facts.error))
    artifact.name = info.name or path.name
    artifact.version = info.version
    artifact.platform_tags = sorted(info.tags)
    artifact.evidence |= metadata_evidence(info, table, where=path.name)
    return artifact, stats
