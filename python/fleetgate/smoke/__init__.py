"""Stage 4: smoke probes and the testinfra suite that gates promotions.

The rollout controller's API:

    from fleetgate.smoke import run_smoke
    run = run_smoke(Path("inventory.yml"), limit="pool_canary", only=["discovery", "gemm"])
    run.ok, run.failed, run.inconclusive, run.results  # CheckResult per host per check
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetgate.smoke.judge import apply_relative
    from fleetgate.smoke.model import CheckResult, ProbeReport, SmokeRun
    from fleetgate.smoke.runner import load_results, run_smoke

__all__ = ["CheckResult", "ProbeReport", "SmokeRun", "apply_relative", "load_results",
           "run_smoke"]

# Where each name of the API lives. Loaded on first use: commands that only parse probe
# output or read a host's identity (fleetgate.smoke.parsers, .model) are started hundreds of
# times in a rollout's life, and must not pay for the judge and the runner with them.
_HOMES = {"CheckResult": "model", "ProbeReport": "model", "SmokeRun": "model",
          "apply_relative": "judge", "load_results": "runner", "run_smoke": "runner"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
