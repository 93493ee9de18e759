"""Triage on the real lab: two lab-cpu container hosts.

- diagnose: a healthy host walks clean (no GPU tools on a cpu backend, iostat missing but
  reported as missing, `ip -s link` read); real faults are found at the stage that explains
  them (cgroup CPU quota -> feeding, NCCL on a NIC the host lacks -> comms) and a host that
  cannot be reached is inconclusive;
- fleet drift: a fresh host has no manifest; a host applied from its class is clean until a
  file of its pinned kernel package is edited by hand; cache-key reads the host's devices;
- preflight warmup: the stack imports and the inference probe warms up on lab-c01; a stack
  with a module that is not there fails.
One lab for the file; apply-class runs once, on lab-c01 only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.conftest import LabHandle
from tests.integration.conftest import LabFactory

pytestmark = pytest.mark.lab


class Lab(LabHandle):
    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = self.run(*args, "--json", check=False)
        assert proc.stdout.strip().startswith("{"), proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.returncode, json.loads(proc.stdout)

    def diagnose(self, host: str) -> tuple[int, dict[str, Any]]:
        rc, doc = self.json("diagnose", "-i", self.inventory, "--limit", host)
        return rc, doc["hosts"][host]

    def drift(self, host: str) -> tuple[int, dict[str, Any]]:
        rc, doc = self.json("fleet", "drift", "-i", self.inventory, "--limit", host)
        return rc, doc["hosts"][host]

    @contextmanager
    def fault(self, host: str, kind: str) -> Iterator[None]:
        """`lab fault HOST KIND` for the block, healed after it whatever the block does."""
        self.run("lab", "fault", host, kind)
        try:
            yield
        finally:
            self.run("lab", "heal", host)


def stage(walk: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in walk["stages"] if s["name"] == name)


@pytest.fixture(scope="module")
def lab(lab_up: LabFactory) -> Iterator[Lab]:
    # Fresh recipe hosts: a host with no manifest is one of the cases.
    with lab_up("triage", containers=2, handle=Lab) as lab:
        yield lab


def test_healthy_cpu_host_walks_clean(lab: Lab) -> None:
    rc, walk = lab.diagnose("lab-c01")
    assert (rc, walk["verdict"]) == (0, "clean"), walk["reason"]
    device, util = stage(walk, "device"), stage(walk, "utilisation")
    assert (device["status"], device["summary"]) == ("n/a", "no GPU tools (cpu backend)")
    assert device["tools"]["nvidia-smi -L"] == "missing"
    assert util["status"] == "n/a"
    feeding = stage(walk, "feeding")
    assert feeding["status"] == "ok" and feeding["tools"]["iostat"] == "missing"
    assert "iostat: missing (sysstat is not installed)" in feeding["notes"]
    comms = stage(walk, "comms")
    assert comms["status"] == "ok" and comms["tools"]["ip -s link"] == "ok"
    assert "eth0" in comms["summary"]


def test_cpu_quota_is_found_at_the_feeding_stage(lab: Lab) -> None:
    with lab.fault("lab-c02", "throttle-cpu"):
        rc, walk = lab.diagnose("lab-c02")
    assert (rc, walk["verdict"], walk["stopped_at"]) == (1, "problem", "feeding"), walk["reason"]
    feeding = stage(walk, "feeding")
    assert feeding["findings"][0]["kind"] == "cpu-throttled"
    assert feeding["findings"][0]["evidence"]["quota_cpus"] == 0.05
    assert feeding["decision"].startswith("CPU throttling masquerades as a slow GPU")
    assert stage(walk, "comms")["status"] == "skipped"


def test_nccl_on_a_missing_nic_is_found_at_the_comms_stage(lab: Lab) -> None:
    with lab.fault("lab-c01", "nccl-bad-nic"):
        rc, walk = lab.diagnose("lab-c01")
    assert (rc, walk["stopped_at"]) == (1, "comms"), walk["reason"]
    assert stage(walk, "comms")["summary"].startswith(
        "NCCL_SOCKET_IFNAME=ib9 (from /etc/environment) matches no interface here")
    assert lab.ssh("lab-c01", "cat /etc/environment").strip() == "", "heal removed the lines"


def test_unreachable_host_is_inconclusive(lab: Lab) -> None:
    # A stopped host refuses the connection at once; a cut network would cost SSH's timeout.
    with lab.fault("lab-c02", "stop"):
        rc, walk = lab.diagnose("lab-c02")
    assert (rc, walk["verdict"]) == (4, "inconclusive")
    assert walk["reason"].startswith("could not collect: unreachable")


def test_fresh_host_has_no_manifest(lab: Lab) -> None:
    rc, host = lab.drift("lab-c02")
    assert (rc, host["status"]) == (1, "drift")
    kinds = {d["kind"] for d in host["drift"]}
    assert "no-manifest" in kinds
    # The lab's base image carries the pinned kernel (as a host built from the previous
    # image would), but not the class's OpenBLAS: apply-class has never run here.
    assert any(d["field"] == "verified.userland.blas" and d["actual"] != "openblas"
               for d in host["drift"]), "the class's BLAS is not in place either"


def test_applied_host_is_clean_until_a_pinned_package_is_edited(lab: Lab) -> None:
    play = lab.run("fleet", "play", "apply-class", "-i", lab.inventory, "--limit", "lab-c01",
                   check=False)
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr
    rc, host = lab.drift("lab-c01")
    assert (rc, host["status"]) == (0, "clean"), host["drift"]
    assert host["devices"][0]["model"], "the cpu class keys by its CPU model"
    with lab.fault("lab-c01", "drift-package"):
        rc, host = lab.drift("lab-c01")
    assert (rc, host["status"]) == (1, "drift")
    assert [(d["kind"], d["field"]) for d in host["drift"]] == [
        ("modified-package", "/boot/config-6.1.0-55-cloud-amd64")]
    assert lab.drift("lab-c01")[0] == 0, "healing restored the packaged file"


def test_cache_key_of_an_applied_host(lab: Lab) -> None:
    rc, doc = lab.json("fleet", "cache-key", "lab-c01", "-i", lab.inventory,
                       "--engine", "torch=2.4.1", "--engine", "triton=3.0.0")
    assert rc == 0
    assert doc["key"].startswith("fg1-") and len(doc["key"]) == 24
    comp = doc["components"]
    assert (comp["backend"], comp["runtime"], comp["engines"]) == (
        "cpu", "none", {"torch": "2.4.1", "triton": "3.0.0"})
    assert comp["device_model"]


def test_warmup_on_one_host_per_class(lab: Lab) -> None:
    # apply-class (above) installs the probes and numpy; run alone, this test installs them.
    if lab.ssh("lab-c01", "test -f /opt/fleetgate/probes/inference.py && echo yes").strip() \
            != "yes":
        play = lab.run("fleet", "play", "smoke-probes", "-i", lab.inventory, "--limit",
                       "lab-c01", check=False)
        assert play.returncode == 0, play.stdout[-3000:] + play.stderr
    rc, doc = lab.json("preflight", "warmup", "-i", lab.inventory, "--class", "lab-cpu")
    (cls,) = doc["classes"]
    assert (rc, cls["outcome"]) == (0, "pass"), cls
    (host,) = cls["hosts"]
    assert host["host"] == "lab-c01" and host["imports"][0]["module"] == "numpy"
    assert host["imports"][0]["ok"] and host["warmup"]["metrics"]["deterministic"] is True
    assert cls["cold_start_s"] > 0


def test_warmup_fails_on_a_stack_that_does_not_import(lab: Lab) -> None:
    rc, doc = lab.json("preflight", "warmup", "-i", lab.inventory, "--class", "lab-cpu",
                       "--all", "--import", "numpy,fleetgate_no_such_wheel")
    (cls,) = doc["classes"]
    assert (rc, cls["outcome"]) == (1, "fail")
    by_host = {h["host"]: h for h in cls["hosts"]}
    assert set(by_host) == {"lab-c01", "lab-c02"}
    missing = by_host["lab-c01"]["imports"][1]
    assert (missing["ok"], missing["module"]) == (False, "fleetgate_no_such_wheel")
    assert missing["error"].startswith("ModuleNotFoundError")
    # lab-c02 never got the class applied: no numpy there either
    assert not by_host["lab-c02"]["imports"][0]["ok"]
