"""One batch, one ansible-runner run, in its own process session.

The controller starts a worker per batch and does not own the Ansible run: if the controller
is killed, the worker finishes the hosts it started (an interrupted apt or initramfs run is
worse than a late one) and leaves `result.json`. The resumed controller waits for a live
worker, or reads its result, instead of applying a second time. A playbook run here leaves
its result at its recap, once every host's outcome is known, rather than after Ansible has
exited; the controller goes on at once and waits for such workers' exit before it ends
(Exits).

The spec names the plan's secret vars by reference only; the worker reads their values from
the environment it inherited (runner/secret_vars.py), and everything it writes (journal,
result, its own log) passes the redactor with those values in it.

Usage (by the controller only): python -m fleetgate.rollout.worker BATCH_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetgate.errors import FleetgateError, validation_error
from fleetgate.inputs import read_input
from fleetgate.rollout import ahead, before
from fleetgate.rollout.hostread import Wanted
from fleetgate.rollout.journal import Journal
from fleetgate.runner import ansible, redact, remote, secret_vars
from fleetgate.runner.ansible import HostOutcome
from fleetgate.runner.private_state import (
    PRIVATE_UMASK,
    private_dirs,
    replace_private,
    write_private,
)
from fleetgate.runner.remote import RemoteJob, RemoteNode
from fleetgate.runner.secret_vars import SecretRef
from fleetgate.site import content_root
from fleetgate.system.procs import proc_start

SPEC = "spec.json"
PIDFILE = "worker.pid"
RESULT = "result.json"
REMOTE = "remote.json"  # the pointer to a batch's job on its execution node, nothing more
BEFORE_RECORDED = "before-recorded"  # written once the run's `before` readings are journalled
# Beyond the batch's own timeout (which the node's ansible-runner enforces): SSH, transmit,
# and the artifacts coming back.
REMOTE_SLACK_S = 300


class Owner(BaseModel):
    """The controller process that holds a batch's run until its release (rollout/ahead.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int = Field(ge=1)
    start: str  # /proc/PID/stat's start time: a recycled pid is not the controller


class BatchSpec(BaseModel):
    """What the controller asks of one worker (spec.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rollout_id: str
    batch_id: str
    wave: int
    journal: str
    inventory: str
    playbook: str
    limit: str
    extravars: dict[str, Any] = Field(default_factory=dict)
    # References ({env: NAME} / {file: PATH}), never values: this file is on disk.
    secret_vars: dict[str, SecretRef] = Field(default_factory=dict)
    forks: int = Field(ge=1)
    timeout: int = Field(ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    # Run on this execution node (runner/remote.py) instead of here.
    execution_node: RemoteNode | None = None
    # The controller's lease: a worker attaches to a remote job only while it is current.
    lease_token: str = ""
    # An apply batch run here: read each host before its change, in the same run
    # (rollout/before.py InRun).
    read_before: Wanted | None = None
    # Such a batch's run waits for this controller's release before it touches a host
    # (rollout/ahead.py); without an owner it is released from its start.
    owner: Owner | None = None


class HostRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: HostOutcome
    task: str = ""
    message: str = ""


class BatchResult(BaseModel):
    """What the worker leaves (result.json); a worker that died leaves none."""

    model_config = ConfigDict(extra="forbid")

    rc: int
    status: str
    error: str = ""
    run_dir: str = ""
    hosts: dict[str, HostRun] = Field(default_factory=dict)
    wall_s: float | None = None
    # Written at the run's recap, while ansible-playbook and ansible-runner were still
    # exiting (run_batch): the worker may still be alive; rc and status are the recap's.
    at_recap: bool = False


_Doc = TypeVar("_Doc", BatchSpec, BatchResult)


def _read(path: Path, model: type[_Doc], what: str) -> _Doc:
    try:
        return model.model_validate_json(read_input(path))
    except ValidationError as exc:
        raise validation_error(exc, path, what=what) from None


SLURM_KEYS = ("node", "state", "reason", "drained_at", "waited_s", "jobs_at_start", "jobs",
              "timed_out", "resumed", "resumed_at", "why", "drained_by_fleetgate")


def _compact(event: dict[str, Any]) -> dict[str, Any] | None:
    """What the journal keeps of an ansible-runner event: enough to replay who did what and
    why it failed, not every stdout line (the run dir keeps those in events.jsonl)."""
    name = str(event.get("event", ""))
    data = event.get("event_data") or {}
    if not (name.startswith("runner_on_") or name in ("playbook_on_task_start",
                                                       "playbook_on_stats", "error")):
        return None
    res = data.get("res") or {}
    out: dict[str, Any] = {"event": name, "task": data.get("task", "")}
    if data.get("host"):
        out["host"] = data["host"]
    if isinstance(res, dict):
        if "changed" in res:
            out["changed"] = bool(res["changed"])
        msg = res.get("msg") or res.get("stderr") or ""
        if msg and name in ("runner_on_failed", "runner_on_unreachable"):
            out["msg"] = " ".join(str(msg).split())[:500]
    if name == "playbook_on_stats":
        out.update({k: data.get(k) for k in ("ok", "changed", "failures", "dark", "skipped")})
    if (isinstance(res, dict) and name in ("runner_on_ok", "runner_on_failed")
            and str(data.get("task_action", "")).endswith("fleetgate_slurm_node")):
        # The drain's story for the report: when it drained, how long it waited and on which
        # jobs, whether fleetgate resumed it (rollout/report_data.drain_stories).
        out["slurm"] = {k: res[k] for k in SLURM_KEYS if k in res}
    return out


def _lease_is(journal: Journal, spec: BatchSpec) -> bool:
    rows = journal.query("SELECT token FROM leases WHERE scope=?",
                         (f"rollout:{spec.rollout_id}",))
    return bool(rows) and rows[0][0] == spec.lease_token


def run_batch(bdir: Path, *, attach: bool = False) -> None:
    """`attach`: the batch's remote job was started by an earlier worker that died; follow it,
    never start it. A job the node never got leaves no result (the hosts' own state decides,
    as for a local worker that died before Ansible started)."""
    spec = _read(bdir / SPEC, BatchSpec, "corrupt batch spec")
    (bdir / PIDFILE).write_text(json.dumps({"pid": os.getpid(),
                                            "start": proc_start(os.getpid())}))
    journal = Journal(Path(spec.journal))
    job: RemoteJob | None = None
    if spec.execution_node is not None:
        job = RemoteJob(spec.execution_node, spec.batch_id, spec.rollout_id,
                        attach_only=attach, timeout_s=spec.timeout + REMOTE_SLACK_S)
        if not _lease_is(journal, spec):
            print(f"batch {spec.batch_id}: the rollout's lease is not this worker's "
                  "controller's; not touching its remote job", file=sys.stderr)
            journal.close()
            return
        if attach and remote.job_state(job) == "absent":
            print(f"batch {spec.batch_id}: no job on {job.node.name}; it never started",
                  file=sys.stderr)
            journal.close()
            return

    def job_started() -> None:
        assert job is not None
        if not (bdir / REMOTE).exists():
            remote.write_pointer(bdir / REMOTE, job)
        journal.event(spec.rollout_id, "remote_job", {
            "batch": spec.batch_id, "state": "reattached" if attach else "started",
            **remote.pointer(job)}, wave=spec.wave)

    reading: before.InRun | None = None
    gate: _Release | None = None
    if spec.read_before is not None and job is None:
        gate = _Release(bdir, spec.owner)
        reading = before.InRun(journal, spec.rollout_id, spec.wave, spec.limit.split(","),
                               bdir / BEFORE_RECORDED, spec.read_before,
                               release=gate.extravars())

    def journal_events(events: list[dict[str, Any]]) -> None:
        # One transaction for a released run's held events, not one fsync each.
        journal.events_at_once(spec.rollout_id, "ansible",
                               [(e.get("host"), {"batch": spec.batch_id, **e}) for e in events],
                               wave=spec.wave)

    def on_event(event: dict[str, Any]) -> None:
        if reading is not None:
            reading.on_event(event)
        c = _compact(event)
        if c is None:
            return
        if gate is not None and not gate.released():
            gate.held_events.append(c)  # a run held ahead of its turn journals nothing yet
            return
        journal_events([*(gate.take_events() if gate is not None else []), c])

    started = time.time()
    early: list[BatchResult] = []

    def on_recap(at: ansible.RunResult) -> None:
        # The hosts' outcomes are final at the recap; the run's exit (ansible-playbook's
        # teardown, pexpect's close, the artifacts trimmed) takes another 0.2 s or so, which
        # the controller need not wait for. Not for a run that was never released, timed out,
        # or whose readings are not journalled yet: those end by the path below.
        if (job is not None or (gate is not None and (not gate.released() or gate.timed_out))
                or (reading is not None and not reading.done)):
            return
        doc = _batch_doc(at, wall_s=round(time.time() - started, 3), at_recap=True)
        try:
            replace_private(bdir / RESULT, redact.text(doc.model_dump_json(indent=2)))
        except OSError as exc:
            print(f"batch {spec.batch_id}: result at the recap not written ({exc}); it "
                  "comes when the run has exited", file=sys.stderr)
            return
        early.append(doc)

    r: ansible.RunResult | None = None
    try:
        secrets = secret_vars.resolve(spec.secret_vars, source=f"batch {spec.batch_id}",
                                      section="plan")
        r = ansible.run(inventory=Path(spec.inventory), playbook=Path(spec.playbook),
                        limit=spec.limit, forks=spec.forks,
                        extravars={**spec.extravars,
                                   **(reading.extravars() if reading else {})},
                        runs_base=bdir / "runs", on_event=on_event,
                        timeout=spec.timeout + (gate.hold_s if gate is not None else 0),
                        cancel=gate.overdue(spec.timeout) if gate is not None else None,
                        env=spec.env, secrets=secrets, on_remote=job,
                        on_remote_started=job_started,
                        pre_playbooks=[content_root() / before.PLAYBOOK] if reading else [],
                        on_recap=on_recap)
        doc = _batch_doc(r)
        if gate is not None and gate.timed_out:
            doc.status, doc.error = "timeout", f"the batch ran out of its {spec.timeout} s"
    except Exception as exc:  # still leave a result: the controller must not guess
        doc = BatchResult(rc=1, status="error", error=f"{type(exc).__name__}: {exc}")
    if gate is not None and not gate.settle():
        # Never released (cancelled, the controller gone): it touched no host and is in no
        # journal; the controller discards its dir.
        journal.close()
        return
    journal_events(gate.take_events() if gate is not None else [])
    if reading is not None and r is not None:
        # A run that ended before its wait (no host answered, a parse error): what it
        # read, and why not for the rest, is still the hosts' reading.
        reading.flush(ended=r.error or f"ansible-runner status {r.status}")
    doc.wall_s = round(time.time() - started, 3)
    if early:
        # The result stands as written at the recap (the controller may have acted on it);
        # only the run's own end can differ from it, and that is said here.
        said = early[0]
        if (doc.rc, doc.status, doc.error) != (said.rc, said.status, said.error):
            print(redact.text(f"batch {spec.batch_id}: after its recap the run ended with rc "
                              f"{doc.rc}, status {doc.status}" +
                              (f": {doc.error}" if doc.error else "")), file=sys.stderr)
    else:
        replace_private(bdir / RESULT, redact.text(doc.model_dump_json(indent=2)))
    journal.close()


def _batch_doc(r: ansible.RunResult, **extra: Any) -> BatchResult:
    return BatchResult(rc=r.rc, status=r.status, error=r.error, run_dir=str(r.run_dir),
                       hosts={h: HostRun(outcome=v.outcome, task=v.task, message=v.message)
                              for h, v in r.hosts.items()}, **extra)


class _Release:
    """A local apply batch's side of rollout/ahead.py: the release wait's vars for its run,
    the run's events held back until the release, and the batch's timeout counted from the
    release rather than from the run's start."""

    def __init__(self, bdir: Path, owner: Owner | None):
        self.bdir, self.owner = bdir, owner
        self.held_events: list[dict[str, Any]] = []
        self.at: float | None = None  # when the release was seen (monotonic)
        self.timed_out = False
        if owner is None:
            ahead.claim(bdir, ahead.GO)  # nobody to wait for
        # A run released before its start has its plain timeout; a held one, the hold too.
        self.hold_s = 0 if ahead.released(bdir) else ahead.HOLD_S

    def extravars(self) -> dict[str, Any]:
        return {"fleetgate_release": str(self.bdir / ahead.RELEASE),
                "fleetgate_release_owner_pid": self.owner.pid if self.owner else 0,
                "fleetgate_release_owner_start": self.owner.start if self.owner else "",
                "fleetgate_release_timeout": ahead.HOLD_S}

    def released(self) -> bool:
        if self.at is None and ahead.released(self.bdir):
            self.at = time.monotonic()
        return self.at is not None

    def take_events(self) -> list[dict[str, Any]]:
        out, self.held_events = self.held_events, []
        return out

    def overdue(self, timeout_s: int) -> Callable[[], bool] | None:
        """ansible-runner's cancel callback for a held run: the batch's own timeout, counted
        from its release (the run's timeout is that plus the hold). None for a run released
        before its start, which keeps ansible-runner's own timeout and signal handling."""
        if not self.hold_s:
            return None

        def cancel() -> bool:
            if self.released() and time.monotonic() - (self.at or 0.0) > timeout_s:
                self.timed_out = True
            return self.timed_out

        return cancel

    def settle(self) -> bool:
        """At the run's end: released or not, for good (ahead.claim decides a race)."""
        return ahead.claim(self.bdir, ahead.ENDED) == ahead.GO


GO = "go"  # in a warm worker's dir: the batch dir it is to run, written once, atomically
WARM_POLL_S = 0.05


class WarmWorkers:
    """At most one worker process started ahead of its batch: Python, pydantic, ansible-runner
    already imported while the controller probes the hosts or waits on the batch before.
    It holds no batch, no spec and no journal connection until handed one (spawn), and exits
    by itself once the controller that started it is gone without handing it one; close()
    ends an unused one. The batch it is handed runs exactly as a freshly spawned worker's."""

    def __init__(self, base: Path):
        self.base = base
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    def start(self) -> None:
        if self._proc is not None:
            return
        d = private_dirs(self.base / uuid.uuid4().hex[:8])
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "fleetgate.rollout.worker", "--warm", str(d),
             str(os.getpid())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, cwd=d)
        self._dir = d

    def hand(self, bdir: Path) -> int | None:
        """Give the warm worker `bdir` (its spec already written): its pid, or None when there
        is none alive to take it. Starts the next one."""
        proc, d = self._proc, self._dir
        self._proc = self._dir = None
        pid: int | None = None
        if proc is not None and d is not None and proc.poll() is None:
            replace_private(d / GO, str(bdir))
            pid = proc.pid
        self.start()
        return pid

    def close(self) -> None:
        proc, d = self._proc, self._dir
        self._proc = self._dir = None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)


def _warm_wait(d: Path, controller: int) -> Path | None:
    """The batch dir the controller hands this warm worker; None once it is gone without."""
    go = d / GO
    while True:
        if go.exists():
            return Path(go.read_text())
        if os.getppid() != controller:
            # Gone: but it may have handed us a batch just before it went.
            return Path(go.read_text()) if go.exists() else None
        time.sleep(WARM_POLL_S)


def warm_main(d: Path, controller: int) -> None:
    bdir = _warm_wait(d, controller)
    if bdir is None:
        return
    shutil.rmtree(d, ignore_errors=True)
    # From here on what spawn() would have set up: the batch dir as cwd, its worker.log.
    log = os.open(bdir / "worker.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC,
                  0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(bdir)
    main(bdir)


def spawn(bdir: Path, spec: BatchSpec | Mapping[str, Any], *, attach: bool = False,
          warm: WarmWorkers | None = None) -> int:
    try:
        checked = spec if isinstance(spec, BatchSpec) else BatchSpec.model_validate(spec)
    except ValidationError as exc:
        raise validation_error(exc, bdir / SPEC, what="batch spec") from None
    # Private whatever the caller's umask: the spec names the plan's vars, the log its errors.
    write_private(bdir / SPEC, checked.model_dump_json(indent=2))
    if warm is not None and not attach and (pid := warm.hand(bdir)) is not None:
        return pid
    log = os.fdopen(os.open(bdir / "worker.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT
                            | (0 if attach else os.O_TRUNC), 0o600), "w")
    argv = [sys.executable, "-m", "fleetgate.rollout.worker", str(bdir)]
    proc = subprocess.Popen([*argv, "--attach"] if attach else argv, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=bdir)
    log.close()
    return proc.pid


def is_remote(bdir: Path) -> bool:
    """A batch whose job went to an execution node (its pointer, or a spec naming a node)."""
    if (bdir / REMOTE).exists():
        return True
    try:
        return _read(bdir / SPEC, BatchSpec, "corrupt batch spec").execution_node is not None
    except (OSError, FleetgateError):
        return False


def may_have_run(bdir: Path) -> bool:
    """Whether a batch's run may have touched its hosts: not one held for a release that
    never came (rollout/ahead.py). Asked once its worker is gone."""
    try:
        spec = _read(bdir / SPEC, BatchSpec, "corrupt batch spec")
    except (OSError, FleetgateError):
        return True
    return spec.owner is None or ahead.released(bdir)


def _json_doc(path: Path) -> dict[str, Any] | None:
    """A small JSON file a worker or the controller wrote; None while absent or half-written."""
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    except (OSError, json.JSONDecodeError):
        return None


def remote_pointer(bdir: Path) -> dict[str, Any] | None:
    return _json_doc(bdir / REMOTE)


def reattach(bdir: Path, lease_token: str) -> dict[str, Any] | None:
    """After a crash that took the batch's worker too: a new worker, under the current lease,
    follows the remote job the dead one started (or collects it, finished) and leaves its
    result. None when the node never got the job."""
    spec = _read(bdir / SPEC, BatchSpec, "corrupt batch spec")
    pid = spawn(bdir, spec.model_copy(update={"lease_token": lease_token}), attach=True)
    return wait(bdir, spawned_pid=pid)


def wait_or_reattach(bdir: Path, lease_token: str, *, grace_s: float = 10
                     ) -> dict[str, Any] | None:
    """wait(), and for a remote batch whose worker is gone without a result, reattach()."""
    doc = wait(bdir, grace_s=grace_s)
    if doc is None and is_remote(bdir):
        doc = reattach(bdir, lease_token)
    return doc


def _pidinfo(bdir: Path) -> dict[str, Any] | None:
    return _json_doc(bdir / PIDFILE)


def pid_of(bdir: Path) -> int | None:
    info = _pidinfo(bdir)
    return int(info["pid"]) if info else None


def worker_alive(bdir: Path) -> bool:
    info = _pidinfo(bdir)
    if info is None:
        return False
    pid = int(info["pid"])
    # The start time guards against a recycled pid belonging to something else.
    return proc_start(pid) == info.get("start") and proc_start(pid) != ""


def read_result(bdir: Path) -> BatchResult | None:
    """The worker's result; None while there is none. A result that does not validate is a
    one-line error naming the file and field, never a KeyError later on."""
    path = bdir / RESULT
    if not path.exists():
        return None
    return _read(path, BatchResult, "corrupt batch result")


def result(bdir: Path) -> dict[str, Any] | None:
    """read_result() as the plain mapping the controller indexes."""
    doc = read_result(bdir)
    return doc.model_dump() if doc is not None else None


def wait(bdir: Path, *, poll_s: float = 0.05, spawned_pid: int | None = None,
         grace_s: float = 30.0) -> dict[str, Any] | None:
    """Until the worker leaves its result, or is gone without one (None). A poll is a stat
    and a waitpid: polled often, since every batch's end waits on it."""
    started = time.monotonic()
    while True:
        doc = result(bdir)
        if doc is not None:
            return doc
        if spawned_pid is not None:
            # Our own child: reap it so it does not linger as a zombie.
            try:
                pid, _ = os.waitpid(spawned_pid, os.WNOHANG)
            except ChildProcessError:
                pid = spawned_pid
            if pid == spawned_pid:
                return result(bdir)
        # Between spawn and the pid file there is a short window with neither.
        elif not worker_alive(bdir) and (
                (bdir / PIDFILE).exists() or time.monotonic() - started > grace_s):
            return result(bdir)
        time.sleep(poll_s)


class Exits:
    """Workers whose result came at their run's recap, and so may still be exiting (run_batch's
    on_recap). The controller goes on to its next batch at once, but waits here before it
    ends and gives up its lease, so that no worker it started outlives it: when `rollout
    start` returns, every run's artifacts are trimmed and private."""

    WAIT_S = 60.0  # ansible-playbook's exit after its recap takes well under a second

    def __init__(self) -> None:
        self._left: dict[Path, int] = {}

    @property
    def pending(self) -> int:
        """Workers still waited for."""
        return len(self._left)

    def add_if_at_recap(self, bdir: Path, doc: Mapping[str, Any] | None, *,
                        child: int | None = None) -> None:
        """A batch whose result came at its run's recap: its worker may still be exiting.
        `child` is the worker this controller spawned, reaped when it exits. Without one the
        batch is an earlier controller's, found after a crash: its pid file names the
        worker, and a worker long gone is not waited on."""
        if doc is None or not doc.get("at_recap"):
            return
        pid = child if child is not None else pid_of(bdir) if worker_alive(bdir) else None
        if pid is not None:
            self._left[bdir] = pid

    def wait(self, log: Callable[[str], None]) -> None:
        deadline = time.monotonic() + self.WAIT_S
        while self._left:
            self._left = {d: p for d, p in self._left.items() if not _exited(d, p)}
            if self._left and time.monotonic() > deadline:
                for d, p in self._left.items():
                    log(f"batch {d.name}: its worker (pid {p}) is still running "
                        f"{self.WAIT_S:g} s after its result; not waiting for it")
                self._left = {}
            elif self._left:
                time.sleep(0.01)


def _exited(bdir: Path, pid: int) -> bool:
    try:
        got, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (or reaped already): its pid file decides
        return not worker_alive(bdir)
    return got == pid


def main(bdir: Path, *, attach: bool = False) -> None:
    # A worker only writes state: everything it and Ansible create is private, and what it
    # prints (a traceback quoting a variable) is masked on its way to worker.log.
    os.umask(PRIVATE_UMASK)
    sys.stdout = redact.RedactingStream(sys.stdout)
    sys.stderr = redact.RedactingStream(sys.stderr)
    run_batch(bdir, attach=attach)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--warm"]:
        warm_main(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        main(Path(sys.argv[1]), attach=sys.argv[2:] == ["--attach"])
