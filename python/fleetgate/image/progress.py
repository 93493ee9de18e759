"""How a build shows its progress: a live rich display on a terminal, plain lines in CI.

Both print the same lines: Packer's steps, Ansible's task headers and every error; the whole
Packer output is in the build's log file (image/build.py names it). Plain mode (CI, a pipe)
stamps each line with the seconds since the build started, and says what it is doing at least
every HEARTBEAT_S when nothing else was printed, so a CI runner's no-output timeout never
fires on a long DKMS compile. The rich display keeps one status line (stage, current Ansible
task, tasks done, elapsed) instead.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from fleetgate.image.packer_run import TASK_RE, BuildTracker, strip_prefix

MAX_LINE = 240
HEARTBEAT_S = 60.0


class Reporter(Protocol):
    def begin(self, title: str) -> None: ...
    def note(self, text: str) -> None: ...
    def packer_line(self, level: str, text: str, tracker: BuildTracker) -> None: ...
    def end(self) -> None: ...


def is_interactive(console: Console) -> bool:
    return console.is_terminal and not os.environ.get("CI")


def shown(level: str, text: str) -> tuple[str, str] | None:
    """(kind, line) if a Packer ui line is worth a progress line: error, step, failure or task
    header; None for the rest (it is in the log)."""
    clean = strip_prefix(text).rstrip()
    if level == "error":
        return "error", clean
    if clean.startswith(("fatal:", "failed:")):
        return "failed", clean
    if text.lstrip().startswith("==>"):
        return "step", "==> " + clean
    if TASK_RE.match(clean):
        return "task", clean.rstrip(" *")
    return None


class PlainReporter:
    def __init__(self, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.start = self.last = time.monotonic()
        self.heartbeat_s = heartbeat_s
        self.tracker: BuildTracker | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _print(self, text: str) -> None:
        with self._lock:
            self.last = time.monotonic()
            print(f"[{self.last - self.start:7.1f}s] {text}", flush=True)

    def begin(self, title: str) -> None:
        self.start = time.monotonic()
        self._print(title)
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="build-heartbeat",
                                      daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        # A long task (a DKMS compile, an apt install) prints nothing for minutes.
        while not self._stop.wait(min(5.0, self.heartbeat_s)):
            if time.monotonic() - self.last >= self.heartbeat_s:
                t = self.tracker
                task = f", task {t.task}" if t is not None and t.task else ""
                done = f", {t.tasks_done} tasks done" if t is not None else ""
                stage = t.stage if t is not None else "preparing"
                # Whole, never cut: the task name is what an operator greps the log for.
                self._print(f"still building: {stage}{task}{done}")

    def note(self, text: str) -> None:
        self._print(text)

    def packer_line(self, level: str, text: str, tracker: BuildTracker) -> None:
        self.tracker = tracker
        line = shown(level, text)
        if line is not None:
            kind, clean = line
            self._print(("ERROR: " if kind == "error" else "") + clean)

    def end(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(10)
            self._beat = None


class RichReporter:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.start = time.monotonic()
        self.status: Status | None = None

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.start)
        return f"{s // 60}:{s % 60:02d}"

    def begin(self, title: str) -> None:
        self.start = time.monotonic()
        self.console.print(f"[bold]{escape(title)}[/bold]")
        self.status = self.console.status("starting", spinner="dots")
        self.status.start()

    def note(self, text: str) -> None:
        self.console.print(f"[dim]{self._elapsed()}[/dim] {escape(text)}")

    def packer_line(self, level: str, text: str, tracker: BuildTracker) -> None:
        line = shown(level, text)
        if line is not None:
            kind, clean = line
            if len(clean) > MAX_LINE:  # e.g. "Executing Ansible: ..." with every variable
                clean = clean[:MAX_LINE] + " …"
            if kind == "error":
                self.console.print(f"[red]{escape(clean)}[/red]")
            elif kind == "task":
                self.console.print(f"[dim]{self._elapsed()}   {escape(clean)}[/dim]")
            else:
                colour = "red" if kind == "failed" else "cyan"
                self.console.print(f"[dim]{self._elapsed()}[/dim] [{colour}]{escape(clean)}[/]")
        if self.status is not None:
            task = f" · {tracker.task}" if tracker.task else ""
            self.status.update(f"{escape(tracker.stage)}{escape(task)} · "
                               f"{tracker.tasks_done} tasks · {self._elapsed()}")

    def end(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def make_reporter(console: Console | None = None) -> Reporter:
    console = console or Console(file=sys.stdout)
    return RichReporter(console) if is_interactive(console) else PlainReporter()
