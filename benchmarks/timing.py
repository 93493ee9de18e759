"""The one timed subprocess run the benchmarks share (imported as a sibling module: the
benchmarks run as scripts, `python benchmarks/X.py`)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed_run(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    """Wall seconds of one command run from the checkout; any other exit ends the benchmark
    with the command's own output, since a figure from a failed run means nothing."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): "
                         f"{proc.stderr[-2000:]}{proc.stdout[-2000:]}")
    return elapsed
