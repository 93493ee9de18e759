"""The one timed subprocess run the benchmarks share (imported as a sibling module: the
benchmarks run as scripts, `python benchmarks/X.py`)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _busy_rows() -> dict[str, float]:
    """Busy CPU seconds since boot per /proc/stat row: `cpu` for the whole machine, `cpuN`
    for each core. User, nice, system, irq and softirq; not idle, iowait or steal (the
    hypervisor's), nor guest, which user already counts."""
    rows: dict[str, float] = {}
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            name, *values = line.split()
            if name.startswith("cpu"):
                user, nice, system, _idle, _iowait, irq, softirq = map(int, values[:7])
                rows[name] = (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    return rows


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot, every process counted: the
    lab's hosts too, which share its cores."""
    return _busy_rows()["cpu"]


def busy_core_s() -> dict[int, float]:
    """busy_cpu_s for each core, from one reading."""
    return {int(k[3:]): v for k, v in _busy_rows().items() if k != "cpu"}


def timed_run(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    """Wall seconds of one command run from the checkout; any other exit ends the benchmark
    with the command's own output, since a figure from a failed run means nothing."""
    return measured_run(argv, env, ok)[0]


def measured_run(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)
                 ) -> tuple[float, float]:
    """timed_run's wall seconds, and the CPU seconds the machine spent busy meanwhile. That
    counts work the command left running when it returned (a detached worker) only up to its
    return, and anything else the machine ran: compare it side by side, on a quiet machine."""
    cpu0 = busy_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    cpu = busy_cpu_s() - cpu0
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): "
                         f"{proc.stderr[-2000:]}{proc.stdout[-2000:]}")
    return elapsed, cpu
