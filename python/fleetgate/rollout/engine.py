"""The rollout controller: waves, batches, gates, budgets, halts, and resume after a crash.

Every step follows the same discipline: commit the transition to the journal, then act, then
commit the result. Ansible runs in batch workers that outlive the controller (worker.py), so a
`kill -9` at any point leaves either a finished batch with its result on disk, a live worker
to wait for, or a host whose real state `resume` reads back before deciding anything.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.rollout import (
    ahead,
    before,
    budgets,
    canary_gate,
    execution_nodes,
    gates,
    image_change,
    measure,
    reconcile,
    signing,
    worker,
)
from fleetgate.rollout.journal import TERMINAL_HOST, HostRow, Journal
from fleetgate.rollout.lease import Lease
from fleetgate.rollout.plan import RolloutPlan, classes_path, drain_of, playbook_path
from fleetgate.rollout.target import Target
from fleetgate.rollout.waves import Assignment, Host
from fleetgate.runner import inventory as inventory_sources
from fleetgate.runner import secret_vars
from fleetgate.runner.ansible import SECRET_VARS_FILE
from fleetgate.runner.private_state import private_dirs, private_state_dir, private_umask
from fleetgate.runner.remote import RemoteNode
from fleetgate.runner.secret_vars import SecretRef
from fleetgate.site import current_site
from fleetgate.smoke.model import CheckResult, SmokeRun
from fleetgate.smoke.runner import run_smoke
from fleetgate.system.procs import proc_start

POLL_S = 1.0
# A drain batch may run this long beyond the plan's drain.timeout_s (the wait on the node
# itself, which the drain task enforces and reports): Ansible's own start-up and the scheduler
# commands around the wait. The same limit wherever a drain or undrain runs.
DRAIN_OVERHEAD_S = 300


class LeaseLost(FleetgateError):
    exit_code = 12


class Stop(Exception):
    """Unwinds the wave loop at a safe point; carries the rollout's final state."""

    def __init__(self, state: str, reason: str, *, resumable: bool = False):
        super().__init__(reason)
        self.state, self.reason, self.resumable = state, reason, resumable


def assignment_of(artifact: dict[str, Any]) -> Assignment:
    hosts = {name: Host(name, h.get("class"), dict(h.get("domains", {})),
                        tuple(h.get("groups", [])))
             for name, h in artifact["hosts"].items()}
    return Assignment([list(w) for w in artifact["waves"]], hosts, list(artifact.get("notes", [])))


def require_secrets(plan: RolloutPlan | dict[str, Any], where: str) -> None:
    """Every secret var of the plan (or an artifact's plan) readable here and now, before
    any host is touched: a start or resume from a shell without the variable is bad input,
    not a failed batch. Reading them also teaches this process's redactor their values."""
    if not isinstance(plan, RolloutPlan):
        plan = RolloutPlan.model_validate(plan)
    for section, part in (("change", plan.change), ("rollback", plan.rollback)):
        if part is not None:
            secret_vars.resolve(part.secret_vars, source=where, section=section)


def rollout_dir(rid: str) -> Path:
    return private_state_dir() / "rollouts" / rid


class Controller:
    # A controller whose batches run no worker (an executor stub) starts none ahead.
    PREWARM = True

    def __init__(self, journal: Journal, rid: str, *, lease_ttl_s: float = 30.0,
                 log: Callable[[str], None] | None = None):
        row = journal.rollout(rid)
        if row is None:
            raise FleetgateError(f"no rollout {rid} in the journal", source=str(journal.path))
        self.j = journal
        self.rid = rid
        self._refused_approvals: set[int] = set()
        self.artifact = row.artifact
        self.plan = RolloutPlan.model_validate(row.artifact["plan"])
        self.a = assignment_of(row.artifact)
        self.inventory = Path(row.inventory)
        self.limits = budgets.limits(self.plan, self.a)
        # The budget counters, rebuilt from the journal when run() takes the rollout and kept
        # in step with every host transition it commits (Journal.own).
        self.tally = budgets.Tally(self.limits, self.a)
        self.drain = drain_of(self.plan)
        require_secrets(self.plan, f"rollout {rid}")
        self.dir = private_dirs(rollout_dir(rid))
        self.lease = Lease(journal, rid, [f"rollout:{rid}", f"inventory:{row.inventory}"],
                           ttl_s=lease_ttl_s)
        self.interrupted = False
        self.halt_now: str | None = None  # a gate that halts whatever the budget says
        self.baseline: list[CheckResult] | None = None  # passing results: relative thresholds
        self.reference = measure.Reference()  # what this wave's canaries are judged against
        self.before: dict[str, list[CheckResult]] = {}  # self-mode canary: host -> before
        self.log = log or (lambda _msg: None)
        # Each batch's worker is started ahead of it (worker.py), and the next apply batch's
        # whole run, held until its turn (ahead.py).
        self.warm = worker.WarmWorkers(self.dir / "warm")
        self.ahead = ahead.Ahead()
        self.exits = worker.Exits()  # workers that gave their result at the recap
        self.owner = {"pid": os.getpid(), "start": proc_start(os.getpid())}

    # ------------------------------------------------------------------------ entry points

    @private_umask()  # the controller writes only state (batch dirs, specs, run dirs)
    def run(self, *, resume: bool = False) -> str:
        notes = self.lease.acquire()
        for n in notes:
            self.log(n)
        self.lease.start_heartbeat()
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            self.interrupted = True
            self.log(f"{signal.Signals(signum).name}: stopping at the next safe point "
                     "(no new hosts; in-flight hosts finish)")

        for s in old:
            signal.signal(s, on_signal)
        try:
            # The lease makes this process the rollout's only writer: its host rows are read
            # from memory from here on (Journal.own), not from the database on every batch.
            self.j.own(self.rid, self.tally)
            if resume:
                self._tidy_held()
                self.reconcile()
            if self.PREWARM:
                self.warm.start()  # the first batch's worker too (its imports take ~0.5 s)
            state, reason, resumable = self._drive()
            self.exits.wait(self.log)  # before the rollout's last row: no run still ending
            self._finish(state, reason, resumable)
            return state
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.ahead.close()
            self.warm.close()
            self.exits.wait(self.log)
            self.j.disown(self.rid)
            self.lease.release()

    def _tidy_held(self) -> None:
        """The dirs of runs an earlier controller held ahead and never released: in no
        journal, and over once their worker had its last word (ahead.py)."""
        known = {r[0] for r in self.j.query("SELECT id FROM batches WHERE rollout_id=?",
                                            (self.rid,))}
        for d in (self.dir / "batches").glob("apply-*"):
            if d.name not in known and ahead.said(d) in (ahead.ENDED, ahead.CANCEL):
                shutil.rmtree(d, ignore_errors=True)

    def _finish(self, state: str, reason: str, resumable: bool) -> None:
        if state in ("halted", "aborted") and not resumable:
            self.j.set_hosts(self.rid, [h for h, r in self.rows().items() if r.state == "pending"],
                             "skipped", f"rollout {state} before this host started: {reason}")
        self.j.set_rollout(self.rid, state, reason=reason, resumable=resumable,
                           hosts={h: r.state for h, r in self.rows().items()})
        self.log(f"rollout {self.rid} {state}" + (f": {reason}" if reason else ""))

    def rows(self) -> dict[str, HostRow]:
        return self.j.hosts(self.rid)

    def row(self, host: str) -> HostRow:
        """One host's row, without copying every row as rows() does."""
        r = self.j.host(self.rid, host)
        if r is None:
            raise KeyError(host)
        return r

    # ------------------------------------------------------------------------ safe points

    def _interrupts(self) -> None:
        """What stops even a wait: a lost lease, an abort, an operator's signal."""
        if self.lease.lost.is_set():
            raise LeaseLost("another controller took over this rollout's lease; stopping "
                            "without touching more hosts", source=f"rollout:{self.rid}")
        aborts = self.j.requests(self.rid, "abort")
        if aborts:
            raise Stop("aborted", f"aborted by {aborts[-1]['by']}: {aborts[-1]['reason']}")
        if self.interrupted:
            raise Stop("halted", "operator interrupt", resumable=True)

    def _safe_point(self, *, wave: int) -> None:
        """Between batches: the only place a rollout decides to stop or wait."""
        self._interrupts()
        if self.halt_now:
            raise Stop("halted", self.halt_now)
        broken = budgets.breaches(self.limits, self.a, self.tally)
        if broken:
            raise Stop("halted", "; ".join(broken))
        w = self.plan.window
        if w is not None:
            while not w.is_open(dt.datetime.now(dt.UTC)):
                if w.when_closed == "halt":
                    raise Stop("halted", "outside the maintenance window", resumable=True)
                self.j.set_rollout(self.rid, "running", wave=wave, phase="waiting for window")
                self._sleep(30)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(POLL_S, left))
            self._interrupts()

    # ---------------------------------------------------------------------------- driving

    def _drive(self) -> tuple[str, str, bool]:
        try:
            for k in range(1, len(self.a.waves) + 1):
                self._wave(k)
        except Stop as s:
            return s.state, s.reason, s.resumable
        return "completed", "", False

    def _wave(self, k: int) -> None:
        members = self.a.waves[k - 1]
        rows = self.rows()
        if all(rows[h].state in TERMINAL_HOST for h in members):
            self._maybe_soak(k)
            return
        self._safe_point(wave=k)
        self._approval(k)
        measure.measure_reference(self, k)
        while True:
            self._safe_point(wave=k)
            if not self.tally.pending[k - 1]:
                break
            batch = budgets.next_batch(self.plan, self.limits, self.a, self.tally, k)
            if not batch:
                raise Stop("halted", "no budget left to start another host")
            self.j.set_rollout(self.rid, "running", wave=k, phase="applying",
                               batch=batch)
            self._pipeline(batch, k)
        self._safe_point(wave=k)
        self._maybe_soak(k)

    def _approval(self, k: int) -> None:
        if k not in self.plan.approvals.before_waves:
            return
        announced = False
        while not self._approved(k):
            if not announced:
                self.j.set_rollout(self.rid, "running", wave=k, phase="awaiting approval")
                self.j.event(self.rid, "approval_needed", {"wave": k}, wave=k)
                self.log(f"wave {k} needs approval: fleetgate rollout approve {self.rid} "
                         f"--wave {k} --reason TEXT")
                announced = True
            self._sleep(POLL_S * 2)

    def _approved(self, k: int) -> bool:
        site = current_site()
        if not site.config.security.require_signed_approvals:
            return any(r["wave"] == k for r in self.j.requests(self.rid, "approve"))
        signers = site.allowed_signers
        for e in self.j.events(self.rid, kinds=("approve",)):
            if e["wave"] != k or signers is None:
                continue
            try:
                signing.recorded_approval(self.rid, k, e["data"], signers)
                return True
            except FleetgateError as exc:
                if e["seq"] not in self._refused_approvals:
                    self._refused_approvals.add(e["seq"])
                    self.log(f"wave {k}: an approval does not verify and opens nothing: {exc}")
        return False

    def _maybe_soak(self, k: int) -> None:
        if k >= len(self.a.waves):
            return
        done = [e for e in self.j.events(self.rid, kinds=("soak",)) if e["wave"] == k]
        if any(e["data"].get("state") == "done" for e in done):
            return
        rows = self.rows()
        healthy = [h for h in self.a.waves[k - 1] if rows[h].state == "healthy"]
        started = [e for e in done if e["data"].get("state") == "started"]
        until = (started[-1]["data"]["until"] if started
                 else time.time() + self.plan.soak.seconds)
        if not started:
            self.j.event(self.rid, "soak", {"state": "started", "until": until}, wave=k)
        self.j.set_rollout(self.rid, "soaking", wave=k,
                           phase=f"soak until {dt.datetime.fromtimestamp(until, dt.UTC):%H:%M:%SZ}")
        self._sleep(max(0.0, until - time.time()))
        if self.plan.soak.rerun_smoke and self.plan.soak.seconds > 0 and healthy:
            # The gates the change passed, with the same retry and inconclusive policies: a
            # host that cannot be measured now is held, as after its change, not rolled back.
            failed, unsure = gates.smoke(self, healthy, k, label="soak")
            bad = [h for h in healthy if h in failed]
            # A batch's size bounds a rollback batch too, as it bounds the change's.
            step = self.plan.concurrency
            for i in range(0, len(bad), step):
                part = bad[i:i + step]
                self._fail(part, k, {h: f"after soak: {failed[h]}" for h in part},
                           redrain=True)
            if unsure:
                self._inconclusive(unsure, k, label="soak", redrain=True)
        self.j.event(self.rid, "soak", {"state": "done"}, wave=k)
        self._safe_point(wave=k)

    # ------------------------------------------------------------------- one batch of hosts

    @property
    def _reads_in_batch(self) -> bool:
        """Each host's `before` reading is taken inside its apply batch's own run, which
        waits on the batch's worker here; a run on an execution node cannot, so its hosts are
        read in a run of their own first (rollout/before.py)."""
        return self.plan.execution is None

    def _pipeline(self, hosts: list[str], k: int) -> None:
        """pending -> (draining) -> applying -> verifying -> healthy | failure handling."""
        todo = [h for h in hosts if self.row(h).state == "pending"]
        if self.drain is not None and todo:
            self.j.set_hosts(self.rid, todo, "draining")
            todo = self._drain_stage(todo, k)
        if todo:
            measure.measure_before(self, todo, k)
            if not self._reads_in_batch:
                before.record(self.j, self.rid, self.inventory, self.plan, todo, k,
                              self.dir / "runs")
            self.j.set_hosts(self.rid, todo, "applying")
            todo = self._apply_stage(todo, k)
        if todo:
            self._verify_stage(todo, k)

    def _drain_run(self, kind: str, hosts: list[str], k: int) -> dict[str, dict[str, Any]] | None:
        """A drain or undrain batch. The reason the hosts carry while drained names this
        rollout and its change, so undrain resumes only what this rollout drained."""
        assert self.drain is not None
        playbook = self.drain.drain_playbook if kind == "drain" else self.drain.undrain_playbook
        return self._stage(kind, hosts, k, playbook, {
            "fleetgate_rollout_id": self.rid, "fleetgate_change": self.plan.change.run_playbook,
            "fleetgate_drain_timeout": self.drain.timeout_s,
        }, self.drain.timeout_s + DRAIN_OVERHEAD_S)

    def _drain_stage(self, hosts: list[str], k: int) -> list[str]:
        res = self._drain_run("drain", hosts, k)
        ok, failed = self._split(res, hosts, "drain")
        self._drain_failed(failed)
        return ok

    def _drain_failed(self, failed: dict[str, str]) -> None:
        """Not failed_held: nothing was applied, and the drain task itself resumed a node it
        drained (or left another owner's drain alone); its message, the reason, says which."""
        self.j.set_hosts(self.rid, list(failed), "drain_failed", failed)

    def _apply_stage(self, hosts: list[str], k: int) -> list[str]:
        c = self.plan.change
        extra = dict(c.extra_vars)
        if c.image_pin is not None:
            extra.update(image_change.reimage_vars(c.image_pin.model_dump()))
        res = self._stage("apply", hosts, k, c.run_playbook, extra,
                          c.timeout_s, c.classes, c.secret_vars,
                          read_before=self._reads_in_batch)
        ok, failed = self._split(res, hosts, "apply")
        if failed:
            self._fail(list(failed), k, failed)
        return ok

    def _verify_stage(self, hosts: list[str], k: int) -> None:
        self.j.set_hosts(self.rid, [h for h in hosts if self.row(h).state != "verifying"],
                         "verifying")
        good, failed, unsure = gates.verify(self, hosts, k, self.plan.change.target,
                                            label="verify")
        good, c_failed, c_unsure = gates.canary(self, good, k)
        failed.update(c_failed)
        unsure.update(c_unsure)
        if failed:
            self._fail(list(failed), k, failed)
        if unsure:
            self._inconclusive(unsure, k)
        self._healthy(good, k)

    def _healthy(self, hosts: list[str], k: int) -> None:
        if hosts and self.drain is not None:
            res = self._drain_run("undrain", hosts, k)
            hosts, failed = self._split(res, hosts, "undrain")
            # Verified but still out of service: say so rather than call it healthy.
            self.j.set_hosts(self.rid, list(failed), "failed_held", failed)
        self.j.set_hosts(self.rid, hosts, "healthy", "applied and verified")

    def _inconclusive(self, unsure: dict[str, str], k: int, *, label: str = "verify",
                      redrain: bool = False) -> None:
        # The retry policy was already spent inside the gates; what is left halts. A host
        # back in service (after a soak) is drained again: held means out of service.
        self.j.set_hosts(self.rid, list(unsure), "failed_held",
                         {h: f"{label} inconclusive: {why}" for h, why in unsure.items()})
        if redrain and self.drain is not None:
            self._drain_run("drain", list(unsure), k)
        self.halt_now = (f"{label} inconclusive on " + ", ".join(sorted(unsure))
                         + f" (policy {self.plan.gates.inconclusive.policy})")

    def _fail(self, hosts: list[str], k: int, reasons: dict[str, str], *,
              redrain: bool = False) -> None:
        if self.plan.on_failure != "rollback":
            self.j.set_hosts(self.rid, hosts, "failed_held", reasons)
            if redrain and self.drain is not None:
                self._drain_run("drain", hosts, k)
            return
        self._rollback(hosts, k, reasons)

    def _rollback(self, hosts: list[str], k: int, reasons: dict[str, str],
                  res: dict[str, dict[str, Any]] | None = None) -> None:
        """Roll back, then prove it: the rollback target, then the same gates. `res` is a
        rollback batch's result already in hand (re-joined after a crash)."""
        rb = self.plan.rollback
        if rb is None:
            self._reimage_back(hosts, k, reasons, res)
            return
        self.j.set_hosts(self.rid, [h for h in hosts if self.row(h).state != "rolling_back"],
                         "rolling_back", reasons)
        if res is None:
            res = self._stage("rollback", hosts, k, rb.run_playbook,
                              dict(rb.extra_vars), rb.timeout_s, rb.classes, rb.secret_vars)
        self._rolled_back(hosts, k, reasons, res, rb.target)

    def _reimage_back(self, hosts: list[str], k: int, reasons: dict[str, str],
                      res: dict[str, dict[str, Any]] | None) -> None:
        """An image change's rollback: each host re-imaged to the image it said it ran before
        the change (its `before` reading), one batch per previous image."""
        before = {e["host"]: e["data"].get("state") or {} for e in self.j.events(
            self.rid, kinds=("hoststate",), hosts=hosts) if e["data"].get("label") == "before"}
        said: dict[str, str] = {
            h: str((before.get(h, {}).get("files") or {}).get(image_change.IMAGE_ID_FILE) or "")
            for h in hosts}
        # One store lookup per image the hosts named, then one batch per image.
        pins = {was: pin for was in set(said.values())
                if was and (pin := image_change.previous_pin(was)) is not None}
        groups: dict[str, list[str]] = {}
        for h, was in said.items():
            if was not in pins:
                self.j.set_host(self.rid, h, "failed_held", f"{reasons[h]}; no previous image "
                                f"to re-image back to (the host reported {was or 'none'})")
                continue
            groups.setdefault(was, []).append(h)
            if self.row(h).state != "rolling_back":
                self.j.set_host(self.rid, h, "rolling_back", reasons[h])
        c = self.plan.change
        for was, group in groups.items():
            got = res if res is not None else self._stage(
                "rollback", group, k, c.run_playbook, image_change.reimage_vars(pins[was]),
                c.timeout_s)
            self._rolled_back(group, k, reasons, got, image_change.target_of(pins[was]))

    def _rolled_back(self, hosts: list[str], k: int, reasons: dict[str, str],
                     res: dict[str, dict[str, Any]] | None, target: Target) -> None:
        """A rollback batch's result, then the proof: the rollback target, the same gates."""
        ok, failed = self._split(res, hosts, "rollback")
        self.j.set_hosts(self.rid, list(failed), "failed_held",
                         {h: f"{reasons[h]}; rollback failed: {why}" for h, why in failed.items()})
        if not ok:
            return
        good, bad, unsure = gates.verify(self, ok, k, target, label="rollback-verify")
        self.j.set_hosts(self.rid, good, "rolled_back",
                         {h: f"{reasons[h]}; rolled back and verified on the old version"
                          for h in good})
        unproven = {**bad, **unsure}
        self.j.set_hosts(self.rid, list(unproven), "failed_held",
                         {h: f"{reasons[h]}; rollback not verified: {why}"
                          for h, why in unproven.items()})

    # ------------------------------------------------------------------- measurement

    def _smoke(self, hosts: list[str], k: int, *, label: str,
               checks: Sequence[str] | None = None) -> SmokeRun:
        """One smoke run, every result journalled. The canary metrics' checks are judged by
        canary analysis per host, so the suite's fleet-relative check leaves them alone."""
        c = self.plan.canary
        ex = self.plan.execution
        # With execution nodes, a host is measured by the node that applies its changes: the
        # one its failure domain names, next to it.
        nodes: dict[str, RemoteNode] = {}
        if ex is not None:
            parts = execution_nodes.by_node(ex, self.a.hosts, [h for h in hosts
                                                               if h in self.a.hosts])
            for name, part in parts.items():  # one connection record per node, not per host
                nodes.update(dict.fromkeys(part, execution_nodes.remote_node(self.inventory,
                                                                              name)))
        run = run_smoke(self.inventory, hosts=hosts, nodes=nodes, owner=self.rid,
                        classes=measure.classes_for(self, label),
                        only=checks or list(self.plan.gates.checks),
                        baseline=self.baseline, forks=self.plan.gates.forks,
                        runs_base=self.dir / "runs",
                        skip_relative=canary_gate.checks_for(c) if c is not None else ())
        self.j.events_at_once(self.rid, "smoke", [
            (r.host, {"label": label, "result": r.model_dump(mode="json"),
                      **({"execution_node": run.execution_nodes[r.host]}
                         if r.host in run.execution_nodes else {})})
            for r in run.results], wave=k)
        return run

    # --------------------------------------------------------------------- batch execution

    def _split(self, res: dict[str, dict[str, Any]] | None, hosts: list[str], what: str
               ) -> tuple[list[str], dict[str, str]]:
        ok: list[str] = []
        failed: dict[str, str] = {}
        for h in hosts:
            r = (res or {}).get(h)
            if r is None:
                failed[h] = f"{what}: no result for the host" + ("" if res is not None else
                                                                  " (the batch worker died)")
            elif r["outcome"] == "unreachable":
                failed[h] = f"unreachable during {what}: {r['message']}"
            elif r["outcome"] == "failed":
                failed[h] = f"{what} failed at task '{r['task']}' on {h}: {r['message']}"
            else:
                ok.append(h)
        return ok, failed

    def _stage(self, kind: str, hosts: list[str], k: int, playbook_rel: str,
               extravars: dict[str, Any], timeout: int, classes: str | None = None,
               secrets: dict[str, SecretRef] | None = None, *, read_before: bool = False
               ) -> dict[str, dict[str, Any]] | None:
        """Run one worker for `hosts` and wait for it; host -> outcome (None: no result).
        The artifact's paths are checked again here, as at planning: the site's tree may have
        changed since (a playbook moved out, a symlink planted). With execution nodes, one
        worker per node the hosts map to, all started before any is waited for: each node
        runs its zone's part of the batch at the same time."""
        where = f"rollout {self.rid} (its plan artifact)"
        playbook = playbook_path(playbook_rel, source=where, field=f"{kind}.playbook")
        classes_dir = (classes_path(classes, source=where, field=f"{kind}.classes")
                       if classes else None)
        spec: dict[str, Any] = {
            "rollout_id": self.rid, "wave": k, "journal": str(self.j.path),
            "inventory": str(self.inventory), "playbook": str(playbook),
            "extravars": extravars, "timeout": timeout, "secret_vars": dict(secrets or {}),
            "env": {"FLEETGATE_CLASSES_DIR": str(classes_dir)} if classes_dir else {},
            "read_before": before.wanted(self.plan) if read_before else None}
        ex = self.plan.execution
        groups: dict[str | None, list[str]] = {None: hosts}
        if ex is not None:
            groups = {n: g for n, g in execution_nodes.by_node(ex, self.a.hosts, hosts).items()}
        if read_before and ex is None:
            # A run here that reads its hosts first waits for its release (ahead.py).
            spec["owner"] = self.owner
            sources = inventory_sources.unchanged_key(self.inventory)
            running = [(hosts, *self._start_apply(hosts, k, spec, sources))]
            self._hold_next(k, spec, sources)
        else:
            running = [(group, *self._spawn_batch(kind, group, k, spec, node))
                       for node, group in groups.items()]
        merged: dict[str, dict[str, Any]] | None = None
        for group, bid, bdir, pid in running:
            doc = worker.wait(bdir, spawned_pid=pid)
            self.exits.add_if_at_recap(bdir, doc, child=pid)
            self._close_batch(bid, k, bdir, doc)
            out = self._outcomes(doc, group)
            if out is not None:
                # A part without a result leaves its hosts out: "no result for the host".
                merged = {**(merged or {}), **out}
        return merged

    def _batch_spec(self, hosts: list[str], k: int, spec: dict[str, Any],
                    node: str | None) -> dict[str, Any]:
        remote = (execution_nodes.remote_node(self.inventory, node).model_dump()
                  if node is not None else None)
        return {**spec, "wave": k, "limit": ",".join(hosts), "forks": len(hosts),
                "execution_node": remote, "lease_token": self.lease.token}

    def _new_batch_dir(self, kind: str) -> tuple[str, Path]:
        bid = f"{kind}-{uuid.uuid4().hex[:8]}"
        return bid, private_dirs(self.dir / "batches" / bid)

    def _spawn_batch(self, kind: str, hosts: list[str], k: int, spec: dict[str, Any],
                     node: str | None) -> tuple[str, Path, int]:
        full = self._batch_spec(hosts, k, spec, node)
        bid, bdir = self._new_batch_dir(kind)
        self.j.start_batch(bid, self.rid, k, kind, hosts, bdir, node=node)
        if full.get("owner"):
            ahead.claim(bdir, ahead.GO)  # its turn already: released before it starts
        pid = worker.spawn(bdir, {**full, "batch_id": bid}, warm=self.warm)
        self.j.batch_spawned(bid, self.rid, pid)
        return bid, bdir, pid

    def _start_apply(self, hosts: list[str], k: int, spec: dict[str, Any],
                     sources: tuple[object, ...] | None) -> tuple[str, Path, int]:
        """This apply batch's run: the one held ahead for exactly it, released once the
        journal has the batch, or a fresh one. `sources`: the inventory's key now
        (runner.inventory.unchanged_key)."""
        held = self.ahead.take(self._batch_spec(hosts, k, spec, None), sources)
        if held is not None:
            self.j.start_batch(held.bid, self.rid, k, "apply", hosts, held.bdir)
            if ahead.claim(held.bdir, ahead.GO) == ahead.GO:
                self.j.batch_spawned(held.bid, self.rid, held.pid, ahead=True)
                return held.bid, held.bdir, held.pid
            # Its run ended by itself between the look and the release: it touched no host.
            self.j.finish_batch(held.bid, self.rid, k, {
                "dir": str(held.bdir), "error": "its run, started ahead, ended before its "
                                                "turn and was not used"})
        return self._spawn_batch("apply", hosts, k, spec, None)

    def _hold_next(self, k: int, spec: dict[str, Any],
                   sources: tuple[object, ...] | None) -> None:
        """Start the run of the apply batch the wave loop will pick next if every host now
        applying ends healthy, held until then (ahead.py). Not across a soak or an approval,
        nor with a drain (which decides the batch's hosts), nor for an inventory whose
        answer is not all in its files (a held run would keep an old answer)."""
        if not self.PREWARM or self.drain is not None or sources is None:
            return
        wave = k
        if not self.tally.pending[k - 1]:  # this wave's last batch: the next wave's first
            wave = k + 1
            if (wave > len(self.a.waves) or self.plan.soak.seconds
                    or wave in self.plan.approvals.before_waves):
                return
        nxt = budgets.next_batch(self.plan, self.limits, self.a, self.tally, wave)
        if not nxt:
            return
        full = self._batch_spec(nxt, wave, spec, None)
        bid, bdir = self._new_batch_dir("apply")
        pid = worker.spawn(bdir, {**full, "batch_id": bid}, warm=self.warm)
        self.ahead.hold(ahead.Held(bid, bdir, pid, full, sources))

    @staticmethod
    def _outcomes(doc: dict[str, Any] | None, hosts: list[str]
                  ) -> dict[str, dict[str, Any]] | None:
        """Host -> outcome; a host the run never reached (the play did not even parse) gets
        the run's own error, so its reason says why."""
        if doc is None:
            return None
        out = dict(doc["hosts"])
        for h in hosts:
            if h not in out and doc.get("error"):
                out[h] = {"outcome": "failed", "task": "(run)", "message": doc["error"]}
        return out

    def _close_batch(self, bid: str, k: int, bdir: Path, doc: dict[str, Any] | None) -> None:
        # A worker killed mid-run could not delete its run's secret-vars file: the batch is
        # over, so no run needs it any more.
        for leftover in bdir.glob(f"runs/*/{SECRET_VARS_FILE}"):
            leftover.unlink(missing_ok=True)
        summary: dict[str, Any] = {"dir": str(bdir)}
        pointer = worker.remote_pointer(bdir)
        if pointer is not None:
            summary["execution_node"] = pointer["node"]
        if doc is None:
            summary["error"] = "the worker ended without a result"
        else:
            summary.update(rc=doc["rc"], wall_s=doc.get("wall_s"), error=doc.get("error", ""),
                           hosts={h: v["outcome"] for h, v in doc["hosts"].items()})
        self.j.finish_batch(bid, self.rid, k, summary)

    # ------------------------------------------------------------------------ reconcile

    def reconcile(self) -> None:
        """Before trusting the journal after a crash (see rollout/reconcile.py)."""
        reconcile.reconcile(self)
