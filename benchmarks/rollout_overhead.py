"""Controller overhead: the same no-op playbook on 20 lab hosts in the same wave layout
(1, 3, then 16), run by `fleetgate rollout start` and by plain `ansible-playbook` with the
equivalent `serial: [1, 3, 16]`. Alternating runs, median ratio over 5 pairs.

fleetgate pays for what ansible-playbook does not do: resolving the inventory, the plan
artifact, one ansible-runner batch worker per wave, and a journal commit per transition.
No gates run (checks: []), so the ratio is the machinery, not the smoke suite. Each run's
`phases` split fleetgate's seconds by the journal's own timestamps (see phases()).

Two more plain runs bound what any controller with fleetgate's guarantees can reach:
- `ansible_read`: the same play with each host's `before` reading ahead of its change, the
  reading fleetgate takes (an image change's rollback re-images a host to what it read);
- `ansible_per_batch`: that play once per batch, each its own ansible-playbook run limited to
  the batch, one after the other (per_batch()). A rollout batch runs the whole change
  playbook before the next batch starts; `serial` is a keyword of each play ("Ansible
  completes the play on the specified number ... of hosts before starting the next batch"),
  so for a playbook of several plays only a run per batch keeps that order, and a
  controller cannot set `serial` or `hosts:` on a play it did not write.
Every run also reports `*_cpu_s`, the CPU seconds the whole machine spent busy meanwhile
(timing.measured_run): the lab's hosts share the controller's cores, so on this 2-core
machine a run's wall time follows its CPU.

Figures (issue 17 item 6), 2-core shared machine:
- cb3840c, quiet: 7.5 s against 3.0 s, median ratio 2.5.
- Under load (load average 10-11), the same 20-container lab, 3 alternating rounds of
  ansible-playbook / cb3840c / this tree side by side: median ansible-playbook 18.9 s
  (2.5 s CPU), cb3840c 59.8 s (11.7 s CPU, ratio 3.16), this tree 51.0 s (10.6 s CPU,
  ratio 2.84). Medians of phases, cb3840c -> now: `before` probes 24.7 -> 21.5 s; worker
  start-up and exit around its Ansible run 2.5 -> 1.0 s (a warm worker, rollout/worker.py
  WarmWorkers; measured with one started for the first batch too, which the controller
  now leaves cold, about 0.5 s, so that executor stubs start none); the worker's Ansible
  run 26.1 -> 23.7 s (no ansible-inventory per batch: the controller's resolution is
  handed over while the sources are unchanged).
- 48fcccd against c7c66d7 (the warm worker landed; the hand-over replaced by the state dir's
  inventory cache, runner/inventory.py), quiet machine, one tree after the other: median
  ratio 4.10 (fleetgate 15.5 s, ansible-playbook 3.6 s) against 3.60 and 3.59 in two runs
  (16.3 s and 14.3 s against 4.7 s and 4.4 s). c7c66d7's medians of phases: start 0.5 s,
  `before` probes 7.5 / 6.6 s, worker start-up and exit 1.0 / 0.8 s, the worker's Ansible
  runs 6.9 / 6.4 s. The runs of plain ansible-playbook alone spread from 3.3 to 5.2 s.
- The next batch's run started ahead and held (rollout/ahead.py), against 7cc438a side by
  side, 5 alternating rounds, quiet machine: fleetgate 5.50 s (ratio 1.87, 1.80 to 2.11),
  7cc438a 5.98 s (2.05, 1.96 to 2.59), ansible-playbook 2.95 s, 3.33 s reading every host
  first. Medians of phases now: start 0.35, Ansible start 0.88 (batch 1 only: 2 of 3 batches
  held), reading 0.66, change 2.91, exit 0.62 s; the held run's start competes with the
  current batch on 2 cores (batch 1's start was about 0.5 s, the changes 2.5 s, before).
- A batch's result at its run's recap (rollout/worker.py), against 54af094 side by side, 5
  alternating rounds, a slower day on the same machine: fleetgate 6.32 s (ratio 1.84, 1.60 to
  1.98), 54af094 6.63 s (1.91, 1.80 to 2.19), ansible-playbook 3.43 s, 3.81 s reading every
  host first. Medians of phases: start 0.37, Ansible start 0.95, reading 0.87, change 3.57,
  exit 0.08 s (0.62 s before): the controller no longer waits for Ansible's exit.
- What was left before that was one ansible-playbook start-up per batch for the `before`
  probe and one for the change, where plain ansible-playbook starts once for all three
  batches: the 1.10 target needs the probe folded into the batch's own run, or one
  long-lived Ansible run per rollout.
- Start-up (README "Start-up": numpy imported only where a comparison runs, fleetgate's own
  modules compiled once by `make venv`), against 4463734 side by side, 5 alternating rounds,
  quiet machine: fleetgate 4.41 s (ratio 1.76), 4463734 4.89 s (1.86), ansible-playbook
  2.63 s, 3.15 s reading every host first. Medians of phases: start 0.19, Ansible start 0.58,
  reading 0.75, change 2.53, exit 0.09 s.
- The floors and CPU seconds (this docstring's two plain runs), with the batch worker no
  longer importing the plan schema (rollout/target.py), against 74d8698 side by side, 5
  alternating rounds, quiet machine. Medians: plain ansible-playbook 2.34 s (4.05 CPU-s),
  reading first 2.62 s (4.56), one run per batch 3.52 s (5.48), fleetgate 4.18 s (7.16),
  74d8698 4.22 s (7.38); ratio 1.76 (to reading first 1.55, to one run per batch 1.16).
  Faster than 74d8698 in 4 of 5 rounds, by about the 0.1 CPU-s that four worker starts save:
  no speed-up is claimed. Reading first alone is 1.12x plain: no controller that reads each
  host before its change reaches 1.10 on this machine, and one run per batch is 1.50x.
  One long-lived Ansible run per rollout, the other way the entry before last names, is not
  open to a controller of playbooks it did not write (`ansible_per_batch` above).
- The hosts off the controller's cores (--host-cores 1: the containers on core 1, this
  benchmark and all it starts on core 0), 5 alternating rounds, medians, wall s / controller
  core CPU-s / hosts' core CPU-s: ansible-playbook 3.87 / 1.33 / 3.10, reading first 4.47 /
  1.84 / 3.32, one run per batch 6.08 / 3.17 / 3.32, fleetgate 7.76 / 5.01 / 3.30 (ratio
  1.97, 1.28 to one run per batch). Plain Ansible is bound by its hosts, fleetgate by its
  controller; the hosts' work is the same. A shared-core run right after: 3.01 s plain, 5.04 s
  fleetgate, ratio 1.68 (1.105 to one run per batch).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from timing import busy_core_s, measured_run, timed_run

from fleetgate.lab.paths import LabPaths
from fleetgate.rollout import hostread
from fleetgate.system.podman import Podman

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FLEETGATE = str(BIN / "fleetgate")
LAYOUT = [1, 3, 16]
READ_PLAY = "Read host state before the change"  # playbooks/rollout-before.yml


def read_and_change(root: Path) -> Path:
    """The no-op change with each host's `before` reading ahead of it, in one play with the
    same `serial`: what fleetgate has the hosts do, run by plain ansible-playbook. It is the
    floor for any controller that reads every host before its change."""
    path = root / "read-and-change.yml"
    path.write_text(yaml.safe_dump([{
        "name": "Read, then the no-op change", "hosts": "all", "gather_facts": False,
        "serial": "{{ noop_serial }}",
        "tasks": [{"name": "Read the host", "ansible.builtin.raw":
                   "{{ fleetgate_hostread_command }}", "args": {"executable": "/bin/sh"},
                   "changed_when": False},
                  {"name": "Reach the host and run a module on it",
                   "ansible.builtin.ping": {}}]}], sort_keys=False))
    return path


def _run_marks(bdir: Path) -> dict[str, float]:
    """When the batch's own Ansible run started, reached the change's play, and ended, from
    its events (ansible-runner's `created` stamps)."""
    marks: dict[str, float] = {}
    for path in bdir.glob("runs/*/events.jsonl"):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            t = dt.datetime.fromisoformat(e["created"]).timestamp() if e.get("created") else None
            if t is None:
                continue
            name, play = e.get("event"), (e.get("event_data") or {}).get("play")
            if name == "playbook_on_start":
                marks.setdefault("start", t)
            elif name == "playbook_on_play_start" and play != READ_PLAY:
                marks.setdefault("change", t)
            elif name == "playbook_on_stats":
                marks["stats"] = t
    return marks


def phases(db: Path, rid: str, t0: float, t1: float) -> dict[str, float]:
    """Where one rollout's wall seconds went, from the journal's own timestamps and each
    batch's Ansible events:
    - start_s: the CLI up to the journal's first row (imports, inventory, the plan artifact);
    - before_probe_s: a batch chosen -> its batch row (where the `before` reading ran in a
      run of its own, as it still does for batches on execution nodes);
    - ansible_start_s: the batch row -> its ansible-playbook's first event (the worker taking
      the batch, ansible-runner and ansible-playbook starting); 0 for a batch whose run was
      started ahead of its turn and held (rollout/ahead.py), counted in `ahead`;
    - reading_s: the batch's run from its start, or its row for a run started ahead, to the
      change's play (the release, the `before` reading and the wait on the journal);
    - change_s: the change's play to the run's recap;
    - ansible_exit_s: the recap -> the batch's done row (Ansible and the worker exiting, the
      controller noticing);
    - finish_s: the last row -> the CLI's exit."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT kind, ts, data FROM events WHERE rollout_id=? AND kind IN "
                           "('rollout', 'batch') ORDER BY seq", (rid,)).fetchall()
    finally:
        con.close()
    out = dict.fromkeys(("before_probe_s", "ansible_start_s", "reading_s", "change_s",
                         "ansible_exit_s", "ahead"), 0.0)
    out["start_s"] = rows[0][1] - t0
    chosen = started = rows[0][1]
    for kind, ts, text in rows:
        data = json.loads(text)
        if kind == "rollout" and data.get("phase") == "applying":
            chosen = ts
        elif kind == "batch" and data.get("state") == "started":
            started = ts
            out["before_probe_s"] += ts - chosen
        elif kind == "batch" and data.get("state") == "done":
            m = _run_marks(Path(data["dir"]))
            change = m.get("change", m["start"])
            out["ansible_start_s"] += max(0.0, m["start"] - started)
            out["reading_s"] += change - max(m["start"], started)
            out["ahead"] += m["start"] < started
            out["change_s"] += m["stats"] - change
            out["ansible_exit_s"] += ts - m["stats"]
    out["finish_s"] = t1 - rows[-1][1]
    return {k: round(v, 2) for k, v in out.items()}


def _measure(row: dict[str, Any], name: str, argvs: list[list[str]], env: dict[str, str],
             split: dict[str, list[int]] | None = None) -> None:
    """The runs' wall seconds and the machine's busy CPU seconds meanwhile, one run after the
    other, summed into `row`; with the cores split (split_cores), also each side's."""
    before = busy_core_s()
    runs = [measured_run(argv, env) for argv in argvs]
    after = busy_core_s()
    row[f"{name}_s"] = round(sum(w for w, _ in runs), 2)
    row[f"{name}_cpu_s"] = round(sum(c for _, c in runs), 2)
    for side, cores in (split or {}).items():
        row[f"{name}_{side}_cpu_s"] = round(sum(after[c] - before[c] for c in cores), 2)


def per_batch(play: list[str], playbook: Path, inventory: Path) -> list[list[str]]:
    """The read-and-change play once per batch, each its own ansible-playbook run limited to
    the batch's hosts, one after the other: what a controller pays that runs each batch as a
    run of its own, as one must for a change playbook it does not write (a play's `hosts:` is
    the playbook's, and `serial` a keyword of its play), with no run started ahead."""
    hosts = list(yaml.safe_load(inventory.read_text())["all"]["hosts"])
    cuts = [sum(LAYOUT[:i]) for i in range(len(LAYOUT) + 1)]
    return [[*play, "--limit", ",".join(hosts[a:b]), "-e", json.dumps({"noop_serial": b - a}),
             str(playbook)] for a, b in itertools.pairwise(cuts)]


def split_cores(lab: Path, host_cores: int) -> dict[str, list[int]]:
    """Put the lab's hosts on the last `host_cores` cores and this benchmark, with all it
    starts (Ansible, fleetgate, ssh and its control masters), on the others: a controller
    whose hosts do not share its cores, as on a fleet. The containers' cpusets are cgroup
    limits that podman sets (`podman update`); this process's affinity is inherited by every
    process it starts."""
    cores = sorted(os.sched_getaffinity(0))
    if not 0 < host_cores < len(cores):
        raise SystemExit(f"--host-cores: {host_cores} is not between 1 and {len(cores) - 1} "
                         f"(this machine has {len(cores)} cores)")
    hosts, controller = cores[-host_cores:], cores[:-host_cores]
    paths = LabPaths(lab)
    podman = Podman(paths.containers_conf)
    for name in podman.containers_with_label(paths.lab_id):  # `podman update` takes one
        podman("update", "--cpuset-cpus", ",".join(map(str, hosts)), name)
    os.sched_setaffinity(0, controller)
    return {"hosts": hosts, "controller": controller}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="another fleetgate checkout (same venv) to run side by side, e.g. "
                         "a `git worktree` of the commit before a change")
    ap.add_argument("--host-cores", type=int, metavar="N",
                    help="run the lab's hosts on the last N cores and the controller side "
                         "on the rest (split_cores); default: all share every core")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "FLEETGATE_STATE_DIR": str(root),
               "FLEETGATE_LAB_DIR": str(root / "lab"), "PATH": f"{BIN}:{os.environ['PATH']}"}
        base_env = ({**env, "FLEETGATE_HOME": str(args.baseline_tree.resolve()),
                     "PYTHONPATH": str(args.baseline_tree.resolve() / "python")}
                    if args.baseline_tree else None)
        n = sum(LAYOUT)
        timed_run([FLEETGATE, "lab", "up", "--containers", str(n)], env)
        inventory = root / "lab" / "inventory.yml"
        try:
            split = split_cores(root / "lab", args.host_cores) if args.host_cores else None
            plan = root / "noop.plan.yml"
            plan.write_text(yaml.safe_dump({
                "name": "noop", "targets": {"inventory": str(inventory), "class": "lab-cpu"},
                "change": {"playbook": "examples/rollout/noop.yml"},
                "waves": {"steps": [1, 4, "100%"]}, "concurrency": n,
                "budgets": {"per_wave": {"max_failed": "100%"},
                            "total": {"max_failed": "100%"}},
                "gates": {"checks": []}}))
            ansible_env = {**env, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                           "ANSIBLE_FORKS": str(n), "ANSIBLE_PIPELINING": "True",
                           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(root / "cp")}
            serial = json.dumps({"noop_serial": LAYOUT,
                                 **hostread.extravars(hostread.Wanted())})
            play = [str(BIN / "ansible-playbook"), "-i", str(inventory), "-e", serial]
            pb = [*play, str(REPO / "examples/rollout/noop.yml")]
            read_first = read_and_change(root)
            pb_read = [*play, str(read_first)]
            batches = per_batch(play, read_first, inventory)
            timed_run(pb, ansible_env)  # warm: host keys, control sockets, page cache
            rows = []
            for i in range(args.runs):
                row: dict[str, Any] = {}
                _measure(row, "ansible_playbook", [pb], ansible_env, split)
                _measure(row, "ansible_read", [pb_read], ansible_env, split)
                _measure(row, "ansible_per_batch", batches, ansible_env, split)
                if base_env is not None:
                    _measure(row, "baseline", [[FLEETGATE, "rollout", "start", str(plan),
                                                "--id", f"base-{i}"]], base_env, split)
                    row["baseline_ratio"] = round(row["baseline_s"] / row["ansible_playbook_s"], 3)
                t0 = time.time()
                _measure(row, "fleetgate", [[FLEETGATE, "rollout", "start", str(plan), "--id",
                                             f"noop-{i}"]], env, split)
                row.update(ratio=round(row["fleetgate_s"] / row["ansible_playbook_s"], 3),
                           ratio_to_read=round(row["fleetgate_s"] / row["ansible_read_s"], 3),
                           ratio_to_per_batch=round(row["fleetgate_s"]
                                                    / row["ansible_per_batch_s"], 3),
                           cpu_ratio=round(row["fleetgate_cpu_s"] / row["ansible_playbook_cpu_s"],
                                           3),
                           phases=phases(root / "rollouts" / "journal.db", f"noop-{i}", t0,
                                         time.time()))
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            timed_run([FLEETGATE, "lab", "down"], env)
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "phases"}
    print(json.dumps({"hosts": n, "layout": LAYOUT, "cores": os.cpu_count(),
                      "split_cores": split, "runs": rows,
                      **{f"median_{k}": v for k, v in medians.items()},
                      "median_phases_s": {k: statistics.median(r["phases"][k] for r in rows)
                                          for k in rows[0]["phases"]}},
                     indent=2))


if __name__ == "__main__":
    main()
