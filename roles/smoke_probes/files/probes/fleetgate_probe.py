"""Shared runtime of fleetgate's on-host smoke probes (installed beside them; not a probe).

Every probe calls `main()`, which keeps the contract of README.txt:

- stdout carries exactly one JSON object: probe, backend, status, reason, metrics, evidence,
  duration_s, tool_versions, inputs. Anything else the work prints goes to stderr.
- The work runs in a forked child that leads its own process group, so every tool and worker
  it starts belongs to that group. The parent waits for the result with a hard deadline; at the
  deadline it sends SIGTERM to the whole group, then SIGKILL, and prints status "timeout" with
  the phase the work was in (e.g. "nvidia-smi -q -x"). A tool stuck in the kernel (D state)
  cannot stop the probe from answering: the parent does not wait for it to be reaped.
- SIGTERM to the probe itself (the caller's own timeout) also takes the work group down and
  still prints one JSON object.
- status: "ok" (measured; the verdict belongs to the controller), "error" (could not
  measure, with a reason), "timeout", or "skipped" (nothing to measure on this backend).
  The exit code is 0 for ok/skipped, 1 for error, 124 for timeout.

Standard library only: it runs on the host's /usr/bin/python3. Tools run through
fleetgate_hostcmd (fleetgate's one command runner, installed beside it), inside the work group.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import fleetgate_hostcmd as hostcmd

PROBE_SCHEMA = 1
BACKENDS = ("nvidia", "amd", "cpu", "none")
# A fixed PATH: results must not depend on the caller's environment. /usr/local first, where
# sites install nccl-tests and vendor tools.
STD_PATH = hostcmd.STD_PATH
EXIT_CODES = {"ok": 0, "skipped": 0, "error": 1, "timeout": 124}
KILL_GRACE_S = 2.0


class ProbeError(Exception):
    """The probe could not measure; the message says why (one line)."""


class Context:
    """Handed to the work function: deadline bookkeeping, phases, tool runs, versions."""

    def __init__(self, args: argparse.Namespace, pipe_fd: int, deadline: float) -> None:
        self.args = args
        self.deadline = deadline
        self._fd = pipe_fd
        self.tool_versions: dict[str, str] = {
            "python": platform.python_version(),
            "kernel": platform.release(),
        }
        self.evidence: dict[str, Any] = {}

    def remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def phase(self, name: str) -> None:
        """Tell the parent what is running now, so a timeout can name the phase that hung."""
        os.write(self._fd, (json.dumps({"phase": name[:200]}) + "\n").encode())

    def run(self, argv: Sequence[str], *, timeout: float | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a host tool with a timeout; FileNotFoundError propagates (the tool is absent),
        and so does subprocess.TimeoutExpired (the tool hung: the probe answers "timeout")."""
        self.phase(" ".join(argv)[:200])
        limit = min(timeout or self.remaining(), self.remaining())
        # own_group=False: the tool stays in the work group, which the watchdog kills whole.
        got = hostcmd.run(argv, limit, own_group=False,
                          env={**os.environ, "PATH": STD_PATH, "LC_ALL": "C"})
        if got.status == "missing":
            raise FileNotFoundError(2, "not installed", argv[0])
        if got.status == "timeout":
            raise subprocess.TimeoutExpired(list(argv), limit)
        if got.rc is None:  # found but could not be started
            raise ProbeError(f"{argv[0]} could not start: {got.stderr}")
        if check and got.rc != 0:
            raise ProbeError(f"{argv[0]} exited {got.rc}: {tail(got.stderr or got.stdout)}")
        return subprocess.CompletedProcess(list(argv), got.rc, got.stdout, got.stderr)


def import_numpy(ctx: Context) -> Any:
    """numpy for the cpu backend's work, its version recorded; a ProbeError without it."""
    try:
        import numpy as np
    except ImportError:
        raise ProbeError("numpy is not importable (the smoke_probes role installs "
                         "python3-numpy for cpu classes)") from None
    ctx.tool_versions["numpy"] = np.__version__
    return np


def by_backend(ctx: Context, nothing: str, cpu: Callable[[Context], dict[str, Any]],
               gpu: Callable[[Context], dict[str, Any]]) -> dict[str, Any]:
    """The work of a probe that measures on the CPU (cpu) or the GPUs (nvidia, amd) and has
    `nothing` to measure on backend none."""
    backend = ctx.args.backend
    if backend == "none":
        return {"status": "skipped", "reason": f"backend none: {nothing}"}
    return {"status": "ok", "metrics": cpu(ctx) if backend == "cpu" else gpu(ctx)}


def tail(text: str | None, lines: int = 3, chars: int = 400) -> str:
    """The last lines of a tool's output, as one line."""
    if not text:
        return ""
    return " | ".join(s.strip() for s in text.strip().splitlines()[-lines:] if s.strip())[-chars:]


def read_text(path: str, limit: int = 1_000_000) -> str | None:
    return hostcmd.read_text(path, limit)


def container_kind() -> str | None:
    """podman/docker/lxc when this host is a container (then the kernel is the outer one)."""
    if os.path.exists("/run/.containerenv"):
        return "podman"
    if os.path.exists("/.dockerenv"):
        return "docker"
    env = read_text("/proc/1/environ") or ""
    for part in env.split("\0"):
        if part.startswith("container="):
            return part.split("=", 1)[1] or "container"
    return None


def cpu_limits() -> dict[str, Any]:
    """What this process may really use: affinity and the cgroup v2/v1 CPU quota."""
    out: dict[str, Any] = {"os_cpus": os.cpu_count()}
    try:
        out["affinity_cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["affinity_cpus"] = None
    quota = None
    raw = read_text("/sys/fs/cgroup/cpu.max")
    if raw:
        q, _, period = raw.strip().partition(" ")
        if q != "max" and period:
            quota = int(q) / int(period)
    else:
        q1 = read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        p1 = read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if q1 and p1 and int(q1) > 0:
            quota = int(q1) / int(p1)
    out["cgroup_cpu_quota"] = quota
    return out


def _non_finite(value: Any, path: str, found: list[str]) -> Any:
    """`value` with every NaN/Infinity replaced by None; their paths are added to `found`."""
    if isinstance(value, float) and not math.isfinite(value):
        found.append(f"{path} ({value})")
        return None
    if isinstance(value, dict):
        return {k: _non_finite(v, f"{path}.{k}" if path else str(k), found)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_non_finite(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def finite(doc: dict[str, Any]) -> dict[str, Any]:
    """The result with no NaN/Infinity: they are not JSON (the controller would refuse the
    whole line), and a measurement that came out NaN did not measure anything, so the
    status becomes error, naming the fields."""
    found: list[str] = []
    clean: dict[str, Any] = _non_finite(doc, "", found)
    if found:
        clean["status"] = "error"
        clean["reason"] = (f"not a finite number: {', '.join(found[:5])}"
                           + (f" (and {len(found) - 5} more)" if len(found) > 5 else "")
                           + (f"; {clean['reason']}" if clean.get("reason") else ""))
    return clean


def _emit(doc: dict[str, Any]) -> int:
    doc = finite(doc)
    # allow_nan=False: finite() removed them; should one remain, fail loudly, never print NaN.
    sys.stdout.write(json.dumps(doc, sort_keys=True, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()
    return EXIT_CODES.get(str(doc.get("status")), 1)


def _child(work: Callable[[Context], dict[str, Any]], args: argparse.Namespace, wfd: int,
           deadline: float) -> None:
    """The forked worker: never returns."""
    code = 0
    try:
        os.setpgid(0, 0)
        os.dup2(2, 1)  # stray prints from libraries must not corrupt the one JSON object
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        ctx = Context(args, wfd, deadline)
        try:
            result = work(ctx)
            result.setdefault("status", "ok")
        except ProbeError as exc:
            result = {"status": "error", "reason": " ".join(str(exc).split())}
        except subprocess.TimeoutExpired as exc:  # one tool hung; the probe still answers
            cmd = exc.cmd[0] if isinstance(exc.cmd, (list, tuple)) else str(exc.cmd)
            result = {"status": "timeout",
                      "reason": f"{cmd} did not answer within {float(exc.timeout):.0f}s"}
        except Exception as exc:  # a probe bug or a library failure: could not measure
            result = {"status": "error", "reason": f"{type(exc).__name__}: "
                                                   f"{' '.join(str(exc).split())[:500]}",
                      "evidence": {"traceback": traceback.format_exc()[-2000:]}}
        result["evidence"] = {**ctx.evidence, **result.get("evidence", {})}
        result["tool_versions"] = {**ctx.tool_versions, **result.get("tool_versions", {})}
        os.write(wfd, (json.dumps({"result": finite(result)}, default=str, allow_nan=False)
                       + "\n").encode())
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _kill_group(pgid: int) -> bool:
    """SIGTERM the whole work group, then SIGKILL what is left; True if the worker was reaped.

    The group, not only the worker: a tool that ignores SIGTERM (a hung nvidia-smi) must not
    outlive the probe. A process stuck in the kernel (D state) survives even SIGKILL; the
    parent then answers anyway instead of waiting for it."""
    reaped = False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        end = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < end:
            if not reaped:
                try:
                    reaped = os.waitpid(pgid, os.WNOHANG)[0] != 0
                except ChildProcessError:
                    reaped = True
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return reaped  # nobody left in the group
            time.sleep(0.05)
    return reaped


def base_parser(probe: str, default_timeout: float) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=probe, description=f"fleetgate smoke probe: {probe}")
    p.add_argument("--backend", required=True, choices=BACKENDS)
    p.add_argument("--timeout", type=float, default=default_timeout,
                   help="hard deadline in seconds for the whole probe")
    return p


def main(probe: str, parser: argparse.ArgumentParser,
         work: Callable[[Context], dict[str, Any]], argv: Sequence[str] | None = None) -> int:
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + max(1.0, float(args.timeout))
    inputs = {k: v for k, v in vars(args).items() if k != "timeout"}
    doc: dict[str, Any] = {
        "probe": probe, "schema": PROBE_SCHEMA, "backend": args.backend,
        "host": socket.gethostname(), "inputs": inputs, "timeout_s": args.timeout,
        "status": "error", "reason": "", "metrics": {}, "evidence": {}, "tool_versions": {},
    }
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(work, args, wfd, deadline)
    os.close(wfd)
    with contextlib.suppress(OSError):  # also from the parent: no race with a group kill
        os.setpgid(pid, pid)
    caller_stop: list[int] = []

    def on_term(signum: int, _frame: Any) -> None:
        caller_stop.append(signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    buf = b""
    phase = "starting"
    result: dict[str, Any] | None = None
    eof = False
    while not eof and not caller_stop:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            ready, _, _ = select.select([rfd], [], [], min(left, 0.5))
        except InterruptedError:
            continue
        if not ready:
            continue
        chunk = os.read(rfd, 65536)
        if not chunk:
            eof = True
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "phase" in msg:
                phase = str(msg["phase"])
            elif "result" in msg and isinstance(msg["result"], dict):
                result = msg["result"]
    os.close(rfd)
    if result is not None and eof:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # whatever the work left behind in its group goes too
        doc.update(result)
    else:
        reaped = _kill_group(pid)
        why = (f"stopped by signal {caller_stop[0]} from the caller" if caller_stop
               else f"no result within {args.timeout:g}s")
        if result is None and eof and not caller_stop:
            doc.update(status="error",
                       reason=f"the worker exited without a result (phase: {phase})")
        else:
            doc.update(status="timeout", reason=f"{why}; hung in: {phase}")
        doc["evidence"] = {"phase": phase, "worker_reaped": reaped}
    doc["duration_s"] = round(time.monotonic() - started, 3)
    return _emit(doc)
