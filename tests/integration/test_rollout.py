"""The rollout controller on the real lab: 8 lab-cpu container hosts in the lab's pools
(canary 1, wave1 3, wave2 4), real ansible-runner batches, real smoke gates, and the
controller itself killed with SIGKILL at random points and resumed.

One lab for the whole file; each test uses its own rollout ids and its own version stamp, so
applications are counted per test on the hosts themselves (applies.log) and in the journal.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.rollout import worker
from tests.conftest import FLEETGATE, REPO, LabHandle
from tests.integration.conftest import GoldenImages, LabFactory
from tests.privacy import assert_private_tree, find_secret

pytestmark = pytest.mark.lab

N_HOSTS = 8
CANARY, WAVE1, WAVE2 = ["lab-c01"], ["lab-c02", "lab-c03", "lab-c04"], [
    "lab-c05", "lab-c06", "lab-c07", "lab-c08"]
VERSION_FILE = "/var/lib/fleetgate-example/version"
APPLIES_LOG = "/var/lib/fleetgate-example/applies.log"
EXIT = {"completed": 0, "halted": 10, "aborted": 11, "lease": 12}


class Lab(LabHandle):
    def plan(self, name: str, **overrides: Any) -> Path:
        doc: dict[str, Any] = {
            "name": name,
            "targets": {"inventory": self.inventory, "class": "lab-cpu"},
            "change": {"playbook": "examples/rollout/stamp-version.yml",
                       "extra_vars": {"stamp_version": name},
                       "target": {"files": {VERSION_FILE: name}}},
            "rollback": {"playbook": "examples/rollout/unstamp-version.yml",
                         "extra_vars": {"stamp_version": "1"},
                         "target": {"files": {VERSION_FILE: "1"}}},
            "waves": {"pools": ["pool_canary", "pool_wave1", "pool_wave2"]},
            "concurrency": 4,
            "budgets": {"per_wave": {"max_failed": 0}, "total": {"max_failed": 1}},
            # The lab's 8 hosts share 2 cores: 2 smoke processes per gate, not one per host.
            "gates": {"checks": ["discovery"], "forks": 2},
        }
        for key, value in overrides.items():
            doc[key] = value
        path = self.root.parent / f"{name}.plan.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def rollout(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("rollout", *args, check=check)

    def status(self, rid: str) -> dict[str, Any]:
        proc = self.rollout("status", rid, "--json")
        doc: dict[str, Any] = json.loads(proc.stdout)
        # `rollout status` exits as `start` would for the state it reports (10 halted, 11
        # aborted), so a CI step can branch on it; a running rollout is 0.
        assert proc.returncode == EXIT.get(doc["state"], 0), (proc.returncode, doc["state"])
        return doc

    def wait_phase(self, rid: str, phase: str, proc: subprocess.Popen[str],
                   timeout: float = 180, *, poll_s: float = 1.0, prefix: bool = False) -> None:
        """Until the controller in `proc` reports `phase`, or a phase starting with it
        (`prefix`); the rollout may not exist yet."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.rollout("status", rid, "--json")
            if got.returncode == 0:
                now = json.loads(got.stdout)["phase"] or ""
                if now == phase or (prefix and now.startswith(phase)):
                    return
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{rid} never reached {phase!r}"
            time.sleep(poll_s)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **self.env}
        return subprocess.Popen([str(FLEETGATE), "rollout", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                                stdin=subprocess.DEVNULL)

    def applies(self, host: str, stamp: str) -> int:
        out = self.ssh(host, f"cat {APPLIES_LOG} 2>/dev/null || true")
        return sum(1 for line in out.splitlines() if line.split()[-1:] == [stamp])

    def version(self, host: str) -> str:
        return self.ssh(host, f"cat {VERSION_FILE} 2>/dev/null || true").strip()


@pytest.fixture(scope="module")
def lab(golden: GoldenImages, lab_up: LabFactory) -> Iterator[Lab]:
    # Hosts from the lab-cpu golden image carry the smoke probes the gates run.
    with lab_up("rollout", containers=N_HOSTS, images=(golden.build("lab-cpu"),),
                golden=golden, handle=Lab) as lab:
        yield lab


def history(lab: Lab, rid: str, kind: str) -> list[dict[str, Any]]:
    proc = lab.rollout("history", rid, "--json", "--kind", kind, check=True)
    events: list[dict[str, Any]] = json.loads(proc.stdout)
    return events


def host_events(lab: Lab, rid: str) -> list[dict[str, Any]]:
    return history(lab, rid, "host")


def test_plan_prints_waves_and_budgets_and_touches_nothing(lab: Lab) -> None:
    plan = lab.plan("plan-only")
    out = lab.root.parent / "plan-only.json"
    proc = lab.rollout("plan", str(plan), "--out", str(out), "--json", check=True)
    doc = json.loads(proc.stdout)
    assert doc["waves"] == [CANARY, WAVE1, WAVE2]
    assert doc["budgets"]["per_wave"][1] == "tolerates 0 failed; halts when failed > 0"
    assert json.loads(out.read_text())["hash"] == doc["hash"]
    assert all(lab.version(h) != "plan-only" for h in CANARY + WAVE1 + WAVE2)
    # An edited artifact is refused before anything runs.
    edited = json.loads(out.read_text())
    edited["waves"] = [WAVE2, CANARY, WAVE1]
    out.write_text(json.dumps(edited))
    bad = lab.rollout("start", str(out))
    assert bad.returncode == 2 and "edited after planning" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_happy_path_in_three_waves_in_order(lab: Lab, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    # The change is the stamp, not apply-class: a whole class re-applied to 8 converged
    # hosts cost this file 4 minutes of the suite's time and proved nothing about the
    # controller that the stamp does not; apply-class through the controller is
    # test_bad_blas.py's in-place rollout (and the class apply itself, test_image.py's).
    # A secret the change carries: read from the controller's environment when a batch runs,
    # and afterwards in no file of the state dir and in neither report.
    secret = f"s3cr3t-{os.getpid()}-registry-token"
    monkeypatch.setenv("FLEETGATE_TEST_REGISTRY_TOKEN", secret)
    plan = lab.plan("happy", change={
        "playbook": "examples/rollout/stamp-version.yml",
        "extra_vars": {"stamp_version": "happy"},
        "secret_vars": {"registry_token": {"env": "FLEETGATE_TEST_REGISTRY_TOKEN"}},
        "target": {"files": {VERSION_FILE: "happy"}}},
        gates={"checks": ["discovery", "stack"], "forks": 2},
        # Room for 3 failures per wave lets a batch hold all 4 wave-2 hosts (budget + 1).
        budgets={"per_wave": {"max_failed": 3}, "total": {"max_failed": 3}})
    # Piped, as in CI: one JSON progress object per line, read as each one arrives.
    # A stamp's phases last a few seconds each, so the heartbeat is the shortest allowed:
    # at 5 s, CI's faster machine finished every phase before its first beat was due.
    started = lab.popen("start", str(plan), "--id", "happy-1", "--log-format", "json",
                        "--heartbeat", "1")
    assert started.stdout is not None
    arrived: list[tuple[float, str]] = []
    for line in started.stdout:
        arrived.append((time.time(), line))
    stderr = started.stderr.read() if started.stderr else ""
    assert started.wait(60) == EXIT["completed"], "".join(x for _, x in arrived)[-2000:] + stderr
    progress = [json.loads(x) for _, x in arrived if x.startswith("{")]
    s = lab.status("happy-1")
    assert s["state"] == "completed"
    # Every host transition got its line while the rollout ran, within seconds of the
    # journal's own timestamp for it, not in a burst at the end.
    journal = {e["seq"]: e for e in host_events(lab, "happy-1")}
    seen = {r["seq"]: (t, r) for (t, _), r in zip(
        [a for a in arrived if a[1].startswith("{")], progress, strict=True) if "seq" in r}
    assert set(journal) <= set(seen)
    for seq, e in journal.items():
        t, r = seen[seq]
        assert r["host"] == e["host"] and r["phase"] == e["data"]["to"]
        assert 0 <= t - e["ts"] < 10, (r, t - e["ts"])
    # The canary's healthy line reached this reader before the controller started the last
    # wave (its first `applying` in the journal, a whole wave's apply and gates later): causal,
    # so a rollout that now takes seconds still proves the stream is live, with room for the
    # follower's poll; a stream that bursts at the end fails it.
    canary_healthy = min(t for t, r in seen.values()
                         if r.get("phase") == "healthy" and r["host"] in CANARY)
    last_wave_applying = min(e["ts"] for e in journal.values()
                             if e["host"] in WAVE2 and e["data"]["to"] == "applying")
    assert canary_healthy < last_wave_applying, (canary_healthy, last_wave_applying)
    beats = [r for r in progress if r["event"] == "heartbeat"]
    assert beats and all(r["elapsed"] and r["phase"] for r in beats)
    gates = [r for r in progress if r["event"] == "smoke"]
    assert {(r["host"], r["check"], r["verdict"]) for r in gates} >= {
        (h, c, "pass") for h in CANARY + WAVE1 + WAVE2 for c in ("discovery", "stack")}
    # The controller read each host before its change.
    before = lab.rollout("history", "happy-1", "--json", "--kind", "hoststate", check=True)
    assert {e["host"] for e in json.loads(before.stdout)
            if e["data"]["label"] == "before" and e["data"]["state"]} == set(
        CANARY + WAVE1 + WAVE2)
    for h in CANARY + WAVE1 + WAVE2:
        assert s["hosts"][h]["state"] == "healthy", s["hosts"][h]
        assert s["hosts"][h]["gates"] == {"discovery": "pass", "stack": "pass"}
        assert s["hosts"][h]["applies"] == 1 and lab.applies(h, "happy") == 1
        assert lab.version(h) == "happy"
    # Journal order: every canary transition to healthy precedes any wave-1 apply, and so on.
    events = host_events(lab, "happy-1")
    healthy_at = {e["host"]: e["seq"] for e in events if e["data"]["to"] == "healthy"}
    applying_at = {e["host"]: e["seq"] for e in events if e["data"]["to"] == "applying"}
    assert max(healthy_at[h] for h in CANARY) < min(applying_at[h] for h in WAVE1)
    assert max(healthy_at[h] for h in WAVE1) < min(applying_at[h] for h in WAVE2)
    batches = lab.rollout("history", "happy-1", "--json", "--kind", "batch", check=True)
    applied = [sorted(e["data"]["hosts"]) for e in json.loads(batches.stdout)
               if e["data"]["state"] == "started" and e["data"]["batch"].startswith("apply-")]
    assert applied == [CANARY, WAVE1, WAVE2]  # one ansible-runner run per wave here
    # Each wave's run after the canary's was started while the wave before it ran, and held
    # until its turn (rollout/ahead.py).
    ahead = [e["data"].get("ahead", False) for e in json.loads(batches.stdout)
             if e["data"]["state"] == "spawned" and e["data"]["batch"].startswith("apply-")]
    assert ahead == [False, True, True], ahead
    # State is private (`find STATE -perm /077` finds nothing; the lab's own dir is shared
    # with podman on purpose, and the plan files are this test's, written beside the state)
    # and the secret is nowhere in it, nor in the reports.
    state = Path(lab.env["FLEETGATE_STATE_DIR"])
    assert_private_tree(state, skip=[lab.root, *state.glob("*.plan.yml")])
    html, md = tmp_path / "happy.html", tmp_path / "happy.md"
    lab.rollout("report", "happy-1", "--html", str(html), "--md", str(md), check=True)
    assert find_secret(state, secret) == [] and find_secret(tmp_path, secret) == []
    assert html.stat().st_size > 0 and "happy-1" in md.read_text()


def test_unsatisfiable_pin_on_canary_halts_and_leaves_later_waves_untouched(lab: Lab) -> None:
    plan = lab.plan("badpin", change={
        "playbook": "examples/rollout/pin-package.yml",
        "extra_vars": {"pin_package": "hostname", "pin_version": "9.9.9-fleetgate-nonexistent"},
        "target": {"packages": {"hostname": "9.9.9-fleetgate-nonexistent"}}})
    proc = lab.rollout("start", str(plan), "--id", "badpin-1", "--json")
    assert proc.returncode == EXIT["halted"], proc.stdout[-2000:] + proc.stderr
    s = json.loads(proc.stdout)
    canary = s["hosts"]["lab-c01"]
    assert canary["state"] == "failed_held"
    assert "Install the pinned version" in canary["reason"] and "lab-c01" in canary["reason"]
    assert "9.9.9-fleetgate-nonexistent" in canary["reason"]
    assert s["state"] == "halted" and "wave 1 budget exceeded" in s["reason"]
    for h in WAVE1 + WAVE2:
        assert s["hosts"][h]["state"] == "skipped" and s["hosts"][h]["applies"] == 0
    batches = lab.rollout("history", "badpin-1", "--json", "--kind", "batch", check=True)
    touched = {h for e in json.loads(batches.stdout) for h in e["data"].get("hosts") or []}
    assert touched == {"lab-c01"}
    # The wave-2 run started ahead of its turn was cancelled at the halt, never released,
    # and its dir is gone: the rollout's batch dirs are the journal's batches.
    journalled = {e["data"]["batch"] for e in json.loads(batches.stdout)
                  if e["data"]["state"] == "started"}
    kept = Path(lab.env["FLEETGATE_STATE_DIR"]) / "rollouts" / "badpin-1" / "batches"
    assert {d.name for d in kept.iterdir()} == journalled


@pytest.mark.parametrize(("budget", "want"), [(1, "completed"), (0, "halted")])
def test_unreachable_host_in_wave_two_against_its_budget(lab: Lab, budget: int,
                                                         want: str) -> None:
    name = f"unreach-{budget}"
    plan = lab.plan(name, budgets={"per_wave": {"max_failed": budget},
                                   "total": {"max_failed": budget}})
    lab.run("lab", "fault", "lab-c03", "cut-network")
    try:
        proc = lab.rollout("start", str(plan), "--id", f"{name}-1", "--json")
    finally:
        lab.run("lab", "heal", "lab-c03")
    assert proc.returncode == EXIT[want], proc.stdout[-2000:] + proc.stderr
    s = json.loads(proc.stdout)
    assert s["hosts"]["lab-c03"]["state"] == "failed_held"
    assert "unreachable during apply" in s["hosts"]["lab-c03"]["reason"]
    if want == "completed":
        assert all(s["hosts"][h]["state"] == "healthy" for h in WAVE2)
        assert all(lab.version(h) == name for h in WAVE2)
    else:
        assert all(s["hosts"][h]["state"] == "skipped" for h in WAVE2)
        assert all(lab.version(h) != name for h in WAVE2)
    assert lab.version("lab-c03") != name


def test_rollback_mode_restores_the_old_version_on_the_failed_canary(lab: Lab) -> None:
    lab.ssh("lab-c01", f"mkdir -p /var/lib/fleetgate-example && echo 1 > {VERSION_FILE}")
    plan = lab.plan("rollback", on_failure="rollback", change={
        "playbook": "examples/rollout/stamp-version.yml",
        "extra_vars": {"stamp_version": "rollback", "stamp_break_hosts": ["lab-c01"]},
        "target": {"files": {VERSION_FILE: "rollback"}}})
    proc = lab.rollout("start", str(plan), "--id", "rollback-1", "--json")
    assert proc.returncode == EXIT["halted"], proc.stdout[-2000:] + proc.stderr
    s = json.loads(proc.stdout)
    c = s["hosts"]["lab-c01"]
    assert c["state"] == "rolled_back", c
    assert "service did not come back" in c["reason"]
    assert "rolled back and verified" in c["reason"]
    assert lab.applies("lab-c01", "rollback") == 1 and lab.version("lab-c01") == "1"
    states = [e["data"]["to"] for e in host_events(lab, "rollback-1") if e["host"] == "lab-c01"]
    assert states == ["applying", "rolling_back", "rolled_back"]


def test_a_host_lost_during_the_soak_is_held_and_halts_the_rollout_not_rolled_back(
        lab: Lab) -> None:
    """The soak re-runs the wave's gates with the policies they had after the change: a host
    that cannot be measured at the soak's end is held (failed_held, inconclusive), as it would
    be after its change, and the rollout halts; a rollback it could not take is not tried."""
    soak_s = 12  # time enough to cut the canary's network once the soak has started
    plan = lab.plan("soak", on_failure="rollback",
                    soak={"seconds": soak_s, "rerun_smoke": True},
                    budgets={"per_wave": {"max_failed": 1}, "total": {"max_failed": 1}})
    proc = lab.popen("start", str(plan), "--id", "soak-1")
    try:
        lab.wait_phase("soak-1", "soak until", proc, poll_s=0.3, prefix=True)
        lab.run("lab", "fault", "lab-c01", "cut-network")
        cut_at = time.time()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        lab.run("lab", "heal", "lab-c01")
    assert proc.returncode == EXIT["halted"], out[-1500:] + err
    soak = [e for e in history(lab, "soak-1", "soak") if e["wave"] == 1]
    assert [e["data"]["state"] for e in soak] == ["started", "done"], soak
    assert cut_at < soak[0]["data"]["until"], "the fault came after the soak had ended"
    s = lab.status("soak-1")
    c = s["hosts"]["lab-c01"]
    assert c["state"] == "failed_held", c
    assert c["reason"].startswith("soak inconclusive: gate discovery inconclusive"), c
    assert s["reason"] == "soak inconclusive on lab-c01 (policy halt)", s["reason"]
    # Not rolled back: its change stays, applied once, and no rollback batch ran.
    assert lab.applies("lab-c01", "soak") == 1 and lab.version("lab-c01") == "soak"
    states = [e["data"]["to"] for e in host_events(lab, "soak-1") if e["host"] == "lab-c01"]
    assert states[-2:] == ["healthy", "failed_held"] and "rolling_back" not in states, states
    measured = [e for e in history(lab, "soak-1", "smoke")
                if e["data"]["label"] == "soak"]
    assert [(e["host"], e["data"]["result"]["status"]) for e in measured] == [
        ("lab-c01", "inconclusive")]
    assert all(lab.applies(h, "soak") == 0 for h in WAVE1 + WAVE2)


def test_second_controller_is_refused_and_a_dead_ones_lease_is_taken_over(lab: Lab) -> None:
    plan = lab.plan("lease", approvals={"before_waves": [2]})
    first = lab.popen("start", str(plan), "--id", "lease-1")
    try:
        lab.wait_phase("lease-1", "awaiting approval", first)
        again = lab.rollout("resume", "lease-1")
        assert again.returncode == EXIT["lease"], again.stderr
        assert f"pid {first.pid}" in again.stderr
        other = lab.rollout("start", str(lab.plan("lease-other")))
        assert other.returncode == EXIT["lease"] and "inventory:" in other.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    lab.rollout("approve", "lease-1", "--wave", "2", "--reason", "canary looks fine",
                check=True)
    resumed = lab.rollout("resume", "lease-1", "--json")
    assert resumed.returncode == EXIT["completed"], resumed.stdout[-2000:] + resumed.stderr
    lease_events = lab.rollout("history", "lease-1", "--json", "--kind", "lease", check=True)
    notes = [n for e in json.loads(lease_events.stdout) for n in e["data"]["notes"]]
    assert any(f"from pid {first.pid}" in n and "process gone" in n for n in notes)


def test_kill_9_at_random_points_then_resume_applies_each_host_exactly_once(lab: Lab) -> None:
    """The crash-safety loop (50 rounds in benchmarks/rollout_crash.py)."""
    rng = random.Random(int(os.environ.get("FLEETGATE_CRASH_SEED", "6")))  # noqa: S311
    rounds = int(os.environ.get("FLEETGATE_CRASH_ROUNDS", "5"))
    hosts = CANARY + WAVE1 + WAVE2[:2]
    total_kills = 0
    report: list[dict[str, Any]] = []
    for i in range(rounds):
        t0 = time.monotonic()
        name = f"crash-{i}"
        plan = lab.plan(name, targets={"inventory": lab.inventory, "class": "lab-cpu",
                                       "patterns": hosts},
                        waves={"steps": [1, 3, "100%"]},
                        budgets={"per_wave": {"max_failed": 1}, "total": {"max_failed": 1}})
        proc = lab.popen("start", str(plan), "--id", f"{name}-r")
        kills = 0
        while True:
            time.sleep(rng.uniform(0.2, 8.0))
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            # Killed while still planning: nothing was recorded, so there is nothing to resume
            # and the operator starts it again.
            exists = lab.rollout("status", f"{name}-r").returncode == 0
            proc = lab.popen("resume" if exists else "start",
                             *([f"{name}-r"] if exists else [str(plan), "--id", f"{name}-r"]))
            if kills >= 3:  # the last resume runs to the end
                break
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == EXIT["completed"], f"round {i}: {out[-1500:]} {err}"
        s = lab.status(f"{name}-r")
        for h in hosts:
            assert s["hosts"][h]["state"] == "healthy", (i, h, s["hosts"][h])
            assert s["hosts"][h]["applies"] == 1, (i, h, s["hosts"][h])
            assert lab.applies(h, name) == 1, (i, h)
        # No batch worker, this controller's or one a killed controller left, outlives it.
        batches = Path(lab.env["FLEETGATE_STATE_DIR"]) / "rollouts" / f"{name}-r" / "batches"
        assert [d.name for d in batches.iterdir() if worker.worker_alive(d)] == [], i
        total_kills += kills
        report.append({"round": i, "kills": kills, "wall_s": round(time.monotonic() - t0, 2),
                       "journal_applies": {h: s["hosts"][h]["applies"] for h in hosts}})
        if os.environ.get("FLEETGATE_CRASH_REPORT"):  # benchmarks/rollout_crash.py reads it
            Path(os.environ["FLEETGATE_CRASH_REPORT"]).write_text(json.dumps(report, indent=2))
    # The kill points are random, but a round that was never killed proves nothing.
    assert total_kills >= rounds, f"only {total_kills} kills in {rounds} rounds"


def test_sigterm_halts_at_a_safe_point_and_abort_skips_the_rest(lab: Lab) -> None:
    plan = lab.plan("interrupt", approvals={"before_waves": [2]})
    proc = lab.popen("start", str(plan), "--id", "interrupt-1")
    lab.wait_phase("interrupt-1", "awaiting approval", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT["halted"], out[-1500:] + err
    s = lab.status("interrupt-1")
    assert (s["state"], s["reason"], s["resumable"]) == ("halted", "operator interrupt", True)
    assert s["hosts"]["lab-c01"]["state"] == "healthy"
    assert all(s["hosts"][h]["state"] == "pending" for h in WAVE1 + WAVE2)  # resumable
    aborted = lab.rollout("abort", "interrupt-1", "--reason", "change window over")
    assert aborted.returncode == 0, aborted.stderr
    s = lab.status("interrupt-1")
    assert s["state"] == "aborted" and "change window over" in s["reason"]
    assert all(s["hosts"][h]["state"] == "skipped" for h in WAVE1 + WAVE2)
    assert all(lab.version(h) != "interrupt" for h in WAVE1 + WAVE2)


def test_closed_window_starts_no_host(lab: Lab) -> None:
    now = time.gmtime()
    # A one-minute window that opened two hours ago.
    start = f"{(now.tm_hour - 2) % 24:02d}:00"
    end = f"{(now.tm_hour - 2) % 24:02d}:01"
    plan = lab.plan("closed", window={"start": start, "end": end, "when_closed": "halt"})
    proc = lab.rollout("start", str(plan), "--id", "closed-1", "--json")
    assert proc.returncode == EXIT["halted"], proc.stdout[-1500:] + proc.stderr
    s = json.loads(proc.stdout)
    assert s["reason"] == "outside the maintenance window" and s["resumable"]
    assert all(h["state"] == "pending" and h["applies"] == 0 for h in s["hosts"].values())
