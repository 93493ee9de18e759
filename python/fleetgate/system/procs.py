"""Subprocess helpers: every external command has a timeout and a readable one-line error."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from fleetgate.errors import ToolError

# The limit for one slow local step: a podman import of a rootfs tar, mkfs of a multi-GiB disk,
# an apt simulation in a fresh container, hole-punching a finished disk. Generous on a loaded
# disk, yet a wedged tool still ends the command.
SLOW_STEP_TIMEOUT_S = 600


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolError(f"{name} not found on PATH (install the Debian package {package})",
                        source=name)
    return path


def run(
    argv: Sequence[str],
    *,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        # Never the caller's stdin: ssh sets the stdin it inherits non-blocking (and leaves it
        # so when killed), after which every Ansible process sharing it refuses to start.
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env,
            input=input_text if input_text is not None else "", check=False,
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"timed out after {timeout:.0f}s", source=argv[0],
                        field=" ".join(argv[1:3])) from None
    except FileNotFoundError:
        raise ToolError("command not found", source=argv[0]) from None
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise ToolError(f"exit {proc.returncode}: {tail[0]}", source=argv[0],
                        field=" ".join(argv[1:3]))
    return proc


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False
