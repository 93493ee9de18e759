"""Canary analysis, as the rollout plan and controller see it: the `canary:` section and the
verdicts. The judging itself lives in the judge family (python/fleetgate/judge/): this module
names what the rollout uses from it, so plans and journals keep one vocabulary."""

from __future__ import annotations

from fleetgate.judge.explain import explain, explain_metric
from fleetgate.judge.judgement import (
    judge_canary,
    judge_metric,
    judge_samples,
    judge_self,
    no_reference,
)
from fleetgate.judge.model import (
    DEFAULT_ALPHA,
    DEFAULT_MARGINAL_THRESHOLD,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_PASS_THRESHOLD,
    DEFAULT_REPEATS,
    DEFAULT_TOLERANCE,
    DEFAULT_UNCERTAINTY_LIMIT,
    MAX_SAMPLES,
    CanaryMetric,
    CanarySection,
    GateOutcome,
    GateVerdict,
    JudgeSettings,
    MetricOutcome,
    MetricVerdict,
    Mode,
    min_p_value,
    parse_canary_section,
)
from fleetgate.judge.score import gate_verdict

__all__ = [
    "DEFAULT_ALPHA", "DEFAULT_MARGINAL_THRESHOLD", "DEFAULT_MIN_SAMPLES", "DEFAULT_PASS_THRESHOLD",
    "DEFAULT_REPEATS", "DEFAULT_TOLERANCE", "DEFAULT_UNCERTAINTY_LIMIT", "MAX_SAMPLES",
    "CanaryMetric", "CanarySection", "GateOutcome", "GateVerdict", "JudgeSettings",
    "MetricOutcome", "MetricVerdict", "Mode", "explain", "explain_metric", "gate_verdict",
    "judge_canary", "judge_metric", "judge_samples", "judge_self", "min_p_value", "no_reference",
    "parse_canary_section",
]
