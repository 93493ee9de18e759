"""Stage 4: smoke probes and the testinfra suite that gates promotions.

The rollout controller's API:

    from fleetgate.smoke import run_smoke
    run = run_smoke(Path("inventory.yml"), limit="pool_canary", only=["discovery", "gemm"])
    run.ok, run.failed, run.inconclusive, run.results  # CheckResult per host per check
"""

from fleetgate.smoke.judge import apply_relative
from fleetgate.smoke.model import CheckResult, ProbeReport, SmokeRun
from fleetgate.smoke.runner import load_results, run_smoke

__all__ = ["CheckResult", "ProbeReport", "SmokeRun", "apply_relative", "load_results",
           "run_smoke"]
