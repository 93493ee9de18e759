"""Build the corpus: the valid base (through the real CLI), then every family's bad inputs
written beside it, and an index of them all (`corpus.json`: id, family, argv, the exit codes
and the stderr fragments each refusal must show).

    .venv/bin/python -m tests.corpus.build DIR [--run] [--only PREFIX]

writes the corpus into DIR (a new directory) and, with --run, runs it as the test does,
prints the failures and the figures, and keeps every call's stderr in DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.corpus import artifacts, classes, flags, inventories, plans, probes, sites
from tests.corpus.base import Base, build_base
from tests.corpus.entry import Entry

MIN_ENTRIES = 250
MIN_PER_FAMILY = 25


@dataclass(frozen=True)
class Corpus:
    base: Base
    entries: list[Entry]

    @property
    def per_family(self) -> Counter[str]:
        return Counter(e.family for e in self.entries)


def build(root: Path) -> Corpus:
    """Write the corpus under `root` (made here; must not exist yet)."""
    root.mkdir(parents=True)
    base = build_base(root)
    entries: list[Entry] = []
    for family in (sites, classes, plans, artifacts, inventories, probes, flags):
        entries += family.entries(base)
    dupes = [i for i, n in Counter(e.id for e in entries).items() if n > 1]
    if dupes:
        raise ValueError(f"corpus ids used twice: {', '.join(dupes)}")
    (root / "corpus.json").write_text(json.dumps([e.to_json() for e in entries], indent=1))
    return Corpus(base, entries)


def main(argv: list[str] | None = None) -> int:
    from tests.corpus.check import failure_table, figures, timed_run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--only", default="", help="run only the entries whose id starts so")
    args = ap.parse_args(argv)
    corpus = build(args.dir.resolve())
    print(f"{len(corpus.entries)} entries: {dict(corpus.per_family)}")
    if not args.run:
        return 0
    chosen = [e for e in corpus.entries if e.id.startswith(args.only)]
    results, wall = timed_run(chosen, site=corpus.base.site, scratch=args.dir / "run-state",
                              markers=corpus.base.markers)
    (args.dir / "results.json").write_text(json.dumps(
        [{"id": r.entry.id, "rc": r.outcome.rc, "wall_s": round(r.outcome.wall_s, 2),
          "stderr": r.outcome.stderr, "problems": list(r.problems)} for r in results],
        indent=1))
    print(failure_table(results, corpus.base.root))
    print(json.dumps({k: v for k, v in figures(results, wall, corpus.base.markers).items()
                      if k != "failing"}, indent=1))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
