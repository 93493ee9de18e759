"""Statistical comparison, the classifier: one metric's canary samples against its reference.

Location (continuous metrics). The maths of Kayenta's Mann-Whitney judge, plus an interval:

* a one-sided Mann-Whitney U test (scipy) in the "worse" direction: rank-based, so one slow
  repeat cannot drag a mean, and no normality assumption on GEMM timings;
* the Hodges-Lehmann shift (median of all pairwise canary - baseline differences) relative
  to the baseline median as the effect size, with its distribution-free confidence interval
  (order statistics of the pairwise differences at the U test's normal-approximation
  critical value).

FAIL needs the shift significant (p <= alpha) AND beyond the tolerance: significance alone
would halt on a real but irrelevant 0.5% change; size alone would halt on noise. PASS needs
the interval to rule out a regression beyond `uncertainty_limit`. Noise widens the interval;
it never voids the verdict: a noisy baseline that still bounds the regression passes, one
that cannot is inconclusive with the bound it reached in the reason.

Spread (continuous). Kayenta misses a variance jump with the same median (kayenta#780): the
Brown-Forsythe test (scipy.stats.levene, center="median"), one-sided (canary wider), plus the
ratio of mean absolute deviations against `spread_tolerance`; `spread: marginal|fail|off`.

Counts. Events per sample (Xid, ECC, retransmits) rising from an all-zero baseline defeat a
rank test (kayenta#426). Given the total k, the canary's share is Binomial(k, n_c/(n_c+n_b))
under "same rate": an exact one-sided test (scipy.stats.binomtest). Events over an all-zero
baseline too few to be significant are marginal, never a pass.

Missing or unusable data is never a pass: too few samples, non-finite values, a zero median
give NODATA with a reason naming what is missing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fleetgate.judge import relative
from fleetgate.judge.model import CanaryMetric, JudgeSettings, MetricVerdict, Mode

# numpy, like scipy below, only where a comparison runs: every plan load reaches this module
# (rollout/plan.py -> rollout/canary.py), and numpy's 30 ms or so would be paid by each CLI
# call and batch worker that judges nothing.
if TYPE_CHECKING:
    import numpy as np


def _stats() -> Any:
    """scipy.stats, imported when a comparison first needs it: it is a second of start-up that
    every other fleetgate command (and every CLI call a test makes) would otherwise pay."""
    # scipy ships no type information (scipy-stubs is not in the lock); unused-ignore keeps
    # this line clean once it is.
    import scipy.stats  # type: ignore[import-untyped, unused-ignore]

    return scipy.stats


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def sides(mode: Mode) -> tuple[str, str]:
    return {"self": ("before", "after"), "promoted": ("promoted", "canary")}.get(
        mode, ("baseline", "canary"))


def shift_interval(c: np.ndarray[Any, Any], b: np.ndarray[Any, Any], alpha: float
                   ) -> tuple[float, float]:
    """Each bound at 1 - alpha: the k-th smallest and largest pairwise difference, k from the
    normal approximation of U's distribution (Lehmann 1975, ch. 2)."""
    import numpy as np

    d = np.sort(np.subtract.outer(c, b), axis=None)
    nc, nb = len(c), len(b)
    z = float(_stats().norm.ppf(1 - alpha))
    k = math.floor(nc * nb / 2 - z * math.sqrt(nc * nb * (nc + nb + 1) / 12))
    k = min(max(k, 0), len(d) - 1)
    return float(d[k]), float(d[len(d) - 1 - k])


def classify(metric: CanaryMetric, s: JudgeSettings, base: list[float], can: list[float],
             mode: Mode) -> MetricVerdict:
    record: dict[str, Any] = {
        "name": metric.name, "mode": mode, "direction": metric.direction,
        "critical": metric.critical, "weight": metric.weight, "tolerance": metric.tolerance,
        "alpha": s.alpha, "min_samples": s.min_samples, "kind": metric.kind,
        "comparison": metric.comparison, "spread_policy": metric.spread,
        "spread_tolerance": metric.spread_tolerance, "uncertainty_limit": s.uncertainty_limit,
        "baseline": [v if math.isfinite(v) else None for v in base],
        "canary": [v if math.isfinite(v) else None for v in can],
        "n_baseline": len(base), "n_canary": len(can),
    }
    ref, new = sides(mode)
    bad = [f"{side} has {k} non-finite value(s)"
           for side, k in ((ref, sum(not math.isfinite(v) for v in base)),
                           (new, sum(not math.isfinite(v) for v in can))) if k]
    if bad:
        return MetricVerdict(outcome="nodata", reason="; ".join(bad), **record)
    need_new = 1 if metric.comparison == "relative" else s.min_samples
    if len(base) < s.min_samples or len(can) < need_new:
        need = (f"need {s.min_samples} per side" if need_new == s.min_samples
                else f"need {s.min_samples} {ref} and {need_new} {new}")
        return MetricVerdict(outcome="nodata", reason=f"too few samples: {new} {len(can)}, "
                             f"{ref} {len(base)} ({need})", **record)
    if metric.kind == "count":
        return _counts(metric, s, base, can, record, ref, new)
    import numpy as np

    b, c = np.asarray(base), np.asarray(can)
    b_med, c_med = float(np.median(b)), float(np.median(c))
    record.update(baseline_median=b_med, canary_median=c_med)
    if b_med == 0:
        return MetricVerdict(outcome="nodata", reason=f"{ref} median is 0: a relative shift is "
                             "undefined", **record)
    b_mean = float(np.mean(b))
    cv = float(np.std(b, ddof=1) / abs(b_mean)) if b_mean != 0 else math.inf
    record["baseline_cv"] = cv if math.isfinite(cv) else None
    if metric.comparison == "relative":
        return _relative(metric, b_med, c_med, record, ref, new)
    return _location_and_spread(metric, s, b, c, record, ref)


def _relative(metric: CanaryMetric, b_med: float, c_med: float, record: dict[str, Any],
              ref: str, new: str) -> MetricVerdict:
    ratio = relative.ratio(c_med, b_med, metric.direction)
    record["ratio"] = ratio
    margin = 1 - metric.tolerance
    if ratio < margin:
        return MetricVerdict(outcome="fail", reason=f"{new} median {c_med:.4g} is {ratio:.2f}x "
                             f"the {ref} median {b_med:.4g} (margin {margin:.2f})", **record)
    return MetricVerdict(outcome="pass", reason=f"{ratio:.2f}x the {ref} median (margin "
                         f"{margin:.2f})", **record)


def _location_and_spread(metric: CanaryMetric, s: JudgeSettings, b: np.ndarray[Any, Any],
                         c: np.ndarray[Any, Any], record: dict[str, Any], ref: str
                         ) -> MetricVerdict:
    import numpy as np

    b_med = record["baseline_median"]
    hl = float(np.median(np.subtract.outer(c, b)))
    rel = hl / abs(b_med)
    lo, hi = shift_interval(c, b, s.alpha)
    ci = (lo / abs(b_med), hi / abs(b_med))
    higher = metric.direction == "higher"
    # x=canary: "less" asks whether the canary is stochastically smaller, i.e. worse when
    # higher is better; "greater" is worse for latencies.
    res = _stats().mannwhitneyu(c, b, alternative="less" if higher else "greater")
    u, p = float(res.statistic), float(res.pvalue)
    worse_by = -rel if higher else rel
    worst = -ci[0] if higher else ci[1]
    record.update(u_statistic=u, p_value=p, hl_shift=hl, relative_shift=rel, shift_ci=ci,
                  worst_shift=worst)
    spread_hit, spread_text = _spread(metric, s, b, c, record)

    if p <= s.alpha and worse_by > metric.tolerance:
        reason = (f"significantly worse: {pct(rel)} beyond the {metric.tolerance:.0%} "
                  f"tolerance at p={p:.2g} <= alpha {s.alpha:g}")
        return MetricVerdict(outcome="fail", reason=reason, **record)
    if spread_hit and metric.spread == "fail":
        return MetricVerdict(outcome="fail", reason=spread_text, **record)
    if worst > s.uncertainty_limit:
        return MetricVerdict(
            outcome="nodata", reason=(
                f"{ref} too noisy to bound the change: at {1 - s.alpha:.1%} confidence it may "
                f"be {pct(-worst if higher else worst)} ({worst:.1%} worse), beyond the "
                f"uncertainty_limit {s.uncertainty_limit:.0%} a pass may leave open "
                f"(CV {record['baseline_cv'] or float('nan'):.3g}; more repeats or a quieter "
                f"{ref} needed)"), **record)
    if spread_hit:
        return MetricVerdict(outcome="marginal", reason=spread_text, **record)
    if p > s.alpha:
        reason = (f"no significant regression (p={p:.2g} > alpha {s.alpha:g}; worst case "
                  f"{worst:.1%} worse, limit {s.uncertainty_limit:.0%})")
    else:
        reason = (f"significant but within tolerance ({pct(rel)}, "
                  f"tolerance {metric.tolerance:.0%})")
    return MetricVerdict(outcome="pass", reason=reason, **record)


def _spread(metric: CanaryMetric, s: JudgeSettings, b: np.ndarray[Any, Any],
            c: np.ndarray[Any, Any], record: dict[str, Any]) -> tuple[bool, str]:
    if metric.spread == "off":
        return False, ""
    import numpy as np

    dev_b = float(np.mean(np.abs(b - np.median(b))))
    dev_c = float(np.mean(np.abs(c - np.median(c))))
    if dev_b == 0 and dev_c == 0:
        record.update(spread_ratio=1.0, spread_p=1.0)
        return False, ""
    ratio = dev_c / dev_b if dev_b > 0 else math.inf
    w, p_two = (float(x) for x in _stats().levene(c, b, center="median"))
    # Two groups: W is the square of the t statistic on absolute deviations, so halving the
    # two-sided p gives the one-sided "canary wider" test.
    p = p_two / 2 if dev_c > dev_b else 1 - p_two / 2
    if not math.isfinite(p):
        p = 0.0 if dev_b == 0 else 1.0
    record.update(spread_w=w if math.isfinite(w) else None, spread_p=p,
                  spread_ratio=ratio if math.isfinite(ratio) else None)
    if p <= s.alpha and ratio > metric.spread_tolerance:
        return True, (f"spread {ratio:.2g}x the reference's (Brown-Forsythe p={p:.2g} <= alpha "
                      f"{s.alpha:g}, spread_tolerance {metric.spread_tolerance:g}x; "
                      f"spread: {metric.spread})")
    return False, ""


def _counts(metric: CanaryMetric, s: JudgeSettings, base: list[float], can: list[float],
            record: dict[str, Any], ref: str, new: str) -> MetricVerdict:
    odd = [v for v in (*base, *can) if v < 0 or v != int(v)]
    if odd:
        return MetricVerdict(outcome="nodata", reason=f"a count metric needs whole numbers >= 0, "
                             f"got {odd[0]:g}", **record)
    import numpy as np

    kc, kb = int(sum(can)), int(sum(base))
    nc, nb = len(can), len(base)
    record.update(canary_events=kc, baseline_events=kb,
                  baseline_median=float(np.median(base)), canary_median=float(np.median(can)))
    if kc == 0 and kb == 0:
        record["count_p"] = 1.0
        return MetricVerdict(outcome="pass", reason=f"no events on either side ({nc} {new}, "
                             f"{nb} {ref} samples)", **record)
    p = float(_stats().binomtest(kc, kc + kb, nc / (nc + nb), alternative="greater").pvalue)
    record["count_p"] = p
    rate_c, rate_b = kc / nc, kb / nb
    text = f"{kc} event(s) in {nc} {new} samples vs {kb} in {nb} {ref} samples"
    if p <= s.alpha and rate_c > rate_b * (1 + metric.tolerance):
        return MetricVerdict(outcome="fail", reason=f"event rate up: {text} (exact test "
                             f"p={p:.2g} <= alpha {s.alpha:g})", **record)
    if kb == 0:
        return MetricVerdict(outcome="marginal", reason=f"events over an all-zero {ref}: {text}, "
                             f"too few to be significant (p={p:.2g}); a human decides",
                             **record)
    return MetricVerdict(outcome="pass", reason=f"no significant rise: {text} (p={p:.2g})",
                         **record)
