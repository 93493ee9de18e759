"""The canary judge: synthetic samples with known answers, seeded so every run is the same.

Mann-Whitney + Hodges-Lehmann per metric, the weighted gate, self before/after mode, the
explanation text, JSON round trips and BadInput field paths for a malformed `canary:` plan."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetgate.errors import BadInput
from fleetgate.rollout.canary import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_TOLERANCE,
    DEFAULT_UNCERTAINTY_LIMIT,
    CanarySection,
    GateVerdict,
    MetricOutcome,
    MetricVerdict,
    explain,
    gate_verdict,
    judge_canary,
    judge_metric,
    judge_self,
    min_p_value,
    parse_canary_section,
)

REPO = Path(__file__).resolve().parents[2]
GEMM = {"name": "gemm_gflops", "direction": "higher", "critical": True}
LATENCY = {"name": "p99_ms", "direction": "lower"}


def draw(mean: float, cv: float, n: int, seed: int) -> list[float]:
    """n normal samples with the given mean and coefficient of variation."""
    rng = np.random.default_rng(seed)
    return [float(x) for x in mean * (1 + cv * rng.standard_normal(n))]


def section(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"metrics": [dict(GEMM)]}
    data.update(overrides)
    return data


# --------------------------------------------------------------------------------------------
# one metric

def test_ten_percent_regression_with_low_noise_fails() -> None:
    v = judge_metric(GEMM, draw(100, 0.01, 12, 1), draw(90, 0.01, 6, 2))
    assert v.outcome == "fail"
    assert v.relative_shift is not None and v.relative_shift == pytest.approx(-0.10, abs=0.015)
    assert v.p_value is not None and v.p_value <= DEFAULT_ALPHA
    assert (v.n_baseline, v.n_canary) == (12, 6)


def test_two_percent_inside_tolerance_passes_even_when_significant() -> None:
    v = judge_metric(GEMM, draw(100, 0.005, 12, 3), draw(98, 0.005, 6, 4))
    assert v.relative_shift is not None and v.relative_shift == pytest.approx(-0.02, abs=0.006)
    # With this little noise 2% is detectable; the tolerance is what keeps it a pass.
    assert v.p_value is not None and v.p_value <= DEFAULT_ALPHA
    assert v.outcome == "pass"
    assert "within tolerance" in v.reason


def test_no_change_passes_with_a_non_significant_p() -> None:
    v = judge_metric(GEMM, draw(100, 0.02, 12, 5), draw(100, 0.02, 6, 6))
    assert v.outcome == "pass"
    assert v.p_value is not None and v.p_value > DEFAULT_ALPHA
    assert "no significant regression" in v.reason


def test_a_big_shift_without_significance_passes() -> None:
    # A 10% drop in just 5 vs 5 samples with CV 0.2: big on paper, but not significant.
    v = judge_metric(GEMM, [100.0, 60.0, 140.0, 80.0, 120.0], [90.0, 54.0, 126.0, 72.0, 108.0],
                     uncertainty_limit=5.0)
    assert v.relative_shift is not None and v.relative_shift < -DEFAULT_TOLERANCE
    assert v.p_value is not None and v.p_value > DEFAULT_ALPHA
    assert v.outcome == "pass"


@pytest.mark.parametrize("n_canary, n_baseline", [(3, 12), (12, 3), (0, 12), (4, 4)])
def test_too_few_samples_is_nodata(n_canary: int, n_baseline: int) -> None:
    v = judge_metric(GEMM, draw(100, 0.01, n_baseline, 7), draw(50, 0.01, n_canary, 8))
    assert v.outcome == "nodata"
    assert f"need {DEFAULT_MIN_SAMPLES} per side" in v.reason
    assert v.p_value is None and v.hl_shift is None


def test_three_samples_make_the_gate_inconclusive_not_a_pass() -> None:
    g = judge_canary(section(), {"gemm_gflops": draw(100, 0.01, 12, 9)},
                     {"gemm_gflops": draw(100, 0.01, 3, 10)})
    assert g.outcome == "inconclusive"
    assert not g.proceed
    assert "no data for critical metric: gemm_gflops" in g.reason


@pytest.mark.parametrize("direction, factor, expected", [
    ("higher", 1.10, "pass"),   # 10% more TFLOPS is an improvement
    ("higher", 0.90, "fail"),
    ("lower", 1.10, "fail"),    # 10% more latency is a regression
    ("lower", 0.90, "pass"),
])
def test_direction_is_respected(direction: str, factor: float, expected: str) -> None:
    metric = {"name": "m", "direction": direction}
    v = judge_metric(metric, draw(100, 0.01, 12, 11), draw(100 * factor, 0.01, 6, 12))
    assert v.outcome == expected
    assert v.relative_shift is not None
    assert v.relative_shift == pytest.approx(factor - 1, abs=0.015)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_samples_are_nodata(bad: float) -> None:
    canary = [*draw(50, 0.01, 5, 13), bad]
    v = judge_metric(GEMM, draw(100, 0.01, 12, 14), canary)
    assert v.outcome == "nodata"
    assert "canary has 1 non-finite value(s)" in v.reason
    assert v.canary[-1] is None  # recorded, as JSON-safe null


def test_zero_baseline_median_is_nodata() -> None:
    v = judge_metric(LATENCY, [0.0] * 6, [1.0] * 6)
    assert v.outcome == "nodata"
    assert "median is 0" in v.reason


def test_identical_samples_pass() -> None:
    v = judge_metric(GEMM, [100.0] * 10, [100.0] * 5)
    assert v.outcome == "pass"
    assert v.p_value == 1.0 and v.hl_shift == 0.0 and v.baseline_cv == 0.0


# --------------------------------------------------------------------------------------------
# noisy baseline

def test_noisy_baseline_without_a_clear_regression_is_inconclusive() -> None:
    base, can = draw(100, 0.2, 12, 15), draw(100, 0.2, 6, 16)
    v = judge_metric(GEMM, base, can)
    assert v.outcome == "nodata"
    assert "baseline too noisy to bound the change" in v.reason
    assert v.worst_shift is not None and v.worst_shift > DEFAULT_UNCERTAINTY_LIMIT
    g = judge_canary(section(), {"gemm_gflops": base}, {"gemm_gflops": can})
    assert g.outcome == "inconclusive"


def test_noisy_baseline_does_not_hide_a_3x_slowdown() -> None:
    v = judge_metric(GEMM, draw(100, 0.2, 12, 17), draw(33, 0.2, 6, 18))
    assert v.outcome == "fail"
    assert "significantly worse" in v.reason


def test_uncertainty_limit_is_the_knob() -> None:
    base, can = draw(100, 0.25, 12, 19), draw(100, 0.25, 6, 20)
    assert judge_metric(GEMM, base, can).outcome == "nodata"
    assert judge_metric(GEMM, base, can, uncertainty_limit=0.6).outcome == "pass"


# --------------------------------------------------------------------------------------------
# the gate

def _metric(name: str, outcome: MetricOutcome, *, weight: float = 1.0,
            critical: bool = False) -> MetricVerdict:
    return MetricVerdict(name=name, outcome=outcome, reason="test", mode="baseline",
                         direction="higher", critical=critical, weight=weight, tolerance=0.05,
                         alpha=0.01, min_samples=5, baseline=[],
                         canary=[], n_baseline=0, n_canary=0)


def test_a_critical_fail_alone_fails_the_gate() -> None:
    verdicts = [_metric("gemm", "fail", critical=True),
                *(_metric(f"m{i}", "pass", weight=3) for i in range(5))]
    g = gate_verdict(verdicts)
    assert g.score is not None and g.score > 90  # the score alone would have passed
    assert g.band == "pass"
    assert g.outcome == "fail"
    assert "critical metric failed: gemm" in g.reason


def test_a_critical_fail_from_real_samples_fails_the_gate() -> None:
    sec = section(metrics=[dict(GEMM), {**LATENCY, "weight": 20}])
    g = judge_canary(sec, {"gemm_gflops": draw(140, 0.01, 12, 21),
                           "p99_ms": draw(10, 0.01, 12, 22)},
                     {"gemm_gflops": draw(5.6, 0.01, 6, 23), "p99_ms": draw(10, 0.01, 6, 24)})
    assert [m.outcome for m in g.metrics] == ["fail", "pass"]
    assert g.score == pytest.approx(100 * 20 / 21)
    assert g.outcome == "fail"


@pytest.mark.parametrize("fail_weight, score, band, outcome", [
    (0.1, 100 * 2 / 2.1, "pass", "pass"),
    (1.0, 100 * 2 / 3, "marginal", "inconclusive"),
    (3.0, 100 * 2 / 5, "fail", "fail"),
])
def test_a_non_critical_fail_lowers_the_score(fail_weight: float, score: float, band: str,
                                              outcome: str) -> None:
    g = gate_verdict([_metric("a", "pass"), _metric("b", "pass"),
                      _metric("c", "fail", weight=fail_weight)])
    assert g.score == pytest.approx(score)
    assert g.band == band
    assert g.outcome == outcome
    assert "failed: c" in g.reason


@pytest.mark.parametrize("score_pct, band", [(90.0, "pass"), (89.9, "marginal"),
                                             (60.0, "marginal"), (59.9, "fail")])
def test_threshold_edges_are_inclusive(score_pct: float, band: str) -> None:
    g = gate_verdict([_metric("a", "pass", weight=score_pct),
                      _metric("b", "fail", weight=100 - score_pct)])
    assert g.band == band


def test_all_nodata_is_inconclusive() -> None:
    g = gate_verdict([_metric("a", "nodata"), _metric("b", "nodata")])
    assert (g.outcome, g.score, g.band) == ("inconclusive", None, None)
    assert "no metric has data" in g.reason


def test_nodata_on_a_non_critical_metric_fails_closed_and_is_named() -> None:
    g = gate_verdict([_metric("a", "pass", critical=True), _metric("b", "nodata")])
    assert g.outcome == "inconclusive"
    assert g.score == 100.0
    assert "no data: b" in g.reason


def test_metrics_with_data_but_no_weight_are_inconclusive() -> None:
    g = gate_verdict([_metric("a", "pass", weight=0), _metric("b", "nodata", weight=1)])
    assert g.outcome == "inconclusive"
    assert g.score is None


def test_a_metric_without_samples_is_nodata_not_a_pass() -> None:
    sec = section(metrics=[dict(GEMM), LATENCY])
    g = judge_canary(sec, {"gemm_gflops": draw(100, 0.01, 12, 25)},
                     {"gemm_gflops": draw(100, 0.01, 6, 26), "unjudged": [1.0]})
    assert [m.outcome for m in g.metrics] == ["pass", "nodata"]
    assert g.metrics[1].n_baseline == 0
    assert "no data: p99_ms" in g.reason


# --------------------------------------------------------------------------------------------
# self before/after mode

def test_self_mode_uses_the_hosts_own_before_samples() -> None:
    before = {"gemm_gflops": draw(100, 0.01, 8, 27)}
    g = judge_self(section(), before, {"gemm_gflops": draw(88, 0.01, 8, 28)})
    assert g.mode == "self"
    assert g.outcome == "fail"
    m = g.metrics[0]
    assert m.mode == "self"
    assert m.baseline == before["gemm_gflops"]
    text = explain(g)
    assert "after median" in text and "vs before" in text
    assert text.splitlines()[-1].startswith("gate (self): FAIL")


def test_self_mode_same_maths_as_baseline_mode() -> None:
    before, after = draw(100, 0.01, 8, 29), draw(99, 0.01, 8, 30)
    # These draws differ in spread (6x): that test has its own cases below.
    sec = section(metrics=[{**GEMM, "spread": "off"}])
    s = judge_self(sec, {"gemm_gflops": before}, {"gemm_gflops": after}).metrics[0]
    b = judge_canary(sec, {"gemm_gflops": before}, {"gemm_gflops": after}).metrics[0]
    assert s.outcome == b.outcome == "pass"
    assert (s.p_value, s.hl_shift, s.u_statistic) == (b.p_value, b.hl_shift, b.u_statistic)


def test_self_mode_too_few_after_samples_is_inconclusive() -> None:
    g = judge_self(section(), {"gemm_gflops": draw(100, 0.01, 8, 31)},
                   {"gemm_gflops": draw(100, 0.01, 2, 32)})
    assert g.outcome == "inconclusive"
    assert "too few samples: after 2, before 8" in g.metrics[0].reason


# --------------------------------------------------------------------------------------------
# explanation and journal

def _brief_example() -> GateVerdict:
    baseline = [140.2 + d for d in (-3, -2.5, -2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2, 2.5, 3)]
    canary = [5.6 + d for d in (-0.3, -0.2, -0.1, 0.1, 0.2, 0.3)]
    return judge_canary(section(), {"gemm_gflops": baseline}, {"gemm_gflops": canary})


def test_explanation_has_medians_p_value_and_effect_size() -> None:
    lines = explain(_brief_example()).splitlines()
    assert len(lines) == 3
    metric, samples, gate = lines
    assert samples == ("  canary samples: 5.3 5.4 5.5 5.7 5.8 5.9; baseline samples: 137.2 "
                       "137.7 138.2 138.7 139.2 139.7 140.7 141.2 141.7 142.2 142.7 143.2")
    assert metric.startswith("gemm_gflops: FAIL — canary median 5.6 vs baseline 140.2")
    assert "HL shift -134.6 (-96.0% CI [" in metric and "tolerance 5%)" in metric
    # 6 vs 12 with every canary below every baseline: exact p = 1 / C(18, 6).
    assert f"Mann-Whitney U=0 p=5.4e-05 (alpha {DEFAULT_ALPHA:g})" in metric
    assert "n=6/12" in metric
    assert "critical" in metric and "higher is better" in metric
    assert gate.startswith("gate (baseline): FAIL — critical metric failed: gemm_gflops")


def test_explanation_of_nodata_gives_the_reason() -> None:
    v = judge_metric(GEMM, draw(100, 0.01, 12, 33), [1.0, 2.0])
    text = explain(v)
    assert text.startswith("gemm_gflops: NODATA — n=2/12")
    assert "too few samples" in text


def test_verdict_records_its_inputs() -> None:
    m = _brief_example().metrics[0]
    assert m.p_value == pytest.approx(1 / math.comb(18, 6))
    assert m.u_statistic == 0
    assert m.hl_shift == pytest.approx(-134.6)
    assert m.relative_shift == pytest.approx(-134.6 / 140.2)
    assert m.baseline_median == pytest.approx(140.2)
    assert m.canary_median == pytest.approx(5.6)
    assert (m.tolerance, m.alpha, m.direction) == (DEFAULT_TOLERANCE, DEFAULT_ALPHA, "higher")
    assert len(m.baseline) == 12 and len(m.canary) == 6


def test_verdict_round_trips_through_strict_json() -> None:
    g = judge_canary(section(metrics=[dict(GEMM), LATENCY]),
                     {"gemm_gflops": draw(100, 0.01, 12, 34), "p99_ms": draw(10, 0.01, 12, 35)},
                     {"gemm_gflops": draw(100, 0.01, 6, 36), "p99_ms": [math.nan] * 6})
    text = json.dumps(g.model_dump(mode="json"), allow_nan=False)
    back = GateVerdict.model_validate(json.loads(text))
    assert back == g
    assert back.metrics[1].canary == [None] * 6


# --------------------------------------------------------------------------------------------
# the plan section and bad input

def test_section_defaults() -> None:
    sec = parse_canary_section(section())
    assert (sec.repeats, sec.alpha, sec.min_samples) == (5, DEFAULT_ALPHA, DEFAULT_MIN_SAMPLES)
    assert (sec.pass_threshold, sec.marginal_threshold, sec.mode) == (90, 60, "baseline")
    assert sec.metrics[0].tolerance == DEFAULT_TOLERANCE and sec.metrics[0].weight == 1.0
    assert isinstance(sec, CanarySection)


@pytest.mark.parametrize("path, value, field, reason", [
    (("metrics", 0, "weight"), -1.0, "canary.metrics[0].weight", "greater than or equal to 0"),
    (("metrics", 0, "weight"), "2", "canary.metrics[0].weight", "valid number"),
    (("metrics", 0, "tolerance"), 0.0, "canary.metrics[0].tolerance", "greater than 0"),
    (("metrics", 0, "tolerance"), 1.0, "canary.metrics[0].tolerance", "less than 1"),
    (("metrics", 0, "direction"), "up", "canary.metrics[0].direction", "'higher' or 'lower'"),
    (("metrics", 0, "name"), "gemm; rm -rf /", "canary.metrics[0].name", "not allowed"),
    (("metrics", 0, "colour"), "red", "canary.metrics[0].colour", "unknown key"),
    (("metrics",), [], "canary.metrics", "at least 1 item"),
    (("mode",), "mirror", "canary.mode", "'baseline' or 'self'"),
    (("alpha",), 0.0, "canary.alpha", "greater than 0"),
    (("marginal_threshold",), 95.0, "canary.marginal_threshold", "above pass_threshold 90"),
    (("pass_threshold",), 50.0, "canary.marginal_threshold", "above pass_threshold 50"),
    (("pass_threshold",), 101.0, "canary.pass_threshold", "less than or equal to 100"),
    (("min_samples",), 3, "canary.min_samples", "can never reach alpha 0.005"),
    (("alpha",), 0.001, "canary.min_samples", "use at least 7"),
    (("repeats",), 4, "canary.repeats", "below min_samples 5"),
    (("bogus",), 1, "canary.bogus", "unknown key"),
])
def test_bad_section_raises_bad_input_with_the_field(path: tuple[Any, ...], value: Any,
                                                     field: str, reason: str) -> None:
    data: Any = copy.deepcopy(section())
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(BadInput) as exc:
        parse_canary_section(data, source="plans/roll.yml")
    assert exc.value.field == field
    assert exc.value.source == "plans/roll.yml"
    assert reason in exc.value.reason


def test_duplicate_metric_names_are_bad_input() -> None:
    with pytest.raises(BadInput, match=r"listed twice \(metrics\[0\] and metrics\[1\]\)") as e:
        parse_canary_section(section(metrics=[dict(GEMM), dict(GEMM)]))
    assert e.value.field == "canary.metrics"


def test_zero_total_weight_is_bad_input() -> None:
    with pytest.raises(BadInput, match="weights are 0"):
        parse_canary_section(section(metrics=[{**GEMM, "weight": 0}]))


def test_judge_canary_validates_a_raw_section() -> None:
    with pytest.raises(BadInput) as exc:
        judge_canary({"metrics": [{"name": "m", "direction": "sideways"}]}, {}, {})
    assert exc.value.field == "canary.metrics[0].direction"


@pytest.mark.parametrize("kwargs, field", [
    ({"alpha": 0.0}, "alpha"),
    ({"alpha": 0.7}, "alpha"),
    ({"min_samples": 1}, "min_samples"),
    ({"uncertainty_limit": -0.1}, "uncertainty_limit"),
    ({"mode": "mirror"}, "mode"),
])
def test_judge_metric_bad_settings(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(BadInput) as exc:
        judge_metric(GEMM, [1.0] * 5, [1.0] * 5, **kwargs)
    assert exc.value.field == field


def test_judge_metric_bad_metric_spec() -> None:
    with pytest.raises(BadInput) as exc:
        judge_metric({"name": "m", "direction": "down"}, [1.0] * 5, [1.0] * 5)
    assert exc.value.field == "metric.direction"


@pytest.mark.parametrize("canary, field", [
    ([1.0, "fast", 2.0], "canary.gemm_gflops[1]"),
    ([1.0, True], "canary.gemm_gflops[1]"),
    ("1.0 2.0", "canary.gemm_gflops"),
    ([1.0] * 2001, "canary.gemm_gflops"),
])
def test_bad_samples_are_bad_input(canary: Any, field: str) -> None:
    with pytest.raises(BadInput) as exc:
        judge_canary(section(), {"gemm_gflops": [1.0] * 5}, {"gemm_gflops": canary})
    assert exc.value.field == field


def test_samples_not_a_mapping_is_bad_input() -> None:
    with pytest.raises(BadInput) as exc:
        judge_self(section(), [1.0] * 5, {})  # type: ignore[arg-type]
    assert exc.value.field == "before"


def test_numpy_samples_are_accepted() -> None:
    v = judge_metric(GEMM, np.full(6, 100.0, dtype=np.float32), np.arange(90, 96))
    assert v.outcome == "fail"
    assert v.canary == [90.0, 91.0, 92.0, 93.0, 94.0, 95.0]


@pytest.mark.parametrize("marginal, passing", [(95.0, 90.0), (-1.0, 90.0), (60.0, 101.0)])
def test_gate_thresholds_out_of_order_or_range(marginal: float, passing: float) -> None:
    with pytest.raises(BadInput) as exc:
        gate_verdict([_metric("a", "pass")], pass_threshold=passing,
                     marginal_threshold=marginal)
    assert exc.value.field in ("marginal_threshold", "pass_threshold")


def test_min_p_value_is_the_exact_one_sided_floor() -> None:
    assert min_p_value(5, 5) == pytest.approx(1 / 252)
    assert min_p_value(5, 10) == pytest.approx(1 / 3003)
    # The default min_samples can reach the default alpha; one fewer cannot.
    assert min_p_value(DEFAULT_MIN_SAMPLES, DEFAULT_MIN_SAMPLES) <= DEFAULT_ALPHA
    assert min_p_value(DEFAULT_MIN_SAMPLES - 1, DEFAULT_MIN_SAMPLES - 1) > DEFAULT_ALPHA


# --------------------------------------------------------------------------------------------
# the benchmark stays runnable

def test_judge_quality_benchmark_runs() -> None:
    spec = importlib.util.spec_from_file_location(
        "judge_quality", REPO / "benchmarks" / "judge_quality.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = io.StringIO()
    with redirect_stdout(out):
        assert mod.main(["--trials", "20", "--json"]) == 0
    doc = json.loads(out.getvalue())
    rows = {r["case"]: r for r in doc["rows"]}
    assert len(rows) == len(mod.CELLS)
    assert rows["10% regression, CV 0.05, 16/16"]["fail"] >= 90
    assert rows["counts 0 -> Poisson(3)/sample, 5/16"]["pass"] == 0
    assert rows["counts 0 -> exactly 3 events, 5/16"]["pass"] == 0
    for b in doc["batches"]:
        assert b["slow_failed"] == 100.0
