"""What a target is (wheel, directory of wheels, venv, site-packages, rootfs, tar) and how its
files are reached: a directory is walked without following symlinks (a venv's bin/python points
outside it); a tar, compressed or not, is read as one stream.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import re
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from fleetgate.errors import BadInput
from fleetgate.preflight.elf_scan import describe_error, maybe_elf
from fleetgate.preflight.members import probe_stream
from fleetgate.preflight.tree import TEXT_CAP, TreeCollector, normalize, wants_text
from fleetgate.preflight.vendor_table import VendorTable

TargetKind = Literal["wheel", "wheel-dir", "venv", "site-packages", "rootfs", "directory", "tar"]
TREE_KINDS = ("venv", "site-packages", "rootfs", "directory")

# Magic numbers of the compressions tarfile reads: their members cannot seek cheaply.
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
# Layers inside an image archive: docker-archive `<id>.tar` or `<id>/layer.tar`, OCI blobs.
_LAYER_RE = re.compile(r"^(?:[0-9a-f]{64}(?:\.tar|/layer\.tar)|blobs/sha256/[0-9a-f]{64})$")
_ARCHIVE_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError)


def detect_kind(target: Path) -> TargetKind:
    if not target.exists():
        raise BadInput("no such file or directory", source=target)
    if target.is_dir():
        try:
            names = os.listdir(target)
        except OSError as exc:
            raise BadInput(f"cannot list: {exc.strerror}", source=target) from None
        if "pyvenv.cfg" in names:
            return "venv"
        if any(n.endswith(".dist-info") for n in names):
            return "site-packages"
        if "etc" in names and ({"usr", "bin", "lib"} & set(names)):
            return "rootfs"
        if any(n.endswith(".whl") for n in names):
            return "wheel-dir"
        return "directory"
    if target.suffix == ".whl":
        return "wheel"
    try:
        if tarfile.is_tarfile(target):
            return "tar"
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror}", source=target) from None
    raise BadInput("not a wheel, a tar archive or a directory", source=target)


def wheels_in(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.whl") if p.is_file())


def walk_files(root: Path) -> Iterator[tuple[str, str, int]]:
    """(absolute path, tree-relative POSIX path, size) of every regular file under root, each
    hard-linked file once."""
    prefix = len(str(root).rstrip("/")) + 1
    stack = [str(root)]
    # A hard-linked file is scanned once, as a tar stores it once (later names as links).
    linked: set[tuple[int, int]] = set()
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # a directory that vanished or is closed to us holds nothing we can scan
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_nlink > 1:
                    if (st.st_dev, st.st_ino) in linked:
                        continue
                    linked.add((st.st_dev, st.st_ino))
                yield entry.path, entry.path[prefix:], st.st_size


def read_tree(root: Path, collector: TreeCollector) -> list[tuple[str, str, int]]:
    """Feed the collector every file's size and the metadata texts; return the files that
    may be ELF (absolute path, relative path, size) for the caller to probe."""
    candidates = []
    for path, rel, size in walk_files(root):
        collector.add_file(rel, size)
        if wants_text(rel):
            # Metadata that cannot be read only costs attribution: its files are still scanned.
            if size <= TEXT_CAP:
                with contextlib.suppress(OSError):
                    collector.add_text(rel, Path(path).read_bytes())
        elif maybe_elf(rel, size):
            candidates.append((path, rel, size))
    return candidates


def _compressed(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(8)
    return head.startswith(_COMPRESSED_MAGIC)


def read_tar(path: Path, collector: TreeCollector, table: VendorTable) -> None:
    """Stream a tar (plain, gz, bz2, xz) once; a corrupt or truncated archive is bad input.
    The layers of an image archive (`podman save`, docker-archive or oci-archive) are read
    in turn as one tree, so a dpkg list in one layer attributes files in another."""
    where = ["(archive header)"]
    try:
        with tarfile.open(path, "r:*") as tf:
            _read_members(tf, collector, table, seekable=not _compressed(path), where=where)
    except _ARCHIVE_ERRORS as exc:
        raise BadInput(f"corrupt or truncated archive: {describe_error(exc)}", source=path,
                       field=" > ".join(where)) from None


def _read_members(tf: tarfile.TarFile, collector: TreeCollector, table: VendorTable, *,
                  seekable: bool, where: list[str]) -> None:
    nested = len(where) > 1
    for member in tf:
        where[-1] = member.name
        if not member.isreg():
            continue  # links point at files scanned in their own right
        rel = normalize(member.name)
        if not nested and _LAYER_RE.match(rel) and _read_layer(tf, member, collector, table,
                                                                where):
            continue
        collector.add_file(rel, member.size)
        if wants_text(rel):
            stream = tf.extractfile(member)
            if stream is not None and member.size <= TEXT_CAP:
                collector.add_text(rel, stream.read())
            continue
        if not maybe_elf(rel, member.size):
            continue
        stream = tf.extractfile(member)
        facts = probe_stream(stream, member.size, table.dlopen_regex,
                             seekable=seekable) if stream is not None else None
        if facts is not None:
            collector.add_elf(rel, member.size, facts)


def _read_layer(tf: tarfile.TarFile, member: tarfile.TarInfo, collector: TreeCollector,
                table: VendorTable, where: list[str]) -> bool:
    """Read an image layer as a tar stream; False if the blob is not a tar (a config)."""
    stream = tf.extractfile(member)
    if stream is None:
        return False
    with contextlib.ExitStack() as stack:
        try:
            layer = stack.enter_context(tarfile.open(fileobj=stream, mode="r|*"))
        except (tarfile.ReadError, tarfile.CompressionError):
            return False
        where.append("(layer header)")
        _read_members(layer, collector, table, seekable=False, where=where)
        where.pop()
    return True
