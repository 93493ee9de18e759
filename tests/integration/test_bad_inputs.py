"""Issue 19's proof: every bad input in the corpus (tests/corpus: malformed classes, plans,
artifacts, inventories, site files, probe outputs and flags) run through the real CLI, each
refused with the documented code and one line on stderr naming the file and the field, with
no traceback, nothing executed (no injection's marker file) and nothing lost.

One test over the whole table, not one pytest item per entry: the failures are collected and
shown together, and the figures for the issue's closing note are printed (and written as
JSON to $FLEETGATE_CORPUS_REPORT when it is set).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.corpus.build import MIN_ENTRIES, MIN_PER_FAMILY, build
from tests.corpus.check import failure_table, figures, timed_run
from tests.corpus.entry import FAMILIES

WORKERS = 3  # each call is about a second of CPU; the CI machine has two cores
TIMEOUT_S = 20.0  # per call: a reader blocked on a FIFO must show up as a hang, not stall


def test_every_bad_input_is_refused_in_one_line(tmp_path: Path) -> None:
    corpus = build(tmp_path / "corpus")
    per_family = corpus.per_family
    assert len(corpus.entries) >= MIN_ENTRIES, f"only {len(corpus.entries)} entries"
    thin = {f: per_family[f] for f in FAMILIES if per_family[f] < MIN_PER_FAMILY}
    assert not thin, f"families with fewer than {MIN_PER_FAMILY} entries: {thin}"

    markers = corpus.base.markers
    results, wall = timed_run(corpus.entries, site=corpus.base.site,
                              scratch=tmp_path / "state", markers=markers, workers=WORKERS,
                              timeout=TIMEOUT_S)
    figs = figures(results, wall, markers)
    summary = {k: v for k, v in figs.items() if k not in ("failing", "by_family")}
    print(f"bad-input corpus: {json.dumps(summary)}")
    print("per family (inputs/passed): " + ", ".join(
        f"{f} {v['inputs']}/{v['passed']}" for f, v in figs["by_family"].items()))
    report = os.environ.get("FLEETGATE_CORPUS_REPORT")
    if report:
        Path(report).write_text(json.dumps(figs, indent=1) + "\n")

    # Checked once more after every call has ended: a payload run by a process that outlived
    # its command would show up only now.
    leftover = sorted(os.listdir(markers))
    if leftover or not all(r.ok for r in results):
        pytest.fail(failure_table(results, corpus.base.root)
                    + (f"\nmarker files left by payloads that ran: {leftover}" if leftover else "")
                    + f"\nfigures: {json.dumps(summary)}", pytrace=False)
