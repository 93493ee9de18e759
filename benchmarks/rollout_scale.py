"""Controller bookkeeping at fleet scale: plan (ansible-inventory on a static inventory,
wave assignment with domain diversity, budgets), then the controller's journal, budget and
gate bookkeeping for every host, for 1k to 100k simulated hosts (--sizes).

The inventory's resolution is timed apart from the rest of planning (`inv_s`, not in
`plan_s`): it is Ansible's own `ansible-inventory --list` in a subprocess, with fleetgate's
vars plugin expanding every host's node class, and it grows faster than linearly (about 33 s
at 10k hosts on the 2-core CI machine). Above --inventory-upto hosts (default 10,000) it is
not run at all: INVENTORY STUB, the resolution is the inventory file's own host variables
and groups, as ansible-inventory would answer without the vars plugin's class variables
(which planning does not read), checked by the same validate_hosts. The `inventory` column
says which a row used.

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


def stub_resolution(doc: dict[str, Any], paths: tuple[Path, ...], limit: str | None) -> Any:
    """INVENTORY STUB (benchmark only, above --inventory-upto): what ansible-inventory --list
    answers for inventory(n), less the vars plugin's class variables."""
    from fleetgate.runner.inventory import Inventory, validate_hosts

    hosts = doc["all"]["hosts"]
    common = doc["all"]["vars"]
    answer = {"_meta": {"hostvars": {h: {**common, **hv} for h, hv in hosts.items()}},
              "all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": list(hosts)}}
    inv = Inventory(paths, limit, answer)
    validate_hosts(inv)
    return inv


def one_size(n: int, inventory_upto: int) -> dict[str, Any]:
    from fleetgate.rollout import artifact as artifacts
    from fleetgate.rollout import before, engine, hoststate, waves
    from fleetgate.rollout.journal import Journal
    from fleetgate.rollout.status import summary
    from fleetgate.smoke.model import CheckResult, SmokeRun

    class StubController(engine.Controller):
        """EXECUTOR STUB (benchmark only): batches and smoke runs answer instantly."""

        PREWARM = False

        def _stage(self, kind: str, hosts: list[str], k: int, playbook_rel: str,
                   extravars: dict[str, Any], timeout: int, classes: str | None = None,
                   secrets: Any = None, *, read_before: bool = False
                   ) -> dict[str, dict[str, Any]] | None:
            bid = f"{kind}-{uuid.uuid4().hex[:8]}"
            self.j.start_batch(bid, self.rid, k, kind, hosts, self.dir)
            self.j.batch_spawned(bid, self.rid, os.getpid())
            if read_before:  # what a real batch's worker journals from its run's reading
                before.journal(self.j, self.rid, dict.fromkeys(hosts, ({"kernel": "stub"},
                                                                       None)), k)
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
        inv_doc = inventory(n)
        inv.write_text(yaml.safe_dump(inv_doc))
        plan = root / "plan.yml"
        plan.write_text(yaml.safe_dump({
            "name": "scale", "targets": {"inventory": str(inv), "class": "lab-cpu"},
            "change": {"playbook": "examples/rollout/noop.yml"},
            "waves": {"steps": [1, 10, "1%", "10%", "100%"], "diversity": ["zone", "rack"]},
            "concurrency": 100,
            "budgets": {"per_wave": {"max_failed": "5%"}, "total": {"max_failed": "2%"},
                        "per_domain": {"key": "rack", "max_failed": 2}},
            "gates": {"checks": ["discovery", "stack"]}}))
        from fleetgate.runner.inventory import resolve_inventory
        t0 = time.perf_counter()
        if n <= inventory_upto:
            # ansible-inventory itself, timed alone; planning below reads its cached answer.
            resolved = resolve_inventory(inv.resolve(), None)
            source = "ansible-inventory"
        else:
            resolved = stub_resolution(inv_doc, (inv.resolve(),), None)
            source = "stub"
        t_inv = time.perf_counter() - t0
        setattr(waves, "resolve_inventory",  # noqa: B010  # the answer just timed
                lambda _inventory, limit: resolved if limit is None else None)
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
            "inventory": source, "inv_s": round(t_inv, 2),
            "plan_s": round(t_plan, 2), "run_s": round(t_run, 2),
            "status_s": round(t_status, 3), "healthy": s["counts"].get("healthy", 0),
            "journal_events": events, "journal_mb": round(size_mb, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,2000,5000,10000,20000,50000,100000",
                    help="host counts, comma-separated (default: %(default)s)")
    ap.add_argument("--inventory-upto", type=int, default=10_000,
                    help="resolve the inventory with ansible-inventory up to this many hosts; "
                    "above, the INVENTORY STUB (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="the rows as JSON, not a table")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one, args.inventory_upto)))
        return
    rows = []
    for n in map(int, args.sizes.split(",")):
        proc = subprocess.run([sys.executable, __file__, "--one", str(n), "--inventory-upto",
                               str(args.inventory_upto)], capture_output=True,
                              text=True, check=True, cwd=REPO)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        r["per_host_us"] = round(1e6 * (r["plan_s"] + r["run_s"]) / r["hosts"])
        r["rss_per_host_kb"] = round(1024 * r["peak_rss_mb"] / r["hosts"], 1)
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            if len(rows) == 1:
                print(HEADER, flush=True)
            print(line(r), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


HEADER = (f"{'hosts':>7} {'inventory':>17} {'inv s':>7} {'plan s':>7} {'run s':>7} "
          f"{'plan+run s':>10} {'peak RSS MB':>11} {'us/host':>8} {'state':>9} {'events':>7}")


def line(r: dict[str, Any]) -> str:
    """One row of the table: inv s is the inventory's resolution, apart from plan s;
    us/host is (plan s + run s) per host."""
    return (f"{r['hosts']:>7} {r['inventory']:>17} {r['inv_s']:>7.2f} {r['plan_s']:>7.2f} "
            f"{r['run_s']:>7.2f} {r['plan_s'] + r['run_s']:>10.2f} {r['peak_rss_mb']:>11.1f} "
            f"{r['per_host_us']:>8} {r['state']:>9} {r['journal_events']:>7}")


if __name__ == "__main__":
    main()
