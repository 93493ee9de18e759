"""Shared test helpers: run the real `fleetgate` CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

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
