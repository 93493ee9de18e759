"""The rollout controller: waves, batches, gates, budgets, halts, and resume after a crash.

Every step follows the same discipline: commit the transition to the journal, then act, then
commit the result. Ansible runs in batch workers that outlive the controller (worker.py), so a
`kill -9` at any point leaves either a finished batch with its result on disk, a live worker
to wait for, or a host whose real state `resume` reads back before deciding anything.
"""

from __future__ import annotations

import datetime as dt
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.rollout import before, budgets, canary_gate, hoststate, worker
from fleetgate.rollout.canary import GateVerdict, explain, judge_canary, judge_self
from fleetgate.rollout.journal import IN_FLIGHT, TERMINAL_HOST, HostRow, Journal
from fleetgate.rollout.lease import Lease
from fleetgate.rollout.plan import RolloutPlan, Target
from fleetgate.rollout.waves import Assignment, Host
from fleetgate.runner.ansible import state_dir
from fleetgate.smoke.model import CheckResult
from fleetgate.smoke.runner import run_smoke
from fleetgate.spec.loader import repo_root

POLL_S = 1.0


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


def rollout_dir(rid: str) -> Path:
    return state_dir() / "rollouts" / rid


class Controller:
    def __init__(self, journal: Journal, rid: str, *, lease_ttl_s: float = 30.0,
                 log: Callable[[str], None] | None = None):
        row = journal.rollout(rid)
        if row is None:
            raise FleetgateError(f"no rollout {rid} in the journal", source=str(journal.path))
        self.j = journal
        self.rid = rid
        self.artifact = row.artifact
        self.plan = RolloutPlan.model_validate(row.artifact["plan"])
        self.a = assignment_of(row.artifact)
        self.inventory = Path(row.inventory)
        self.limits = budgets.limits(self.plan, self.a)
        self.dir = rollout_dir(rid)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lease = Lease(journal, rid, [f"rollout:{rid}", f"inventory:{row.inventory}"],
                           ttl_s=lease_ttl_s)
        self.interrupted = False
        self.halt_now: str | None = None  # a gate that halts whatever the budget says
        self.baseline: list[CheckResult] | None = None  # passing results: relative thresholds
        self.baseline_all: list[CheckResult] = []  # every result: canary samples
        self.before: dict[str, list[CheckResult]] = {}  # self-mode canary: host -> before
        self.log = log or (lambda _msg: None)

    # ------------------------------------------------------------------------ entry points

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
            if resume:
                self.reconcile()
            state, reason, resumable = self._drive()
            self._finish(state, reason, resumable)
            return state
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.lease.release()

    def _finish(self, state: str, reason: str, resumable: bool) -> None:
        if state in ("halted", "aborted") and not resumable:
            for h, r in self.rows().items():
                if r.state == "pending":
                    self.j.set_host(self.rid, h, "skipped", f"rollout {state} before this host"
                                    f" started: {reason}")
        self.j.set_rollout(self.rid, state, reason=reason, resumable=resumable,
                           hosts={h: r.state for h, r in self.rows().items()})
        self.log(f"rollout {self.rid} {state}" + (f": {reason}" if reason else ""))

    def rows(self) -> dict[str, HostRow]:
        return self.j.hosts(self.rid)

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
        broken = budgets.breaches(self.limits, self.a, self.rows())
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
        self._measure_baseline(k)
        while True:
            self._safe_point(wave=k)
            rows = self.rows()
            if not any(rows[h].state == "pending" for h in members):
                break
            batch = budgets.next_batch(self.plan, self.limits, self.a, rows, k)
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
        while not any(r["wave"] == k for r in self.j.requests(self.rid, "approve")):
            if not announced:
                self.j.set_rollout(self.rid, "running", wave=k, phase="awaiting approval")
                self.j.event(self.rid, "approval_needed", {"wave": k}, wave=k)
                self.log(f"wave {k} needs approval: fleetgate rollout approve {self.rid} "
                         f"--wave {k} --reason TEXT")
                announced = True
            self._sleep(POLL_S * 2)

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
            run = self._smoke(healthy, k, label="soak")
            for h in healthy:
                bad = [r for r in run.results if r.host == h and r.status != "pass"]
                if bad:
                    self._fail([h], k, {h: "after soak: " + self._why(bad)}, redrain=True)
        self.j.event(self.rid, "soak", {"state": "done"}, wave=k)
        self._safe_point(wave=k)

    # ------------------------------------------------------------------- one batch of hosts

    def _pipeline(self, hosts: list[str], k: int) -> None:
        """pending -> (draining) -> applying -> verifying -> healthy | failure handling."""
        rows = self.rows()
        todo = [h for h in hosts if rows[h].state == "pending"]
        if self.plan.drain is not None and todo:
            self.j.set_hosts(self.rid, todo, "draining")
            todo = self._drain_stage(todo, k)
        if todo:
            self._measure_before(todo, k)
            before.record(self.j, self.rid, self.inventory, self.plan, todo, k, self.dir / "runs")
            self.j.set_hosts(self.rid, todo, "applying")
            todo = self._apply_stage(todo, k)
        if todo:
            self._verify_stage(todo, k)

    def _drain_stage(self, hosts: list[str], k: int) -> list[str]:
        assert self.plan.drain is not None
        res = self._stage("drain", hosts, k, repo_root() / self.plan.drain.drain_playbook, {},
                          600)
        ok, failed = self._split(res, hosts, "drain")
        if failed:
            self._fail(list(failed), k, failed, apply_started=False)
        return ok

    def _apply_stage(self, hosts: list[str], k: int) -> list[str]:
        c = self.plan.change
        res = self._stage("apply", hosts, k, repo_root() / c.playbook, dict(c.extra_vars),
                          c.timeout_s, c.classes)
        ok, failed = self._split(res, hosts, "apply")
        if failed:
            self._fail(list(failed), k, failed)
        return ok

    def _verify_stage(self, hosts: list[str], k: int) -> None:
        rows = self.rows()
        self.j.set_hosts(self.rid, [h for h in hosts if rows[h].state != "verifying"],
                         "verifying")
        good, failed, unsure = self._verify(hosts, k, self.plan.change.target, label="verify")
        good, c_failed, c_unsure = self._canary(good, k)
        failed.update(c_failed)
        unsure.update(c_unsure)
        if failed:
            self._fail(list(failed), k, failed)
        if unsure:
            self._inconclusive(unsure, k)
        self._healthy(good, k)

    def _healthy(self, hosts: list[str], k: int) -> None:
        if hosts and self.plan.drain is not None:
            res = self._stage("undrain", hosts, k,
                              repo_root() / self.plan.drain.undrain_playbook, {}, 600)
            hosts, failed = self._split(res, hosts, "undrain")
            for h, why in failed.items():
                # Verified but still out of service: say so rather than call it healthy.
                self.j.set_host(self.rid, h, "failed_held", why)
        self.j.set_hosts(self.rid, hosts, "healthy", "applied and verified")

    def _inconclusive(self, unsure: dict[str, str], k: int) -> None:
        # The retry policy was already spent inside _verify; what is left halts.
        for h, why in unsure.items():
            self.j.set_host(self.rid, h, "failed_held", f"verify inconclusive: {why}")
        self.halt_now = ("verify inconclusive on " + ", ".join(sorted(unsure))
                         + f" (policy {self.plan.gates.inconclusive.policy})")

    def _fail(self, hosts: list[str], k: int, reasons: dict[str, str], *,
              apply_started: bool = True, redrain: bool = False) -> None:
        if self.plan.on_failure != "rollback" or not apply_started:
            for h in hosts:
                self.j.set_host(self.rid, h, "failed_held", reasons[h])
            if redrain and self.plan.drain is not None:
                self._stage("drain", hosts, k, repo_root() / self.plan.drain.drain_playbook, {},
                            600)
            return
        self._rollback(hosts, k, reasons)

    def _rollback(self, hosts: list[str], k: int, reasons: dict[str, str],
                  res: dict[str, dict[str, Any]] | None = None) -> None:
        """Roll back, then prove it: the rollback target, then the same gates. `res` is a
        rollback batch's result already in hand (re-joined after a crash)."""
        rb = self.plan.rollback
        assert rb is not None
        for h in hosts:
            if self.rows()[h].state != "rolling_back":
                self.j.set_host(self.rid, h, "rolling_back", reasons[h])
        if res is None:
            res = self._stage("rollback", hosts, k, repo_root() / rb.playbook,
                              dict(rb.extra_vars), rb.timeout_s, rb.classes)
        ok, failed = self._split(res, hosts, "rollback")
        for h, why in failed.items():
            self.j.set_host(self.rid, h, "failed_held", f"{reasons[h]}; rollback failed: {why}")
        if not ok:
            return
        good, bad, unsure = self._verify(ok, k, rb.target, label="rollback-verify")
        for h in good:
            self.j.set_host(self.rid, h, "rolled_back",
                            f"{reasons[h]}; rolled back and verified on the old version")
        for h, why in {**bad, **unsure}.items():
            self.j.set_host(self.rid, h, "failed_held",
                            f"{reasons[h]}; rollback not verified: {why}")

    # ------------------------------------------------------------------- verification

    def _verify(self, hosts: list[str], k: int, target: Target, *, label: str
                ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """Target check, then smoke gates with the plan's retry policies.
        Returns (good, failed with reason, inconclusive with reason)."""
        failed: dict[str, str] = {}
        unsure: dict[str, str] = {}
        todo = list(hosts)
        if not target.empty:
            states, why = hoststate.probe(self.inventory, todo, [target],
                                          runs_base=self.dir / "runs")
            for h in todo:
                st = states[h]
                self.j.event(self.rid, "hoststate", {"label": label, "state": st,
                                                     "why": why.get(h)}, host=h, wave=k)
                if st is None:
                    unsure[h] = f"could not read host state: {why[h]}"
                elif diff := hoststate.mismatches(target, st):
                    failed[h] = f"not at target after {label}: " + "; ".join(diff)
            todo = [h for h in todo if h not in failed and h not in unsure]
        gates = self.plan.gates
        fail_tries = gates.retries
        unsure_tries = gates.inconclusive.retries if gates.inconclusive.policy == "retry" else 0
        while todo and gates.checks:
            run = self._smoke(todo, k, label=label)
            next_round: list[str] = []
            for h in todo:
                mine = [r for r in run.results if r.host == h]
                bad = [r for r in mine if r.status == "fail"]
                odd = [r for r in mine if r.status == "inconclusive"]
                if (bad and fail_tries > 0) or (not bad and odd and unsure_tries > 0):
                    next_round.append(h)
                elif bad:
                    failed[h] = self._why(bad)
                elif odd:
                    unsure[h] = self._why(odd)
            if not next_round:
                break
            self.j.event(self.rid, "gate_retry", {"hosts": next_round, "label": label}, wave=k)
            fail_tries -= 1
            unsure_tries -= 1
            todo = next_round
        good = [h for h in hosts if h not in failed and h not in unsure]
        return good, failed, unsure

    @staticmethod
    def _why(results: list[CheckResult]) -> str:
        return "; ".join(f"gate {r.check} {r.status}: {r.reason}" for r in results)

    def _checks(self, *, canary: bool) -> list[str]:
        want = set(self.plan.gates.checks)
        if canary and self.plan.canary is not None:
            want |= set(canary_gate.checks_for(self.plan.canary))
        return [c for c in ("discovery", "stack", "gemm", "comms", "inference") if c in want]

    def _classes_for(self, label: str) -> Path | None:
        """The class version a measurement judges against: the change's for changed hosts,
        the rollback's after a rollback, the inventory's for baseline and before-samples."""
        rel = (self.plan.change.classes if label in ("verify", "canary", "soak")
               else self.plan.rollback.classes if label == "rollback-verify" and self.plan.rollback
               else None)
        return repo_root() / rel if rel else None

    def _smoke(self, hosts: list[str], k: int, *, label: str,
               checks: Sequence[str] | None = None) -> Any:
        run = run_smoke(self.inventory, limit=",".join(hosts), classes=self._classes_for(label),
                        only=checks or list(self.plan.gates.checks),
                        baseline=self.baseline, forks=max(1, len(hosts)),
                        runs_base=self.dir / "runs")
        for r in run.results:
            self.j.event(self.rid, "smoke", {"label": label, "result": r.model_dump(mode="json")},
                         host=r.host, wave=k)
        return run

    def _measure(self, hosts: list[str], k: int, *, label: str, checks: Sequence[str]
                 ) -> list[CheckResult]:
        """Smoke runs until every host has the canary section's `repeats` samples of every
        canary metric (a probe reports a few repeats per run), at most 10 runs."""
        c = self.plan.canary
        results: list[CheckResult] = []
        for _ in range(10):
            results += self._smoke(hosts, k, label=label, checks=checks).results
            if c is None:
                break
            short = [h for h in hosts if any(
                len(v) < c.repeats for v in canary_gate.samples(
                    c, [r for r in results if r.host == h]).values())]
            if not short:
                break
            # A host that cannot be measured at all will not improve by asking again.
            if all(not any(r.host == h and r.probe_status == "ok" for r in results)
                   for h in short):
                break
        return results

    def _measure_baseline(self, k: int) -> None:
        """Hosts of later waves, same class, still on the old version: the reference for
        relative thresholds and for canary analysis. Measured before every wave, because the
        set shrinks as waves go by and the machine's load moves."""
        n = self.plan.gates.baseline_hosts
        checks = self._checks(canary=True)
        if not n or not checks:
            return
        rows = self.rows()
        later = [h for w in self.a.waves[k:] for h in w if rows[h].state == "pending"][:n]
        self.j.event(self.rid, "baseline", {"state": "started", "hosts": later}, wave=k)
        if not later:
            self.baseline, self.baseline_all = None, []
            return
        self.j.set_rollout(self.rid, "running", wave=k, phase="measuring baseline")
        self._set_baseline(self._measure(later, k, label="baseline", checks=checks))
        self.j.event(self.rid, "baseline", {"state": "done", "hosts": later}, wave=k)

    def _set_baseline(self, results: list[CheckResult]) -> None:
        self.baseline_all = list(results)
        self.baseline = [r for r in results if r.status == "pass"]

    def _restore_baseline(self, k: int) -> None:
        """After a crash: the baseline this wave was judged against, from the journal."""
        marks = [e for e in self.j.events(self.rid, kinds=("baseline",)) if e["wave"] == k]
        if not marks or marks[-1]["data"].get("state") != "done":
            return
        start = max(e["seq"] for e in marks if e["data"].get("state") == "started")
        self._set_baseline([CheckResult.model_validate(e["data"]["result"])
                            for e in self.j.events(self.rid, kinds=("smoke",), after=start)
                            if e["data"].get("label") == "baseline" and e["wave"] == k
                            and e["seq"] < marks[-1]["seq"]])

    def _measure_before(self, hosts: list[str], k: int) -> None:
        """Self-mode canary analysis: each host's own numbers before the change."""
        c = self.plan.canary
        if c is None or c.mode != "self":
            return
        results = self._measure(hosts, k, label="before", checks=canary_gate.checks_for(c))
        for h in hosts:
            self.before[h] = [r for r in results if r.host == h]

    def _canary(self, hosts: list[str], k: int) -> tuple[list[str], dict[str, str],
                                                          dict[str, str]]:
        """Judge the batch's canaries. (passed, failed with reason, inconclusive with reason)."""
        c = self.plan.canary
        if c is None or not hosts:
            return hosts, {}, {}
        if c.mode == "baseline" and not self.baseline_all:
            self.j.event(self.rid, "canary", {"hosts": hosts, "skipped": True,
                                              "reason": "no baseline host left (last wave)"},
                         wave=k)
            return hosts, {}, {}
        measured = self._measure(hosts, k, label="canary", checks=canary_gate.checks_for(c))
        passed: list[str] = []
        failed: dict[str, str] = {}
        unsure: dict[str, str] = {}
        verdicts: dict[str, GateVerdict] = {}
        if c.mode == "baseline":
            v = judge_canary(c, canary_gate.samples(c, self.baseline_all),
                             canary_gate.samples(c, measured), source=f"wave {k}")
            verdicts = {h: v for h in hosts}
        else:
            for h in hosts:
                mine = [r for r in measured if r.host == h]
                verdicts[h] = judge_self(c, canary_gate.samples(c, self.before.get(h, [])),
                                         canary_gate.samples(c, mine), source=h)
        for h in hosts:
            v = verdicts[h]
            self.j.event(self.rid, "canary", {"hosts": hosts, "verdict": v.model_dump(mode="json"),
                                              "explanation": explain(v)}, host=h, wave=k)
            failing = [m.name for m in v.metrics if m.outcome == "fail"]
            if v.outcome == "pass":
                passed.append(h)
            elif v.outcome == "fail":
                failed[h] = (f"canary analysis failed ({', '.join(failing) or 'score'}): "
                             f"{v.reason}")
            else:
                unsure[h] = f"canary analysis inconclusive: {v.reason}"
        return passed, failed, unsure

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

    def _stage(self, kind: str, hosts: list[str], k: int, playbook: Path,
               extravars: dict[str, Any], timeout: int, classes: str | None = None
               ) -> dict[str, dict[str, Any]] | None:
        """Run one worker for `hosts` and wait for it; host -> outcome (None: no result)."""
        bid = f"{kind}-{uuid.uuid4().hex[:8]}"
        bdir = self.dir / "batches" / bid
        bdir.mkdir(parents=True)
        self.j.start_batch(bid, self.rid, k, kind, hosts, bdir)
        pid = worker.spawn(bdir, {
            "rollout_id": self.rid, "batch_id": bid, "wave": k, "journal": str(self.j.path),
            "inventory": str(self.inventory), "playbook": str(playbook),
            "limit": ",".join(hosts), "extravars": extravars, "forks": len(hosts),
            "timeout": timeout,
            "env": {"FLEETGATE_CLASSES_DIR": str(repo_root() / classes)} if classes else {}})
        self.j.batch_spawned(bid, self.rid, pid)
        doc = worker.wait(bdir, spawned_pid=pid)
        self._close_batch(bid, k, bdir, doc)
        return self._outcomes(doc, hosts)

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

    def _rejoin(self, kind: str, hosts: list[str]
                ) -> tuple[bool, dict[str, dict[str, Any]] | None]:
        """After a crash: the open batch of `kind` that holds these hosts, waited for and
        closed. (found, its result or None when its worker died without one)."""
        for b in self.j.open_batches(self.rid):
            if b["kind"] == kind and set(b["hosts"]) >= set(hosts):
                self.log(f"re-joining {kind} batch {b['id']} ({', '.join(b['hosts'])})")
                doc = worker.wait(b["dir"], grace_s=10)
                if b["pid"] is None and worker.pid_of(b["dir"]) is not None:
                    # Spawned just before the crash, before its pid was committed.
                    self.j.batch_spawned(b["id"], self.rid, worker.pid_of(b["dir"]) or 0)
                self._close_batch(b["id"], b["wave"], b["dir"], doc)
                return True, self._outcomes(doc, hosts)
        return False, None

    def _close_batch(self, bid: str, k: int, bdir: Path, doc: dict[str, Any] | None) -> None:
        summary: dict[str, Any] = {"dir": str(bdir)}
        if doc is None:
            summary["error"] = "the worker ended without a result"
        else:
            summary.update(rc=doc["rc"], wall_s=doc.get("wall_s"), error=doc.get("error", ""),
                           hosts={h: v["outcome"] for h, v in doc["hosts"].items()})
        self.j.finish_batch(bid, self.rid, k, summary)

    # ------------------------------------------------------------------------ reconcile

    def reconcile(self) -> None:
        """Before trusting the journal after a crash: wait out every batch worker still
        running, ask every in-flight host what it actually runs, then carry each host on from
        where the evidence says it is."""
        rows = self.rows()
        inflight = [h for h, r in rows.items() if r.state in IN_FLIGHT]
        open_batches = self.j.open_batches(self.rid)
        self.j.event(self.rid, "reconcile", {"in_flight": {h: rows[h].state for h in inflight},
                                             "open_batches": [b["id"] for b in open_batches]})
        # The host state read below must be the state live workers leave, not a midpoint.
        for b in open_batches:
            worker.wait(b["dir"], grace_s=10)
        states: dict[str, dict[str, Any] | None] = {}
        if inflight:
            targets = [self.plan.change.target]
            if self.plan.rollback is not None:
                targets.append(self.plan.rollback.target)
            states, why = hoststate.probe(self.inventory, inflight, targets,
                                          runs_base=self.dir / "runs")
            for h in inflight:
                st = states[h]
                self.j.event(self.rid, "reconcile_host", {
                    "journal_state": rows[h].state, "host_state": st, "why": why.get(h),
                    "at_change_target": self._at_target(self.plan.change.target, st)},
                    host=h, wave=rows[h].wave)
        by_wave: dict[int, list[str]] = {}
        for h in inflight:
            by_wave.setdefault(rows[h].wave, []).append(h)
        for k, hosts in sorted(by_wave.items()):
            self._restore_baseline(k)
            self._resume_hosts(hosts, k, states)
        for b in self.j.open_batches(self.rid):  # e.g. an undrain whose host was re-verified
            self._close_batch(b["id"], b["wave"], b["dir"], worker.result(b["dir"]))

    @staticmethod
    def _at_target(target: Target, st: dict[str, Any] | None) -> bool:
        return st is not None and not target.empty and not hoststate.mismatches(target, st)

    def _resume_hosts(self, hosts: list[str], k: int,
                      states: dict[str, dict[str, Any] | None]) -> None:
        rows = self.rows()
        by_state: dict[str, list[str]] = {}
        for h in hosts:
            by_state.setdefault(rows[h].state, []).append(h)
        if draining := by_state.get("draining", []):
            found, res = self._rejoin("drain", draining)
            if found and res is not None:
                ok, failed = self._split(res, draining, "drain")
                if failed:
                    self._fail(list(failed), k, failed, apply_started=False)
            else:
                ok = self._drain_stage(draining, k)  # draining twice is harmless
            self.j.set_hosts(self.rid, ok, "applying")
            by_state.setdefault("applying", []).extend(ok)
        if applying := by_state.get("applying", []):
            found, res = self._rejoin("apply", applying)
            if res is not None:
                ok, failed = self._split(res, applying, "apply")
                if failed:
                    self._fail(list(failed), k, failed)
            else:
                # No result: the host's own state decides. At target: the apply finished
                # (or a closed batch says so) -> verify. Otherwise apply it (again).
                ok = []
                for h in applying:
                    if self._at_target(self.plan.change.target, states.get(h)) or (
                            self._applied_in_journal(h)):
                        ok.append(h)
                    else:
                        self.j.set_host(self.rid, h, "pending",
                                        "apply " + ("interrupted" if found else "not started")
                                        + " by a controller crash; will be applied")
            by_state.setdefault("verifying", []).extend(ok)
        if verifying := by_state.get("verifying", []):
            self._verify_stage(verifying, k)
        if rolling := by_state.get("rolling_back", []):
            reasons = {h: rows[h].reason for h in rolling}
            found, res = self._rejoin("rollback", rolling)
            self._rollback(rolling, k, reasons, res)

    def _applied_in_journal(self, h: str) -> bool:
        """The last closed apply batch of this host reported it ok or changed."""
        for e in reversed(self.j.events(self.rid, kinds=("batch",))):
            d = e["data"]
            if (d.get("state") == "done" and str(d.get("batch", "")).startswith("apply-")
                    and h in (d.get("hosts") or {})):
                return d["hosts"][h] in ("ok", "changed")
        return False
