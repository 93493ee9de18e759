"""Benchmark `fleetgate preflight deps` on a real virtualenv of over 1 GB: files, ELF files and
bytes scanned per second and peak RSS, serial (--jobs 1) against the process pool.

The venv (CPU torch from the machine's wheel cache, the usual data stack, one CUDA runtime
wheel so that there is something to find) is built once under the fleetgate cache and reused.
Each measured scan runs in a fresh process, so its peak RSS is its own; the first scan only
warms the page cache and is reported apart. Not a test: it prints a table and JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fleetgate.preflight import load_table, scan_target
from fleetgate.system.cache import cache_dir

# torch==2.13.0 resolves to the CPU wheel on this machine's disk (see README); the rest come
# from the registry. nvidia-cuda-runtime-cu12 gives the scan a real vendor library to report.
PACKAGES = ("torch==2.13.0", "scipy", "pandas", "scikit-learn", "pyarrow", "polars",
            "opencv-python-headless", "onnxruntime", "nvidia-cuda-runtime-cu12")
MIN_BYTES = 1 << 30


def venv_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def build_venv(root: Path) -> Path:
    marker = root / ".fleetgate-bench-ready"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"),
                    "install", "-q", *PACKAGES], check=True)
    size = venv_bytes(root)
    if size < MIN_BYTES:
        raise SystemExit(f"{root} is only {size / 1e9:.2f} GB; add packages to PACKAGES")
    marker.write_text(" ".join(PACKAGES) + "\n")
    return root


def measure(target: Path, jobs: int) -> dict[str, Any]:
    """One scan in this process (the child side of run_child)."""
    table = load_table()
    started = time.perf_counter()
    result = scan_target(target, table, jobs=jobs)
    wall = time.perf_counter() - started
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    s = result.stats
    return {
        "jobs": jobs, "wall_s": round(wall, 3), "files": s.files, "elf_files": s.elf_files,
        "bytes": s.bytes, "files_per_s": round(s.files / wall),
        "elf_per_s": round(s.elf_files / wall), "mb_per_s": round(s.bytes / wall / 1e6),
        "peak_rss_mb": round(own / 1024, 1),
        "peak_worker_rss_mb": round(children / 1024, 1),
        "violating_for_cpu": len(result.violating(frozenset(), strict=False)),
    }


def run_child(target: Path, jobs: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--measure", str(target), "--jobs", str(jobs)],
                          capture_output=True, text=True, check=True)
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=cache_dir() / "bench" / "preflight-venv")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.jobs)))
        return
    venv = build_venv(args.venv)
    size = venv_bytes(venv)
    warmup = run_child(venv, args.jobs)
    runs: dict[int, list[dict[str, Any]]] = {1: [], args.jobs: []}
    for _ in range(args.repeats):
        for jobs in runs:  # interleaved, so both modes see the same machine load
            runs[jobs].append(run_child(venv, jobs))
    print(f"venv {venv}: {size / 1e9:.2f} GB on disk; first (page-cache warm-up) scan "
          f"{warmup['wall_s']} s")
    print(f"{'jobs':>4} {'wall s':>7} {'files/s':>8} {'ELF/s':>7} {'MB/s':>6} "
          f"{'RSS MB':>7} {'worker RSS MB':>13}")
    modes: dict[int, Any] = {}
    summary = {"venv": str(venv), "venv_bytes": size, "warmup": warmup, "modes": modes}
    for jobs, results in runs.items():
        best = sorted(results, key=lambda r: r["wall_s"])[len(results) // 2]  # the median run
        modes[jobs] = {"median": best,
                                  "wall_s": [r["wall_s"] for r in results],
                                  "median_wall_s": statistics.median(r["wall_s"] for r in results)}
        print(f"{jobs:>4} {best['wall_s']:>7} {best['files_per_s']:>8} {best['elf_per_s']:>7} "
              f"{best['mb_per_s']:>6} {best['peak_rss_mb']:>7} {best['peak_worker_rss_mb']:>13}")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
