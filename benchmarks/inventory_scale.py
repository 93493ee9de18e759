"""The inventory layer at fleet scale: `resolve_inventory` on a 10,000-host INI inventory
(100 racks, 4 zones, the class group class_lab_cpu, two pools), cold and warm, next to the
raw `ansible-inventory --list` it wraps, in the same run.

- raw: the subprocess alone, with the same argv and environment as the layer (checkout
  ansible.cfg, so the fleetgate_class vars plugin runs).
- cold: a first call (the process's answer cache emptied first): the subprocess, JSON
  decoding, unwrapping Ansible's unsafe markers and validating every host's variables.
- warm: a second call, answered from the cache (one stat per source file).

The three are interleaved within each repeat, so a busy machine slows them alike. A raw call
takes about 45 s on a loaded 2-core machine, hence 2 repeats by default (about 3 minutes).
Not a test: it prints a table and JSON. Run it from the checkout (its fleetgate.yml is the
site whose node classes the vars plugin reads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleetgate.runner import inventory as layer

RACKS = 100
ZONES = 4


def write_inventory(path: Path, n: int) -> None:
    canary = max(1, n // 100)
    lines = ["[class_lab_cpu]"]
    lines += [f"gpu{i:05d} ansible_port={2200 + i % RACKS} rack=rack{i % RACKS:03d} "
              f"zone=zone{i % RACKS % ZONES}" for i in range(n)]
    lines += ["[pool_canary]", *(f"gpu{i:05d}" for i in range(canary))]
    lines += ["[pool_main]", *(f"gpu{i:05d}" for i in range(canary, n))]
    lines += ["[all:vars]", "ansible_host=127.0.0.1", "ansible_user=root"]
    path.write_text("\n".join(lines) + "\n")


def raw_ansible_inventory(path: Path) -> int:
    argv = [str(Path(sys.executable).parent / "ansible-inventory"), "--list", "-i", str(path)]
    env = {**layer.ansible_env(), "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=True,
                          timeout=layer.RESOLVE_TIMEOUT_S)
    return len(proc.stdout)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"raw": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hosts.ini"
        write_inventory(path, args.hosts)
        out_bytes = 0
        for r in range(args.repeats):
            t0 = time.perf_counter()
            out_bytes = raw_ansible_inventory(path)
            times["raw"].append(time.perf_counter() - t0)
            # The benchmark's own reach into the layer: a first call, not an edited file.
            layer._CACHE.clear()
            t0 = time.perf_counter()
            inv = layer.resolve_inventory(path)
            times["cold"].append(time.perf_counter() - t0)
            times["warm"].append(timed(lambda: layer.resolve_inventory(path)))
            assert layer.resolve_inventory(path) is inv and len(inv.hosts) == args.hosts
            print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
                f"{k} {v[-1]:.3f}s" for k, v in times.items()), file=sys.stderr, flush=True)
        # What a consumer pays per `inv.hostvars` (it is rebuilt on every access).
        hostvars_s = timed(lambda: inv.hostvars)
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {"hosts": args.hosts, "racks": RACKS, "zones": ZONES, "repeats": args.repeats,
           "ansible_output_mb": round(out_bytes / 2**20, 1),
           "raw_s": round(med["raw"], 3), "cold_s": round(med["cold"], 3),
           "warm_s": round(med["warm"], 6), "hostvars_access_s": round(hostvars_s, 3),
           "cold_vs_raw": round(med["cold"] / med["raw"], 3),
           "cold_overhead_s": round(med["cold"] - med["raw"], 3),
           "warm_vs_raw": round(med["warm"] / med["raw"], 6),
           "all_s": {k: [round(x, 6) for x in v] for k, v in times.items()}}
    print(f"{'':28}{'median':>12}{'vs raw':>10}")
    print(f"{'ansible-inventory --list':28}{med['raw']:>11.3f}s{1:>10.2f}")
    print(f"{'resolve_inventory, cold':28}{med['cold']:>11.3f}s{row['cold_vs_raw']:>10.2f}")
    print(f"{'resolve_inventory, warm':28}{med['warm']:>11.6f}s{row['warm_vs_raw']:>10.6f}")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
