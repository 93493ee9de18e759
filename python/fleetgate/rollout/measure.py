"""Measurement for canary analysis: the reference a wave's canaries are judged against
(old-version baseline hosts, hosts promoted in earlier waves, or each host before its
change), and the repeated smoke runs that give each host enough samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleetgate.rollout import canary_gate
from fleetgate.rollout.canary import Mode
from fleetgate.rollout.plan import classes_path
from fleetgate.smoke.model import CheckResult, by_host

if TYPE_CHECKING:
    from fleetgate.rollout.engine import Controller

MAX_RUNS = 10


@dataclass
class Reference:
    """What this wave's canaries are compared with. `missing` says why there is nothing."""

    mode: Mode = "baseline"
    hosts: list[str] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)
    missing: str = ""


def checks(ctl: Controller, *, canary: bool) -> list[str]:
    want = set(ctl.plan.gates.checks)
    if canary and ctl.plan.canary is not None:
        want |= set(canary_gate.checks_for(ctl.plan.canary))
    return [c for c in ("discovery", "stack", "gemm", "comms", "inference") if c in want]


def classes_for(ctl: Controller, label: str) -> Path | None:
    """The class version a measurement judges against: the change's for changed hosts (and
    promoted ones), the rollback's after a rollback, the inventory's for baseline and
    before-samples."""
    plan = ctl.plan
    rel = (plan.change.classes if label in ("verify", "canary", "soak", "promoted")
           else plan.rollback.classes if label == "rollback-verify" and plan.rollback
           else None)
    if not rel:
        return None
    return classes_path(rel, source=f"rollout {ctl.rid} (its plan artifact)", field="classes")


def measure(ctl: Controller, hosts: list[str], k: int, *, label: str, checks: Sequence[str]
            ) -> list[CheckResult]:
    """Smoke runs until every host has the canary section's `repeats` samples of every
    canary metric (a probe reports a few repeats per run), at most MAX_RUNS runs."""
    c = ctl.plan.canary
    results: list[CheckResult] = []
    for _ in range(MAX_RUNS):
        results += ctl._smoke(hosts, k, label=label, checks=checks).results
        if c is None:
            break
        mine = by_host(results)
        short = [h for h in hosts if any(
            len(v) < c.repeats for v in canary_gate.samples(c, mine.get(h, [])).values())]
        if not short:
            break
        # A host that cannot be measured at all will not improve by asking again.
        if all(not any(r.probe_status == "ok" for r in mine.get(h, [])) for h in short):
            break
    return results


def measure_reference(ctl: Controller, k: int) -> None:
    """Hosts of later waves, same class, still on the old version: the reference for
    relative thresholds and for canary analysis. Measured before every wave, because the
    set shrinks as waves go by and the machine's load moves. When none is left (the last
    wave), the plan's `canary.last_wave` picks hosts promoted in earlier waves, or each
    host's own before-samples; never nothing."""
    n = ctl.plan.gates.baseline_hosts
    c = ctl.plan.canary
    wanted = checks(ctl, canary=True)
    if not n or not wanted:
        return
    rows = ctl.rows()
    later = [h for w in ctl.a.waves[k:] for h in w if rows[h].state == "pending"][:n]
    mode: Mode = "baseline"
    label = "baseline"
    hosts = later
    if not later and c is not None and c.mode == "baseline":
        if c.last_wave == "self":
            ctl.j.event(ctl.rid, "baseline", {"state": "started", "hosts": [], "mode": "self"},
                        wave=k)
            ctl.reference = Reference(mode="self")
            ctl.baseline = None
            return
        mode, label = "promoted", "promoted"
        hosts = [h for w in ctl.a.waves[:k - 1] for h in w if rows[h].state == "healthy"][:n]
    ctl.j.event(ctl.rid, "baseline", {"state": "started", "hosts": hosts, "mode": mode},
                wave=k)
    if not hosts:
        ctl.baseline = None
        ctl.reference = Reference(mode=mode, missing=(
            "no reference: no old-version host left and no host promoted in an earlier wave"
            if mode == "promoted" else "no baseline host left"))
        return
    ctl.j.set_rollout(ctl.rid, "running", wave=k, phase=f"measuring {label} hosts")
    set_reference(ctl, mode, hosts, measure(ctl, hosts, k, label=label, checks=wanted))
    ctl.j.event(ctl.rid, "baseline", {"state": "done", "hosts": hosts, "mode": mode}, wave=k)


def set_reference(ctl: Controller, mode: Mode, hosts: list[str],
                  results: list[CheckResult]) -> None:
    ctl.reference = Reference(mode=mode, hosts=list(hosts), results=list(results))
    ctl.baseline = [r for r in results if r.status == "pass"]


def restore_reference(ctl: Controller, k: int) -> None:
    """After a crash: the reference this wave was judged against, from the journal."""
    marks = [e for e in ctl.j.events(ctl.rid, kinds=("baseline",)) if e["wave"] == k]
    if not marks:
        return
    data = marks[-1]["data"]
    mode: Mode = data.get("mode", "baseline")
    if mode == "self":
        ctl.reference = Reference(mode="self")
        return
    if data.get("state") != "done":
        return
    start = max(e["seq"] for e in marks if e["data"].get("state") == "started")
    set_reference(ctl, mode, list(data.get("hosts") or []), [
        CheckResult.model_validate(e["data"]["result"])
        for e in ctl.j.events(ctl.rid, kinds=("smoke",), after=start)
        if e["data"].get("label") in ("baseline", "promoted") and e["wave"] == k
        and e["seq"] < marks[-1]["seq"]])


def measure_before(ctl: Controller, hosts: list[str], k: int) -> None:
    """Self-mode canary analysis (or a last wave judged so): each host's own numbers before
    the change."""
    c = ctl.plan.canary
    if c is None or not (c.mode == "self" or ctl.reference.mode == "self"):
        return
    results = measure(ctl, hosts, k, label="before", checks=canary_gate.checks_for(c))
    mine = by_host(results)
    for h in hosts:
        ctl.before[h] = mine.get(h, [])
