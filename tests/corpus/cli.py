"""One call of the real `fleetgate` executable, as an operator's shell would make it: no
stdin, a clean environment, a wall-clock limit that kills the whole process group (an
Ansible or ssh grandchild included), so a hang is reported instead of stalling the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLEETGATE = Path(sys.executable).parent / "fleetgate"
TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Outcome:
    rc: int | None  # None: killed at the time limit
    stdout: str
    stderr: str
    wall_s: float

    @property
    def hung(self) -> bool:
        return self.rc is None


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without any fleetgate or Ansible setting of its own (a
    developer's FLEETGATE_STATE_DIR must not leak into a corpus run), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLEETGATE_", "ANSIBLE_"))}
    env.update({"FLEETGATE_HOME": str(REPO), "COLUMNS": "200", "NO_COLOR": "1"})
    env.update(extra)
    return env


def run(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
        timeout: float = TIMEOUT_S) -> Outcome:
    start = time.monotonic()
    proc = subprocess.Popen([str(FLEETGATE), *argv], cwd=cwd, env=dict(env),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        # The session's whole group: ansible-inventory, ssh, a reader blocked on a FIFO.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # A grandchild in a session of its own (a rollout worker) still holds the pipes.
            proc.kill()
            out, err = b"", b"(output lost: a detached child kept the pipes open)"
        rc = None
    return Outcome(rc, out.decode(errors="replace"), err.decode(errors="replace"),
                   time.monotonic() - start)
