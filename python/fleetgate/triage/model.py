"""What the walk reports: per stage a status, its findings and notes, and the article's
decision for the stage that explains the problem."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

StageStatus = Literal["ok", "problem", "inconclusive", "n/a", "skipped"]
Verdict = Literal["clean", "problem", "inconclusive"]

STAGES: tuple[tuple[str, str], ...] = (
    ("device", "Device health and visibility"),
    ("utilisation", "Under-utilisation"),
    ("feeding", "Feeding the GPU: storage, CPU, NUMA, PCIe"),
    ("comms", "Communications: NIC and NCCL"),
)


@dataclass
class Finding:
    kind: str  # a key of decisions.DECISIONS
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageResult:
    number: int
    name: str
    title: str
    status: StageStatus
    summary: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)  # tool -> ok / missing / timeout ...
    decision: str | None = None


@dataclass
class Walk:
    host: str
    backend: str
    verdict: Verdict
    reason: str
    stopped_at: str | None
    stages: list[StageResult]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stage(name: str, status: StageStatus, summary: str, **kw: Any) -> StageResult:
    number = next(i for i, (n, _) in enumerate(STAGES, start=1) if n == name)
    return StageResult(number=number, name=name, title=STAGES[number - 1][1], status=status,
                       summary=summary, **kw)
