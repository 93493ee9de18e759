"""The fast-diagnosis walk: stages in the article's order, stopping at the first that
explains the problem.

Stages after the explaining one are reported as "skipped", not evaluated: the article's
point is that nothing further up matters until that one is fixed. A stage that could not
measure does not stop the walk -- it cannot explain anything -- but it keeps the verdict from
being "clean".
"""

from __future__ import annotations

from collections.abc import Callable

from fleetgate.triage.comms import comms
from fleetgate.triage.evidence import Evidence
from fleetgate.triage.model import STAGES, StageResult, Walk, stage
from fleetgate.triage.stages import device, feeding, utilisation

STAGE_FUNCS: tuple[Callable[[Evidence], StageResult], ...] = (device, utilisation, feeding,
                                                               comms)


def walk(host: str, ev: Evidence) -> Walk:
    results: list[StageResult] = []
    stopped: StageResult | None = None
    for (name, _), func in zip(STAGES, STAGE_FUNCS, strict=True):
        if stopped is not None:
            results.append(stage(name, "skipped", f"not evaluated: stage {stopped.number} "
                                 f"({stopped.name}) explains the problem"))
            continue
        result = func(ev)
        results.append(result)
        if result.status == "problem":
            stopped = result
    if stopped is not None:
        return Walk(host, ev.backend, "problem", f"stage {stopped.number} ({stopped.name}): "
                    f"{stopped.summary}", stopped.name, results)
    unclear = [r for r in results if r.status == "inconclusive"]
    if unclear:
        return Walk(host, ev.backend, "inconclusive", "; ".join(
            f"stage {r.number} ({r.name}): {r.summary}" for r in unclear), None, results)
    return Walk(host, ev.backend, "clean", "no stage found a problem", None, results)


def uncollected(host: str, backend: str, reason: str) -> Walk:
    """The walk of a host whose evidence never arrived (unreachable, collector failed)."""
    results = [stage(name, "inconclusive", f"not collected: {reason}") for name, _ in STAGES]
    return Walk(host, backend, "inconclusive", f"could not collect: {reason}", None, results)
