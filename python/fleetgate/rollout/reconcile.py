"""Resume after a controller crash: wait out live batch workers, read back each in-flight
host's real state, then carry every host on from where the evidence says it is.

Functions of the controller (engine.Controller); `Controller.reconcile()` is the entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetgate.rollout import hoststate, measure, worker
from fleetgate.rollout.journal import IN_FLIGHT
from fleetgate.rollout.target import Target

if TYPE_CHECKING:
    from fleetgate.rollout.engine import Controller


def reconcile(ctl: Controller) -> None:
    """Before trusting the journal after a crash: wait out every batch worker still
    running, ask every in-flight host what it actually runs, then carry each host on from
    where the evidence says it is."""
    rows = ctl.rows()
    inflight = [h for h, r in rows.items() if r.state in IN_FLIGHT]
    open_batches = ctl.j.open_batches(ctl.rid)
    ctl.j.event(ctl.rid, "reconcile", {"in_flight": {h: rows[h].state for h in inflight},
                                         "open_batches": [b["id"] for b in open_batches]})
    # The host state read below must be the state live workers leave, not a midpoint.
    for b in open_batches:
        # A remote batch whose local worker died too is followed again on its node: the
        # stream is kept there, so the job is collected, never started a second time.
        ctl.exits.add_if_at_recap(
            b["dir"], worker.wait_or_reattach(b["dir"], ctl.lease.token, grace_s=10))
    states: dict[str, dict[str, Any] | None] = {}
    if inflight:
        targets = [ctl.plan.change.target]
        if ctl.plan.rollback is not None:
            targets.append(ctl.plan.rollback.target)
        states, why = hoststate.probe(ctl.inventory, inflight, targets,
                                      runs_base=ctl.dir / "runs")
        for h in inflight:
            st = states[h]
            ctl.j.event(ctl.rid, "reconcile_host", {
                "journal_state": rows[h].state, "host_state": st, "why": why.get(h),
                "at_change_target": at_target(ctl.plan.change.target, st)},
                host=h, wave=rows[h].wave)
    by_wave: dict[int, list[str]] = {}
    for h in inflight:
        by_wave.setdefault(rows[h].wave, []).append(h)
    for k, hosts in sorted(by_wave.items()):
        measure.restore_reference(ctl, k)
        resume_hosts(ctl, hosts, k, states)
    for b in ctl.j.open_batches(ctl.rid):  # e.g. an undrain whose host was re-verified
        ctl._close_batch(b["id"], b["wave"], b["dir"], worker.result(b["dir"]))


def at_target(target: Target, st: dict[str, Any] | None) -> bool:
    return st is not None and not target.empty and not hoststate.mismatches(target, st)


def resume_hosts(ctl: Controller, hosts: list[str], k: int,
                  states: dict[str, dict[str, Any] | None]) -> None:
    rows = ctl.rows()
    by_state: dict[str, list[str]] = {}
    for h in hosts:
        by_state.setdefault(rows[h].state, []).append(h)
    if draining := by_state.get("draining", []):
        found, res = rejoin(ctl, "drain", draining)
        if found and res is not None:
            ok, failed = ctl._split(res, draining, "drain")
            ctl._drain_failed(failed)
        else:
            ok = ctl._drain_stage(draining, k)  # draining twice is harmless
        ctl.j.set_hosts(ctl.rid, ok, "applying")
        by_state.setdefault("applying", []).extend(ok)
    if applying := by_state.get("applying", []):
        found, res = rejoin(ctl, "apply", applying)
        if res is not None:
            ok, failed = ctl._split(res, applying, "apply")
            if failed:
                ctl._fail(list(failed), k, failed)
        else:
            # No result: the host's own state decides. At target: the apply finished
            # (or a closed batch says so) -> verify. Otherwise apply it (again).
            ok = []
            for h in applying:
                if at_target(ctl.plan.change.target, states.get(h)) or (
                        applied_in_journal(ctl, h)):
                    ok.append(h)
                else:
                    ctl.j.set_host(ctl.rid, h, "pending",
                                    "apply " + ("interrupted" if found else "not started")
                                    + " by a controller crash; will be applied")
        by_state.setdefault("verifying", []).extend(ok)
    if verifying := by_state.get("verifying", []):
        ctl._verify_stage(verifying, k)
    if rolling := by_state.get("rolling_back", []):
        reasons = {h: rows[h].reason for h in rolling}
        found, res = rejoin(ctl, "rollback", rolling)
        ctl._rollback(rolling, k, reasons, res)


def applied_in_journal(ctl: Controller, h: str) -> bool:
    """The last closed apply batch of this host reported it ok or changed."""
    for e in reversed(ctl.j.events(ctl.rid, kinds=("batch",))):
        d = e["data"]
        if (d.get("state") == "done" and str(d.get("batch", "")).startswith("apply-")
                and h in (d.get("hosts") or {})):
            return d["hosts"][h] in ("ok", "changed")
    return False


def rejoin(ctl: Controller, kind: str, hosts: list[str]
            ) -> tuple[bool, dict[str, dict[str, Any]] | None]:
    """After a crash: the open batch of `kind` that holds these hosts (with execution nodes,
    the open batches, one per node, that hold them together), waited for and closed.
    (found, the results, or None when no worker left one)."""
    mine = [b for b in ctl.j.open_batches(ctl.rid)
            if b["kind"] == kind and set(b["hosts"]) & set(hosts)]
    if not mine or not set(hosts) <= {h for b in mine for h in b["hosts"]}:
        return False, None
    merged: dict[str, dict[str, Any]] | None = None
    for b in mine:
        ctl.log(f"re-joining {kind} batch {b['id']} ({', '.join(b['hosts'])})")
        doc = worker.wait_or_reattach(b["dir"], ctl.lease.token, grace_s=10)
        ctl.exits.add_if_at_recap(b["dir"], doc)
        if (b["pid"] is None and worker.pid_of(b["dir"]) is not None
                and worker.may_have_run(b["dir"])):
            # Spawned (or released, ahead.py) just before the crash, before its pid was
            # committed.
            ctl.j.batch_spawned(b["id"], ctl.rid, worker.pid_of(b["dir"]) or 0)
        ctl._close_batch(b["id"], b["wave"], b["dir"], doc)
        out = ctl._outcomes(doc, hosts if len(mine) == 1 else b["hosts"])
        if out is not None:
            merged = {**(merged or {}), **out}
    return True, merged
