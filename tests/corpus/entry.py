"""One corpus entry, and the small tools the family modules write bad files with."""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

Family = Literal["class", "plan", "artifact", "inventory", "site", "probe", "flag"]
FAMILIES: tuple[Family, ...] = ("class", "plan", "artifact", "inventory", "site", "probe",
                                "flag")
BAD_INPUT = frozenset({2})
# The reason a refusal of a non-regular file must give (a FIFO is not "no such file").
DIR_REASON = "not a regular file|is a directory|Is a directory"
FIFO_REASON = "FIFO|named pipe|not a regular file"


@dataclass(frozen=True)
class Entry:
    """A bad input and what its refusal must look like.

    `expect`: fragments stderr must contain, the file (or flag) first, then the field; "a|b"
    is either spelling.
    `inputs`: files the command must leave as they were ("nothing lost"); `absent`: paths it
    must not create ("nothing written"). `state_from`: a state directory copied in as the
    entry's FLEETGATE_STATE_DIR (an artifact verifies only with the state that planned it).
    """

    id: str
    family: Family
    argv: tuple[str, ...]
    expect: tuple[str, ...]
    why: str
    codes: frozenset[int] = BAD_INPUT
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    state_from: Path | None = None
    inputs: tuple[Path, ...] = ()
    absent: tuple[Path, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "family": self.family, "argv": list(self.argv),
                "codes": sorted(self.codes), "expect": list(self.expect), "why": self.why,
                "cwd": str(self.cwd) if self.cwd else None, "env": dict(self.env),
                "state_from": str(self.state_from) if self.state_from else None,
                "inputs": [str(p) for p in self.inputs],
                "absent": [str(p) for p in self.absent]}


# ------------------------------------------------------------------------ editing documents

Doc = dict[str, Any]
Mutation = Callable[[Doc], None]
_STEP_RE = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(dotted: str) -> list[str | int]:
    return [int(i) if i else k for k, i in _STEP_RE.findall(dotted)]


def _parent(doc: Any, dotted: str) -> tuple[Any, str | int]:
    *head, last = _steps(dotted)
    for step in head:
        doc = doc[step]
    return doc, last


def put(dotted: str, value: Any) -> Mutation:
    """Set `a.b[0].c` to `value` (a missing last key is added)."""
    def apply(doc: Doc) -> None:
        parent, last = _parent(doc, dotted)
        parent[last] = copy.deepcopy(value)
    return apply


def drop(dotted: str) -> Mutation:
    def apply(doc: Doc) -> None:
        parent, last = _parent(doc, dotted)
        del parent[last]
    return apply


def edits(*mutations: Mutation) -> Mutation:
    def apply(doc: Doc) -> None:
        for m in mutations:
            m(doc)
    return apply


def mutated(doc: Doc, mutation: Mutation) -> Doc:
    out = copy.deepcopy(doc)
    mutation(out)
    return out


# ---------------------------------------------------------------------------- writing files

def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def write_yaml(path: Path, doc: Any) -> Path:
    return write(path, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def write_json(path: Path, doc: Any) -> Path:
    return write(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def fifo(path: Path) -> Path:
    """A named pipe nobody writes to: a reader that opens it blocks for ever."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def directory(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def not_regular(path_for: Callable[[str], Path], a_file: str, the_file: str
                ) -> list[tuple[str, Path, str, str]]:
    """A directory and a named pipe where a family's file belongs: (id, path, the reason its
    refusal must give, why), each at `path_for(id)`. `a_file`/`the_file` name the file in the
    why: "a plan", "the plan"."""
    return [("directory", directory(path_for("directory")), DIR_REASON,
             f"a directory named like {a_file}"),
            ("fifo", fifo(path_for("fifo")), FIFO_REASON, f"a named pipe as {the_file}")]


def symlink(path: Path, target: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def deep_yaml(depth: int = 20000) -> str:
    """Flow sequences nested past any recursion limit (PyYAML composes recursively)."""
    return "[" * depth + "]" * depth + "\n"


def deep_json(depth: int = 200000) -> str:
    return "[" * depth + "]" * depth


def huge_then(tail: str, megabytes: int) -> str:
    """`megabytes` of YAML comment lines, then the real (bad) content: a reader must get
    through it in time, and still refuse the content."""
    line = "# " + "x" * 1021 + "\n"
    return line * (megabytes * 1024) + tail
