"""Checks that state stays private and secrets stay out of it; shared by the unit tests and
the lab's rollout tests (tests/integration/test_rollout.py)."""

from __future__ import annotations

import json
import stat
from collections.abc import Collection
from pathlib import Path


def open_paths(root: Path, *, skip: Collection[Path] = ()) -> list[str]:
    """Every path under `root` (and `root` itself) that a group or other user could read,
    write or enter, as 'MODE PATH'. `skip`: subtrees that are not private state on purpose
    (a lab directory or an image store kept inside the state dir)."""
    skipped = {p.resolve() for p in skip}
    out: list[str] = []
    todo = [root]
    while todo:
        p = todo.pop()
        if p.resolve() in skipped:
            continue
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_mode & 0o077:
            out.append(f"{stat.S_IMODE(st.st_mode):04o} {p}")
        if stat.S_ISDIR(st.st_mode):
            todo.extend(p.iterdir())
    return sorted(out)


def assert_private_tree(root: Path, *, skip: Collection[Path] = ()) -> None:
    """`find ROOT -perm /077` finds nothing (outside `skip`)."""
    assert root.is_dir(), f"{root} is not a directory"
    found = open_paths(root, skip=skip)
    assert not found, "readable by others:\n" + "\n".join(found[:50])


def find_secret(root: Path, value: str) -> list[Path]:
    """Every file under `root` whose bytes hold `value`, as written or as JSON escapes it
    (SQLite databases and their -wal files included: they store text as UTF-8)."""
    needles = {value.encode(), json.dumps(value)[1:-1].encode(),
               json.dumps(value, ensure_ascii=False)[1:-1].encode()}
    hits: list[Path] = []
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        data = p.read_bytes()
        if any(n in data for n in needles):
            hits.append(p)
    return hits
