"""The valid base every bad input is made from, built through the real CLI: a site from
`fleetgate init`, an INI inventory of hosts at 127.0.0.1 port 1 (nothing listens there, so
even an input wrongly accepted reaches no real host), a plan adapted from
examples/bad-blas/rollout.yml, and the artifact `fleetgate rollout plan` writes for it.

The plan's maintenance window is closed (it opens two hours from now), so a valid artifact
started here halts at its first safe point without touching a host: that is the control
that proves `rollout start` accepts the untampered artifact.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.corpus.cli import REPO, clean_env, run
from tests.corpus.entry import Doc, write, write_json, write_yaml

FIXTURES = REPO / "tests" / "fixtures"
CLASS_FILES = {name: REPO / "inventory" / "classes" / f"{name}.yml" for name in (
    "lab-cpu", "nvidia-h100-535", "nvidia-h200-580", "amd-mi300x-rocm")}
BASE_ROLLOUT_ID = "corpus-base"
INVENTORY_INI = """\
[class_lab_cpu]
h1 ansible_host=127.0.0.1 ansible_port=1 zone=z1 rack=r1
h2 ansible_host=127.0.0.1 ansible_port=1 zone=z2 rack=r2
h3 ansible_host=127.0.0.1 ansible_port=1 zone=z1 rack=r2

[pool_canary]
h1

[pool_rest]
h2
h3
"""


class BaseRefused(AssertionError):
    """The valid base itself was refused: every entry would pass for the wrong reason."""


@dataclass(frozen=True)
class Base:
    root: Path
    site: Path
    pristine: Path  # an untouched copy of the site, for the entries that break one
    inventory: Path
    plan: Doc
    plan_file: Path
    artifact: Path
    state: Path  # the state that planned the artifact (its key) and ran `corpus-base`
    markers: Path
    classes: dict[str, Doc]
    probe: Path
    samples: Path
    results: Path
    triage: Path

    def dir(self, family: str, entry_id: str) -> Path:
        d = self.root / family / entry_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    def marker(self, entry_id: str) -> Path:
        """The file an injection of `entry_id` would create if it ran."""
        return self.markers / entry_id

    def touch(self, entry_id: str) -> str:
        return f"touch {self.marker(entry_id)}"

    def evil_playbook(self, entry_id: str) -> Path:
        """A playbook outside every allowed directory that, if run, runs on the controller."""
        return write_yaml(self.root / "evil" / f"{entry_id}.yml", [{
            "name": "Tampered change", "hosts": "all", "connection": "local",
            # raw: no Python needed on the controller, so nothing but acceptance decides.
            "gather_facts": False, "tasks": [{"name": "Leave a marker",
                                              "ansible.builtin.raw": self.touch(entry_id)}]}])

    def evil_script(self, entry_id: str) -> Path:
        """An executable that leaves the entry's marker: what a smuggled interpreter,
        ProxyCommand or become executable would run."""
        path = write(self.root / "evil" / f"{entry_id}.sh",
                     f"#!/bin/sh\n{self.touch(entry_id)}\n")
        path.chmod(0o755)
        return path

    def env(self, state: Path) -> dict[str, str]:
        return clean_env({"FLEETGATE_STATE_DIR": str(state)})


def _check(what: str, argv: list[str], cwd: Path, env: dict[str, str],
           codes: tuple[int, ...] = (0,)) -> None:
    out = run(argv, cwd=cwd, env=env, timeout=120)
    if out.rc not in codes:
        raise BaseRefused(f"{what}: fleetgate {' '.join(argv)} -> {out.rc}\n"
                          f"{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def closed_window(now: dt.datetime) -> Doc:
    """A window that opens two hours from now: closed for the whole run, whatever the hour."""
    start, end = now + dt.timedelta(hours=2), now + dt.timedelta(hours=3)
    return {"start": f"{start:%H:%M}", "end": f"{end:%H:%M}", "timezone": "UTC",
            "when_closed": "halt"}


def base_plan(now: dt.datetime) -> Doc:
    plan: Doc = yaml.safe_load((REPO / "examples" / "bad-blas" / "rollout.yml").read_text())
    plan["name"] = "corpus-base"
    plan["targets"]["inventory"] = "../inventory/hosts.ini"
    plan["change"]["playbook"] = "playbooks/noop.yml"
    plan["change"]["classes"] = "classes-v2"
    plan["rollback"]["playbook"] = "playbooks/noop.yml"
    plan["waves"] = {"pools": ["pool_canary", "pool_rest"]}
    plan["gates"]["baseline_hosts"] = 1
    plan["window"] = closed_window(now)
    return plan


def _probe_files(root: Path) -> tuple[Path, Path, Path, Path]:
    d = root / "probe-base"
    tflops = [0.0101, 0.0104, 0.0099, 0.0102, 0.0100, 0.0103]
    probe = write_json(d / "probe.json", {
        "probe": "gemm", "backend": "cpu", "status": "ok", "reason": "",
        "metrics": {"tflops": 0.0102, "samples": tflops}, "evidence": {},
        "duration_s": 3.5, "tool_versions": {"numpy": "1.24.2"}})
    samples = write_json(d / "samples.json", {"gemm.tflops": tflops})
    results = write_json(d / "results.json", {
        "schema": "fleetgate.smoke.result/v1", "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:01:00Z", "wall_s": 60.0, "inventory": "hosts.ini",
        "limit": None, "node_class": None, "checks": ["gemm"], "hosts": ["h1"],
        "results": [{"host": "h1", "check": "gemm", "status": "pass", "probe_status": "ok",
                     "reason": "", "metrics": {"tflops": 0.0102, "samples": tflops}}]})
    triage = d / "triage-h1.json"
    shutil.copy(FIXTURES / "triage" / "lab-saved-healthy.json", triage)
    return probe, samples, results, triage


def build_base(root: Path) -> Base:
    now = dt.datetime.now(dt.UTC)
    state, markers = root / "base-state", root / "markers"
    markers.mkdir(parents=True)
    env = clean_env({"FLEETGATE_STATE_DIR": str(state)})
    _check("fleetgate init", ["init", "site", "--class", "lab-cpu"], root, env)
    site = root / "site"
    inventory = write(site / "inventory" / "hosts.ini", INVENTORY_INI)
    shutil.copy(REPO / "examples" / "rollout" / "noop.yml", site / "playbooks" / "noop.yml")
    (site / "classes-v2").mkdir()
    shutil.copy(REPO / "examples" / "bad-blas" / "classes" / "lab-cpu.yml",
                site / "classes-v2" / "lab-cpu.yml")
    # A valid class directory outside the site: for plans and artifacts that point there.
    (root / "outside-classes").mkdir()
    shutil.copy(site / "classes-v2" / "lab-cpu.yml", root / "outside-classes" / "lab-cpu.yml")
    plan = base_plan(now)
    plan_file = write_yaml(site / "plans" / "base.yml", plan)
    pristine = root / "pristine-site"
    shutil.copytree(site, pristine, symlinks=True)
    artifact = root / "artifact-base" / "base.json"
    artifact.parent.mkdir()
    _check("the base plan", ["rollout", "plan", str(plan_file), "--out", str(artifact)],
           site, env)
    # Halted by the closed window before any host: the journal now holds a real rollout for
    # the flags that need one (approve, explain, history, report).
    _check("the base artifact", ["rollout", "start", str(artifact), "--id", BASE_ROLLOUT_ID],
           site, env, codes=(10,))
    classes = {name: yaml.safe_load(path.read_text()) for name, path in CLASS_FILES.items()}
    probe, samples, results, triage = _probe_files(root)
    return Base(root=root, site=site, pristine=pristine, inventory=inventory, plan=plan,
                plan_file=plan_file, artifact=artifact, state=state, markers=markers,
                classes=classes, probe=probe, samples=samples, results=results, triage=triage)


def artifact_doc(base: Base) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base.artifact.read_text())
    return doc
