"""The smoke suite on the real lab: 6 lab-cpu container hosts started from the lab-cpu golden
image (the smoke_probes role installed the probes at build time), then `fleetgate smoke run`
healthy and under real faults (CPU quota throttling, a cut network, a hung probe tool). One lab
for all cases.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.smoke import run_smoke
from tests.conftest import LabHandle
from tests.integration.conftest import GoldenImages, LabFactory

pytestmark = pytest.mark.lab

N_HOSTS = 6
CHECKS = ("discovery", "stack", "gemm", "comms", "inference")
DISCOVERY_TIMEOUT_S = 20  # thresholds.yml backends.cpu.timeouts_s.discovery


class Lab(LabHandle):
    def smoke(self, *args: str) -> tuple[int, dict[str, Any], float]:
        out = self.root.parent / f"smoke-{time.monotonic_ns()}.json"
        t0 = time.monotonic()
        proc = self.run("smoke", "run", "-i", self.inventory, "--out", str(out), *args,
                        check=False)
        wall = time.monotonic() - t0
        assert out.exists(), proc.stderr
        return proc.returncode, json.loads(out.read_text()), wall


def by_host(doc: dict[str, Any], check: str) -> dict[str, dict[str, Any]]:
    return {r["host"]: r for r in doc["results"] if r["check"] == check}


@pytest.fixture(scope="module")
def lab(golden: GoldenImages, lab_up: LabFactory) -> Iterator[Lab]:
    # Hosts from the lab-cpu golden image: the smoke_probes role installed the probes there
    # (and its Molecule scenario proves the role on a fresh host).
    with lab_up("smoke", containers=N_HOSTS, images=(golden.build("lab-cpu"),),
                golden=golden, handle=Lab) as lab:
        yield lab


def test_suite_passes_on_every_healthy_host(lab: Lab) -> None:
    rc, doc, _ = lab.smoke()
    assert rc == 0, [r["reason"] for r in doc["results"] if r["status"] != "pass"]
    assert doc["summary"] == {"pass": N_HOSTS * len(CHECKS), "fail": 0, "inconclusive": 0}
    assert len(doc["hosts"]) == N_HOSTS
    for r in doc["results"]:
        assert (r["status"], r["probe_status"], r["node_class"]) == ("pass", "ok", "lab-cpu")
        assert r["probe_version"] and not any("re-run smoke_probes" in w for w in r["warnings"])
    for r in by_host(doc, "gemm").values():
        assert r["metrics"]["correct"] is True and r["metrics"]["tflops"] > 0
        assert r["metrics"]["size"] == 512 and r["threshold"]["relative"]["reference_n"] == N_HOSTS
    for r in by_host(doc, "comms").values():
        assert r["metrics"]["correct"] is True and r["metrics"]["busbw_gbps"] > 0
    for r in by_host(doc, "inference").values():
        assert r["metrics"]["deterministic"] is True


def test_cpu_throttled_host_fails_gemm_against_its_peers(lab: Lab) -> None:
    # The lab's hosts share this machine's cores: run them one at a time (--forks 1), so each
    # healthy host measures the machine, not its share of the others' contention.
    lab.run("lab", "fault", "lab-c02", "throttle-cpu")
    try:
        rc, doc, _ = lab.smoke("--only", "gemm", "--forks", "1")
    finally:
        lab.run("lab", "heal", "lab-c02")
    # One pytest process measured the 6 hosts, one after another.
    assert len(list(Path(doc["run_dir"]).glob("group-*.log"))) == 1
    gemm = by_host(doc, "gemm")
    slow = gemm.pop("lab-c02")
    assert rc == 1
    assert (slow["status"], slow["probe_status"]) == ("fail", "ok"), slow["reason"]
    assert "peers median" in slow["reason"] or "below the floor" in slow["reason"]
    assert slow["threshold"]["relative"]["ratio"] < slow["threshold"]["relative"]["margin"]
    # This machine is shared (CI runs two lanes at once), so a healthy host can be measured
    # during another test's burst. The judge says so itself: its repeats vary past cv_warn
    # and it carries the noisy-host warning. At most one such host is let off; every other
    # healthy host must pass.
    noisy = {h for h, r in gemm.items() if r["status"] == "fail"
             and any("noisy host?" in w for w in r.get("warnings") or [])}
    assert len(noisy) <= 1, {h: gemm[h]["reason"] for h in noisy}
    assert {r["status"] for h, r in gemm.items() if h not in noisy} == {"pass"}, {
        h: (r["status"], r["reason"]) for h, r in gemm.items()}


def test_unreachable_and_hung_hosts_are_inconclusive_within_budget(lab: Lab) -> None:
    """Two faults on two hosts, one run: a cut network (unreachable) and a probe tool that
    hangs ignoring SIGTERM (timeout). Neither is "failed as measured", the other hosts pass,
    and the run still ends within the hung probe's deadline plus transport."""
    lab.run("lab", "fault", "lab-c03", "cut-network")
    lab.run("lab", "fault", "lab-c04", "hang-probe")
    try:
        rc, doc, wall = lab.smoke("--only", "discovery,stack")
        leftovers = lab.ssh("lab-c04", "ps -eo args | grep -c '^/bin/sh /usr/local/bin/lscpu'")
    finally:
        lab.run("lab", "heal", "lab-c03")
        lab.run("lab", "heal", "lab-c04")
    assert rc == 4, "inconclusive only: exit 4, neither 0 nor 1"
    discovery, stack = by_host(doc, "discovery"), by_host(doc, "stack")
    for check in (discovery, stack):
        cut = check.pop("lab-c03")
        assert (cut["status"], cut["probe_status"]) == ("inconclusive", "unreachable")
    hung = discovery.pop("lab-c04")
    assert (hung["status"], hung["probe_status"]) == ("inconclusive", "timeout")
    assert "hung in: lscpu" in hung["reason"]
    assert stack.pop("lab-c04")["status"] == "pass", "the host's next check still ran"
    assert {r["status"] for r in [*discovery.values(), *stack.values()]} == {"pass"}
    assert wall < DISCOVERY_TIMEOUT_S + 30, f"the run took {wall:.0f}s"
    assert leftovers.strip() == "0", "the hung tool was killed with the probe's group"
    assert lab.ssh("lab-c04", "ls /usr/local/bin").strip() == "", "heal removed the shims"


def test_python_api_for_the_rollout_controller(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(lab.root.parent))
    run = run_smoke(Path(lab.inventory), limit="pool_canary", only=["discovery", "stack"])
    assert run.ok and run.hosts == ["lab-c01"] and len(run.results) == 2
    assert {r.check for r in run.results} == {"discovery", "stack"}
