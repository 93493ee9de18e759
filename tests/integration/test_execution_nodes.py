"""Rollouts whose batches run on execution nodes, on the real lab: 12 container hosts in two
zones (lab-c01..12; zone-b is every third host) and 2 execution-node containers (lab-x01 for
zone-a, lab-x02 for zone-b) running `ansible-runner worker`, fed by transmit over SSH and read
back by process on the controller.

One lab for the file, its hosts from the lab-cpu golden image (the smoke probes are there).
The change is the stamp (examples/rollout/stamp-version.yml). The first rollout gates on the
smoke suite's discovery check, which the nodes run too; the others have no smoke checks:
they are about where batches run and what survives a crash, and the target check (the
version file) still gates every host. Each test has its own stamp, so applications are
counted per test on the hosts (applies.log) and in the journal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FLEETGATE, REPO, LabHandle
from tests.integration.conftest import GoldenImages, LabFactory

pytestmark = pytest.mark.lab

N_HOSTS = 12
HOSTS = [f"lab-c{i:02d}" for i in range(1, N_HOSTS + 1)]
ZONE_B = [h for i, h in enumerate(HOSTS) if i % 3 == 2]  # the lab's rack3 is zone-b
NODE = {h: "lab-x02" if h in ZONE_B else "lab-x01" for h in HOSTS}
VERSION_FILE = "/var/lib/fleetgate-example/version"
APPLIES_LOG = "/var/lib/fleetgate-example/applies.log"
EXIT = {"completed": 0, "halted": 10}


class Lab(LabHandle):
    def plan(self, name: str, hosts: list[str] | None = None, delay_s: int = 0,
             **overrides: Any) -> Path:
        doc: dict[str, Any] = {
            "name": name,
            "targets": {"inventory": self.inventory, "class": "lab-cpu",
                        "patterns": hosts or []},
            "change": {"playbook": "examples/rollout/stamp-version.yml",
                       "extra_vars": {"stamp_version": name, "stamp_delay_s": delay_s},
                       "target": {"files": {VERSION_FILE: name}}},
            "waves": {"pools": ["pool_canary", "pool_wave1", "pool_wave2"]},
            "concurrency": 12,
            "budgets": {"per_wave": {"max_failed": 6}, "total": {"max_failed": 12}},
            "gates": {"checks": []},
            "execution": {"domain": "zone",
                          "nodes": {"zone-a": "lab-x01", "zone-b": "lab-x02"}},
        }
        doc.update(overrides)
        path = self.root.parent / f"{name}.plan.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def rollout(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("rollout", *args, check=check)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **self.env}
        return subprocess.Popen([str(FLEETGATE), "rollout", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                                stdin=subprocess.DEVNULL)

    def history(self, rid: str, kind: str) -> list[dict[str, Any]]:
        proc = self.rollout("history", rid, "--json", "--kind", kind)
        if proc.returncode != 0:
            return []  # not in the journal yet
        events: list[dict[str, Any]] = json.loads(proc.stdout)
        return events

    def status(self, rid: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.rollout("status", rid, "--json").stdout)
        return doc

    def wait_remote_job(self, rid: str, proc: subprocess.Popen[str], wave: int,
                        timeout: float = 120) -> dict[str, Any]:
        """Until a batch of `wave` has its job on an execution node."""
        deadline = time.monotonic() + timeout
        while True:
            started = [e for e in self.history(rid, "remote_job")
                       if e["wave"] == wave and e["data"]["state"] == "started"]
            if started:
                return started[0]
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{rid}: no remote job in wave {wave}"
            time.sleep(0.5)

    def applies(self, host: str, stamp: str) -> int:
        out = self.ssh(host, f"cat {APPLIES_LOG} 2>/dev/null || true")
        return sum(1 for line in out.splitlines() if line.split()[-1:] == [stamp])


@pytest.fixture(scope="module")
def lab(golden: GoldenImages, lab_up: LabFactory) -> Iterator[Lab]:
    with lab_up("execnodes", containers=N_HOSTS, images=(golden.build("lab-cpu"),),
                golden=golden, handle=Lab, args=("--execution-nodes", "2")) as lab:
        yield lab


def batches(lab: Lab, rid: str) -> list[dict[str, Any]]:
    return [e["data"] for e in lab.history(rid, "batch") if e["data"]["state"] == "started"]


def test_a_rollout_across_execution_nodes_says_which_node_ran_each_batch(lab: Lab) -> None:
    t0 = time.monotonic()
    plan = lab.plan("across", gates={"checks": ["discovery"]})
    proc = lab.rollout("start", str(plan), "--id", "across-1", "--json")
    assert proc.returncode == EXIT["completed"], proc.stdout[-3000:] + proc.stderr
    s = json.loads(proc.stdout)
    for h in HOSTS:
        assert s["hosts"][h]["state"] == "healthy", s["hosts"][h]
        assert s["hosts"][h]["applies"] == 1 and lab.applies(h, "across") == 1, h
    applied = [b for b in batches(lab, "across-1") if b["batch"].startswith("apply-")]
    # Every batch ran on one node, the node of its hosts' zone, and both nodes were used.
    for b in applied:
        assert {NODE[h] for h in b["hosts"]} == {b["execution_node"]}, b
    assert sorted(h for b in applied for h in b["hosts"]) == HOSTS
    assert {b["execution_node"] for b in applied} == {"lab-x01", "lab-x02"}
    done = [e["data"] for e in lab.history("across-1", "batch") if e["data"]["state"] == "done"]
    assert all(d.get("execution_node") for d in done if d["batch"].startswith("apply-"))
    # The events came back through process into the journal, as a local run's do.
    ansible_events = lab.history("across-1", "ansible")
    assert {e["host"] for e in ansible_events if e["data"]["event"] == "runner_on_ok"} == set(
        HOSTS)
    # Each host's smoke gate ran on its zone's node, and passed there.
    smoke = [e for e in lab.history("across-1", "smoke") if e["data"]["label"] == "verify"]
    assert {e["host"] for e in smoke} == set(HOSTS), smoke
    for e in smoke:
        assert e["data"]["execution_node"] == NODE[e["host"]], e
        assert e["data"]["result"]["status"] == "pass", e["data"]["result"]["reason"]
    # The nodes keep nothing of a collected job.
    for node in ("lab-x01", "lab-x02"):
        assert lab.ssh(node, "ls -A ~/.fleetgate-jobs 2>/dev/null || true").strip() == ""
    print(f"across: {time.monotonic() - t0:.1f}s")


def test_smoke_run_on_the_execution_nodes_measures_as_the_controller_does(lab: Lab) -> None:
    """`smoke run --execution-node` twice: the hosts are dealt to the nodes, each measures
    its part from there (a worker job each), and the verdicts are those of the same run from
    the controller. The nodes themselves are never measured."""
    verdicts = {}
    walls = {}
    for where in ("here", "nodes"):
        out = lab.root.parent / f"smoke-{where}.json"
        nodes = ["--execution-node", "lab-x01", "--execution-node", "lab-x02"]
        t0 = time.monotonic()
        proc = lab.run("smoke", "run", "-i", lab.inventory, "--only", "discovery,stack",
                       "--out", str(out), *(nodes if where == "nodes" else []), check=False)
        walls[where] = time.monotonic() - t0
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        doc = json.loads(out.read_text())
        assert doc["hosts"] == HOSTS
        verdicts[where] = {(r["host"], r["check"]): (r["status"], r["reason"], r["probe_version"])
                           for r in doc["results"]}
        ran_on = doc["execution_nodes"]
    assert verdicts["nodes"] == verdicts["here"]
    assert ran_on == {h: "lab-x01" if i < N_HOSTS // 2 else "lab-x02"
                      for i, h in enumerate(HOSTS)}
    for node in ("lab-x01", "lab-x02"):
        assert lab.ssh(node, "ls -A ~/.fleetgate-jobs 2>/dev/null || true").strip() == ""
    print(f"smoke on 12 hosts: here {walls['here']:.1f}s, on 2 nodes {walls['nodes']:.1f}s")


def test_controller_and_its_worker_killed_mid_batch_then_resume_applies_once(lab: Lab) -> None:
    hosts = ["lab-c03", "lab-c06"]  # zone-b: one batch, on lab-x02
    plan = lab.plan("crash", hosts, delay_s=6, waves={"pools": ["pool_wave1"]})
    proc = lab.popen("start", str(plan), "--id", "crash-1")
    try:
        lab.wait_remote_job("crash-1", proc, wave=1)
        # Both: the controller and the batch's local worker that follows the remote stream.
        spawned = [e["data"] for e in lab.history("crash-1", "batch")
                   if e["data"]["state"] == "spawned"]
        os.kill(spawned[-1]["pid"], signal.SIGKILL)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    resumed = lab.rollout("resume", "crash-1", "--json")
    assert resumed.returncode == EXIT["completed"], resumed.stdout[-3000:] + resumed.stderr
    s = json.loads(resumed.stdout)
    for h in hosts:
        assert s["hosts"][h]["state"] == "healthy", s["hosts"][h]
        assert s["hosts"][h]["applies"] == 1, s["hosts"][h]
        assert lab.applies(h, "crash") == 1, h
    jobs = lab.history("crash-1", "remote_job")
    assert any(e["data"]["state"] == "reattached" and e["data"]["node"] == "lab-x02"
               for e in jobs), jobs
    assert len({e["data"]["job"] for e in jobs if e["data"]["state"] == "started"}) == len(
        batches(lab, "crash-1"))


def test_an_execution_node_stopped_mid_batch_fails_its_hosts_and_the_budget_halts(
        lab: Lab) -> None:
    hosts = ["lab-c03", "lab-c06", "lab-c09", "lab-c12"]  # zone-b: wave 1 c03 c06, 2 c09 c12
    # A batch holds budget + 1 hosts: both of wave 1's, whose two failures then exceed it.
    plan = lab.plan("nodedies", hosts, delay_s=8, waves={"pools": ["pool_wave1", "pool_wave2"]},
                    budgets={"per_wave": {"max_failed": 1}, "total": {"max_failed": 1}})
    proc = lab.popen("start", str(plan), "--id", "nodedies-1")
    try:
        lab.wait_remote_job("nodedies-1", proc, wave=1)
        lab.run("lab", "fault", "lab-x02", "stop")
        assert proc.wait(120) == EXIT["halted"], proc.communicate()
    finally:
        proc.kill()
        proc.wait()
        lab.run("lab", "heal", "lab-x02", check=False)
    s = lab.status("nodedies-1")
    assert s["state"] == "halted" and "budget exceeded" in s["reason"], s
    for h in ("lab-c03", "lab-c06"):
        assert s["hosts"][h]["state"] == "failed_held", s["hosts"][h]
        assert "unreachable during apply" in s["hosts"][h]["reason"], s["hosts"][h]
        assert "lab-x02" in s["hosts"][h]["reason"], s["hosts"][h]
        assert lab.applies(h, "nodedies") <= 1
    for h in ("lab-c09", "lab-c12"):
        assert s["hosts"][h]["state"] == "skipped", s["hosts"][h]
        assert lab.applies(h, "nodedies") == 0
