"""Benchmark the smoke suite on the lab: `fleetgate smoke run` wall time for 1 host and for 6
hosts in parallel (median of 3 each), and the GEMM probe's coefficient of variation over 10
runs on one host. Not a test: it prints a table and JSON.

`--processes`: instead, the cost of pytest processes: one smoke run (discovery and stack)
over all `--hosts` hosts with one process per host (`--forks HOSTS`, what smoke did before
it dealt hosts into groups) against 2 and 4 processes, in alternating rounds, wall seconds
and the CPU seconds the run and its children used.

`--priming`: instead, one smoke group process over all `--hosts` hosts (discovery), run as
`smoke run` runs it, with testinfra handed the controller's inventory answer
(`--fleetgate-resolved`) against testinfra starting `ansible-inventory` on the same stand-in
itself, in alternating rounds: wall and CPU seconds of the pytest process and its children.

`--nodes`: instead, one smoke run (discovery and stack) over all `--hosts` hosts from this
machine against the same run from 2 execution nodes (`--execution-node lab-x01
--execution-node lab-x02`, the lab started with `--execution-nodes 2`), in alternating
rounds. The CPU seconds are this machine's processes only: the nodes' pytest runs in their
containers, outside this process's children. 2ecbdad, 20 hosts, 3 rounds: from this
machine 7.8 s and 9.5 CPU-s, from 2 nodes 20.7 s and 1.3 CPU-s (one 2-core machine: the
nodes' pytest processes share the hosts' cores).

One lab of 6 lab-cpu containers is brought up (probes installed with `fleetgate fleet play
smoke-probes`) and taken down at the end. All hosts share this machine's cores, so the
6-host figure includes their contention, as a real run on one box would.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from timing import timed_run

REPO = Path(__file__).resolve().parents[1]
FLEETGATE = str(Path(sys.executable).parent / "fleetgate")


def suite_wall(env: dict[str, str], inventory: str, limit: str | None,
               repeats: int) -> dict[str, Any]:
    times = []
    for _ in range(repeats):
        argv = [FLEETGATE, "smoke", "run", "-i", inventory]
        if limit:
            argv += ["--limit", limit]
        times.append(timed_run(argv, env))
    return {"median_s": round(statistics.median(times), 2), "runs_s": [round(t, 2) for t in times]}


def cpu_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, children included) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed_run(argv, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def processes(env: dict[str, str], inventory: str, hosts: int,
              rounds: int) -> dict[str, Any]:
    variants = {f"{hosts} processes (one per host)": hosts, "4 processes": 4, "2 processes": 2}
    got: dict[str, dict[str, list[float]]] = {k: {"wall_s": [], "cpu_s": []} for k in variants}
    for i in range(rounds):
        order = list(variants.items())
        for name, forks in order if i % 2 == 0 else reversed(order):
            wall, cpu = cpu_run([FLEETGATE, "smoke", "run", "-i", inventory, "--only",
                                 "discovery,stack", "--forks", str(forks)], env)
            got[name]["wall_s"].append(round(wall, 2))
            got[name]["cpu_s"].append(round(cpu, 2))
    return {k: {"median_wall_s": statistics.median(v["wall_s"]),
                "median_cpu_s": statistics.median(v["cpu_s"]), **v} for k, v in got.items()}


def nodes(env: dict[str, str], inventory: str, rounds: int) -> dict[str, Any]:
    on_nodes = ["--execution-node", "lab-x01", "--execution-node", "lab-x02"]
    variants = {"from this machine": [], "from 2 execution nodes": on_nodes}
    got: dict[str, dict[str, list[float]]] = {k: {"wall_s": [], "cpu_s": []} for k in variants}
    for i in range(rounds):
        order = list(variants.items())
        for name, extra in order if i % 2 == 0 else reversed(order):
            wall, cpu = cpu_run([FLEETGATE, "smoke", "run", "-i", inventory, "--only",
                                 "discovery,stack", *extra], env)
            got[name]["wall_s"].append(round(wall, 2))
            got[name]["cpu_s"].append(round(cpu, 2))
    return {k: {"median_wall_s": statistics.median(v["wall_s"]),
                "median_cpu_s": statistics.median(v["cpu_s"]), **v} for k, v in got.items()}


def priming(env: dict[str, str], inventory: str, root: Path, rounds: int) -> dict[str, Any]:
    from fleetgate.runner.inventory import ansible_env, resolve_inventory
    from fleetgate.smoke.probeset import PROBES_DIR
    from fleetgate.smoke.runner import new_run_dir, suite_argv

    inv = resolve_inventory(Path(inventory))
    run_dir = new_run_dir(root / "priming")
    stand_in = inv.hosts_source(run_dir, inv.hosts, "all")
    run_env = {**ansible_env(), **{k: v for k, v in env.items() if k.startswith("FLEETGATE_")}}
    variants = {"primed (--fleetgate-resolved)": True, "testinfra runs ansible-inventory": False}
    got: dict[str, dict[str, list[float]]] = {k: {"wall_s": [], "cpu_s": []} for k in variants}
    for i in range(rounds):
        order = list(variants.items())
        for name, primed in order if i % 2 == 0 else reversed(order):
            results = run_dir / f"{i}-{primed}.jsonl"
            wall, cpu = cpu_run(suite_argv(inv.hosts, stand_in, run_dir, results, ["discovery"],
                                           PROBES_DIR, primed=primed), run_env)
            passed = [json.loads(x)["status"] for x in results.read_text().splitlines()]
            if passed != ["pass"] * len(inv.hosts):  # a figure from a failed run means nothing
                raise SystemExit(f"{name}: {passed}")
            got[name]["wall_s"].append(round(wall, 2))
            got[name]["cpu_s"].append(round(cpu, 2))
    return {k: {"median_wall_s": statistics.median(v["wall_s"]),
                "median_cpu_s": statistics.median(v["cpu_s"]), **v} for k, v in got.items()}


def gemm_cv(env: dict[str, str], inventory: str, host: str, runs: int,
            out_dir: Path) -> dict[str, Any]:
    values = []
    for i in range(runs):
        out = out_dir / f"gemm-{i}.json"
        timed_run([FLEETGATE, "smoke", "run", "-i", inventory, "--limit", host, "--only", "gemm",
                   "--out", str(out)], env)
        doc = json.loads(out.read_text())
        values.append(float(doc["results"][0]["metrics"]["tflops"]))
    mean = statistics.fmean(values)
    return {"host": host, "runs": runs, "gflops": [round(v * 1000, 3) for v in values],
            "mean_gflops": round(mean * 1000, 3),
            "cv": round(statistics.pstdev(values) / mean, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gemm-runs", type=int, default=10)
    ap.add_argument("--hosts", type=int, default=6)
    ap.add_argument("--processes", action="store_true",
                    help="compare pytest process counts instead (see above)")
    ap.add_argument("--priming", action="store_true",
                    help="compare testinfra primed with the controller's answer (see above)")
    ap.add_argument("--nodes", action="store_true",
                    help="compare runs from 2 execution nodes with runs from here (see above)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fgbench-smoke-") as d:
        root = Path(d)
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "FLEETGATE_LAB_DIR": str(root / "lab"),
               "FLEETGATE_STATE_DIR": str(root),
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        inventory = str(root / "lab" / "inventory.yml")
        try:
            timed_run([FLEETGATE, "lab", "up", "--containers", str(args.hosts),
                       *(["--execution-nodes", "2"] if args.nodes else [])], env)
            timed_run([FLEETGATE, "fleet", "play", "smoke-probes", "-i", inventory], env)
            if args.processes or args.priming or args.nodes:
                table = (processes(env, inventory, args.hosts, args.repeats) if args.processes
                         else nodes(env, inventory, args.repeats) if args.nodes
                         else priming(env, inventory, root, args.repeats))
                for name, row in table.items():
                    print(f"{name:32} wall {row['median_wall_s']:6.2f} s  CPU "
                          f"{row['median_cpu_s']:6.2f} s  {row['wall_s']} {row['cpu_s']}")
                print(json.dumps(table, indent=2))
                return
            one = suite_wall(env, inventory, "lab-c01", args.repeats)
            many = suite_wall(env, inventory, None, args.repeats)
            cv = gemm_cv(env, inventory, "lab-c01", args.gemm_runs, root)
        finally:
            subprocess.run([FLEETGATE, "lab", "down"], env=env, cwd=REPO, capture_output=True,
                           check=False)
    result = {"suite_1_host": one, f"suite_{args.hosts}_hosts_parallel": many, "gemm_cv": cv,
              "cpus": os.cpu_count()}
    print(f"{'measure':34} {'median / value':>16}  runs")
    print(f"{'suite wall, 1 host':34} {one['median_s']:>14.2f} s  {one['runs_s']}")
    print(f"{f'suite wall, {args.hosts} hosts in parallel':34} {many['median_s']:>14.2f} s  "
          f"{many['runs_s']}")
    print(f"{'GEMM probe CV, 10 runs on lab-c01':34} {cv['cv']:>16.4f}  {cv['gflops']} GFLOPS")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
