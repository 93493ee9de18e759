"""What a host ran before its change, read with the same probe reconcile uses.

Without it a report can only say what a host ran after the change; with it, "kernel
6.1.0-55 → 6.1.0-57". Recorded as a `hoststate` event labelled `before`, once per host: a
host applied again after a controller crash keeps its first reading, which is the old one.
"""

from __future__ import annotations

from pathlib import Path

from fleetgate.rollout import hoststate
from fleetgate.rollout.journal import Journal
from fleetgate.rollout.plan import RolloutPlan

LABEL = "before"


def record(j: Journal, rid: str, inventory: Path, plan: RolloutPlan, hosts: list[str],
           wave: int, runs_base: Path) -> None:
    """Probe `hosts` and journal each one's state; never raises: a reading that cannot be
    taken is recorded with its reason and the rollout goes on (the change is what counts)."""
    seen = {e["host"] for e in j.events(rid, kinds=("hoststate",), hosts=hosts)
            if e["data"].get("label") == LABEL}
    todo = [h for h in hosts if h not in seen]
    if not todo:
        return
    targets = [plan.change.target, *([plan.rollback.target] if plan.rollback else [])]
    try:
        states, why = hoststate.probe(inventory, todo, targets, runs_base=runs_base)
    except Exception as exc:  # the probe is evidence, not a gate
        states, why = dict.fromkeys(todo), dict.fromkeys(todo, f"{type(exc).__name__}: {exc}")
    j.events_at_once(rid, "hoststate", [
        (h, {"label": LABEL, "state": states.get(h), "why": why.get(h)}) for h in todo],
        wave=wave)
