"""`run_smoke()`: the smoke suite across hosts, the API the rollout controller calls.

One pytest process per host runs the testinfra suite (python/fleetgate/smoke/suite) with
`--hosts=ansible://HOST`, so each host's checks run in order (a GEMM never shares a host with
its own all-reduce) while hosts run in parallel, up to `forks` at a time. Each process has a
deadline derived from its class's probe timeouts; a process past it is killed and its
missing checks become inconclusive. The per-host verdicts are then compared across hosts
(fleet median, or a baseline set) and returned as one SmokeRun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.inputs import load_json, read_input
from fleetgate.runner.inventory import (
    Inventory,
    Sources,
    ansible_env,
    host_path,
    resolve_inventory,
    validate_limit,
)
from fleetgate.runner.private_state import private_state_dir, private_umask
from fleetgate.smoke.judge import apply_relative, unmeasured
from fleetgate.smoke.model import CheckResult, SmokeRun
from fleetgate.smoke.probeset import PROBES_DIR, host_budget_s
from fleetgate.smoke.thresholds import CHECKS, Check, Plan, resolve
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass

SUITE_DIR = Path(__file__).with_name("suite")
DEFAULT_HOST_BUDGET_S = 900.0


def parse_only(only: str | Sequence[str] | None) -> list[Check]:
    if only is None:
        return list(CHECKS)
    names = [s.strip() for s in (only.split(",") if isinstance(only, str) else only)]
    unknown = [n for n in names if n not in CHECKS]
    if unknown or not names or "" in names:
        raise BadInput(f"unknown check {', '.join(unknown) or '(empty)'} "
                       f"(known: {', '.join(CHECKS)})", source="--only")
    return [c for c in CHECKS if c in names]


def _class_of(hv: dict[str, Any], cache: dict[str, tuple[NodeClass, Plan]],
              classes: Path | None = None) -> tuple[NodeClass, Plan] | None:
    name = hv.get("fleetgate_class")
    if not name:
        return None
    if name not in cache:
        _, nc = resolve_class(str(name), classes)
        cache[name] = (nc, resolve(nc))
    return cache[name]


def _run_host(host: str, inventory: Path, checks: list[Check], run_dir: Path,
              budget_s: float, probes_dir: str, classes: Path | None = None
              ) -> tuple[list[CheckResult], dict[str, Any]]:
    results_file = host_path(run_dir, host, ".jsonl")
    log_file = host_path(run_dir, host, ".log")
    # testinfra's ansible backend runs ssh through `/bin/sh -c` with the host's ssh args
    # pasted in unquoted (testinfra/backend/ssh.py). Only checked values get there: the host
    # name here and every connection variable passed resolve_inventory() before this run,
    # and the suite checks testinfra's own view of them again before it connects
    # (smoke/session.py connection_refusal), since a dynamic source is asked a second time.
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
            "-c", str(run_dir / "pytest.ini"), "--rootdir", str(SUITE_DIR),
            f"--hosts=ansible://{host}", f"--ansible-inventory={inventory}",
            f"--fleetgate-results={results_file}", f"--fleetgate-only={','.join(checks)}",
            f"--fleetgate-probes-dir={probes_dir}", str(SUITE_DIR)]
    started = time.monotonic()
    killed = False
    with log_file.open("w") as log:
        env = ansible_env()
        if classes is not None:  # the suite judges the host against this class version
            env["FLEETGATE_CLASSES_DIR"] = str(classes)
        # No stdin, as for ansible-inventory (runner/inventory.py): testinfra's Ansible
        # backend refuses a non-blocking one.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=run_dir,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            killed = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    results: list[CheckResult] = []
    if results_file.exists():
        for line in results_file.read_text().splitlines():
            if line.strip():
                results.append(CheckResult.model_validate_json(line))
    meta = {"rc": rc, "killed": killed, "wall_s": round(time.monotonic() - started, 3),
            "log": str(log_file)}
    return results, meta


@private_umask()  # its run dir, logs and results are private state, like a rollout's
def run_smoke(
    inventory: Sources | Inventory,
    *,
    limit: str | None = None,
    node_class: str | None = None,
    only: str | Sequence[str] | None = None,
    baseline: Iterable[CheckResult] | None = None,
    forks: int = 20,
    probes_dir: str = PROBES_DIR,
    runs_base: Path | None = None,
    classes: Path | None = None,
    skip_relative: Collection[str] = (),
) -> SmokeRun:
    """Run the smoke suite on every matching host in parallel; never raises for a host that
    fails or cannot be reached (those are results), only for bad input (BadInput).
    `skip_relative`: checks whose fleet-relative comparison a caller makes itself (a
    rollout's canary analysis judges them per host), so they are not judged twice."""
    limit = validate_limit(limit)
    checks = parse_only(only)
    if forks < 1:
        raise BadInput("must be at least 1", source="--forks")
    if node_class is not None:
        resolve_class(node_class, classes)  # an unknown class: bad input before anything runs
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    inv = resolve_inventory(inventory, limit)
    hostvars = inv.hostvars
    cache: dict[str, tuple[NodeClass, Plan]] = {}
    selected: dict[str, tuple[NodeClass, Plan] | None] = {}
    for host, hv in hostvars.items():
        cls = _class_of(hv, cache, classes)
        if node_class is not None and (cls is None or cls[0].name != node_class):
            continue
        selected[host] = cls
    if not selected:
        raise BadInput("no hosts match" + (f" class {node_class}" if node_class else ""),
                       source=inv.label, field=f"--limit {limit}" if limit else None)
    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    run_dir = (runs_base or private_state_dir() / "runs") / f"{stamp}-smoke-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(parents=True)
    (run_dir / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")

    def one(host: str) -> list[CheckResult]:
        cls = selected[host]
        if cls is None:
            return [unmeasured(host, c, "not-run", "host has no fleetgate_class") for c in checks]
        nc, plan = cls
        got, meta = _run_host(host, inv.host_source(run_dir, host), checks, run_dir,
                              host_budget_s(checks, plan), probes_dir, classes)
        done = {r.check for r in got}
        for c in checks:
            if c in done:
                continue
            if meta["killed"]:
                got.append(unmeasured(host, c, "timeout", f"the host's suite passed its "
                                      f"{host_budget_s(checks, plan):.0f}s budget and was "
                                      "stopped", nc=nc, plan=plan, evidence=meta))
            else:
                tail = Path(meta["log"]).read_text()[-600:] if Path(meta["log"]).exists() else ""
                got.append(unmeasured(host, c, "not-run", f"the suite produced no result "
                                      f"(pytest rc {meta['rc']}): {' '.join(tail.split())}",
                                      nc=nc, plan=plan, evidence=meta))
        order = {c: i for i, c in enumerate(checks)}
        return sorted(got, key=lambda r: order[r.check])

    with ThreadPoolExecutor(max_workers=min(forks, len(selected))) as pool:
        per_host = list(pool.map(one, list(selected)))
    results = apply_relative([r for rs in per_host for r in rs], baseline, skip=skip_relative)
    run = SmokeRun(
        schema="fleetgate.smoke.result/v1", started_at=started_at,
        finished_at=datetime.now(UTC), wall_s=round(time.monotonic() - t0, 3),
        inventory=inv.label, limit=limit, node_class=node_class, checks=checks,
        hosts=list(selected), results=results, run_dir=str(run_dir))
    (run_dir / "result.json").write_text(run.to_json())
    return run


def load_results(path: Path) -> list[CheckResult]:
    """Results of an earlier run (`smoke run --json` output), e.g. as a baseline."""
    doc = load_json(read_input(path), path, what="not a smoke result file")
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise BadInput("not a smoke result file (no results list)", source=path)
    try:
        return [CheckResult.model_validate(r) for r in doc["results"]]
    except ValueError as exc:
        raise BadInput(f"bad result entry: {' '.join(str(exc).split())[:200]}",
                       source=path) from None
