"""The real NVIDIA driver, compiled once by DKMS against the pinned kernel, without a GPU.

1. Packer builds the nvidia-h100-535 golden image: Debian's nvidia-driver 535.261.03 and
   nvidia-kernel-dkms are installed and DKMS really compiles the module for the pinned
   6.1.0-55-amd64 inside the build container; the image's manifest must record it.
2. The gpu_driver Molecule scenario (kernel_pin + gpu_driver) then runs on a lab container host
   started from that image (FLEETGATE_MOLECULE_IMAGE, molecule/resources/create.yml): converge,
   idempotence and the scenario's testinfra suite against what the build produced. The role is
   the same one the image ran, so the module is compiled once for both, not once each.
NVIDIA's container-toolkit repository is unreachable here, so the toolkit is left out of the
image, and the image records that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetgate.spec.loader import load_class
from tests.conftest import REPO
from tests.integration.conftest import GoldenImages

pytestmark = [pytest.mark.lab, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\]8;;[^\x1b]*\x1b\\")
DKMS_TEST = "test_dkms_installed_driver_module_for_pinned_kernel"
H100 = load_class(REPO / "inventory" / "classes" / "nvidia-h100-535.yml")


@pytest.fixture(scope="module")
def image(golden: GoldenImages) -> str:
    return golden.build(H100.name, "--omit", "gpu-toolkit")


def test_nvidia_h100_535_image_has_the_driver_and_its_dkms_module(
        golden: GoldenImages, image: str) -> None:
    m = golden.manifests[f"{H100.name}-{H100.version}"]
    assert m["drift"] == [] and m["build"]["omitted"] == ["gpu-toolkit"]
    abi = H100.kernel.abi
    assert m["verified"]["kernel"]["default_boot"] == abi
    assert m["verified"]["packages"]["nvidia-driver"] == "535.261.03-1"
    assert m["verified"]["packages"]["containerd"] == H100.runtime.version
    mod = H100.dkms[0]
    assert {"name": mod.name, "version": mod.version, "kernel": abi, "arch": "x86_64",
            "status": "installed"} in m["verified"]["dkms"]
    status = {r["name"]: r["status"] for r in m["components"]}
    assert status["nvidia-container-toolkit"] == "omitted"
    assert {s for n, s in status.items() if n != "nvidia-container-toolkit"} == {"ok"}


def test_gpu_driver_scenario_on_the_built_image(golden: GoldenImages, image: str) -> None:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "FLEETGATE_HOME": str(REPO), "NO_COLOR": "1", "PY_COLORS": "0", "COLUMNS": "300",
           "FLEETGATE_MOLECULE_IMAGE": image, **golden.env}
    # No command borders: with them molecule wraps long lines, test ids included.
    proc = subprocess.run([str(VENV_BIN / "molecule"), "test", "-s", "gpu_driver",
                           "--no-command-borders"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=2400,
                          check=False, stdin=subprocess.DEVNULL)
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out[-6000:]
    assert "idempotence: Executed: Successful" in out or "Idempotence completed" in out, \
        out[-3000:]
    # The verifier runs pytest -v: the DKMS check itself must be listed as passed.
    assert re.search(rf"{DKMS_TEST}\[\S+\] PASSED", out), out[-6000:]
    assert re.search(r"=+ \d+ passed[^=]* in [0-9.]+s", out), out[-6000:]
    assert "Verifier completed successfully" in out, out[-6000:]
