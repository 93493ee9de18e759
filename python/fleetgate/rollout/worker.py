"""One batch, one ansible-runner run, in its own process session.

The controller starts a worker per batch and does not own the Ansible run: if the controller
is killed, the worker finishes the hosts it started (an interrupted apt or initramfs run is
worse than a late one) and leaves `result.json`. The resumed controller waits for a live
worker, or reads its result, instead of applying a second time.

Usage (by the controller only): python -m fleetgate.rollout.worker BATCH_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.rollout.journal import Journal
from fleetgate.runner import ansible

SPEC = "spec.json"
PIDFILE = "worker.pid"
RESULT = "result.json"


@dataclass(frozen=True)
class BatchOutcome:
    host: str
    outcome: str
    task: str
    message: str


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
    return out


def _proc_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def run_batch(bdir: Path) -> None:
    spec = json.loads((bdir / SPEC).read_text())
    (bdir / PIDFILE).write_text(json.dumps({"pid": os.getpid(),
                                            "start": _proc_start(os.getpid())}))
    journal = Journal(Path(spec["journal"]))
    rid, wave = spec["rollout_id"], spec["wave"]

    def on_event(event: dict[str, Any]) -> None:
        c = _compact(event)
        if c is not None:
            journal.event(rid, "ansible", {"batch": spec["batch_id"], **c},
                          host=c.get("host"), wave=wave)

    started = time.time()
    try:
        r = ansible.run(inventory=Path(spec["inventory"]), playbook=Path(spec["playbook"]),
                        limit=spec["limit"], extravars=spec["extravars"], forks=spec["forks"],
                        runs_base=bdir / "runs", on_event=on_event, timeout=spec["timeout"],
                        env=spec.get("env") or {})
        hosts = {h: {"outcome": v.outcome, "task": v.task, "message": v.message}
                 for h, v in r.hosts.items()}
        doc = {"rc": r.rc, "status": r.status, "error": r.error, "run_dir": str(r.run_dir),
               "hosts": hosts}
    except Exception as exc:  # still leave a result: the controller must not guess
        doc = {"rc": 1, "status": "error", "error": f"{type(exc).__name__}: {exc}",
               "run_dir": "", "hosts": {}}
    doc["wall_s"] = round(time.time() - started, 3)
    tmp = bdir / (RESULT + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, bdir / RESULT)
    journal.close()


def spawn(bdir: Path, spec: dict[str, Any]) -> int:
    (bdir / SPEC).write_text(json.dumps(spec, indent=2))
    log = (bdir / "worker.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "fleetgate.rollout.worker", str(bdir)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=bdir)
    log.close()
    return proc.pid


def _pidinfo(bdir: Path) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = json.loads((bdir / PIDFILE).read_text())
        return info
    except (OSError, json.JSONDecodeError):
        return None


def pid_of(bdir: Path) -> int | None:
    info = _pidinfo(bdir)
    return int(info["pid"]) if info else None


def worker_alive(bdir: Path) -> bool:
    info = _pidinfo(bdir)
    if info is None:
        return False
    pid = int(info["pid"])
    # The start time guards against a recycled pid belonging to something else.
    return _proc_start(pid) == info.get("start") and _proc_start(pid) != ""


def result(bdir: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads((bdir / RESULT).read_text())
        return doc
    except (OSError, json.JSONDecodeError):
        return None


def wait(bdir: Path, *, poll_s: float = 0.5, spawned_pid: int | None = None,
         grace_s: float = 30.0) -> dict[str, Any] | None:
    """Until the worker leaves its result, or is gone without one (None)."""
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


if __name__ == "__main__":
    run_batch(Path(sys.argv[1]))
