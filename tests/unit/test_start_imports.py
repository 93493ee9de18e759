"""What every `fleetgate` process pays before it does anything: the controller's and the batch
worker's modules import none of the numeric libraries, which only a canary comparison, a
report's plots or a judge command needs (judge/compare.py, rollout/report_plots.py), and the
batch worker, started once per batch, imports no plan schema (rollout/target.py)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "scipy", "matplotlib")


def _fresh(code: str) -> str:
    """What `code` prints in a fresh Python process, which has imported nothing yet."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    return out.stdout


def test_the_controller_and_worker_import_no_numeric_library() -> None:
    code = ("import json, sys\n"
            "import fleetgate.cli.main, fleetgate.rollout.engine, fleetgate.rollout.worker\n"
            "import fleetgate.rollout.plan, fleetgate.rollout.canary\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    assert json.loads(_fresh(code)) == []


def test_the_batch_worker_imports_no_plan_schema() -> None:
    # What the worker reads hosts against is the target alone; the plan's schema brings the
    # canary, judge and smoke modules and the node-class loader with it.
    code = ("import json, sys\n"
            "import fleetgate.rollout.worker\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('fleetgate.') and\n"
            "                        m.split('.')[1] in ('judge', 'smoke') or m in\n"
            "                        ('fleetgate.rollout.plan', 'fleetgate.spec.loader'))))")
    assert json.loads(_fresh(code)) == []
    assert "fleetgate.rollout.target" in _fresh(
        "import sys, fleetgate.rollout.worker; print(*sys.modules)").split()


def test_a_comparison_imports_numpy_itself_when_it_runs() -> None:
    # A fresh process that never imported numpy: the rank test, its shift interval and the
    # spread check each reach numpy on their own (judge/compare.py).
    code = ("import json, sys\n"
            "from fleetgate.judge.judgement import judge_metric\n"
            "v = judge_metric({'name': 'gemm.tflops', 'direction': 'higher'},\n"
            "                 [100.0, 101, 99, 100, 102, 98], [50.0, 51, 49, 50, 52, 48])\n"
            "print(json.dumps([v.outcome, 'numpy' in sys.modules]))")
    assert json.loads(_fresh(code)) == ["fail", True]
