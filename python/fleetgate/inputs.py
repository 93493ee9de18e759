"""Reading what an operator hands fleetgate: one-line BadInput for anything that is not a
plain file of sane text, before any parser sees it.

- Only regular files are read. A FIFO or a device named as a class, plan, artifact or probe
  output would block `read()` forever (or stream without end): it is refused on the `stat`,
  and again on the descriptor actually opened (O_NONBLOCK, so even opening a FIFO that was
  swapped in meanwhile cannot wait for a writer).
- Reads are capped: no input fleetgate takes is anywhere near MAX_INPUT_BYTES.
- JSON is strict: NaN and Infinity are not JSON (RFC 8259), and a document nested deeper than
  MAX_DEPTH is refused instead of overflowing the parser's stack (exit 70).

Host code (plugins/module_utils) cannot import this module: it is standard library only and
keeps its own strict JSON reader (fleetgate_parsers.loads_json), with the same rules.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput, field_path

MAX_INPUT_BYTES = 64 * 1024 * 1024
# Deeper than any document fleetgate reads or writes (a smoke result is ~8 levels), far below
# where a recursive parser or pydantic would run out of stack.
MAX_DEPTH = 64

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_kind(mode: int) -> str:
    """What a stat mode is, in words ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "an unusual file type")


def read_input(path: Path, *, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of an input file; anything but a readable regular file is BadInput."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"is {file_kind(st.st_mode)}, not a regular file", source=path)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput("no such file", source=path) from None
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", source=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the stat and the open
            raise BadInput(f"is {file_kind(st.st_mode)}, not a regular file", source=path)
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", source=path) from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise BadInput(f"larger than {max_bytes} bytes; not an input fleetgate reads",
                       source=path)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text (byte {exc.start})", source=path) from None


def check_inventory_source(source: str | Path, *, max_entries: int = 100_000) -> None:
    """An inventory source that names a path must be a regular file (INI, YAML, a plugin
    config or an executable script) or a directory of them, group_vars/ and host_vars/
    included: Ansible reads every file in an inventory directory, and one FIFO or device
    among them would hang `ansible-inventory`. Sources that are not paths (`host1,host2,`) are
    Ansible's to read. Call it before `ansible-inventory` runs."""
    try:
        st = os.stat(source)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", source=str(source)) from None
    if stat.S_ISREG(st.st_mode):
        return
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"an inventory is a file or a directory, not {file_kind(st.st_mode)}",
                       source=str(source))
    seen = 0
    for top, dirs, files in os.walk(source):
        for name in [*dirs, *files]:
            seen += 1
            if seen > max_entries:
                raise BadInput(f"more than {max_entries} entries; not an inventory directory",
                               source=str(source))
            entry = os.path.join(top, name)
            try:
                mode = os.stat(entry).st_mode
            except OSError:  # a dangling symlink: Ansible skips what it cannot read
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise BadInput(f"an inventory directory holds only files and directories; "
                               f"this is {file_kind(mode)}", source=entry)


class _NotANumber(float):
    """NaN, Infinity or a number that overflows to infinity, as the parser met it: kept only
    until load_json has found where in the document it sits, to name that field."""

    text = ""


def _not_a_number(text: str, why: str) -> _NotANumber:
    value = _NotANumber(text)  # float() reads NaN, Infinity and 1e999 alike
    value.text = f"{text} {why}"
    return value


def _constant(name: str) -> float:
    return _not_a_number(name, "is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf
        return _not_a_number(text, "is out of range for a number")
    return value


def _first_not_a_number(doc: Any) -> tuple[tuple[int | str, ...], str] | None:
    """Where the first NaN/Infinity sits in `doc`, and what it was (iterative: any depth)."""
    stack: list[tuple[tuple[int | str, ...], Any]] = [((), doc)]
    while stack:
        loc, node = stack.pop()
        if isinstance(node, _NotANumber):
            return loc, node.text
        if isinstance(node, dict):
            stack.extend(((*loc, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*loc, i), v) for i, v in reversed(list(enumerate(node))))
    return None


def depth_exceeds(doc: Any, limit: int = MAX_DEPTH) -> bool:
    """True if lists/dicts nest deeper than `limit` (iterative: safe on any depth)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def load_json(text: str, source: str | Path, *, what: str = "JSON") -> Any:
    """Strict JSON: no NaN/Infinity, no number that overflows to infinity, nesting at most
    MAX_DEPTH. Anything else is one line of BadInput naming `what` (and, for a number that is
    not one, the field it sits in)."""
    try:
        doc = json.loads(text, parse_constant=_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what}: invalid JSON: {exc.msg} at line {exc.lineno} col {exc.colno}",
                       source=source) from None
    except ValueError as exc:
        raise BadInput(f"{what}: invalid JSON: {exc}", source=source) from None
    except RecursionError:
        raise BadInput(f"{what}: nested too deeply (more than {MAX_DEPTH} levels)",
                       source=source) from None
    if depth_exceeds(doc):
        raise BadInput(f"{what}: nested too deeply (more than {MAX_DEPTH} levels)",
                       source=source)
    found = _first_not_a_number(doc)
    if found is not None:
        loc, why = found
        raise BadInput(f"{what}: invalid JSON: {why}", source=source,
                       field=field_path(loc) if loc else None)
    return doc
