"""The crash-safety loop at benchmark size: 50 rounds of a 6-host rollout on the real lab, the
controller killed with SIGKILL at random points (up to 3 times a round) and resumed, every
host checked to be applied exactly once, by the journal and by the host's own applies.log.

It runs the integration test tests/integration/test_rollout.py::test_kill_9_... with more
rounds (the test runs 5 in `make test`), and prints the per-round figures it records.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = ("tests/integration/test_rollout.py::"
        "test_kill_9_at_random_points_then_resume_applies_each_host_exactly_once")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20261130)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "crash.json"
        env = {**os.environ, "FLEETGATE_CRASH_ROUNDS": str(args.rounds),
               "FLEETGATE_CRASH_SEED": str(args.seed), "FLEETGATE_CRASH_REPORT": str(report)}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               TEST], cwd=REPO, env=env, check=False)
        wall = time.monotonic() - t0
        rounds = json.loads(report.read_text()) if report.exists() else []
    kills = [r["kills"] for r in rounds]
    summary = {
        "rounds": len(rounds), "passed": proc.returncode == 0, "total_wall_s": round(wall, 1),
        "kills_total": sum(kills), "rounds_killed": sum(1 for k in kills if k),
        "round_wall_median_s": statistics.median(r["wall_s"] for r in rounds) if rounds else None,
        "applies_per_host": sorted({n for r in rounds for n in r["journal_applies"].values()}),
    }
    print(json.dumps(summary, indent=2))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
