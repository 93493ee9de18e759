"""Controller overhead: the same no-op playbook on 20 lab hosts in the same wave layout
(1, 3, then 16), run by `fleetgate rollout start` and by plain `ansible-playbook` with the
equivalent `serial: [1, 3, 16]`. Alternating runs, median ratio over 5 pairs.

fleetgate pays for what ansible-playbook does not do: resolving the inventory, the plan
artifact, one ansible-runner batch worker per wave, and a journal commit per transition.
No gates run (checks: []), so the ratio is the machinery, not the smoke suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from timing import timed_run

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FLEETGATE = str(BIN / "fleetgate")
LAYOUT = [1, 3, 16]


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
                f = timed_run([FLEETGATE, "rollout", "start", str(plan), "--id", f"noop-{i}"], env)
                rows.append({"ansible_playbook_s": round(a, 2), "fleetgate_s": round(f, 2),
                             "ratio": round(f / a, 3)})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            timed_run([FLEETGATE, "lab", "down"], env)
    print(json.dumps({"hosts": n, "layout": LAYOUT, "runs": rows,
                      "median_ratio": statistics.median(r["ratio"] for r in rows),
                      "median_ansible_playbook_s": statistics.median(
                          r["ansible_playbook_s"] for r in rows),
                      "median_fleetgate_s": statistics.median(r["fleetgate_s"] for r in rows)},
                     indent=2))


if __name__ == "__main__":
    main()
