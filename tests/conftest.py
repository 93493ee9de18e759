"""Shared test helpers: run the real `fleetgate` CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from fleetgate.lab.keys import ssh_argv
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import load_state

REPO = Path(__file__).resolve().parents[1]
FLEETGATE = Path(sys.executable).parent / "fleetgate"


def fleetgate(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 600, check: bool = False
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **(env or {})}
    proc = subprocess.run([str(FLEETGATE), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=REPO, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"fleetgate {' '.join(args)} -> {proc.returncode}\n"
                    f"{proc.stdout}\n{proc.stderr}")
    return proc


class LabHandle:
    """A lab in its own directory, driven through the real CLI; shared by the lab test files."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {"FLEETGATE_LAB_DIR": str(root), "FLEETGATE_STATE_DIR": str(root.parent)}

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return fleetgate(*args, env=self.env, check=check)

    @property
    def inventory(self) -> str:
        return str(self.root / "inventory.yml")

    def ssh(self, host: str, command: str) -> str:
        """Run a command on a lab host over the lab's own SSH trust; returns stdout."""
        paths = LabPaths(self.root)
        state = load_state(paths.state)
        assert state is not None, f"no lab in {self.root}"
        proc = subprocess.run(ssh_argv(paths, state.host(host).port, command),
                              capture_output=True, text=True, timeout=30, check=False)
        return proc.stdout
