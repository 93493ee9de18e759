"""Drain for real: rollouts with a `drain` section on a lab whose 3 container hosts are a real
Slurm 22.05 cluster (`lab up --slurm`: slurmctld on lab-c01, slurmd on all three; pools
canary lab-c01, wave1 lab-c02, wave2 lab-c03). Jobs are real sbatch jobs; every drain, wait and
resume is scontrol on the controller, and every assertion reads Slurm's own state back.

One lab for the file. The change is examples/rollout/stamp-version.yml (a version file and a
line in applies.log per application, stamped with the host's clock): the point is the order
of drain, job end and apply, not what is applied. With stamp_reboot it then reboots the host
the way a container host can: every process but init and the sshd listener is killed and the
lab's boot script starts munged and slurmd again, so a job that was still running would die.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FLEETGATE, REPO, LabHandle
from tests.integration.conftest import LabFactory

pytestmark = pytest.mark.lab

CONTROLLER = "lab-c01"
CANARY, WAVE1, WAVE2 = "lab-c01", "lab-c02", "lab-c03"
APPLIES_LOG = "/var/lib/fleetgate-example/applies.log"
CHANGE = "examples/rollout/stamp-version.yml"


class SlurmLab(LabHandle):
    def slurm(self, command: str) -> str:
        """A Slurm command on the controller host, over the lab's SSH."""
        return self.ssh(CONTROLLER, command)

    def node(self, name: str) -> dict[str, str]:
        """State and Reason (without Slurm's [user@time] stamp) of `scontrol show node -o`."""
        line = self.slurm(f"scontrol show node -o {name}").strip()
        state = line.split(" State=", 1)[1].split()[0]
        reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in line else ""
        return {"State": state, "Reason": reason}

    def submit(self, node: str, seconds: int, name: str) -> str:
        job = self.slurm(f"sbatch --parsable -w {node} -J {name} -o /dev/null "
                         f"--wrap 'sleep {seconds}'").strip()
        assert job.isdigit(), f"sbatch gave {job!r}"
        deadline = time.monotonic() + 30
        while self.slurm(f"squeue -h -j {job} -o %T").strip() != "RUNNING":
            assert time.monotonic() < deadline, f"job {job} never started"
            time.sleep(0.5)
        return job

    def job_end(self, job: str) -> float:
        """Slurm's own EndTime of a finished job (UTC, the lab hosts' zone), as epoch seconds."""
        line = self.slurm(f"scontrol show job -o {job}")
        end = line.split(" EndTime=", 1)[1].split()[0]
        return datetime.fromisoformat(end).replace(tzinfo=UTC).timestamp()

    def applies(self, host: str, stamp: str) -> list[float]:
        out = self.ssh(host, f"cat {APPLIES_LOG} 2>/dev/null || true")
        return [float(line.split()[0]) for line in out.splitlines()
                if line.split()[-1:] == [stamp]]

    def plan(self, name: str, pools: list[str], **overrides: Any) -> Path:
        doc: dict[str, Any] = {
            "name": name,
            "targets": {"inventory": self.inventory, "class": "lab-cpu", "patterns": pools},
            "change": {"playbook": CHANGE, "extra_vars": {"stamp_version": name}},
            "waves": {"pools": pools},
            "concurrency": 1,
            "budgets": {"per_wave": {"max_failed": 0}, "total": {"max_failed": 0}},
            # No smoke gate: the base image carries no probes, and the drain is under test.
            "gates": {"checks": []},
            "drain": {"timeout_s": 180},
            **overrides,
        }
        path = self.root.parent / f"{name}.plan.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def start(self, plan: Path, rid: str) -> subprocess.Popen[str]:
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **self.env}
        return subprocess.Popen([str(FLEETGATE), "rollout", "start", str(plan), "--id", rid],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=REPO, stdin=subprocess.DEVNULL)

    def status(self, rid: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("rollout", "status", rid, "--json",
                                                  check=False).stdout)
        return doc

    def host_events(self, rid: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = json.loads(
            self.run("rollout", "history", rid, "--json", "--kind", "host").stdout)
        return events


@pytest.fixture(scope="module")
def lab(lab_up: LabFactory) -> Iterator[SlurmLab]:
    with lab_up("slurm", containers=3, args=("--slurm",), handle=SlurmLab) as lab:
        yield lab


def test_lab_is_a_slurm_cluster_and_the_inventory_says_so(lab: SlurmLab) -> None:
    inv = yaml.safe_load(Path(lab.inventory).read_text())["all"]
    for h in (CANARY, WAVE1, WAVE2):
        assert inv["hosts"][h]["fleetgate_slurm_node"] == h
        assert inv["hosts"][h]["fleetgate_slurm_controller"] == CONTROLLER
        assert lab.node(h) == {"State": "IDLE", "Reason": ""}
    assert set(inv["children"]["slurm_nodes"]["hosts"]) == {CANARY, WAVE1, WAVE2}
    # The controller and the nodes really talk: a job runs on another host and returns.
    assert lab.slurm(f"srun -w {WAVE2} hostname").strip() == WAVE2


def test_a_running_job_holds_the_drain_until_it_ends_then_the_change_reboots_the_host(
        lab: SlurmLab) -> None:
    # On WAVE1, not the canary: that host also runs slurmctld, and this change reboots.
    job = lab.submit(WAVE1, 45, "train-a")
    rid = "slurm-wait-1"
    proc = lab.start(lab.plan("slurm-wait", ["pool_wave1"], change={
        "playbook": CHANGE,
        "extra_vars": {"stamp_version": "slurm-wait", "stamp_reboot": True}}), rid)
    seen: set[str] = set()
    while proc.poll() is None:
        n = lab.node(WAVE1)
        if n["Reason"].startswith(f"fleetgate: {rid} "):
            seen.add(n["State"])
        time.sleep(1)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, out[-3000:]
    # Slurm held the node DRAINING (the job still on it), not DRAINED, and fleetgate waited.
    assert "ALLOCATED+DRAIN" in seen, (seen, out[-2000:])
    ended = lab.job_end(job)
    applied = lab.applies(WAVE1, "slurm-wait")
    assert len(applied) == 1, applied
    # Slurm's EndTime has whole seconds: the apply began after the second the job ended in.
    assert applied[0] >= ended, (applied, ended)
    to_apply = [e for e in lab.host_events(rid) if e["data"]["to"] == "applying"]
    assert to_apply and to_apply[0]["ts"] >= ended
    # The reboot killed every process on the host after the job had ended, so the job ran to
    # its end: a job still running then would have died with its slurmstepd.
    boots = [float(x) for x in lab.ssh(WAVE1, "cat /var/lib/fleetgate-example/boots.log"
                                       ).split()]
    assert len(boots) == 1 and boots[0] > applied[0] >= ended, (boots, applied, ended)
    assert "JobState=COMPLETED" in lab.slurm(f"scontrol show job -o {job}")
    assert lab.ssh(WAVE1, "pgrep -x slurmd").strip()
    # Undrained after the gates: back to service, fleetgate's reason gone.
    assert lab.node(WAVE1) == {"State": "IDLE", "Reason": ""}
    assert lab.status(rid)["hosts"][WAVE1]["state"] == "healthy"
    # The report tells the host's drain story: the wait on the job, then the resume.
    md = lab.root.parent / f"{rid}.md"
    lab.run("rollout", "report", rid, "--md", str(md))
    drain = md.read_text().split("**Drain**", 1)[1]
    story = next(x for x in drain.splitlines() if x.startswith(f"- `{WAVE1}`: "))
    assert f"job {job} 'train-a' (root)" in story and "drained at " in story, story
    assert "resumed at " in story, story


def test_a_job_that_outlives_the_drain_timeout_leaves_the_host_untouched_and_resumed(
        lab: SlurmLab) -> None:
    job = lab.submit(CANARY, 120, "train-long")
    rid = "slurm-timeout-1"
    try:
        proc = lab.start(lab.plan("slurm-timeout", ["pool_canary", "pool_wave1"],
                                  drain={"timeout_s": 10}), rid)
        out, _ = proc.communicate(timeout=300)
        # The plan's budget (0 failed per wave) decides: the rollout halts.
        assert proc.returncode == 10, out[-3000:]
        s = lab.status(rid)
        canary = s["hosts"][CANARY]
        # Not held: it was never changed and is back in service; it still counts as a failure.
        assert canary["state"] == "drain_failed" and s["budget"]["failed"] == 1, s
        assert any(x.startswith("fleetgate rollout plan ") for x in s["next_steps"]), s
        # The reason names the job still running, says nothing was applied and how the node
        # was left; Slurm agrees: resumed, the job still running on it.
        assert f"job {job} 'train-long' (root)" in canary["reason"], canary
        assert "timed out after 10s" in canary["reason"]
        assert "nothing applied" in canary["reason"] and "node resumed" in canary["reason"]
        assert lab.node(CANARY) == {"State": "ALLOCATED", "Reason": ""}
        assert lab.slurm(f"squeue -h -j {job} -o %T").strip() == "RUNNING"
        assert lab.applies(CANARY, "slurm-timeout") == []
        assert s["hosts"][WAVE1]["state"] == "skipped"
        assert lab.node(WAVE1) == {"State": "IDLE", "Reason": ""}
    finally:
        lab.slurm(f"scancel {job}")


def test_a_failed_canary_stays_drained_and_later_waves_are_never_drained(
        lab: SlurmLab) -> None:
    rid = "slurm-fail-1"
    plan = lab.plan("slurm-fail", ["pool_canary", "pool_wave1", "pool_wave2"], change={
        "playbook": CHANGE,
        "extra_vars": {"stamp_version": "slurm-fail", "stamp_break_hosts": [CANARY]}})
    try:
        proc = lab.start(plan, rid)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 10, out[-3000:]
        s = lab.status(rid)
        assert s["hosts"][CANARY]["state"] == "failed_held"
        assert "service did not come back" in s["hosts"][CANARY]["reason"]
        # Out of service, with the reason that says who and why.
        assert lab.node(CANARY) == {"State": "IDLE+DRAIN", "Reason": f"fleetgate: {rid} {CHANGE}"}
        # The later waves were never drained: no journal transition, and Slurm never saw one.
        drained = {e["host"] for e in lab.host_events(rid) if e["data"]["to"] == "draining"}
        assert drained == {CANARY}
        for h in (WAVE1, WAVE2):
            assert s["hosts"][h]["state"] == "skipped"
            assert lab.node(h) == {"State": "IDLE", "Reason": ""}
        log = lab.slurm("cat /var/log/slurm/slurmctld.log")
        assert f"node {CANARY} reason set to: fleetgate: {rid}" in log
        md = lab.root.parent / f"{rid}.md"
        lab.run("rollout", "report", rid, "--md", str(md))
        assert f"- `{CANARY}`: `drained at " in md.read_text()
        assert f"held out of service: drained, reason 'fleetgate: {rid} {CHANGE}'" in (
            md.read_text())
        assert not any(f"node {h} reason set to: fleetgate: {rid}" in log for h in (WAVE1, WAVE2))
    finally:
        lab.slurm(f"scontrol update NodeName={CANARY} State=RESUME")


def test_kill_9_during_the_drain_wait_then_resume_drains_once_and_leaves_no_stray_reason(
        lab: SlurmLab) -> None:
    rid = "slurm-kill-1"
    job = lab.submit(CANARY, 30, "train-k")
    proc = lab.start(lab.plan("slurm-kill", ["pool_canary"]), rid)
    deadline = time.monotonic() + 120
    # The controller is waiting for the drain: Slurm shows fleetgate's reason, the job runs.
    while not (lab.node(CANARY)["Reason"].startswith(f"fleetgate: {rid} ")
               and lab.node(CANARY)["State"] == "ALLOCATED+DRAIN"):
        assert proc.poll() is None and time.monotonic() < deadline, (
            proc.stdout.read() if proc.stdout else "")
        time.sleep(0.5)
    proc.kill()
    proc.wait()
    env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **lab.env}
    resumed = subprocess.run([str(FLEETGATE), "rollout", "resume", rid], capture_output=True,
                             text=True, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                             timeout=400, check=False)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
    s = lab.status(rid)
    assert s["state"] == "completed" and s["hosts"][CANARY]["state"] == "healthy", s["hosts"]
    assert s["hosts"][CANARY]["applies"] == 1 and len(lab.applies(CANARY, "slurm-kill")) == 1
    # The apply came after the job: the crash did not let it skip the wait.
    assert lab.applies(CANARY, "slurm-kill")[0] >= lab.job_end(job)
    # One drain request reached slurmctld for this rollout, and the node is back in service
    # with no reason of fleetgate's left behind.
    log = lab.slurm("cat /var/log/slurm/slurmctld.log")
    assert log.count(f"node {CANARY} reason set to: fleetgate: {rid}") == 1, log[-2000:]
    assert lab.node(CANARY) == {"State": "IDLE", "Reason": ""}
