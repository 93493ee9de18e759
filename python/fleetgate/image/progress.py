"""How a build shows its progress: a live rich display on a terminal, plain lines in CI.

Plain mode prints every line Packer shows, with the seconds since the build started, so a CI
log carries the whole build. The rich display keeps one status line (stage, current Ansible
task, tasks done, elapsed) and prints only Packer's steps, task headers and errors above it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from fleetgate.image.packer_run import TASK_RE, BuildTracker, strip_prefix

MAX_LINE = 240


class Reporter(Protocol):
    def begin(self, title: str) -> None: ...
    def note(self, text: str) -> None: ...
    def packer_line(self, level: str, text: str, tracker: BuildTracker) -> None: ...
    def end(self) -> None: ...


def is_interactive(console: Console) -> bool:
    return console.is_terminal and not os.environ.get("CI")


class PlainReporter:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def _print(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:7.1f}s] {text}", flush=True)

    def begin(self, title: str) -> None:
        self.start = time.monotonic()
        self._print(title)

    def note(self, text: str) -> None:
        self._print(text)

    def packer_line(self, level: str, text: str, tracker: BuildTracker) -> None:
        self._print(("ERROR: " if level == "error" else "") + text.rstrip())

    def end(self) -> None:
        pass


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
        clean = strip_prefix(text).rstrip()
        if len(clean) > MAX_LINE:  # e.g. "Executing Ansible: ..." with every class variable
            clean = clean[:MAX_LINE] + " …"
        if level == "error":
            self.console.print(f"[red]{escape(clean)}[/red]")
        elif text.lstrip().startswith("==>") or clean.startswith(("fatal:", "failed:")):
            colour = "red" if clean.startswith(("fatal", "failed")) else "cyan"
            self.console.print(f"[dim]{self._elapsed()}[/dim] [{colour}]{escape(clean)}[/]")
        elif TASK_RE.match(clean):
            self.console.print(f"[dim]{self._elapsed()}   {escape(clean.rstrip(' *'))}[/dim]")
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
