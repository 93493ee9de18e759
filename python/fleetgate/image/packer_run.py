"""Run `packer build -machine-readable` and turn its output into events.

Machine-readable lines are `timestamp,target,type,data...`, with commas in data written as
`%!(PACKER_COMMA)` and newlines as literal `\\n`. The `ui` lines carry what a person would see;
Ansible's output arrives inside them, prefixed with the source name. From them this module
follows the build's stage and the Ansible task, and keeps the first failure's message so the
CLI can say in one line why a build failed (e.g. the DKMS module that did not build).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

PREFIX_RE = re.compile(r"^\s*(?:==> )?(?:[a-z0-9-]+\.[A-Za-z0-9_-]+: ?)")
TASK_RE = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.+?)\] \**$")
PLAY_RE = re.compile(r"^PLAY \[(?P<name>.+?)\] \**$")
FAILED_RE = re.compile(r"^(?:fatal|failed): \[[^\]]+\]")
MSG_RE = re.compile(r"^\s*msg: ?(?P<msg>.*)$")
BUILD_ERR_RE = re.compile(r"^Build '[^']+' errored after [^:]+: (?P<msg>.*)$")

# Packer's own steps, in the order a build passes them: (text fragment, stage name).
STAGES = (
    ("Starting docker container", "starting the build container"),
    ("Starting VM", "booting the build VM"),
    ("Waiting for SSH", "waiting for SSH"),
    ("Uploading ", "uploading build files"),
    ("Provisioning with shell", "preparing the image"),
    ("Provisioning with Ansible", "running Ansible"),
    ("Exporting the container", "exporting the root filesystem"),
    ("Gracefully halting", "shutting the build VM down"),
    ("Running post-processor", "post-processing"),
)


@dataclass(frozen=True)
class MachineLine:
    timestamp: str
    target: str
    kind: str
    data: tuple[str, ...]


def parse_machine_line(line: str) -> MachineLine | None:
    parts = line.rstrip("\n").split(",")
    if len(parts) < 3 or not parts[0].isdigit():
        return None
    data = tuple(p.replace("%!(PACKER_COMMA)", ",").replace("\\n", "\n").replace("\\r", "")
                 for p in parts[3:])
    return MachineLine(parts[0], parts[1], parts[2], data)


def ui_lines(ml: MachineLine) -> list[tuple[str, str]]:
    """(level, text) for each line a person would see; level is say, message or error."""
    if ml.kind != "ui" or len(ml.data) < 2:
        return []
    level = ml.data[0]
    return [(level, text) for text in ml.data[1].splitlines() if text.strip()]


def strip_prefix(text: str) -> str:
    return PREFIX_RE.sub("", text, count=1)


@dataclass
class BuildTracker:
    """Follows stage, play and task; remembers the first failure."""

    stage: str = "starting Packer"
    play: str = ""
    task: str = ""
    tasks_done: int = 0
    failed_task: str = ""
    failure: str = ""
    packer_error: str = ""
    first_error: str = ""
    _failing: bool = field(default=False, repr=False)
    _want_msg: bool = field(default=False, repr=False)
    _msg_follows: bool = field(default=False, repr=False)

    def feed(self, level: str, raw: str) -> None:
        text = strip_prefix(raw).rstrip()
        for fragment, stage in STAGES:
            if fragment in raw:
                self.stage = stage
        if m := PLAY_RE.match(text):
            self.play = m.group("name")
        elif m := TASK_RE.match(text):
            self.task = m.group("name")
            self.tasks_done += 1
        elif text.strip() == "...ignoring" and self._failing:
            self.failed_task, self.failure, self._failing, self._want_msg = "", "", False, False
        elif FAILED_RE.match(text) and not self.failed_task:
            self.failed_task, self._failing, self._want_msg = self.task, True, True
            inline = re.search(r'"msg": "(?P<msg>(?:[^"\\]|\\.)+)"', text)
            if inline:
                self.failure, self._want_msg = inline.group("msg"), False
        elif self._want_msg and (m := MSG_RE.match(text)):
            msg = m.group("msg").strip()
            if msg in ("", "|", "|-", ">", ">-"):
                self._msg_follows = True
            else:
                self.failure = msg.strip("'\"")
            self._want_msg = False
        elif self._msg_follows and text.strip():
            self.failure, self._msg_follows = text.strip(), False
        if level == "error" and (m := BUILD_ERR_RE.match(text.strip())):
            self.packer_error = m.group("msg")
        elif level == "error" and not self.first_error and text.strip():
            self.first_error = text.strip()

    def reason(self) -> str:
        if self.failure:
            where = f"task {self.failed_task!r}" if self.failed_task else "a task"
            return f"{where} failed in {self.play or 'Ansible'}: {self.failure}"
        parts = [p for p in (self.packer_error, self.first_error) if p]
        if len(parts) == 2 and parts[1] in parts[0]:
            parts = parts[:1]
        return ": ".join(parts) or "packer build failed"


@dataclass
class PackerResult:
    rc: int
    tracker: BuildTracker
    seconds: float
    timed_out: bool = False


def run_packer(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    on_line: Callable[[str, str, BuildTracker], None],
    timeout: float,
    log_path: str | None = None,
) -> PackerResult:
    """Run Packer to completion, feeding each ui line to the tracker and then to on_line.

    Packer runs in its own session; on timeout or Ctrl-C it first gets SIGINT (it then stops
    and removes its build container or VM itself), and SIGKILL only if it does not exit."""
    tracker = BuildTracker()
    start = time.monotonic()
    proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", bufsize=1, start_new_session=True)
    timed_out = threading.Event()

    def on_timeout() -> None:
        timed_out.set()
        _interrupt(proc)

    timer = threading.Timer(timeout, on_timeout)
    timer.daemon = True
    timer.start()
    log = open(log_path, "a") if log_path else None  # noqa: SIM115 - closed in finally
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ml = parse_machine_line(line)
            if ml is None:
                if log is not None:
                    log.write(line)
                continue
            for level, text in ui_lines(ml):
                if log is not None:  # what a person would have seen, not the CSV
                    log.write(f"{'ERROR: ' if level == 'error' else ''}{text}\n")
                tracker.feed(level, text)
                on_line(level, text, tracker)
        rc = proc.wait()
    except BaseException:
        _interrupt(proc)
        raise
    finally:
        timer.cancel()
        if log is not None:
            log.close()
    return PackerResult(rc, tracker, time.monotonic() - start, timed_out.is_set())


def _interrupt(proc: subprocess.Popen[str], grace: float = 90) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
