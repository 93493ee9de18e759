"""Probe one file, or one member of a zip or tar, for ELF facts without unpacking the archive.

pyelftools needs random access, which a member of a compressed archive only offers by
re-inflating from the start on every backward seek. So an ELF member is first copied out:
into memory below MEMORY_CAP, else into an anonymous temporary file, one member at a time.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from fleetgate.preflight.elf_scan import ELF_MAGIC, MIN_ELF_SIZE, ElfFacts, scan_elf

MEMORY_CAP = 32 << 20
COPY_BUFSIZE = 1 << 20


@contextmanager
def _seekable_copy(stream: IO[bytes], head: bytes, size: int) -> Iterator[IO[bytes]]:
    if size <= MEMORY_CAP:
        yield io.BytesIO(head + stream.read())
        return
    with tempfile.TemporaryFile(prefix="fleetgate-elf-") as tmp:
        tmp.write(head)
        shutil.copyfileobj(stream, tmp, COPY_BUFSIZE)
        tmp.seek(0)
        yield tmp


def probe_stream(stream: IO[bytes], size: int, pattern: re.Pattern[bytes], *,
                 seekable: bool) -> ElfFacts | None:
    """ElfFacts for an ELF stream, None for anything else. `seekable`: the stream seeks
    cheaply (a plain file, a member of an uncompressed tar) and is read in place."""
    if size < MIN_ELF_SIZE:
        return None
    head = stream.read(len(ELF_MAGIC))
    if head != ELF_MAGIC:
        return None
    if seekable:
        stream.seek(0)
        return scan_elf(stream, pattern)
    with _seekable_copy(stream, head, size) as copy:
        return scan_elf(copy, pattern)


def probe_path(path: str, pattern: bytes) -> ElfFacts | None:
    """probe_stream for a file on disk; module-level so that a process pool can run it. A file
    that cannot be opened is reported as unreadable: it might have been an ELF file."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, io.SEEK_END)
            f.seek(0)
            return probe_stream(f, size, re.compile(pattern), seekable=True)
    except OSError as exc:
        return ElfFacts(error=f"cannot read: {exc.strerror or exc}")
