"""The judge's entry points: samples in, a verdict with its inputs out. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.judge.compare import classify, sides
from fleetgate.judge.model import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_UNCERTAINTY_LIMIT,
    CanaryMetric,
    CanarySection,
    GateVerdict,
    JudgeSettings,
    MetricVerdict,
    Mode,
    parse_canary_section,
    samples,
    validated,
)
from fleetgate.judge.score import gate_verdict


def judge_metric(metric: CanaryMetric | Mapping[str, Any], baseline: Iterable[float],
                 canary: Iterable[float], *, alpha: float = DEFAULT_ALPHA,
                 min_samples: int = DEFAULT_MIN_SAMPLES,
                 uncertainty_limit: float = DEFAULT_UNCERTAINTY_LIMIT,
                 mode: Mode = "baseline", source: str = "canary") -> MetricVerdict:
    """Judge one metric: canary samples against baseline samples (or after vs before)."""
    spec = validated(CanaryMetric, metric, source=source, prefix="metric")
    settings = validated(JudgeSettings, {"alpha": alpha, "min_samples": min_samples,
                                         "uncertainty_limit": uncertainty_limit},
                         source=source, prefix="")
    if mode not in ("baseline", "self", "promoted"):
        raise BadInput(f"unknown mode {mode!r} (baseline, self or promoted)", source=source,
                       field="mode")
    ref, new = sides(mode)
    base = samples(baseline, source=source, field=f"{ref}.{spec.name}")
    can = samples(canary, source=source, field=f"{new}.{spec.name}")
    return classify(spec, settings, base, can, mode)


def judge_samples(section: CanarySection | Mapping[str, Any],
                  reference: Mapping[str, Iterable[float]],
                  candidate: Mapping[str, Iterable[float]], *, mode: Mode = "baseline",
                  source: str = "canary", host: str | None = None,
                  reference_hosts: Sequence[str] = ()) -> GateVerdict:
    """Every metric of the section, candidate against reference, scored into one verdict.
    Metrics in the samples but not in the section are ignored; a section metric missing from
    the samples is NODATA (so the gate is inconclusive), never a pass."""
    sec = parse_canary_section(section, source=source)
    ref, new = sides(mode)
    for side, got in ((ref, reference), (new, candidate)):
        if not isinstance(got, Mapping):
            raise BadInput(f"{side} samples must map metric name to samples, "
                           f"got {type(got).__name__}", source=source, field=side)
    settings = sec.settings
    verdicts = []
    for m in sec.metrics:
        base = samples(reference.get(m.name, ()), source=source, field=f"{ref}.{m.name}")
        can = samples(candidate.get(m.name, ()), source=source, field=f"{new}.{m.name}")
        v = classify(m, settings, base, can, mode)
        if not base and not can:
            v = v.model_copy(update={"reason": f"metric {m.name} missing: not measured on "
                                               f"either side ({v.reason})"})
        elif not can:
            v = v.model_copy(update={"reason": f"metric {m.name} missing on the {new} "
                                               f"({v.reason})"})
        elif not base:
            v = v.model_copy(update={"reason": f"metric {m.name} missing on the {ref} "
                                               f"({v.reason})"})
        verdicts.append(v)
    return gate_verdict(verdicts, pass_threshold=sec.pass_threshold,
                        marginal_threshold=sec.marginal_threshold, mode=mode, source=source,
                        host=host, reference_hosts=reference_hosts)


def judge_canary(section: CanarySection | Mapping[str, Any],
                 baseline: Mapping[str, Iterable[float]], canary: Mapping[str, Iterable[float]],
                 *, source: str = "canary", host: str | None = None,
                 reference_hosts: Sequence[str] = ()) -> GateVerdict:
    """One canary (or any candidate set) against unchanged baseline hosts of its class."""
    return judge_samples(section, baseline, canary, mode="baseline", source=source, host=host,
                         reference_hosts=reference_hosts)


def judge_self(section: CanarySection | Mapping[str, Any],
               before: Mapping[str, Iterable[float]], after: Mapping[str, Iterable[float]],
               *, source: str = "canary", host: str | None = None) -> GateVerdict:
    """One host against itself: its before-change samples are the baseline."""
    return judge_samples(section, before, after, mode="self", source=source, host=host)


def no_reference(section: CanarySection, reason: str, *, mode: Mode, host: str | None
                 ) -> GateVerdict:
    """The verdict when there is nothing to compare with: inconclusive, naming what is missing."""
    verdicts = [classify(m, section.settings, [], [], mode).model_copy(update={"reason": reason})
                for m in section.metrics]
    return gate_verdict(verdicts, pass_threshold=section.pass_threshold,
                        marginal_threshold=section.marginal_threshold, mode=mode, host=host)
