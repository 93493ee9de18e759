"""Every role's Molecule scenario on real lab hosts: converge → idempotence → testinfra verify.

gpu_driver's scenario (a real NVIDIA DKMS build, minutes long) runs from test_nvidia_dkms.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.lab

SLOW_SCENARIOS = {"gpu_driver"}
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")
                   if p.parent.name not in SLOW_SCENARIOS)


def run_molecule(scenario: str) -> subprocess.CompletedProcess[str]:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "NO_COLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "FLEETGATE_HOME": str(REPO)}
    return subprocess.run([str(bindir / "molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=3600, check=False,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario: str) -> None:
    proc = run_molecule(scenario)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "idempotence: Executed: Successful" in out, out[-3000:]
    assert "verify: Executed: Successful" in out, out[-3000:]
