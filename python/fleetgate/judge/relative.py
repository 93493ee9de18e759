"""Fleet-relative checks: a host's headline value against the median of its peers (this run)
or of a baseline set (hosts still on the old version), with a margin from thresholds.yml.

Fewer measured peers than `min_peers` is no reference at all: the check is inconclusive
and says how many it had, never a pass with a warning."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # smoke.judge imports this module: no import cycle at run time
    from fleetgate.smoke.model import CheckResult


def ratio(value: float, reference: float, better: Literal["higher", "lower"]) -> float:
    """value / reference in the good direction: 1.0 is "as good", 0.5 is "half as good"."""
    if better == "higher":
        return value / reference
    return reference / value if value else float("inf")


def _metric(r: CheckResult) -> float | None:
    rel = r.threshold.get("relative")
    if not rel or r.probe_status != "ok":
        return None
    value = r.metrics.get(rel["metric"])
    return (float(value) if isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0 else None)


def _shown(value: object) -> str:
    return "missing" if value is None else repr(value)


def apply_relative(results: list[CheckResult],
                   baseline: Iterable[CheckResult] | None = None, *,
                   skip: Collection[str] = ()) -> list[CheckResult]:
    """Fail measured hosts that fall short of margin x the reference median.

    The reference is the median of the same class and check in `baseline` when given (hosts
    still on the old version), else of this run's measured peers (including the host). Fewer
    than min_peers measured values: inconclusive. Checks in `skip` are judged elsewhere (a
    rollout's canary analysis), so they are left alone here: nothing is judged twice."""
    base = list(baseline) if baseline is not None else None
    out: list[CheckResult] = []
    groups: dict[tuple[str | None, str], list[float]] = {}
    for r in (base if base is not None else results):
        val = _metric(r)
        if val is not None:
            groups.setdefault((r.node_class, r.check), []).append(val)
    for r in results:
        rel = r.threshold.get("relative")
        if rel is None or r.probe_status != "ok" or r.status == "inconclusive" or r.check in skip:
            out.append(r)
            continue
        val = _metric(r)
        if val is None:
            # A probe that ran but did not report the value: no measurement, never a pass.
            msg = (f"relative check has no value: {rel['metric']} is "
                   f"{_shown(r.metrics.get(rel['metric']))} in the probe output, needs a "
                   f"number > 0")
            out.append(r.model_copy(update={
                "status": "fail" if r.status == "fail" else "inconclusive",
                "reason": msg if r.status == "pass" else f"{r.reason}; {msg}"}))
            continue
        ref_values = groups.get((r.node_class, r.check), [])
        kind = "baseline" if base is not None else "peers"
        info: dict[str, Any] = dict(rel, reference_kind=kind, reference_n=len(ref_values))
        if len(ref_values) < rel["min_peers"]:
            msg = (f"relative check has no reference: {len(ref_values)} measured {kind}, "
                   f"needs {rel['min_peers']} (min_peers)")
            out.append(r.model_copy(update={
                "threshold": {**r.threshold, "relative": info},
                "status": "fail" if r.status == "fail" else "inconclusive",
                "reason": msg if r.status == "pass" else f"{r.reason}; {msg}"}))
            continue
        median = statistics.median(ref_values)
        q = ratio(val, median, rel["better"])
        info.update(reference_median=median, ratio=round(q, 4))
        update: dict[str, Any] = {"threshold": {**r.threshold, "relative": info}}
        if q < rel["margin"]:
            word = "slower" if r.check != "comms" else "lower"
            msg = (f"{rel['metric']} {val:g} is {q:.2f}x the {kind} median {median:g} "
                   f"({len(ref_values)} {kind}; margin {rel['margin']}): {word} than the fleet")
            update["status"] = "fail"
            update["reason"] = msg if r.status == "pass" else f"{r.reason}; {msg}"
        out.append(r.model_copy(update=update))
    return out
