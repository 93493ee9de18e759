"""What a host ran before its change, read with the same probe reconcile uses.

Without it a report can only say what a host ran after the change; with it, "kernel
6.1.0-55 → 6.1.0-57". Recorded as a `hoststate` event labelled `before`, once per host: a
host applied again after a controller crash keeps its first reading, which is the old one.

Two ways to take it, with the same module and the same journal rows:
- **in the apply batch's own run** (`InRun`, for a batch the controller runs here): the
  batch worker runs playbooks/rollout-before.yml ahead of the change in one ansible-playbook,
  journals the readings from the run's events, and only then lets the run go on to the change.
  This saves a whole Ansible start per batch, which for a small change is most of its cost.
- **in a run of its own** (`record`, for a batch on an execution node, whose run cannot wait
  on a file the worker here writes).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetgate.rollout import hostread, hoststate
from fleetgate.rollout.hostread import Wanted
from fleetgate.rollout.journal import Journal
from fleetgate.rollout.target import Target
from fleetgate.runner.private_state import write_private

if TYPE_CHECKING:  # the batch worker imports this module, and needs no plan schema
    from fleetgate.rollout.plan import RolloutPlan

LABEL = "before"
PLAYBOOK = "playbooks/rollout-before.yml"
# Names in rollout-before.yml that the worker recognises the play's events by.
PLAY = "Read host state before the change"
AWAIT_ACTION = "fleetgate_await_file"
RECORDED_TASK = "Wait until the batch worker has journalled the readings"
MARKER_VAR = "fleetgate_before_recorded"

Reading = tuple[dict[str, Any] | None, str | None]


def targets(plan: RolloutPlan) -> list[Target]:
    """What a reading must cover: the change's target and the rollback's."""
    return [plan.change.target, *([plan.rollback.target] if plan.rollback else [])]


def wanted(plan: RolloutPlan) -> Wanted:
    return hostread.wanted(targets(plan))


def unread(j: Journal, rid: str, hosts: list[str]) -> list[str]:
    """The hosts without a `before` reading yet (the first reading is the one kept)."""
    seen = {e["host"] for e in j.events(rid, kinds=("hoststate",), hosts=hosts)
            if e["data"].get("label") == LABEL}
    return [h for h in hosts if h not in seen]


def journal(j: Journal, rid: str, readings: dict[str, Reading], wave: int) -> None:
    """One transaction for a batch's readings; a host read before keeps its first one."""
    todo = unread(j, rid, list(readings))
    j.events_at_once(rid, "hoststate", [
        (h, {"label": LABEL, "state": readings[h][0], "why": readings[h][1]}) for h in todo],
        wave=wave)


def record(j: Journal, rid: str, inventory: Path, plan: RolloutPlan, hosts: list[str],
           wave: int, runs_base: Path) -> None:
    """Probe `hosts` and journal each one's state; never raises: a reading that cannot be
    taken is recorded with its reason and the rollout goes on (the change is what counts)."""
    todo = unread(j, rid, hosts)
    if not todo:
        return
    try:
        states, why = hoststate.probe(inventory, todo, targets(plan), runs_base=runs_base)
    except Exception as exc:  # the probe is evidence, not a gate
        states, why = dict.fromkeys(todo), dict.fromkeys(todo, f"{type(exc).__name__}: {exc}")
    journal(j, rid, {h: (states.get(h), why.get(h)) for h in todo}, wave)


class InRun:
    """The readings of an apply batch's own run, gathered from its events by the batch worker.
    When the run reaches its wait (the play's last task starts, so every host has answered or
    dropped out), they are journalled in one transaction and then the marker file is written
    that lets the run go on to the change."""

    def __init__(self, j: Journal, rid: str, wave: int, hosts: list[str], marker: Path,
                 want: Wanted, release: dict[str, Any] | None = None):
        self.j, self.rid, self.wave, self.hosts, self.marker = j, rid, wave, hosts, marker
        self.want = want
        self.release = release or {}  # the release wait's vars (rollout/ahead.py)
        self.states: dict[str, dict[str, Any]] = {}
        self.why: dict[str, str] = {}
        self.done = False

    def extravars(self) -> dict[str, Any]:
        return {**hostread.extravars(self.want), MARKER_VAR: str(self.marker), **self.release}

    def on_event(self, event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        if data.get("play") != PLAY:
            return
        name = str(event.get("event", ""))
        action = str(data.get("task_action", ""))
        if (name == "playbook_on_task_start" and action.endswith(AWAIT_ACTION)
                and data.get("task") == RECORDED_TASK):
            self.flush()
            return
        host = data.get("host")
        if not host or not name.startswith("runner_on_") or not action.endswith("raw"):
            return
        res = data.get("res") or {}
        state = hostread.reading(res, self.want) if name == "runner_on_ok" else None
        if state is not None:
            self.states[host] = state
        elif name in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            self.why[host] = hostread.why_not(res, unreachable=name == "runner_on_unreachable")

    def flush(self, ended: str = "") -> None:
        """Journal the readings, then write the marker; once. `ended`: the run is over and
        never reached the wait (why, for the hosts it did not read)."""
        if self.done:
            return
        self.done = True
        missing = f"no answer ({ended or 'the run did not read the host'})"
        journal(self.j, self.rid, {
            h: (self.states.get(h), None if h in self.states else self.why.get(h, missing))
            for h in self.hosts}, self.wave)
        if not ended:
            write_private(self.marker, "recorded\n")
