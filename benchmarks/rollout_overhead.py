"""Controller overhead: the same no-op playbook on 20 lab hosts in the same wave layout
(1, 3, then 16), run by `fleetgate rollout start` and by plain `ansible-playbook` with the
equivalent `serial: [1, 3, 16]`. Alternating runs, median ratio over 5 pairs.

fleetgate pays for what ansible-playbook does not do: resolving the inventory, the plan
artifact, one ansible-runner batch worker per wave, and a journal commit per transition.
No gates run (checks: []), so the ratio is the machinery, not the smoke suite. Each run's
`phases` split fleetgate's seconds by the journal's own timestamps (see phases()).

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
- What is left is one ansible-playbook start-up per batch for the `before` probe and one for
  the change, where plain ansible-playbook starts once for all three batches: the 1.10 target
  needs the probe folded into the batch's own run, or one long-lived Ansible run per rollout.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from timing import timed_run

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FLEETGATE = str(BIN / "fleetgate")
LAYOUT = [1, 3, 16]


def phases(db: Path, rid: str, t0: float, t1: float) -> dict[str, float]:
    """Where one rollout's wall seconds went, from the journal's own timestamps: the CLI up to
    the journal's first row (imports, ansible-inventory, the plan artifact); per batch, the
    `before` probe (batch chosen -> batch row), the worker's spawn and exit around its Ansible
    run (batch row -> done, less the worker's wall_s), the Ansible run itself (wall_s); the
    rest (the controller's finish, the CLI's exit)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT kind, ts, data FROM events WHERE rollout_id=? AND kind IN "
                           "('rollout', 'batch') ORDER BY seq", (rid,)).fetchall()
    finally:
        con.close()
    out = {"start_s": rows[0][1] - t0, "before_probe_s": 0.0, "worker_start_exit_s": 0.0,
           "ansible_run_s": 0.0}
    chosen = started = rows[0][1]
    for kind, ts, text in rows:
        data = json.loads(text)
        if kind == "rollout" and data.get("phase") == "applying":
            chosen = ts
        elif kind == "batch" and data.get("state") == "started":
            started = ts
            out["before_probe_s"] += ts - chosen
        elif kind == "batch" and data.get("state") == "done":
            wall = float(data.get("wall_s") or 0.0)
            out["ansible_run_s"] += wall
            out["worker_start_exit_s"] += ts - started - wall
    out["finish_s"] = t1 - rows[-1][1]
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "FLEETGATE_HOME": str(REPO), "FLEETGATE_STATE_DIR": str(root),
               "FLEETGATE_LAB_DIR": str(root / "lab"), "PATH": f"{BIN}:{os.environ['PATH']}"}
        n = sum(LAYOUT)
        timed_run([FLEETGATE, "lab", "up", "--containers", str(n)], env)
        inventory = root / "lab" / "inventory.yml"
        try:
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
            serial = json.dumps({"noop_serial": LAYOUT})
            pb = [str(BIN / "ansible-playbook"), "-i", str(inventory), "-e", serial,
                  str(REPO / "examples/rollout/noop.yml")]
            timed_run(pb, ansible_env)  # warm: host keys, control sockets, page cache
            rows = []
            for i in range(args.runs):
                a = timed_run(pb, ansible_env)
                t0 = time.time()
                f = timed_run([FLEETGATE, "rollout", "start", str(plan), "--id", f"noop-{i}"], env)
                rows.append({"ansible_playbook_s": round(a, 2), "fleetgate_s": round(f, 2),
                             "ratio": round(f / a, 3),
                             "phases": phases(root / "rollouts" / "journal.db", f"noop-{i}",
                                              t0, time.time())})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            timed_run([FLEETGATE, "lab", "down"], env)
    print(json.dumps({"hosts": n, "layout": LAYOUT, "runs": rows,
                      "median_ratio": statistics.median(r["ratio"] for r in rows),
                      "median_ansible_playbook_s": statistics.median(
                          r["ansible_playbook_s"] for r in rows),
                      "median_fleetgate_s": statistics.median(r["fleetgate_s"] for r in rows),
                      "median_phases_s": {k: statistics.median(r["phases"][k] for r in rows)
                                          for k in rows[0]["phases"]}},
                     indent=2))


if __name__ == "__main__":
    main()
