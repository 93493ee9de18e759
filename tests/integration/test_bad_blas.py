"""The bad golden image on the real lab: lab-cpu version 2 (examples/bad-blas) swaps OpenBLAS
for the reference BLAS. Every functional gate passes; the GEMM canary analysis against hosts
still on version 1 fails, the rollout halts by itself, the canary is rolled back to version 1
and re-verified, and the later waves are never touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO, LabHandle
from tests.integration.conftest import GoldenImages, LabFactory

pytestmark = pytest.mark.lab

N_HOSTS = 5  # canary 1, wave1 2, wave2 2
PLAN = REPO / "examples" / "bad-blas" / "rollout.yml"


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


def test_bad_blas_canary_fails_gemm_halts_rolls_back_and_spares_later_waves(
        lab: LabHandle) -> None:
    proc = lab.run("rollout", "start", str(PLAN), "-i", lab.inventory, "--id", "badblas-1",
                   "--json", check=False)
    assert proc.returncode == 10, proc.stdout[-3000:] + proc.stderr  # halted
    s = json.loads(proc.stdout)
    canary = s["hosts"]["lab-c01"]
    assert canary["state"] == "rolled_back", canary
    assert "canary analysis failed (gemm.tflops)" in canary["reason"]
    assert "rolled back and verified on the old version" in canary["reason"]
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
