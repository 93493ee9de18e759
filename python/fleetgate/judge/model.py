"""The judge's inputs and outputs: a plan's `canary:` section (or `fleetgate judge`'s settings)
and the verdicts, as strict pydantic models so a plan error is one line with a field path."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fleetgate.errors import BadInput, validation_error

DEFAULT_TOLERANCE = 0.05
# Two tests (location and spread) each at alpha: the no-change false-fail rate stays <= 0.5%.
DEFAULT_ALPHA = 0.005
DEFAULT_MIN_SAMPLES = 5
# A pass must rule out (at 1 - alpha confidence) a regression larger than this; a baseline so
# noisy that it cannot is inconclusive, and the reason says how far the bound reached.
DEFAULT_UNCERTAINTY_LIMIT = 0.20
DEFAULT_SPREAD_TOLERANCE = 1.5
DEFAULT_REPEATS = 5
DEFAULT_PASS_THRESHOLD = 90.0
DEFAULT_MARGINAL_THRESHOLD = 60.0
# The HL shift builds an n_canary x n_baseline matrix; 2000 a side keeps it at 32 MB.
MAX_SAMPLES = 2000

METRIC_NAME_RE = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"

Direction = Literal["higher", "lower"]
# baseline: against unchanged hosts; self: a host's own before-samples; promoted: against
# hosts already promoted in earlier waves (the last wave, when no old-version host is left).
Mode = Literal["baseline", "self", "promoted"]
LastWave = Literal["promoted", "self"]
Kind = Literal["continuous", "count"]
Comparison = Literal["statistical", "relative"]
SpreadPolicy = Literal["fail", "marginal", "off"]
MetricOutcome = Literal["pass", "fail", "marginal", "nodata"]
GateOutcome = Literal["pass", "fail", "inconclusive"]
ScoreBand = Literal["pass", "marginal", "fail"]
MetricName = Annotated[str, StringConstraints(pattern=METRIC_NAME_RE)]

_M = TypeVar("_M", bound=BaseModel)


class _Strict(BaseModel):
    # Same house rules as spec/schema.py: no silent coercion, a typo'd key is an error.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CanaryMetric(_Strict):
    """One judged metric; `direction` says which way is better (TFLOPS higher, latency lower)."""

    name: MetricName
    direction: Direction
    critical: bool = False
    weight: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = 1.0
    # Relative effect size that matters: 0.05 = a 5% shift in the bad direction (for counts:
    # a 5% higher event rate; from a zero baseline any event rate is beyond it).
    tolerance: Annotated[float, Field(gt=0, lt=1)] = DEFAULT_TOLERANCE
    # continuous: timings, throughputs; count: events per sample (Xid, ECC, retransmits).
    kind: Kind = "continuous"
    # statistical: the rank test with its shift CI; relative: the candidate median against
    # the reference median with the tolerance as margin (the smoke suite's fleet check).
    comparison: Comparison = "statistical"
    # A wider spread with the same median: what it does to the verdict.
    spread: SpreadPolicy = "marginal"
    # Ratio of mean absolute deviations from the median (canary / baseline) that matters.
    spread_tolerance: Annotated[float, Field(gt=1, le=100)] = DEFAULT_SPREAD_TOLERANCE

    @model_validator(mode="after")
    def _counts_are_lower_is_better(self) -> CanaryMetric:
        if self.kind == "count" and self.direction != "lower":
            raise ValueError("a count metric counts bad events: direction must be lower")
        if self.kind == "count" and self.comparison != "statistical":
            raise ValueError("a count metric is judged by the exact count test: comparison "
                             "must be statistical")
        return self


def min_p_value(n_a: int, n_b: int) -> float:
    """The smallest one-sided Mann-Whitney p-value n_a vs n_b samples can produce (exact, no
    ties): every canary value below every baseline value, 1 / C(n_a + n_b, n_a)."""
    return 1.0 / math.comb(n_a + n_b, n_a)


class JudgeSettings(_Strict):
    """The statistical knobs shared by every metric of one judgement."""

    # The cross-field checks must also see a default paired with an explicit value.
    model_config = ConfigDict(validate_default=True)

    alpha: Annotated[float, Field(gt=0, le=0.5)] = DEFAULT_ALPHA
    min_samples: Annotated[int, Field(ge=2, le=MAX_SAMPLES)] = DEFAULT_MIN_SAMPLES
    uncertainty_limit: Annotated[float, Field(gt=0, le=10)] = DEFAULT_UNCERTAINTY_LIMIT

    @field_validator("min_samples")
    @classmethod
    def _test_can_reject(cls, v: int, info: ValidationInfo) -> int:
        # With too few samples the U test can never reach alpha, so every metric would PASS
        # whatever the canary did: the worst kind of silent pass.
        alpha = info.data.get("alpha")
        if alpha is not None and min_p_value(v, v) > alpha:
            need = next(m for m in range(v, MAX_SAMPLES + 1) if min_p_value(m, m) <= alpha)
            raise ValueError(
                f"{v} samples per side can never reach alpha {alpha:g} "
                f"(smallest p-value {min_p_value(v, v):.3g}); use at least {need}")
        return v


class CanarySection(JudgeSettings):
    """The `canary:` section of a rollout plan."""

    metrics: Annotated[list[CanaryMetric], Field(min_length=1, max_length=100)]
    # baseline: canaries against unchanged hosts of the class; self: each host's own
    # before-samples against its after-samples.
    mode: Literal["baseline", "self"] = "baseline"
    # baseline mode, when no old-version host is left (the last wave): against the hosts
    # promoted in earlier waves, or each host against its own before-samples.
    last_wave: LastWave = "promoted"
    # Samples per canary host (and per host before/after in self mode).
    repeats: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] = DEFAULT_REPEATS
    pass_threshold: Annotated[float, Field(ge=0, le=100)] = DEFAULT_PASS_THRESHOLD
    marginal_threshold: Annotated[float, Field(ge=0, le=100)] = DEFAULT_MARGINAL_THRESHOLD

    @field_validator("metrics")
    @classmethod
    def _metrics_unique_and_weighted(cls, v: list[CanaryMetric]) -> list[CanaryMetric]:
        seen: dict[str, int] = {}
        for i, m in enumerate(v):
            if m.name in seen:
                raise ValueError(f"metric {m.name!r} listed twice (metrics[{seen[m.name]}] "
                                 f"and metrics[{i}])")
            seen[m.name] = i
        if sum(m.weight for m in v) <= 0:
            raise ValueError("all metric weights are 0: the score would be undefined")
        return v

    @field_validator("repeats")
    @classmethod
    def _repeats_reach_min_samples(cls, v: int, info: ValidationInfo) -> int:
        min_samples = info.data.get("min_samples")
        if min_samples is not None and v < min_samples:
            raise ValueError(f"{v} repeats is below min_samples {min_samples}: every canary "
                             "host would be judged without data")
        return v

    @field_validator("marginal_threshold")
    @classmethod
    def _thresholds_in_order(cls, v: float, info: ValidationInfo) -> float:
        pass_threshold = info.data.get("pass_threshold")
        if pass_threshold is not None and v > pass_threshold:
            raise ValueError(f"marginal_threshold {v:g} is above pass_threshold "
                             f"{pass_threshold:g}")
        return v

    @property
    def settings(self) -> JudgeSettings:
        return JudgeSettings(alpha=self.alpha, min_samples=self.min_samples,
                             uncertainty_limit=self.uncertainty_limit)


def validated(model: type[_M], data: Any, *, source: str, prefix: str) -> _M:
    """`model` from `data`, or one BadInput naming the first bad field (`canary.metrics[1]...`)."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source, prefix=prefix) from None


def parse_canary_section(data: Any, *, source: str = "plan", prefix: str = "canary"
                         ) -> CanarySection:
    """Validate a plan's `canary:` mapping; every problem is one BadInput with a field path
    such as `canary.metrics[1].tolerance`."""
    return validated(CanarySection, data, source=source, prefix=prefix)


def samples(values: Iterable[float], *, source: str, field: str) -> list[float]:
    """A list of real numbers (bools and strings refused), at most MAX_SAMPLES."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise BadInput(f"samples must be a list of numbers, got {type(values).__name__}",
                       source=source, field=field)
    out: list[float] = []
    for i, v in enumerate(values):
        # bool is a numbers.Real; True as "1.0 GFLOPS" is a caller bug, not a sample.
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise BadInput(f"sample is not a number, got {type(v).__name__}",
                           source=source, field=f"{field}[{i}]")
        out.append(float(v))
        if len(out) > MAX_SAMPLES:
            raise BadInput(f"more than {MAX_SAMPLES} samples", source=source, field=field)
    return out


# --------------------------------------------------------------------------------------------
# verdicts

class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricVerdict(_Record):
    """One metric's outcome with everything needed to explain it: the samples, the statistics
    and the thresholds. In self mode `baseline` holds the host's before-samples and `canary`
    its after-samples. Non-finite samples are recorded as null so the record stays JSON."""

    name: str
    outcome: MetricOutcome
    reason: str
    mode: Mode
    direction: Direction
    critical: bool
    weight: float
    tolerance: float
    alpha: float
    min_samples: int
    kind: Kind = "continuous"
    comparison: Comparison = "statistical"
    spread_policy: SpreadPolicy = "marginal"
    spread_tolerance: float = DEFAULT_SPREAD_TOLERANCE
    uncertainty_limit: float = DEFAULT_UNCERTAINTY_LIMIT
    baseline: list[float | None]
    canary: list[float | None]
    n_baseline: int
    n_canary: int
    baseline_median: float | None = None
    canary_median: float | None = None
    baseline_cv: float | None = None
    # scipy's U of the first sample, the canary (or after) side.
    u_statistic: float | None = None
    p_value: float | None = None
    # canary - baseline, in the metric's unit, and relative to |baseline median|.
    hl_shift: float | None = None
    relative_shift: float | None = None
    # The relative shift's confidence interval (each bound at 1 - alpha), and the bound on the
    # bad side as a regression: how bad the change may be at that confidence.
    shift_ci: tuple[float, float] | None = None
    worst_shift: float | None = None
    # Brown-Forsythe: W, one-sided p (canary wider), ratio of mean absolute deviations.
    spread_w: float | None = None
    spread_p: float | None = None
    spread_ratio: float | None = None
    # Exact count test: events on each side, one-sided conditional binomial p.
    canary_events: int | None = None
    baseline_events: int | None = None
    count_p: float | None = None
    # relative comparison: candidate median / reference median (in the good direction).
    ratio: float | None = None


class GateVerdict(_Record):
    """The gate decision: only `outcome == "pass"` lets a rollout proceed. `host` names the
    judged canary when the verdict is one host's."""

    outcome: GateOutcome
    reason: str
    mode: Mode
    score: float | None
    band: ScoreBand | None
    pass_threshold: float
    marginal_threshold: float
    metrics: list[MetricVerdict]
    host: str | None = None
    reference_hosts: list[str] = Field(default_factory=list)

    @property
    def proceed(self) -> bool:
        return self.outcome == "pass"
