"""Benchmark the Ansible content on the real lab: apply-class.yml on 1, 5 and 10 container
hosts (first run and idempotent rerun, with the rerun's changed count), and optionally the
kernel update on one VM. Not a test: prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FLEETGATE = str(Path(sys.executable).parent / "fleetgate")


def fg(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FLEETGATE, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          check=False)


def changed_hosts(run_dir: str) -> int:
    """Hosts whose recap shows changed > 0, read from the run's playbook_on_stats event."""
    for line in Path(run_dir, "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "playbook_on_stats":
            return sum(1 for n in event["event_data"].get("changed", {}).values() if n)
    raise RuntimeError(f"no recap in {run_dir}")


def timed_play(env: dict[str, str], inventory: str, playbook: str,
               *extra: str) -> tuple[float, dict[str, Any]]:
    args = ["fleet", "play", playbook, "-i", inventory, "--json"]
    for kv in extra:
        args += ["-e", kv]
    t0 = time.perf_counter()
    proc = fg(env, *args)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{playbook} failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return elapsed, json.loads(proc.stdout)


def bench_apply(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "FLEETGATE_LAB_DIR": f"{d}/lab",
               "FLEETGATE_STATE_DIR": d}
        try:
            up = fg(env, "lab", "up", "--containers", str(n))
            if up.returncode != 0:
                raise SystemExit(up.stderr)
            inv = f"{d}/lab/inventory.yml"
            first, _ = timed_play(env, inv, "apply-class")
            second, out = timed_play(env, inv, "apply-class")
            return {"hosts": n, "first_s": round(first, 1), "rerun_s": round(second, 1),
                    "rerun_changed_hosts": changed_hosts(out["run_dir"])}
        finally:
            fg(env, "lab", "down")


def bench_kernel_update() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "FLEETGATE_LAB_DIR": f"{d}/lab",
               "FLEETGATE_STATE_DIR": d}
        try:
            fg(env, "lab", "up", "--containers", "0", "--vms", "1")
            inv = f"{d}/lab/inventory.yml"
            apply_s, _ = timed_play(env, inv, "apply-class")
            # The target is lab-vm version 2's pin, as examples/kernel-update/rollout.yml runs it.
            new_class = {**env, "FLEETGATE_CLASSES_DIR": str(REPO / "examples" /
                                                                 "kernel-update" / "classes")}
            update_s, _ = timed_play(new_class, inv, "kernel-update",
                                     "kernel_update_from_class=true")
            rollback_s, _ = timed_play(env, inv, "rollback")
            return {"apply_class_vm_s": round(apply_s, 1), "kernel_update_s": round(update_s, 1),
                    "rollback_s": round(rollback_s, 1)}
        finally:
            fg(env, "lab", "down")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 10])
    ap.add_argument("--kernel-update", action="store_true", help="also time it on one VM")
    args = ap.parse_args()
    results: dict[str, Any] = {"apply_class": []}
    for n in args.sizes:
        row = bench_apply(n)
        results["apply_class"].append(row)
        print(f"apply-class on {row['hosts']:>2} hosts: first {row['first_s']:6.1f} s, "
              f"rerun {row['rerun_s']:6.1f} s, hosts changed on rerun: "
              f"{row['rerun_changed_hosts']}", flush=True)
    if args.kernel_update:
        results["vm"] = bench_kernel_update()
        print(f"VM: apply-class {results['vm']['apply_class_vm_s']} s, kernel update "
              f"{results['vm']['kernel_update_s']} s, rollback {results['vm']['rollback_s']} s")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
