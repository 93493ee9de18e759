"""Glue between smoke results and the canary judge: which samples a metric name means.

A canary metric is named `CHECK.FIELD` (e.g. `gemm.tflops`, `comms.busbw_gbps`). A probe that
times several repeats reports them as `FIELD_samples` (the GEMM probe, older and simpler, as
`samples` next to its headline `tflops`); every repeat is a sample, so one smoke run gives
the judge N values per host instead of one median.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from fleetgate.rollout.canary import CanarySection
from fleetgate.smoke.model import CheckResult
from fleetgate.smoke.thresholds import CHECKS, Check

# The probe whose per-repeat list is called plain `samples`, and the field it belongs to.
PLAIN_SAMPLES = {"gemm": "tflops"}


def checks_for(section: CanarySection) -> list[Check]:
    wanted = {m.name.split(".", 1)[0] for m in section.metrics}
    return [c for c in CHECKS if c in wanted]


def _values(metrics: dict[str, Any], check: str, field: str) -> list[float]:
    for key in (f"{field}_samples", "samples" if PLAIN_SAMPLES.get(check) == field else None):
        if key and isinstance(metrics.get(key), list):
            # A repeat that is not a number (null, a string) did not measure: NaN keeps its
            # place, and the judge reports it as no data.
            return [float(v) if isinstance(v, int | float) and not isinstance(v, bool)
                    else math.nan for v in metrics[key]]
    v = metrics.get(field)
    return [float(v)] if isinstance(v, int | float) and not isinstance(v, bool) else []


def samples(section: CanarySection, results: Iterable[CheckResult]) -> dict[str, list[float]]:
    """Metric name -> every measured repeat across the given hosts. Results that could not be
    measured contribute nothing (the judge then says nodata, never pass)."""
    out: dict[str, list[float]] = {m.name: [] for m in section.metrics}
    rs = [r for r in results if r.probe_status == "ok"]
    for m in section.metrics:
        check, _, field = m.name.partition(".")
        for r in rs:
            if r.check == check:
                # Non-finite repeats stay in: the judge calls them out as no data, where
                # dropping them would judge the rest as if every repeat had measured.
                out[m.name].extend(_values(r.metrics, check, field))
    return out
