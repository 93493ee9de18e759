"""Apply batches started ahead of their turn, held until the controller releases them.

A batch's Ansible run spends about half a second before it touches its first host:
ansible-runner, ansible-playbook and the playbooks starting. A rollout of small batches pays
that once per batch, where plain ansible-playbook with `serial` pays it once. So while a
batch runs, the controller starts the run of the batch it expects next (the one the wave loop
picks if every host now applying ends healthy), and that run waits at its first task
(playbooks/rollout-before.yml) for the release file in its batch dir:

- `go`: the controller's release, written only once the batch is in the journal, so a
  released run is always a journalled one, and resume after a crash knows of it;
- `cancel`: the controller picked another batch (a host failed, the budget moved, a host's
  inventory changed) or is stopping; the run fails its wait and ends with no host contacted;
- `ended`: the worker's own word at its end when it was never released (cancelled, its
  controller gone, the run ended by itself), so that a release after that is refused.

Whoever writes the file first decides it: it is created whole with link(2), which fails when
the file exists. Until its release, a held run journals nothing and has contacted no host,
so a `kill -9` of the controller leaves nothing to reconcile: the wait sees the controller
gone within 10 ms and the run ends.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.runner.private_state import write_private
from fleetgate.system.procs import pid_alive

RELEASE = "release"
GO, CANCEL, ENDED = "go", "cancel", "ended"
# How long a held run waits for its release before it ends by itself. Past it, the controller
# starts the batch afresh when its turn comes, as it would without a run held ahead.
HOLD_S = 900
# How long the controller waits, as it stops, for the runs it cancelled to end.
CANCEL_WAIT_S = 30.0


def said(bdir: Path) -> str | None:
    """What the batch's release file says; None while there is none."""
    try:
        return (bdir / RELEASE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


def claim(bdir: Path, word: str) -> str:
    """Write the release file with `word` unless it already exists: what it says now."""
    tmp = bdir / f".{RELEASE}.{os.getpid()}.{time.monotonic_ns()}"
    write_private(tmp, word + "\n")
    try:
        os.link(tmp, bdir / RELEASE)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return said(bdir) or ""


def released(bdir: Path) -> bool:
    """Whether a batch with a release file was released. Read once its worker is gone: a
    worker killed before its release leaves no file at all."""
    return said(bdir) == GO


@dataclass
class Held:
    bid: str
    bdir: Path
    pid: int
    spec: dict[str, Any]  # as spawned, less the batch id: its hosts (limit) and wave too
    sources: tuple[object, ...]  # the inventory's files as they were when it was spawned


def _gone(pid: int) -> bool:
    try:
        got, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours to reap (or reaped): whether it still runs
        return not pid_alive(pid)
    return got == pid


class Ahead:
    """The controller's run held ahead of its turn: at most one, always the next apply batch
    it expects. `take` hands it over only for exactly the batch it was started for (its
    spec: hosts, wave, change; and the inventory's files), so a guess that turned out wrong
    costs a cancel, never a different change."""

    def __init__(self) -> None:
        self.held: Held | None = None
        self._cancelled: list[Held] = []

    def hold(self, held: Held) -> None:
        self.cancel()
        self.held = held

    def take(self, spec: dict[str, Any], sources: tuple[object, ...] | None) -> Held | None:
        h, self.held = self.held, None
        if h is None:
            return None
        if (h.spec == spec and h.sources == sources and said(h.bdir) is None
                and not _gone(h.pid)):
            return h
        self._cancel(h)
        return None

    def cancel(self) -> None:
        h, self.held = self.held, None
        if h is not None:
            self._cancel(h)

    def _cancel(self, h: Held) -> None:
        claim(h.bdir, CANCEL)
        self._cancelled.append(h)

    def close(self) -> None:
        """Cancel the held run; wait for every cancelled one to end, then remove its dir:
        it was never in the journal."""
        self.cancel()
        deadline = time.monotonic() + CANCEL_WAIT_S
        for h in self._cancelled:
            while not _gone(h.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            shutil.rmtree(h.bdir, ignore_errors=True)
        self._cancelled.clear()
