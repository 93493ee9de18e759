"""The smoke suite's data: what a probe prints, and the verdict per host per check.

A verdict is pass, fail or inconclusive. "Could not measure" (timeout, unreachable, a probe
that crashed or printed garbage) is inconclusive, never fail: probe_status keeps the raw reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fleetgate.errors import BadInput, validation_error
from fleetgate.inputs import load_json
from fleetgate.smoke import parsers
from fleetgate.smoke.thresholds import Check

Status = Literal["pass", "fail", "inconclusive"]
ProbeStatus = Literal["ok", "error", "timeout", "skipped", "unreachable", "malformed",
                      "not-run"]
RESULT_SCHEMA = "fleetgate.smoke.result/v1"
# Metrics that may be negative: the inference probe's checksum is a weighted sum of logits.
SIGNED_METRICS = frozenset({"checksum"})


class ProbeReport(BaseModel):
    """The one JSON object a probe prints (roles/smoke_probes/files/probes/README.txt)."""

    model_config = ConfigDict(extra="allow")

    probe: Check
    backend: Literal["nvidia", "amd", "cpu", "none"]
    status: Literal["ok", "error", "timeout", "skipped"]
    reason: str = ""
    metrics: dict[str, Any] = Field(default_factory=dict)
    evidence: dict[str, Any] = Field(default_factory=dict)
    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    tool_versions: dict[str, str] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metrics")
    @classmethod
    def _measurable(cls, metrics: dict[str, Any]) -> dict[str, Any]:
        # What a probe measured is judged and gated on: a negative TFLOPS sample or byte count
        # is no measurement (the parsers' own rule for what they read on hosts).
        return parsers.check_values(metrics, signed=SIGNED_METRICS)


def read_results(path: Path) -> list[CheckResult]:
    """A group's results file (one CheckResult per line, the suite's --fleetgate-results);
    none when the suite wrote none."""
    if not path.exists():
        return []
    return [CheckResult.model_validate_json(line)
            for line in path.read_text().splitlines() if line.strip()]


def by_host(results: Iterable[CheckResult]) -> dict[str, list[CheckResult]]:
    """Each host's results, in their order: one pass over a run's results, where a scan per
    host would grow with hosts x results (a soak re-run measures a whole wave at once)."""
    out: dict[str, list[CheckResult]] = {}
    for r in results:
        out.setdefault(r.host, []).append(r)
    return out


def parse_probe_output(text: str, *, source: str = "probe output") -> ProbeReport:
    """Exactly one JSON object (surrounding whitespace allowed); anything else is BadInput."""
    stripped = text.strip()
    if not stripped:
        raise BadInput("empty; a probe prints exactly one JSON object", source=source)
    # Strict JSON: a NaN metric is not JSON, and not a measurement either.
    doc = load_json(stripped, source, what="not one JSON object")
    if not isinstance(doc, dict):
        raise BadInput(f"a probe prints a JSON object, not a {type(doc).__name__}", source=source)
    try:
        return ProbeReport.model_validate(doc)
    except ValidationError as exc:
        raise validation_error(exc, source) from None


class CheckResult(BaseModel):
    """One host, one check: the verdict with everything that went into it."""

    model_config = ConfigDict(extra="forbid")

    host: str
    check: Check
    status: Status
    probe_status: ProbeStatus
    reason: str
    node_class: str | None = None
    backend: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    threshold: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)
    tool_versions: dict[str, str] = Field(default_factory=dict)
    probe_version: str | None = None
    duration_s: float | None = None


class SmokeRun(BaseModel):
    """What `fleetgate smoke run --json OUT` writes and `run_smoke()` returns."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=RESULT_SCHEMA, alias="schema")
    started_at: datetime
    finished_at: datetime
    wall_s: float
    inventory: str
    limit: str | None
    node_class: str | None
    checks: list[Check]
    hosts: list[str]
    results: list[CheckResult]
    run_dir: str | None = None
    # host -> the execution node that measured it; a host measured from the controller is
    # not in it.
    execution_nodes: dict[str, str] = Field(default_factory=dict)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def inconclusive(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "inconclusive"]

    @property
    def ok(self) -> bool:
        return all(r.status == "pass" for r in self.results)

    def summary(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "inconclusive": 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def result(self, host: str, check: str) -> CheckResult:
        for r in self.results:
            if r.host == host and r.check == check:
                return r
        raise KeyError(f"{host}/{check}")

    def to_json(self) -> str:
        doc = self.model_dump(mode="json", by_alias=True)
        doc["summary"] = self.summary()
        doc["ok"] = self.ok
        return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)
