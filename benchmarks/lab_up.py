"""Benchmark `fleetgate lab up`: wall time and peak RSS for 10 and 20 containers (warm image
cache), and VM boot-to-SSH time. Median of 3 each. Not a test: it prints a table and JSON.

Peak RSS is the largest resident set among the `fleetgate lab up` process and the children it
waited for (podman, ssh, mkfs), read from wait4's rusage, so it is per run, not per session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FLEETGATE = str(Path(sys.executable).parent / "fleetgate")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, rusage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{' '.join(argv)} failed ({rc}): {err}")
    return elapsed, rusage.ru_maxrss // 1024, rc  # ru_maxrss is KiB on Linux


def lab_env(root: Path) -> dict[str, str]:
    return {**os.environ, "FLEETGATE_HOME": str(REPO), "FLEETGATE_LAB_DIR": str(root / "lab"),
            "FLEETGATE_STATE_DIR": str(root)}


def bench_containers(n: int, repeats: int) -> dict[str, Any]:
    times, rss = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
            env = lab_env(Path(d))
            try:
                t, mb, _ = timed([FLEETGATE, "lab", "up", "--containers", str(n)], env)
            finally:
                subprocess.run([FLEETGATE, "lab", "down"], env=env, cwd=REPO,
                               capture_output=True, check=False)
            times.append(t)
            rss.append(mb)
    return {"hosts": n, "median_s": round(statistics.median(times), 2),
            "runs_s": [round(t, 2) for t in times], "median_peak_rss_mib": statistics.median(rss)}


def bench_vm(repeats: int) -> dict[str, Any]:
    totals, boot_to_ssh = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
            env = lab_env(Path(d))
            try:
                t, _, _ = timed([FLEETGATE, "lab", "up", "--containers", "0", "--vms", "1"], env)
                done = time.time()
                boots = (Path(d) / "lab" / "hosts" / "lab-v01" / "boots.jsonl").read_text()
                first_boot = json.loads(boots.splitlines()[0])["ts"]
            finally:
                subprocess.run([FLEETGATE, "lab", "down"], env=env, cwd=REPO,
                               capture_output=True, check=False)
            totals.append(t)
            boot_to_ssh.append(done - first_boot)
    return {"lab_up_vm_median_s": round(statistics.median(totals), 2),
            "boot_to_ssh_median_s": round(statistics.median(boot_to_ssh), 2),
            "boot_to_ssh_runs_s": [round(b, 2) for b in boot_to_ssh]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 20])
    args = ap.parse_args()
    # Warm the caches (base rootfs, podman image, VM rootfs) so every measured run is warm.
    with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
        env = lab_env(Path(d))
        timed([FLEETGATE, "lab", "up", "--containers", "1", "--vms", "1"], env)
        subprocess.run([FLEETGATE, "lab", "down"], env=env, cwd=REPO, check=True,
                       capture_output=True)
    results: dict[str, Any] = {"containers": [bench_containers(n, args.repeats)
                                              for n in args.sizes]}
    results["vm"] = bench_vm(args.repeats)
    results["cpus"] = os.cpu_count()
    for row in results["containers"]:
        print(f"lab up --containers {row['hosts']:>3}: median {row['median_s']:6.2f} s  "
              f"peak RSS {row['median_peak_rss_mib']} MiB  runs {row['runs_s']}")
    vm = results["vm"]
    print(f"lab up --vms 1: median {vm['lab_up_vm_median_s']} s; "
          f"boot-to-SSH median {vm['boot_to_ssh_median_s']} s {vm['boot_to_ssh_runs_s']}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
