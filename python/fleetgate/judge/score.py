"""Scoring: metric verdicts -> one gate verdict.

A critical FAIL fails the gate. Then it fails closed: any metric without data makes the gate
inconclusive (critical or not), because a metric the plan asked for and nobody measured
must not read as passing. Otherwise the weighted score over the metrics decides; a marginal
score or a marginal metric (a wider spread, events over a zero baseline) is inconclusive: a
human decides, never a pass."""

from __future__ import annotations

from collections.abc import Sequence

from fleetgate.errors import BadInput
from fleetgate.judge.model import (
    DEFAULT_MARGINAL_THRESHOLD,
    DEFAULT_PASS_THRESHOLD,
    GateOutcome,
    GateVerdict,
    MetricOutcome,
    MetricVerdict,
    Mode,
    ScoreBand,
)


def gate_verdict(verdicts: Sequence[MetricVerdict], *,
                 pass_threshold: float = DEFAULT_PASS_THRESHOLD,
                 marginal_threshold: float = DEFAULT_MARGINAL_THRESHOLD,
                 mode: Mode = "baseline", source: str = "canary", host: str | None = None,
                 reference_hosts: Sequence[str] = ()) -> GateVerdict:
    for name, v in (("pass_threshold", pass_threshold),
                    ("marginal_threshold", marginal_threshold)):
        if not 0 <= v <= 100:
            raise BadInput(f"{v!r} is not within 0..100", source=source, field=name)
    if marginal_threshold > pass_threshold:
        raise BadInput(f"marginal_threshold {marginal_threshold:g} is above pass_threshold "
                       f"{pass_threshold:g}", source=source, field="marginal_threshold")

    with_data = [v for v in verdicts if v.outcome != "nodata"]
    data_weight = sum(v.weight for v in with_data)
    # A marginal metric's location passed: it scores, and makes the gate inconclusive below.
    pass_weight = sum(v.weight for v in with_data if v.outcome in ("pass", "marginal"))
    score = 100 * pass_weight / data_weight if data_weight > 0 else None
    band: ScoreBand | None = None
    if score is not None:
        band = ("pass" if score >= pass_threshold
                else "marginal" if score >= marginal_threshold else "fail")

    def names(outcome: MetricOutcome, *, critical: bool | None = None) -> list[str]:
        return [v.name for v in verdicts
                if v.outcome == outcome and (critical is None or v.critical == critical)]

    score_text = (f"score {score:.1f} (pass >= {pass_threshold:g}, "
                  f"marginal >= {marginal_threshold:g})" if score is not None else "no score")
    outcome: GateOutcome
    if names("fail", critical=True):
        outcome = "fail"
        reason = f"critical metric failed: {', '.join(names('fail', critical=True))}; {score_text}"
    elif band == "fail":
        outcome, reason = "fail", f"{score_text}: below marginal"
    elif names("nodata", critical=True):
        outcome = "inconclusive"
        reason = (f"no data for critical metric: {', '.join(names('nodata', critical=True))}; "
                  f"{score_text}")
    elif not with_data:
        outcome, reason = "inconclusive", "no metric has data"
    elif names("nodata"):
        # Fail closed: a metric the plan asks for and nobody measured is not a pass.
        outcome, reason = "inconclusive", f"a metric has no data (fail closed); {score_text}"
    elif score is None:
        outcome, reason = "inconclusive", "the metrics with data all have weight 0"
    elif band == "marginal":
        outcome, reason = "inconclusive", f"marginal {score_text}: a human decides"
    elif names("marginal"):
        outcome = "inconclusive"
        reason = f"marginal: {', '.join(names('marginal'))}: a human decides; {score_text}"
    else:
        outcome, reason = "pass", score_text
    failed = names("fail", critical=False)
    if failed:
        reason += f"; failed: {', '.join(failed)}"
    # Spelled out on every verdict: data that was missing is never silent.
    missing = names("nodata")
    if missing:
        reason += f"; no data: {', '.join(missing)}"
    return GateVerdict(outcome=outcome, reason=reason, mode=mode, score=score, band=band,
                       pass_threshold=pass_threshold, marginal_threshold=marginal_threshold,
                       metrics=list(verdicts), host=host, reference_hosts=list(reference_hosts))
