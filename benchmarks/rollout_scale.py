"""Controller bookkeeping at fleet scale: plan (ansible-inventory on a static inventory,
wave assignment with domain diversity, budgets), then the controller's journal, budget and
gate bookkeeping for every host, for 1k, 2k, 5k and 10k simulated hosts.

EXECUTOR STUB: no host is contacted. `StubController` replaces the three calls that reach
hosts (the batch worker running Ansible, the smoke suite, and the host-state probe that
records what a host ran before its change) with instant "ok"/"pass" answers; everything
else (journal transactions and fsyncs, leases, budgets, next_batch, safe points, status) is
the real code. This stub exists only here.

Each size runs in a fresh process, so peak RSS is that size's own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def inventory(n: int) -> dict[str, Any]:
    racks = max(4, n // 40)
    return {"all": {"vars": {"ansible_host": "127.0.0.1"},
                    "hosts": {f"gpu{i:05d}": {"fleetgate_class": "lab-cpu",
                                              "rack": f"rack{i % racks:03d}",
                                              "zone": f"zone{i % racks % 4}"}
                              for i in range(n)}}}


def one_size(n: int) -> dict[str, Any]:
    from fleetgate.rollout import artifact as artifacts
    from fleetgate.rollout import engine, hoststate
    from fleetgate.rollout.journal import Journal
    from fleetgate.rollout.status import summary
    from fleetgate.smoke.model import CheckResult, SmokeRun

    class StubController(engine.Controller):
        """EXECUTOR STUB (benchmark only): batches and smoke runs answer instantly."""

        def _stage(self, kind: str, hosts: list[str], k: int, playbook_rel: str,
                   extravars: dict[str, Any], timeout: int, classes: str | None = None,
                   secrets: Any = None) -> dict[str, dict[str, Any]] | None:
            bid = f"{kind}-{uuid.uuid4().hex[:8]}"
            self.j.start_batch(bid, self.rid, k, kind, hosts, self.dir)
            self.j.batch_spawned(bid, self.rid, os.getpid())
            doc = {"rc": 0, "hosts": {h: {"outcome": "changed", "task": "", "message": ""}
                                      for h in hosts}}
            self._close_batch(bid, k, self.dir, doc)
            return self._outcomes(doc, hosts)

    def stub_smoke(inventory: Path, *, limit: str | None = None, only: Any = None,
                   **_: Any) -> SmokeRun:
        hosts = (limit or "").split(",")
        checks = list(only or ["discovery"])
        now = datetime.now(UTC)
        return SmokeRun(started_at=now, finished_at=now, wall_s=0.0, inventory=str(inventory),
                        limit=limit, node_class="lab-cpu", checks=checks, hosts=hosts,
                        results=[CheckResult(host=h, check=c, status="pass", probe_status="ok",
                                             reason="stub", node_class="lab-cpu")
                                 for h in hosts for c in checks])

    def stub_probe(inventory: Path, hosts: list[str], targets: Any, **_: Any
                   ) -> tuple[dict[str, Any], dict[str, str]]:
        return {h: {"kernel": "stub"} for h in hosts}, {}

    setattr(engine, "run_smoke", stub_smoke)  # noqa: B010  # the stub, see module doc
    setattr(hoststate, "probe", stub_probe)  # noqa: B010  # likewise: it reaches hosts

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["FLEETGATE_STATE_DIR"] = str(root)
        inv = root / "inventory.yml"
        inv.write_text(yaml.safe_dump(inventory(n)))
        plan = root / "plan.yml"
        plan.write_text(yaml.safe_dump({
            "name": "scale", "targets": {"inventory": str(inv), "class": "lab-cpu"},
            "change": {"playbook": "examples/rollout/noop.yml"},
            "waves": {"steps": [1, 10, "1%", "10%", "100%"], "diversity": ["zone", "rack"]},
            "concurrency": 100,
            "budgets": {"per_wave": {"max_failed": "5%"}, "total": {"max_failed": "2%"},
                        "per_domain": {"key": "rack", "max_failed": 2}},
            "gates": {"checks": ["discovery", "stack"]}}))
        t0 = time.perf_counter()
        doc = artifacts.build(plan, None)
        t_plan = time.perf_counter() - t0
        j = Journal()
        t1 = time.perf_counter()
        j.create_rollout("scale-1", "scale", doc["inventory"], doc, doc["waves"])
        state = StubController(j, "scale-1").run()
        t_run = time.perf_counter() - t1
        t2 = time.perf_counter()
        s = summary(j, "scale-1")
        t_status = time.perf_counter() - t2
        events = j.query("SELECT COUNT(*) FROM events")[0][0]
        size_mb = (root / "rollouts" / "journal.db").stat().st_size / 2**20
    return {"hosts": n, "state": state, "waves": [len(w) for w in doc["waves"]],
            "plan_s": round(t_plan, 2), "run_s": round(t_run, 2),
            "status_s": round(t_status, 3), "healthy": s["counts"].get("healthy", 0),
            "journal_events": events, "journal_mb": round(size_mb, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,2000,5000,10000")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    rows = []
    for n in map(int, args.sizes.split(",")):
        proc = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True,
                              text=True, check=True, cwd=REPO)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    for r in rows:
        r["run_per_host_ms"] = round(1000 * r["run_s"] / r["hosts"], 2)
        r["run_vs_first"] = round(r["run_s"] / base["run_s"], 2)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
