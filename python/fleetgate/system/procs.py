"""Subprocess helpers: every external command has a timeout and a readable one-line error."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TextIO

from fleetgate.errors import ToolError

# The limit for one slow local step: a podman import of a rootfs tar, mkfs of a multi-GiB disk,
# an apt simulation in a fresh container, hole-punching a finished disk. Generous on a loaded
# disk, yet a wedged tool still ends the command.
SLOW_STEP_TIMEOUT_S = 600


# Where run() writes each command and its whole output while a long operation (lab up, image
# build) is under way: the terminal gets one line per stage, the log gets what apt, mmdebstrap
# and podman said. Not inherited by worker threads (contextvars), which only probe SSH.
_TOOL_LOG: ContextVar[TextIO | None] = ContextVar("fleetgate_tool_log", default=None)


@contextmanager
def log_to(path: Path) -> Iterator[Path]:
    """Append every run() of this context to `path` (0600: tool output can name hosts,
    paths and keys' fingerprints, and it lives in private state)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as f:
        token = _TOOL_LOG.set(f)
        try:
            yield path
        finally:
            _TOOL_LOG.reset(token)


def _log(argv: Sequence[str], outcome: str, started: float, out: str = "", err: str = "") -> None:
    f = _TOOL_LOG.get()
    if f is None:
        return
    f.write(f"$ {shlex.join(argv)}  # {outcome}, {time.monotonic() - started:.1f}s\n")
    for text in (out, err):
        if text:
            f.write(text if text.endswith("\n") else text + "\n")
    f.flush()


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
    started = time.monotonic()
    try:
        # Never the caller's stdin: ssh sets the stdin it inherits non-blocking (and leaves it
        # so when killed), after which every Ansible process sharing it refuses to start.
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env,
            input=input_text if input_text is not None else "", check=False,
        )
    except subprocess.TimeoutExpired:
        _log(argv, f"timed out after {timeout:.0f}s", started)
        raise ToolError(f"timed out after {timeout:.0f}s", source=argv[0],
                        field=" ".join(argv[1:3])) from None
    except FileNotFoundError:
        _log(argv, "command not found", started)
        raise ToolError("command not found", source=argv[0]) from None
    _log(argv, f"exit {proc.returncode}", started, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise ToolError(f"exit {proc.returncode}: {tail[0]}", source=argv[0],
                        field=" ".join(argv[1:3]))
    return proc


def proc_start(pid: int) -> str:
    """A process's start time (/proc/PID/stat field 22; "" when there is none): with its pid,
    which process, so that a recycled pid is not taken for it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


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
