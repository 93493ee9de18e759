"""`diagnose()`: one Ansible run collects the evidence on every matched host, then each host
gets its own walk. Also the offline replay of a saved or hand-collected document."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.inputs import load_json, read_input
from fleetgate.runner import ansible
from fleetgate.runner.inventory import Sources, host_path, resolve_inventory, validate_limit
from fleetgate.site import content_root
from fleetgate.spec.loader import resolve_class
from fleetgate.triage import evidence
from fleetgate.triage.model import Walk
from fleetgate.triage.walk import uncollected, walk

COLLECT_TASK = "Run the triage collector"
SAVED_SCHEMA = "fleetgate.triage.saved/v1"
BACKENDS = ("nvidia", "amd", "cpu", "none", "auto")


@dataclass
class Target:
    backend: str  # nvidia | amd | cpu | none | auto (no class: read it off the tools)
    expected_gpus: int | None


@dataclass
class DiagnoseRun:
    run_dir: Path | None
    walks: list[Walk]

    @property
    def exit_code(self) -> int:
        verdicts = {w.verdict for w in self.walks}
        return 1 if "problem" in verdicts else 4 if "inconclusive" in verdicts else 0


def target_of(hostvars: dict[str, Any], host: str) -> Target:
    name = hostvars.get("fleetgate_class")
    if not name:
        return Target("auto", None)
    try:
        _, nc = resolve_class(str(name))
    except BadInput as exc:
        raise BadInput(exc.reason, source=host, field="fleetgate_class") from None
    return Target(nc.accelerator.backend, nc.accelerator.count)


def evaluate(host: str, c: evidence.Collection, t: Target) -> Walk:
    backend = t.backend
    if backend == "auto":
        seen = {k: c.commands.get(k) for k in ("nvidia_smi_list", "rocminfo", "amd_smi_static")}
        present = [k for k, v in seen.items() if v is not None and v.status != "missing"]
        backend = "nvidia" if "nvidia_smi_list" in present else "amd" if present else "cpu"
    ev = evidence.build(c, backend=backend, expected_gpus=0)
    if t.expected_gpus is not None:
        ev.expected_gpus = t.expected_gpus
    elif backend == "nvidia" and ev.tools["nvidia_smi_list"].ok:
        ev.expected_gpus = len(ev.tools["nvidia_smi_list"].data)
    elif backend == "amd" and ev.tools["rocminfo"].ok:
        ev.expected_gpus = ev.tools["rocminfo"].data["gpu_agent_count"]
    return walk(host, ev)


def diagnose(inventory: Sources, limit: str, *, command_timeout: int = 10,
             runs_base: Path | None = None) -> DiagnoseRun:
    """Bad input raises BadInput before any host is touched; an unreachable host or a broken
    collector is an inconclusive walk, never an exception."""
    validate_limit(limit)
    if not 1 <= command_timeout <= 120:
        raise BadInput("must be between 1 and 120", source="--command-timeout")
    inv = resolve_inventory(inventory, limit)
    hostvars = inv.hostvars
    if not hostvars:
        raise BadInput("no host in the inventory matches", source=inv.label,
                       field=f"--limit {limit}")
    targets = {h: target_of(hv, h) for h, hv in hostvars.items()}
    stdout: dict[str, str] = {}

    def on_event(event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("task") == COLLECT_TASK:
            stdout[str(data.get("host"))] = evidence.collection_text(
                (data.get("res") or {}).get("collection"))

    result = ansible.run(inventory=inv, playbook=content_root() / "playbooks" / "diagnose.yml",
                         limit=limit, extravars={"triage_command_timeout": command_timeout},
                         on_event=on_event, runs_base=runs_base,
                         timeout=command_timeout * 20 + 180)
    walks = []
    for host, t in targets.items():
        hr = result.hosts.get(host)
        if host not in stdout:
            why = (f"{hr.outcome}: {hr.message}" if hr is not None and hr.message
                   else hr.outcome if hr is not None else result.error or "no result")
            walks.append(uncollected(host, t.backend, why))
            continue
        try:
            c = evidence.load_collection(stdout[host])
        except evidence.MalformedCollection as exc:
            walks.append(uncollected(host, t.backend, f"collector output: {exc}"))
            continue
        save(host_path(result.run_dir, host, ".json", prefix="triage-"), host, t, c)
        walks.append(evaluate(host, c, t))
    return DiagnoseRun(result.run_dir, walks)


def save(path: Path, host: str, t: Target, c: evidence.Collection) -> None:
    doc = {"schema": SAVED_SCHEMA, "host": host, "backend": t.backend,
           "expected_gpus": t.expected_gpus,
           "collection": {**c.model_dump(exclude={"schema_"}), "schema": evidence.SCHEMA}}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def replay(path: Path, *, backend: str | None = None, gpus: int | None = None) -> DiagnoseRun:
    """Walk a saved document (run_dir/triage-HOST.json) or a collector's raw output."""
    text = read_input(path)  # a FIFO or device is refused, never read
    if backend is not None and backend not in BACKENDS:
        raise BadInput(f"unknown backend (known: {', '.join(BACKENDS)})", source="--backend",
                       field=backend)
    if gpus is not None and not 0 <= gpus <= 64:
        raise BadInput("must be between 0 and 64", source="--gpus")
    doc = load_json(text, path, what="not JSON")
    host, t = path.stem.removeprefix("triage-"), Target(backend or "auto", gpus)
    if isinstance(doc, dict) and doc.get("schema") == SAVED_SCHEMA:
        host = str(doc.get("host") or host)
        saved_backend = doc.get("backend")
        saved_gpus = doc.get("expected_gpus")
        t = Target(backend or (saved_backend if saved_backend in BACKENDS else "auto"),
                   gpus if gpus is not None else
                   saved_gpus if isinstance(saved_gpus, int) else None)
        doc = doc.get("collection")
    try:
        c = evidence.load_collection(json.dumps(doc))
    except evidence.MalformedCollection as exc:
        raise BadInput(f"not a triage collection: {exc}", source=path) from None
    return DiagnoseRun(None, [evaluate(host, c, t)])
