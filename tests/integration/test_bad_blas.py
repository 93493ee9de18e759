"""The bad golden image on the real lab: lab-cpu version 2 (examples/bad-blas) swaps OpenBLAS
for the reference BLAS. Every functional gate passes; the GEMM canary analysis against hosts
still on version 1 fails, the rollout halts by itself, the canary is rolled back to version 1
and re-verified, and the later waves are never touched.

Twice: as an in-place apply of class version 2 (the demo's rollout), then as a real image
rollout (`change: {image: lab-cpu:2}`, Packer's build of version 2), in which the canary is
re-imaged to version 2 and back to the image it ran before. The same lab then re-images its
other 4 hosts to version 2 in 2 waves, with functional gates only: each ends on the image
planned, its manifest the image's own, reachable through the lab's unchanged known_hosts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fleetgate.image.manifest import manifest_digest, node_part
from tests.conftest import FLEETGATE, REPO, LabHandle
from tests.integration.conftest import GoldenImages, LabFactory

pytestmark = pytest.mark.lab

N_HOSTS = 5  # canary 1, wave1 2, wave2 2
HOSTS = [f"lab-c0{i}" for i in range(1, N_HOSTS + 1)]
PLAN = REPO / "examples" / "bad-blas" / "rollout.yml"
V2_CLASSES = REPO / "examples" / "bad-blas" / "classes"
IMAGE_PLAN = REPO / "examples" / "bad-blas" / "reimage.yml"
IMAGE_ID = "/etc/fleetgate/image-id"


@pytest.fixture(scope="module")
def lab(golden: GoldenImages, lab_up: LabFactory) -> Iterator[LabHandle]:
    # Version 1 everywhere first, as a fleet built from the lab-cpu:1 golden image is:
    # OpenBLAS behind libblas.so.3, manifests written.
    with lab_up("badblas", containers=N_HOSTS, images=(golden.build("lab-cpu"),),
                golden=golden) as lab:
        yield lab


def manifest(lab: LabHandle, host: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(lab.ssh(host, "cat /etc/fleetgate/manifest.json"))
    return doc


def test_version_one_runs_openblas(lab: LabHandle) -> None:
    for h in ("lab-c01", "lab-c05"):
        m = manifest(lab, h)
        assert m["class_version"] == 1 and m["verified"]["userland"]["blas"] == "openblas"
        assert m["drift"] == []


def halted_with_the_canary_rolled_back(lab: LabHandle, plan: str, rid: str,
                                       *args: str) -> dict[str, Any]:
    """Start the rollout; it must halt with its canary failed on GEMM, rolled back and
    verified. Returns `rollout start --json`'s summary."""
    proc = lab.run("rollout", "start", plan, *args, "--id", rid, "--json", check=False)
    assert proc.returncode == 10, proc.stdout[-3000:] + proc.stderr  # halted
    s: dict[str, Any] = json.loads(proc.stdout)
    canary = s["hosts"]["lab-c01"]
    assert canary["state"] == "rolled_back", canary
    assert "canary analysis failed (gemm.tflops)" in canary["reason"]
    assert "rolled back and verified on the old version" in canary["reason"]
    return s


def test_bad_blas_canary_fails_gemm_halts_rolls_back_and_spares_later_waves(
        lab: LabHandle) -> None:
    s = halted_with_the_canary_rolled_back(lab, str(PLAN), "badblas-1", "-i", lab.inventory)
    assert s["state"] == "halted" and "wave 1 budget exceeded" in s["reason"]
    # Functionally the bad version was fine: its discovery and stack gates passed.
    verify = lab.run("rollout", "history", "badblas-1", "--json", "--kind", "smoke")
    labels = {(e["data"]["label"], e["data"]["result"]["check"], e["data"]["result"]["status"])
              for e in json.loads(verify.stdout) if e["host"] == "lab-c01"}
    assert ("verify", "discovery", "pass") in labels and ("verify", "stack", "pass") in labels
    # The verdict records its inputs: a significant drop far past the 10% tolerance.
    events = json.loads(lab.run("rollout", "history", "badblas-1", "--json", "--kind",
                                "canary").stdout)
    verdict = events[0]["data"]["verdict"]
    gemm = verdict["metrics"][0]
    assert verdict["outcome"] == "fail" and gemm["name"] == "gemm.tflops"
    assert gemm["outcome"] == "fail" and gemm["p_value"] < 0.01
    assert gemm["relative_shift"] < -0.5, gemm
    assert gemm["n_canary"] >= 5 and gemm["n_baseline"] >= 5
    # The canary is back on version 1 with OpenBLAS, proven by its manifest.
    m = manifest(lab, "lab-c01")
    assert m["class_version"] == 1 and m["verified"]["userland"]["blas"] == "openblas"
    # Later waves: skipped, never applied, still on version 1.
    for h in ("lab-c02", "lab-c03", "lab-c04", "lab-c05"):
        assert s["hosts"][h]["state"] == "skipped" and s["hosts"][h]["applies"] == 0
        assert manifest(lab, h)["class_version"] == 1


@pytest.fixture(scope="module")
def v2(golden: GoldenImages) -> str:
    return golden.build("lab-cpu", classes=V2_CLASSES)


def image_id(golden: GoldenImages, name: str) -> str:
    return f"{name}:{golden.manifests[name]['image']['artifact_sha256']}"


def reimages(lab: LabHandle, host: str) -> list[dict[str, Any]]:
    """The lab provider's record of each container it started for the host (outside it)."""
    log = lab.root / "hosts" / host / "reimages.jsonl"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def image_plan(lab: LabHandle, name: str, *, drop: tuple[str, ...] = (), **over: Any) -> str:
    """examples/bad-blas/reimage.yml, the bad-BLAS rollout as an image rollout, on this lab."""
    doc = yaml.safe_load(IMAGE_PLAN.read_text())
    for key in drop:
        doc.pop(key)
    doc["targets"]["inventory"] = lab.inventory
    doc.update(name=name, **over)
    path = lab.root.parent / f"{name}.plan.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def two_wave_plan(lab: LabHandle, name: str, hosts: list[str], image: str) -> str:
    """An image rollout of `hosts` in two waves, functional gates only, halting on failure."""
    return image_plan(lab, name, on_failure="halt", change={"image": image},
                      targets={"inventory": lab.inventory, "class": "lab-cpu",
                               "patterns": [":".join(hosts)]},
                      waves={"steps": [2, "100%"], "diversity": []},
                      gates={"checks": ["discovery"], "forks": 2}, drop=("canary",))


def test_a_bad_image_canary_is_re_imaged_back_to_the_image_it_ran(
        lab: LabHandle, golden: GoldenImages, v2: str) -> None:
    v1_id = image_id(golden, "lab-cpu-1")
    assert lab.ssh("lab-c01", f"cat {IMAGE_ID}").strip() == v1_id
    before = {h: len(reimages(lab, h)) for h in HOSTS}
    plan = image_plan(lab, "reimage-bad")
    # Planning asked every host which image it runs: each could be re-imaged back.
    planned = json.loads(lab.run("rollout", "plan", plan, "--json").stdout)
    assert planned["plan"]["change"]["image_pin"]["name"] == "lab-cpu-2"
    assert planned["warnings"] == [], planned["warnings"]
    s = halted_with_the_canary_rolled_back(lab, plan, "reimage-bad-1")
    # Re-imaged twice, each a new container: to version 2, then back to version 1.
    new = reimages(lab, "lab-c01")[before["lab-c01"]:]
    assert [r["image_id"] for r in new] == [image_id(golden, "lab-cpu-2"), v1_id]
    assert len({r["made"] for r in new}) == 2
    assert lab.ssh("lab-c01", f"cat {IMAGE_ID}").strip() == v1_id
    host_manifest = json.loads(lab.ssh("lab-c01", "cat /etc/fleetgate/manifest.json"))
    assert manifest_digest(host_manifest) == manifest_digest(
        node_part(golden.manifests["lab-cpu-1"]))
    # The later waves were never touched.
    for h in HOSTS[1:]:
        assert s["hosts"][h]["state"] == "skipped" and len(reimages(lab, h)) == before[h]


def test_an_image_rollout_re_images_four_hosts_in_two_waves_once_each(
        lab: LabHandle, golden: GoldenImages, v2: str) -> None:
    hosts = HOSTS[1:]
    v1_id, v2_id = image_id(golden, "lab-cpu-1"), image_id(golden, "lab-cpu-2")
    known_hosts = (lab.root / "ssh" / "known_hosts").read_bytes()
    before = {h: len(reimages(lab, h)) for h in hosts}
    plan = two_wave_plan(lab, "reimage-good", hosts, "lab-cpu:2")
    proc = lab.run("rollout", "start", plan, "--id", "reimage-good-1", "--json", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    s = json.loads(proc.stdout)
    waves = [e for e in json.loads(lab.run("rollout", "history", "reimage-good-1", "--json",
                                           "--kind", "batch").stdout)
             if e["data"].get("kind") == "apply" and e["data"].get("state") == "started"]
    # Two waves, in order; each host its own batch (a budget of 0 caps a batch at 1 host).
    assert [(e["wave"], e["data"]["hosts"]) for e in waves] == [
        (1, ["lab-c02"]), (1, ["lab-c03"]), (2, ["lab-c04"]), (2, ["lab-c05"])]
    v2_digest = manifest_digest(node_part(golden.manifests["lab-cpu-2"]))
    for h in hosts:
        assert s["hosts"][h]["state"] == "healthy", s["hosts"][h]
        assert [r["image_id"] for r in reimages(lab, h)[before[h]:]] == [v2_id]
        assert lab.ssh(h, f"cat {IMAGE_ID}").strip() == v2_id
        assert manifest_digest(json.loads(lab.ssh(h, "cat /etc/fleetgate/manifest.json"))) \
            == v2_digest
    # The lab's trust never changed: every host answered over the same known_hosts.
    assert (lab.root / "ssh" / "known_hosts").read_bytes() == known_hosts
    # What each host ran before is in the journal: the image a rollback would go back to.
    states = json.loads(lab.run("rollout", "history", "reimage-good-1", "--json", "--kind",
                                "hoststate").stdout)
    assert {e["host"]: e["data"]["state"]["files"][IMAGE_ID] for e in states
            if e["data"]["label"] == "before"} == dict.fromkeys(hosts, v1_id)
    # Idempotent by image id: the same change again re-images nothing.
    again = lab.run("rollout", "start", plan, "--id", "reimage-good-2", "--json", check=False)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert all(len(reimages(lab, h)) == before[h] + 1 for h in hosts)


def test_kill_9_during_a_re_image_then_resume_re_images_each_host_once(
        lab: LabHandle, golden: GoldenImages, v2: str) -> None:
    hosts = HOSTS[1:]  # on version 2 since the test above: this rollout takes them back to 1
    v1_id = image_id(golden, "lab-cpu-1")
    before = {h: len(reimages(lab, h)) for h in hosts}
    plan = two_wave_plan(lab, "reimage-crash", hosts, "lab-cpu:1")
    env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **lab.env}
    proc = subprocess.Popen([str(FLEETGATE), "rollout", "start", plan, "--id", "reimage-crash"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO, stdin=subprocess.DEVNULL)
    # Killed once the first wave's re-imaging is under way: its batch worker lives on.
    deadline = time.monotonic() + 300
    while not any(len(reimages(lab, h)) > before[h] for h in hosts[:2]):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no host was ever re-imaged"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = lab.run("rollout", "resume", "reimage-crash", "--json", check=False)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
    s = json.loads(resumed.stdout)
    # The kill landed mid-batch: resume found a first-wave host in flight and asked it.
    [rec] = json.loads(lab.run("rollout", "history", "reimage-crash", "--json", "--kind",
                               "reconcile").stdout)
    assert set(rec["data"]["in_flight"]) & set(hosts[:2]), rec
    for h in hosts:
        assert s["hosts"][h]["state"] == "healthy", s["hosts"][h]
        assert s["hosts"][h]["applies"] == 1, s["hosts"][h]  # the journal's count
        # The provider's own count, from outside the host: exactly one new container.
        assert [r["image_id"] for r in reimages(lab, h)[before[h]:]] == [v1_id], h
        assert lab.ssh(h, f"cat {IMAGE_ID}").strip() == v1_id
