"""The one way fleetgate runs Ansible: ansible-runner, a private data dir per run, every event kept.

Nothing in fleetgate shells out to `ansible-playbook`. Each run gets its own directory under
the state dir (inputs, artifacts, `events.jsonl`), so a run can be audited or replayed later.
The directory is private (umask 077), and what it keeps has passed the redactor
(runner/redact.py): a secret var given to the run is in it only while the run lasts.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import ansible_runner

from fleetgate.runner import redact, remote, secret_vars, vault
from fleetgate.runner.inventory import Inventory, Sources, resolve_inventory, validate_limit
from fleetgate.runner.private_state import private_state_dir, private_tree, private_umask
from fleetgate.site import content_env, content_root, current_site

HostOutcome = Literal["ok", "changed", "failed", "unreachable", "skipped"]
# Inside the private data dir for the run only; deleted before anything else reads the dir.
SECRET_VARS_FILE = "secret-vars.yml"  # noqa: S105 - a file name, not a secret


@dataclass
class HostResult:
    host: str
    outcome: HostOutcome
    message: str = ""
    task: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunResult:
    status: str
    rc: int
    run_dir: Path
    hosts: dict[str, HostResult]
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and all(h.outcome in ("ok", "changed", "skipped")
                                    for h in self.hosts.values())


def state_dir() -> Path:
    return current_site().state_dir


def _new_run_dir(kind: str, base: Path | None) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    d = (base or private_state_dir() / "runs") / f"{stamp}-{kind}-{uuid.uuid4().hex[:6]}"
    d.mkdir(parents=True)
    return d


def _trim_command_artifact(run_dir: Path, envvars: Mapping[str, str]) -> None:
    """ansible-runner records the whole environment it ran with (`artifacts/*/command`): the
    controller's, with whatever tokens an operator's shell holds. Keep only what we set."""
    for path in run_dir.glob("artifacts/*/command"):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("env"), dict):
            doc["env"] = {k: v for k, v in doc["env"].items() if k in envvars}
            path.write_text(json.dumps(doc, ensure_ascii=False))


def _env(forks: int) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_FORKS": str(forks),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_TIMEOUT": "15",
        # fleetgate's ansible.cfg (roles, the fleetgate_class vars plugin) applies to every
        # run, whatever directory ansible-runner starts Ansible in; a rollout of a new class
        # version overrides the classes through `env`.
        **content_env(),
        "ANSIBLE_ROLES_PATH": str(content_root() / "roles"),
        "ANSIBLE_STDOUT_CALLBACK": "default",
        # Short socket paths: ControlPath must fit in sun_path (108 bytes).
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(state_dir() / "cp"),
    }


def run(
    *,
    inventory: Sources | Inventory,
    playbook: Path | None = None,
    module: str | None = None,
    module_args: str = "",
    limit: str | None = None,
    extravars: Mapping[str, Any] | None = None,
    forks: int = 20,
    runs_base: Path | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    timeout: int | None = None,
    env: Mapping[str, str] | None = None,
    cancel: Callable[[], bool] | None = None,
    secrets: Mapping[str, str] | None = None,
    on_remote: remote.RemoteJob | None = None,
    on_remote_started: Callable[[], None] = lambda: None,
    pre_playbooks: Sequence[Path] = (),
    on_recap: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """One ansible-runner run; `on_remote`: on that execution node (runner/remote.py), the
    events folded here exactly as a local run's. `pre_playbooks` run ahead of `playbook` in
    the same ansible-playbook (_importing). `cancel` is polled to stop the run early;
    without it, ansible-runner's own SIGINT/SIGTERM handlers cancel it, and the caller's
    handlers are put back afterwards (ansible-runner installs its own and never restores
    them). `on_recap`: called once, from inside the run, with what its recap
    (playbook_on_stats) says, before ansible-playbook and ansible-runner exit (see
    recap_result); a local playbook run only. `secrets`:
    extra vars whose values are masked in everything the run keeps (runner/secret_vars.py
    reads them)."""
    with private_umask():
        return _run(inventory=inventory, playbook=playbook, module=module,
                    module_args=module_args, limit=limit, extravars=extravars, forks=forks,
                    runs_base=runs_base, on_event=on_event, timeout=timeout, env=env,
                    cancel=cancel, secrets=secrets or {}, on_remote=on_remote,
                    on_remote_started=on_remote_started, pre_playbooks=pre_playbooks,
                    on_recap=on_recap)


def _run(
    *,
    inventory: Sources | Inventory,
    playbook: Path | None,
    module: str | None,
    module_args: str,
    limit: str | None,
    extravars: Mapping[str, Any] | None,
    forks: int,
    runs_base: Path | None,
    on_event: Callable[[dict[str, Any]], None] | None,
    timeout: int | None,
    env: Mapping[str, str] | None,
    cancel: Callable[[], bool] | None,
    secrets: Mapping[str, str],
    on_remote: remote.RemoteJob | None = None,
    on_remote_started: Callable[[], None] = lambda: None,
    pre_playbooks: Sequence[Path] = (),
    on_recap: Callable[[RunResult], None] | None = None,
) -> RunResult:
    if on_remote is not None and playbook is None:
        raise ValueError("an execution node runs playbooks only")
    if pre_playbooks and (on_remote is not None or playbook is None):
        raise ValueError("playbooks ahead of the playbook: a local playbook run only")
    if (playbook is None) == (module is None):
        raise ValueError("give exactly one of playbook or module")
    # Resolved once per command (and kept): a source Ansible cannot parse is one line of bad
    # input here, not a traceback from deep inside Ansible after a run dir was made.
    inv = inventory if isinstance(inventory, Inventory) else resolve_inventory(inventory)
    limit = validate_limit(limit)
    sources = inv.runner_sources()
    kind = playbook.stem if playbook else f"adhoc-{module}"
    redact.add_secrets(secrets.values())
    # The inventory's own vaulted values: Ansible decrypts them inside the run, so the
    # redactor must know them before the first event is written.
    redact.add_secrets(vault.inventory_plaintexts(inv.vaulted, source=inv.label))
    run_dir = _new_run_dir(kind, runs_base)
    events_path = run_dir / "events.jsonl"
    hosts: dict[str, HostResult] = {}
    stats: dict[str, Any] = {}
    errors: list[str] = []

    with events_path.open("w") as events_file:

        def handler(event: dict[str, Any]) -> bool:
            clean = redact.event(event)
            # In place: ansible-runner writes this same dict to job_events/, and its stdout
            # line to artifacts/*/stdout, after us (tests/unit/test_private_state.py).
            event.clear()
            event.update(clean)
            events_file.write(json.dumps(clean, default=str) + "\n")
            _fold_event(hosts, clean)
            if clean.get("event") == "playbook_on_stats":
                stats.update(clean.get("event_data") or {})
            elif clean.get("event") == "error":
                errors.append(" ".join(str(clean.get("stdout", "")).split())[:500])
            if on_event is not None:
                on_event(clean)
            if (on_recap is not None and on_remote is None and playbook is not None
                    and clean.get("event") == "playbook_on_stats"):
                # Ansible read the secret vars at its start: they need not outlive the
                # recap, and what the caller reads of the run is on disk from here on.
                vars_file.unlink(missing_ok=True)
                events_file.flush()
                on_recap(recap_result(run_dir, hosts, stats, errors))
            return True  # keep ansible-runner's own job_events too

        envvars = {**_env(forks), **(env or {})}
        kwargs: dict[str, Any] = {
            "private_data_dir": str(run_dir),
            "inventory": sources[0] if len(sources) == 1 else sources,
            "envvars": envvars,
            "extravars": dict(extravars or {}),
            "quiet": True,
            "event_handler": handler,
            "limit": limit,
            "timeout": timeout,
            # ansible-runner's default jsonfile fact cache keeps every host's facts on disk
            # (0644, Ansible chmods them), ansible_env included: a run needs them only in
            # memory, and a controller's environment holds secrets.
            "fact_cache_type": "memory",
        }
        if playbook is not None:
            kwargs["playbook"] = str(playbook.resolve())
        else:
            kwargs.update(module=module, module_args=module_args, host_pattern="all")
        if cancel is not None:
            kwargs["cancel_callback"] = cancel
        if pre_playbooks:
            assert playbook is not None
            kwargs["playbook"] = str(_importing(run_dir, [*pre_playbooks, playbook]))
        vars_file = run_dir / SECRET_VARS_FILE
        if secrets and on_remote is None:
            secret_vars.write_vars_file(vars_file, secrets)
            kwargs["cmdline"] = f"-e @{shlex.quote(str(vars_file))}"
        saved = ({sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
                 if threading.current_thread() is threading.main_thread() else {})
        lost = ""
        try:
            if on_remote is None:
                r: Any = ansible_runner.run(**kwargs)
            else:
                assert playbook is not None
                r = remote.run(on_remote, {**kwargs, "ident": on_remote.job}, inv=inv,
                               playbook=playbook.resolve(), secrets=secrets,
                               event_handler=handler, on_started=on_remote_started)
                lost = r.lost
        finally:
            for sig, prev in saved.items():
                signal.signal(sig, prev)
            vars_file.unlink(missing_ok=True)
            _trim_command_artifact(run_dir, envvars)
            if on_remote is not None:
                _redact_returned(run_dir)
            private_tree(run_dir)

    # The stats event we saw is authoritative; runner's own r.stats can be None when the run
    # ends with an error event after the recap.
    _fold_stats(hosts, stats or r.stats or {})
    rc = int(r.rc if r.rc is not None else 1)
    if rc != 0 and not stats and not errors:
        # A playbook that does not parse never emits an error event; its reason is on stdout.
        errors.extend(_stdout_errors(run_dir))
    if rc != 0 and not stats:
        # The play aborted (a parse error, a missing role...): no host got to its recap, so
        # none of them is "ok", whatever events arrived before the abort.
        reason = errors[-1] if errors else f"ansible-runner status {r.status}, rc {rc}"
        for hr in hosts.values():
            if hr.outcome in ("ok", "changed", "skipped"):
                hr.outcome, hr.message = "failed", reason
    if lost:
        # The node (or the way to it) went mid-batch: no host's outcome is known, whatever
        # events came before; each is unreachable during this run, by today's rules.
        for name in limit.split(",") if limit else []:
            hosts[name] = HostResult(name, "unreachable", message=lost,
                                     task=hosts[name].task if name in hosts else "")
        errors.append(lost)
    (run_dir / "result.json").write_text(json.dumps(
        {"status": r.status, "rc": r.rc,
         "hosts": {h: {"outcome": v.outcome, "message": v.message, "task": v.task}
                   for h, v in hosts.items()}}, indent=2))
    return RunResult(status=str(r.status), rc=rc, run_dir=run_dir, hosts=hosts,
                     error=errors[-1] if errors else "")


def _importing(run_dir: Path, playbooks: list[Path]) -> Path:
    """One playbook that imports `playbooks` in order, in the run's dir. Ansible gives each
    imported playbook its own directory as playbook_dir, with its group_vars, host_vars and
    plugin dirs, as when it runs alone; ansible-playbook's own list of playbooks would not
    fit ansible-runner, which puts its options between the list and the last playbook."""
    paths = [str(p.resolve()) for p in playbooks]
    for path in paths:
        # import_playbook templates its path.
        if any(c in path for c in "{}%"):
            raise ValueError(f"{path}: a playbook path with {{, }} or % cannot be imported")
    out = run_dir / "playbooks.yml"
    out.write_text(json.dumps([{"name": f"Import {Path(p).name}",
                                "ansible.builtin.import_playbook": p} for p in paths]))
    return out


def _redact_returned(run_dir: Path) -> None:
    """A node's stdout and stderr come back whole in the artifacts' zip, written there before
    any redactor saw them (a local run's stdout is written after the event handler masked the
    event it comes from)."""
    for path in [*run_dir.glob("artifacts/*/stdout"), *run_dir.glob("artifacts/*/stderr")]:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        path.write_text(redact.text(text), encoding="utf-8")


def _stdout_errors(run_dir: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(run_dir.glob("artifacts/*/stdout")):
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if line.startswith(("[ERROR]", "ERROR!")):
                # The message, plus the "Origin: file:line" line Ansible prints after it.
                more = [x for x in lines[i + 1:i + 3] if x.startswith("Origin:")]
                out.append(redact.text(" ".join(" ".join([line, *more]).split()))[:500])
    return out


def recap_result(run_dir: Path, hosts: Mapping[str, HostResult], stats: Mapping[str, Any],
                 errors: Sequence[str]) -> RunResult:
    """A playbook run's result as its recap gives it, before ansible-playbook exits: the
    hosts exactly as the finished run will have them (the recap is authoritative for every
    host it processed), and the rc and status ansible-playbook's strategy returns for them
    (unreachable 4, failed 2, else 0). What can still differ is only the run's own end: an
    error event after the recap, or a kill while ansible-playbook exits."""
    out = {h: replace(v, results=list(v.results)) for h, v in hosts.items()}
    _fold_stats(out, stats)
    outcomes = {v.outcome for v in out.values()}
    rc = 4 if "unreachable" in outcomes else 2 if "failed" in outcomes else 0
    return RunResult(status="successful" if rc == 0 else "failed", rc=rc, run_dir=run_dir,
                     hosts=out, error=errors[-1] if errors else "")


def _fold_stats(hosts: dict[str, HostResult], stats: Mapping[str, Any]) -> None:
    for name, outcome in _stats_outcomes(stats).items():
        hr = hosts.setdefault(name, HostResult(name, outcome))
        hr.outcome = outcome


def _stats_outcomes(stats: Mapping[str, Any]) -> dict[str, HostOutcome]:
    out: dict[str, HostOutcome] = {}
    for host in stats.get("processed", {}):
        if host in stats.get("dark", {}):
            out[host] = "unreachable"
        elif host in stats.get("failures", {}):
            out[host] = "failed"
        elif host in stats.get("changed", {}):
            out[host] = "changed"
        elif host in stats.get("ok", {}):
            out[host] = "ok"
        else:
            out[host] = "skipped"
    return out


def _fold_event(hosts: dict[str, HostResult], event: Mapping[str, Any]) -> None:
    name = event.get("event", "")
    data = event.get("event_data") or {}
    host = data.get("host")
    if not host or not name.startswith("runner_on_"):
        return
    res = data.get("res") or {}
    hr = hosts.setdefault(host, HostResult(host, "ok"))
    if name == "runner_on_ok":
        hr.results.append(res)
        if res.get("changed") and hr.outcome == "ok":
            hr.outcome = "changed"
    elif name in ("runner_on_failed", "runner_on_unreachable"):
        if name == "runner_on_failed" and data.get("ignore_errors"):
            return
        hr.outcome = "unreachable" if name == "runner_on_unreachable" else "failed"
        hr.task = str(data.get("task", ""))
        msg = res.get("msg") or res.get("stderr") or res.get("module_stderr") or ""
        hr.message = " ".join(str(msg).split())[:500]
