"""The real NVIDIA driver, built by DKMS against the pinned kernel, on a lab container host.

Runs the gpu_driver Molecule scenario (kernel_pin + gpu_driver, class nvidia-h100-535): Debian's
nvidia-driver 535 and the pinned kernel headers are really installed and DKMS really compiles
the module. The scenario's testinfra suite carries the assertions; this only runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.lab, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\]8;;[^\x1b]*\x1b\\")
DKMS_TEST = "test_dkms_installed_driver_module_for_pinned_kernel"


def test_nvidia_module_builds_for_pinned_kernel() -> None:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "FLEETGATE_HOME": str(REPO), "NO_COLOR": "1", "PY_COLORS": "0", "COLUMNS": "300"}
    # No command borders: with them molecule wraps long lines, test ids included.
    proc = subprocess.run([str(VENV_BIN / "molecule"), "test", "-s", "gpu_driver",
                           "--no-command-borders"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=2400,
                          check=False)
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out[-6000:]
    # The verifier runs pytest -v: the DKMS check itself must be listed as passed.
    assert re.search(rf"{DKMS_TEST}\[\S+\] PASSED", out), out[-6000:]
    assert re.search(r"=+ \d+ passed[^=]* in [0-9.]+s", out), out[-6000:]
    assert "Verifier completed successfully" in out, out[-6000:]
