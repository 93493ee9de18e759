"""What every `fleetgate` process pays before it does anything: the controller's and the batch
worker's modules import none of the numeric libraries, which only a canary comparison, a
report's plots or a judge command needs (judge/compare.py, rollout/report_plots.py)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "scipy", "matplotlib")


def test_the_controller_and_worker_import_no_numeric_library() -> None:
    code = ("import json, sys\n"
            "import fleetgate.cli.main, fleetgate.rollout.engine, fleetgate.rollout.worker\n"
            "import fleetgate.rollout.plan, fleetgate.rollout.canary\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert json.loads(out.stdout) == [], out.stdout


def test_a_comparison_still_gets_numpy_when_it_runs() -> None:
    code = ("import sys\n"
            "from fleetgate.judge.compare import shift_interval\n"
            "import numpy as np\n"
            "lo, hi = shift_interval(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]), 0.05)\n"
            "print(lo <= 0.0 <= hi)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "True", out.stdout + out.stderr
