"""fleetgate's one way to run a command on a host: an argv (never a shell string), a deadline,
and an answer even when the tool hangs.

Shared by the Ansible modules (shipped by AnsiballZ as ansible.module_utils.fleetgate_hostcmd),
the triage collector, and the smoke probes (installed beside them as fleetgate_hostcmd.py, run
by the host's python3 without Ansible). So: standard library only, Python 3.9+.

- A tool that is not installed is status "missing", never an exception.
- At the deadline the command is SIGKILLed, with its whole process group when it runs in its
  own (the default): a tool stuck on a wedged GPU ignores SIGTERM, and its children would keep
  our pipes open. A process stuck in the kernel (D state) survives even SIGKILL; the runner
  then answers anyway instead of waiting for it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Where system tools live, for lookups that must not depend on the caller's PATH (Ansible's
# get_bin_path adds the sbin directories the same way).
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REAP_WAIT_S = 5.0


@dataclass(frozen=True)
class CmdResult:
    """One command's outcome. status: ok (rc in ok_rc), failed (another rc, or it could not
    start), timeout (killed at the deadline; its output is dropped), missing (not on PATH)."""

    argv: list[str]
    status: str
    rc: int | None
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment in the C locale (tool output is parsed), plus `extra`."""
    return {**os.environ, "LC_ALL": "C", "LANG": "C", **(extra or {})}


def search_path(env: Mapping[str, str] | None = None) -> str:
    """PATH of `env` (default: ours) followed by the standard system directories."""
    own = (env if env is not None else os.environ).get("PATH", "")
    return ":".join(p for p in dict.fromkeys([*own.split(":"), *STD_PATH.split(":")]) if p)


def _kill(proc: subprocess.Popen[bytes], own_group: bool) -> None:
    with contextlib.suppress(OSError):
        if own_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=REAP_WAIT_S)


def run(argv: Sequence[str], timeout: float, *, ok_rc: Sequence[int] = (0,),
        env: Mapping[str, str] | None = None, path: str | None = None,
        own_group: bool = True) -> CmdResult:
    """Run argv[0] (looked up in `path`, default the PATH of the command's environment) with
    `timeout` seconds to finish.

    env: the command's whole environment (default command_env()). own_group=False keeps the
    command in the caller's process group, for callers that kill their group themselves (the
    probe watchdog); at the deadline only the command itself is then killed."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("run() takes an argv list of strings, never a shell string")
    args = list(argv)
    started = time.monotonic()
    full_env = dict(env) if env is not None else command_env()
    exe = shutil.which(args[0], path=path if path is not None else full_env.get("PATH"))
    if exe is None:
        return CmdResult(args, "missing", None, "", "", 0.0)
    try:
        proc = subprocess.Popen([exe, *args[1:]], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                                start_new_session=own_group)
    except OSError as exc:
        return CmdResult(args, "failed", None, "", str(exc), 0.0)
    try:
        out, err = proc.communicate(timeout=max(0.001, timeout))
    except subprocess.TimeoutExpired:
        _kill(proc, own_group)
        return CmdResult(args, "timeout", None, "", "",
                         round(time.monotonic() - started, 3))
    return CmdResult(args, "ok" if proc.returncode in ok_rc else "failed", proc.returncode,
                     out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     round(time.monotonic() - started, 3))


def stdout_of(argv: Sequence[str], timeout: float, *, ok_rc: Sequence[int] = (0,),
              path: str | None = None) -> str | None:
    """stdout of the command, or None when the tool is missing, fails or times out."""
    got = run(argv, timeout, ok_rc=ok_rc, path=path)
    return got.stdout if got.ok else None


def read_text(path: str, limit: int | None = None) -> str | None:
    """A small file's text (undecodable bytes replaced), or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read() if limit is None else fh.read(limit)
    except OSError:
        return None
