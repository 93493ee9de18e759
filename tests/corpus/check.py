"""Run corpus entries through the real CLI and judge each refusal against the rule: the
expected exit code, exactly one line on stderr naming the file (or flag) and the field, no
traceback, no marker left by an injection, no input changed, nothing created."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.corpus.cli import Outcome, clean_env, run
from tests.corpus.entry import FAMILIES, Entry

INTERNAL_ERROR = 70  # fleetgate's exit code for a bug (an unexpected exception)
# What a raw pydantic error leaks into a message: its union branch names and its own dump.
# The field must read as the operator wrote it, and the reason be fleetgate's.
PYDANTIC_LEAKS = ("function-after[", "constrained-int", "constrained-str", "[type=",
                  "errors.pydantic.dev", "validation errors for")


@dataclass(frozen=True)
class Result:
    entry: Entry
    outcome: Outcome
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def traceback(self) -> bool:
        return "Traceback" in self.outcome.stderr or "Traceback" in self.outcome.stdout

    @property
    def one_line(self) -> bool:
        err = self.outcome.stderr.rstrip("\n")
        return bool(err.strip()) and "\n" not in err

    @property
    def refused_in_one_line(self) -> bool:
        return self.outcome.rc in self.entry.codes and self.one_line and not self.traceback

    @property
    def accepted(self) -> bool:
        """The input got through: the command ran to an end other than a refusal or a crash."""
        rc = self.outcome.rc
        return rc is not None and rc not in self.entry.codes and rc != INTERNAL_ERROR


def _digest(paths: Iterable[Path]) -> dict[Path, str]:
    out = {}
    for p in paths:
        if p.is_file():
            out[p] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def judge(entry: Entry, out: Outcome, before: dict[Path, str], marker: Path,
          tmp: Path) -> list[str]:
    """What is wrong with `out` as the refusal of `entry` (nothing: it is refused right).
    The first expected fragment (the file or flag) may be found anywhere in stderr; the
    others (field, reason) not inside a path under `tmp`, where every entry's own directory
    name would match them for free ("os" in .../class/os-ubuntu-bookworm/...)."""
    problems: list[str] = []
    if out.hung:
        problems.append(f"hung: killed after {out.wall_s:.0f}s")
    elif out.rc not in entry.codes:
        problems.append(f"exit {out.rc}, expected {'/'.join(map(str, sorted(entry.codes)))}")
    err = out.stderr.rstrip("\n")
    if not err.strip():
        problems.append("nothing on stderr")
    elif "\n" in err:
        problems.append(f"{err.count(chr(10)) + 1} lines on stderr")
    # A fragment "a|b" is named if either spelling is (--min-samples or min_samples).
    bare = re.sub(re.escape(str(tmp)) + r"[^\s:'\")]*", "<path>", out.stderr)
    missing = [frag for i, frag in enumerate(entry.expect)
               if not any(alt in (out.stderr if i == 0 else bare) for alt in frag.split("|"))]
    if missing and err.strip():
        problems.append("stderr does not name " + ", ".join(repr(m) for m in missing))
    if "Traceback" in out.stderr or "Traceback" in out.stdout:
        problems.append("traceback")
    leaks = [s for s in PYDANTIC_LEAKS if s in out.stderr]
    if leaks:
        problems.append("pydantic internals in the message: " + ", ".join(map(repr, leaks)))
    if marker.exists():
        problems.append("its payload ran (marker file left)")
    after = _digest(before)
    problems += [f"changed {p.name}" for p in before if after.get(p) != before[p]]
    problems += [f"created {p}" for p in entry.absent if p.exists() or p.is_symlink()]
    return problems


def run_entry(entry: Entry, *, site: Path, scratch: Path, markers: Path,
              timeout: float) -> Result:
    """One entry in a state directory of its own (a copy of `state_from` if it names one)."""
    state = scratch / entry.id
    if entry.state_from is not None:
        shutil.copytree(entry.state_from, state, symlinks=True)
    else:
        state.mkdir(parents=True)
    extra = {"FLEETGATE_STATE_DIR": str(state), **entry.env}
    env = {k: v for k, v in clean_env(extra).items() if v != ""}  # "" means: leave it unset
    before = _digest(entry.inputs)
    out = run(entry.argv, cwd=entry.cwd or site, env=env, timeout=timeout)
    # Everything the corpus and its runs wrote lies under the two directories' common parent.
    tmp = Path(os.path.commonpath([scratch, markers]))
    return Result(entry, out, tuple(judge(entry, out, before, markers / entry.id, tmp)))


def run_all(entries: Sequence[Entry], *, site: Path, scratch: Path, markers: Path,
            workers: int = 3, timeout: float = 20.0) -> list[Result]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda e: run_entry(e, site=site, scratch=scratch,
                                                 markers=markers, timeout=timeout), entries))


def figures(results: Sequence[Result], wall_s: float, markers: Path) -> dict[str, Any]:
    """What the closing note of issue 19 reports."""
    by_family: dict[str, dict[str, int]] = {}
    for fam in FAMILIES:
        mine = [r for r in results if r.entry.family == fam]
        by_family[fam] = {"inputs": len(mine), "passed": sum(r.ok for r in mine)}
    return {
        "inputs": len(results),
        "passed": sum(r.ok for r in results),
        "refused_in_one_line": sum(r.refused_in_one_line for r in results),
        "accepted": sum(r.accepted for r in results),
        "internal_errors": sum(r.outcome.rc == INTERNAL_ERROR for r in results),
        "tracebacks": sum(r.traceback for r in results),
        "hangs": sum(r.outcome.hung for r in results),
        "markers_left": sorted(os.listdir(markers)),
        "exit_codes": dict(Counter(str(r.outcome.rc) for r in results)),
        "wall_s": round(wall_s, 1),
        "by_family": by_family,
        "failing": [{"id": r.entry.id, "problems": list(r.problems)}
                    for r in results if not r.ok],
    }


def failure_table(results: Sequence[Result], root: Path | None = None) -> str:
    """Every failing entry: id, exit code, what is wrong, the command, the first 200
    characters of stderr (paths under `root` shortened to $CORPUS, so the reason shows)."""
    def short(text: str) -> str:
        return text.replace(str(root), "$CORPUS") if root is not None else text

    rows = [r for r in results if not r.ok]
    lines = [f"{len(rows)} of {len(results)} bad inputs not refused by the rule:",
             f"{'id':44} {'rc':>4}  problems / command / stderr (first 200 chars)"]
    for r in rows:
        lines.append(f"{r.entry.id:44} {r.outcome.rc!s:>4}  {'; '.join(r.problems)}")
        lines.append(f"{'':50}$ fleetgate {short(' '.join(r.entry.argv))[:160]}")
        lines.append(f"{'':50}{short(' '.join(r.outcome.stderr.split()))[:200]!r}")
    return "\n".join(lines)


def timed_run(entries: Sequence[Entry], **kwargs: Any) -> tuple[list[Result], float]:
    t = time.monotonic()
    results = run_all(entries, **kwargs)
    return results, time.monotonic() - t
