"""A verdict in words: per metric a line of statistics and thresholds and a line of the samples
judged, then the gate."""

from __future__ import annotations

from fleetgate.judge.compare import pct, sides
from fleetgate.judge.model import GateVerdict, MetricVerdict


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 1e-4 else f"{p:.2g}"


def explain_metric(v: MetricVerdict) -> str:
    """One line: outcome, medians, shift and its interval vs tolerance, the tests, counts."""
    ref, new = sides(v.mode)
    tags = ", ".join([*(["critical"] if v.critical else []), f"weight {v.weight:g}",
                      f"{v.direction} is better", *(["count"] if v.kind == "count" else []),
                      *(["relative"] if v.comparison == "relative" else [])])
    head = f"{v.name}: {v.outcome.upper()}"
    counts = f"n={v.n_canary}/{v.n_baseline}"
    if v.kind == "count" and v.canary_events is not None:
        return (f"{head} — events {v.canary_events} {new} / {v.baseline_events} {ref}, exact "
                f"test p={_p(v.count_p or 1.0)} (alpha {v.alpha:g}), {counts} [{tags}]: "
                f"{v.reason}")
    medians = (f"{new} median {_num(v.canary_median)} vs {ref} {_num(v.baseline_median)}"
               if v.baseline_median is not None else "")
    if v.ratio is not None:
        return f"{head} — {medians}, ratio {v.ratio:.3f}, {counts} [{tags}]: {v.reason}"
    if v.p_value is None or v.hl_shift is None or v.relative_shift is None:
        return f"{head} — {medians + ', ' if medians else ''}{counts} [{tags}]: {v.reason}"
    cv = f", {ref} CV {v.baseline_cv:.3g}" if v.baseline_cv is not None else ""
    ci = (f" CI [{pct(v.shift_ci[0])}, {pct(v.shift_ci[1])}]" if v.shift_ci is not None
          else "")
    spread = (f", spread {v.spread_ratio:.2g}x p={_p(v.spread_p)}"
              if v.spread_ratio is not None and v.spread_p is not None else "")
    return (f"{head} — {medians}, HL shift {v.hl_shift:+.4g} ({pct(v.relative_shift)}{ci}, "
            f"tolerance {v.tolerance:.0%}), Mann-Whitney U={v.u_statistic:g} p={_p(v.p_value)} "
            f"(alpha {v.alpha:g}){spread}, {counts}{cv} [{tags}]: {v.reason}")


def explain_samples(v: MetricVerdict) -> str:
    """The values judged, whole: a reader checks the verdict against the numbers, not a
    summary of them. A value that did not measure (non-finite) shows as n/a."""
    ref, new = sides(v.mode)
    return (f"  {new} samples: {' '.join(map(_num, v.canary)) or '(none)'}; "
            f"{ref} samples: {' '.join(map(_num, v.baseline)) or '(none)'}")


def explain(verdict: GateVerdict | MetricVerdict) -> str:
    """A human explanation: per metric its line and the samples judged, then the gate line."""
    if isinstance(verdict, MetricVerdict):
        return explain_metric(verdict)
    lines = [line for v in verdict.metrics for line in (explain_metric(v), explain_samples(v))]
    who = f" {verdict.host}" if verdict.host else ""
    against = (f" against {', '.join(verdict.reference_hosts)}" if verdict.reference_hosts
               else "")
    lines.append(f"gate ({verdict.mode}{who}{against}): {verdict.outcome.upper()} — "
                 f"{verdict.reason}")
    return "\n".join(lines)
