"""What one ELF file links against, what it calls itself, and which vendor sonames it names in
.rodata (the usual sign of a dlopen).

Only the headers, the dynamic section with its string table, and .rodata (in fixed-size
chunks) are read, so a 500 MB libtorch_cuda.so costs a few megabytes of memory at most.
Anything pyelftools cannot parse comes back as `error`, never as an exception: a truncated
file in a venv must not stop the scan of the other thirty thousand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from elftools.elf.dynamic import Dynamic, DynamicSection, DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section

ELF_MAGIC = b"\x7fELF"
# The ELF header alone is 52 (32-bit) or 64 bytes: anything shorter cannot be a library.
MIN_ELF_SIZE = 52
# Sources, text and data that no loader maps: most of a venv's files are these, and skipping
# them by name spares an open() each. Anything else is checked for the ELF magic.
NOT_ELF_SUFFIXES = frozenset({
    ".py", ".pyc", ".pyi", ".pyx", ".pxd", ".pxi", ".h", ".hh", ".hpp", ".cuh", ".c", ".cc",
    ".cpp", ".cu", ".txt", ".md", ".rst", ".json", ".yaml", ".yml", ".toml", ".cfg", ".ini",
    ".html", ".css", ".js", ".svg", ".png", ".jpg", ".gif", ".csv", ".typed", ".afm", ".ttf",
    ".pem", ".mo", ".po",
})
RODATA_CHUNK = 1 << 20
# Longer than any soname worth reporting; a match split across two chunks is still seen.
CHUNK_OVERLAP = 256
_TAG_ATTRS = {"DT_NEEDED": "needed", "DT_SONAME": "soname"}
# A soname in .rodata starts a string or follows a '/': not after a name character, which
# would make "libcuda.so" out of "notlibcuda.so".
_NAME_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+-")


@dataclass(frozen=True)
class ElfFacts:
    needed: tuple[str, ...] = ()
    soname: str | None = None
    dlopen: tuple[str, ...] = ()
    error: str | None = None


def maybe_elf(name: str, size: int) -> bool:
    """Whether a file of this name and size is worth checking for the ELF magic."""
    dot = name.rfind(".")
    return size >= MIN_ELF_SIZE and (dot <= name.rfind("/") or name[dot:] not in NOT_ELF_SUFFIXES)


def _wanted_sections(elf: ELFFile) -> tuple[list[Dynamic], Section | None]:
    """The dynamic table(s) and .rodata, from one pass over the section headers."""
    dynamics: list[Dynamic] = []
    rodata = None
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            dynamics.append(section)
        elif section.name == ".rodata" and section["sh_type"] != "SHT_NOBITS":
            rodata = section
    # A binary stripped of section headers still has its PT_DYNAMIC segment.
    dynamics = dynamics or [s for s in elf.iter_segments() if isinstance(s, DynamicSegment)]
    return dynamics, rodata


def _dynamic_tags(dynamics: list[Dynamic]) -> Iterator[tuple[str, str]]:
    """("needed" | "soname", value) for each DT_NEEDED and DT_SONAME entry."""
    for dyn in dynamics:
        for tag in dyn.iter_tags():
            attr = _TAG_ATTRS.get(tag.entry.d_tag)
            if attr is not None:  # pyelftools resolves these tags' strings into attributes
                yield attr, str(getattr(tag, attr))


def _rodata_strings(rodata: Section, stream: IO[bytes], pattern: re.Pattern[bytes]) -> set[str]:
    found: set[str] = set()
    offset, remaining = int(rodata["sh_offset"]), int(rodata["sh_size"])
    stream.seek(offset)
    tail = b""
    while remaining > 0:
        chunk = stream.read(min(RODATA_CHUNK, remaining))
        if not chunk:
            break
        remaining -= len(chunk)
        buf = tail + chunk
        # A match starting in the last CHUNK_OVERLAP bytes may run into the next chunk: it is
        # left for the next round, which starts one byte earlier to see what precedes it.
        limit = len(buf) - CHUNK_OVERLAP if remaining > 0 else len(buf)
        for m in pattern.finditer(buf, 1 if tail else 0):
            start = m.start()
            if start >= limit:
                break
            if start == 0 or buf[start - 1] not in _NAME_BYTES:
                found.add(m.group().decode("ascii"))
        tail = buf[max(limit - 1, 0):]
    return found


def describe_error(exc: BaseException) -> str:
    """One short line for an unreadable file, whatever the exception says."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:200]


def scan_elf(stream: IO[bytes], pattern: re.Pattern[bytes]) -> ElfFacts:
    """Parse one seekable ELF stream positioned anywhere; never raises for a bad file."""
    try:
        elf = ELFFile(stream)
        needed: list[str] = []
        soname = None
        dynamics, rodata = _wanted_sections(elf)
        for kind, value in _dynamic_tags(dynamics):
            if kind == "needed":
                needed.append(value)
            else:
                soname = value
        dlopen = _rodata_strings(rodata, stream, pattern) if rodata is not None else set()
    except Exception as exc:  # untrusted bytes: pyelftools raises many types on garbage
        return ElfFacts(error=describe_error(exc))
    return ElfFacts(tuple(needed), soname, tuple(sorted(dlopen)))
