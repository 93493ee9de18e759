"""`run_smoke()`: the smoke suite across hosts, the API the rollout controller calls.

The hosts are dealt into at most `forks` groups, and one pytest process per group runs the
testinfra suite (python/fleetgate/smoke/suite) with `--hosts=ansible://H1,ansible://H2,...`:
a host's checks run in order, one at a time (a GEMM never shares a host with its own
all-reduce), groups run in parallel. One process per host instead costs every host a
Python, pytest, testinfra and ansible-inventory start-up (about 2 s of CPU) per gate, which
is what a controller pays most often. Each process has a deadline, the sum of its hosts'
budgets from their classes' probe timeouts; a process past it is killed and its hosts'
missing checks become inconclusive. The per-host verdicts are then compared across hosts
(fleet median, or a baseline set) and returned as one SmokeRun.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.inputs import load_json, read_input
from fleetgate.runner.inventory import (
    EXEC_NODES_GROUP,
    Inventory,
    Sources,
    ansible_env,
    host_path,
    resolve_inventory,
    stand_in_answer,
    validate_limit,
)
from fleetgate.runner.private_state import private_state_dir, private_umask
from fleetgate.runner.remote import RemoteNode, member_node
from fleetgate.smoke import remote
from fleetgate.smoke.judge import apply_relative, unmeasured
from fleetgate.smoke.model import CheckResult, SmokeRun, read_results
from fleetgate.smoke.probeset import PROBES_DIR, host_budget_s
from fleetgate.smoke.thresholds import CHECKS, Check, Plan, resolve
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass

SUITE_DIR = Path(__file__).with_name("suite")
DEFAULT_HOST_BUDGET_S = 900.0
# pytest processes a smoke run starts at most; each runs its share of the hosts in turn.
DEFAULT_FORKS = 8


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


def _groups(hosts: Sequence[str], forks: int) -> list[list[str]]:
    """`hosts` in at most `forks` groups of near-equal size, in order."""
    n = min(forks, len(hosts))
    size, extra = divmod(len(hosts), n)
    out: list[list[str]] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(hosts[start:end]))
        start = end
    return out


def new_run_dir(run_dir: Path) -> Path:
    """A smoke run's directory, with the pytest.ini its group processes are given (-c)."""
    run_dir.mkdir(parents=True)
    (run_dir / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    return run_dir


def suite_argv(hosts: Sequence[str], inventory: Path, run_dir: Path, results_file: Path,
               checks: Sequence[str], probes_dir: str, *, primed: bool = True) -> list[str]:
    """One group's pytest command. `inventory` is a stand-in from Inventory.hosts_source;
    `primed`: testinfra reads the answer that stand-in prints instead of starting
    ansible-inventory on it (smoke/session.py prime_inventory). `run_dir` was made by
    new_run_dir()."""
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
            "-c", str(run_dir / "pytest.ini"), "--rootdir", str(SUITE_DIR),
            "--hosts=" + ",".join(f"ansible://{h}" for h in hosts),
            f"--ansible-inventory={inventory}",
            *([f"--fleetgate-resolved={stand_in_answer(inventory)}"] if primed else []),
            f"--fleetgate-results={results_file}", f"--fleetgate-only={','.join(checks)}",
            f"--fleetgate-probes-dir={probes_dir}", str(SUITE_DIR)]


def run_group(name: str, hosts: list[str], inventory: Path, checks: list[Check],
              run_dir: Path, budget_s: float, probes_dir: str, classes: Path | None = None
              ) -> tuple[list[CheckResult], dict[str, Any]]:
    """One group's pytest process, here: its results and how it ended (rc, killed past its
    budget, wall time, log). An execution node runs its groups with this too
    (smoke/on_node.py)."""
    results_file = host_path(run_dir, name, ".jsonl")
    log_file = host_path(run_dir, name, ".log")
    # testinfra's ansible backend runs ssh through `/bin/sh -c` with the host's ssh args
    # pasted in unquoted (testinfra/backend/ssh.py). Only checked values get there: the host
    # names here and every connection variable passed resolve_inventory() before this run,
    # and the suite checks testinfra's own view of them again before it connects
    # (smoke/session.py connection_refusal), whatever source testinfra was given.
    argv = suite_argv(hosts, inventory, run_dir, results_file, checks, probes_dir)
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
    results = read_results(results_file)
    meta = {"rc": rc, "killed": killed, "wall_s": round(time.monotonic() - started, 3),
            "log": str(log_file), "hosts": hosts, "budget_s": round(budget_s, 3)}
    return results, meta


@private_umask()  # its run dir, logs and results are private state, like a rollout's
def run_smoke(
    inventory: Sources | Inventory,
    *,
    limit: str | None = None,
    hosts: Sequence[str] | None = None,
    node_class: str | None = None,
    only: str | Sequence[str] | None = None,
    baseline: Iterable[CheckResult] | None = None,
    forks: int = DEFAULT_FORKS,
    probes_dir: str = PROBES_DIR,
    runs_base: Path | None = None,
    classes: Path | None = None,
    skip_relative: Collection[str] = (),
    nodes: Mapping[str, RemoteNode] | None = None,
    on_nodes: Sequence[str] = (),
    owner: str | None = None,
) -> SmokeRun:
    """Run the smoke suite on every matching host in parallel; never raises for a host that
    fails or cannot be reached (those are results), only for bad input (BadInput).
    `hosts`: these inventory hosts by name, instead of a `limit` pattern; the controller's
    way, so a rollout's every batch reuses its one resolution of the inventory (a limit is
    another resolution: an ansible-inventory run).
    `skip_relative`: checks whose fleet-relative comparison a caller makes itself (a
    rollout's canary analysis judges them per host), so they are not judged twice.
    `nodes`: host -> the execution node whose worker measures it (smoke/remote.py); hosts
    without one are measured from here. `on_nodes`: these execution nodes (inventory group
    fleetgate_execution_nodes) measure every host, dealt in order (`smoke run
    --execution-node`). `owner` names the jobs' rollout on the nodes (a
    rollout's id; default: this run's own name)."""
    limit = validate_limit(limit)
    checks = parse_only(only)
    if forks < 1:
        raise BadInput("must be at least 1", source="--forks")
    if node_class is not None:
        resolve_class(node_class, classes)  # an unknown class: bad input before anything runs
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    if hosts is not None and limit is not None:
        raise ValueError("give hosts or a limit, not both")
    inv = resolve_inventory(inventory, limit)
    hostvars = inv.hostvars
    # A host a rollout planned may have left the inventory since: its checks are not-run
    # results, as any other host's that could not be measured, not an error mid-rollout.
    gone: list[str] = []
    if hosts is not None:
        gone = [h for h in hosts if h not in hostvars]
        hostvars = {h: hostvars[h] for h in hosts if h in hostvars}
        limit = ",".join(hosts)
    cache: dict[str, tuple[NodeClass, Plan]] = {}
    selected: dict[str, tuple[NodeClass, Plan] | None] = {}
    # Execution nodes run jobs for the fleet; they are never measured as part of it.
    infrastructure = {h for h, groups in inv.groups_of().items() if EXEC_NODES_GROUP in groups}
    for host, hv in hostvars.items():
        if host in infrastructure:
            continue
        cls = _class_of(hv, cache, classes)
        if node_class is not None and (cls is None or cls[0].name != node_class):
            continue
        selected[host] = cls
    if not selected and not gone:
        raise BadInput("no hosts match" + (f" class {node_class}" if node_class else ""),
                       source=inv.label, field=f"--limit {limit}" if limit else None)
    measured = {h: cls for h, cls in selected.items() if cls is not None}
    unclassed = [h for h, cls in selected.items() if cls is None]
    nodes = dict(nodes or {})
    if on_nodes:  # an unknown node is bad input before anything runs
        chosen = [member_node(inv, n, source="--execution-node", field=n)
                  for n in dict.fromkeys(on_nodes)]
        # The hosts in order, in near-equal contiguous parts, a part per node.
        for node, part in zip(chosen, _groups(list(measured), len(chosen)) if measured else [],
                              strict=False):
            nodes.update(dict.fromkeys(part, node))

    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    run_dir = (runs_base or private_state_dir() / "runs") / f"{stamp}-smoke-{uuid.uuid4().hex[:6]}"
    new_run_dir(run_dir)
    job_owner = owner or f"smoke-{stamp.lower()}-{run_dir.name[-6:]}"

    def complete(group: list[str], got: list[CheckResult], meta: dict[str, Any]
                 ) -> list[CheckResult]:
        """The group's results, with a stated one for every check the suite did not answer."""
        for host in group:
            nc, plan = measured[host]
            done = {r.check for r in got if r.host == host}
            for c in checks:
                if c in done:
                    continue
                if meta.get("lost"):
                    got.append(unmeasured(host, c, "not-run", f"the suite of its group ran on "
                                          f"execution node {meta['execution_node']}, which "
                                          f"did not return it: {meta['lost']}", nc=nc,
                                          plan=plan, evidence=meta))
                elif meta["killed"]:
                    got.append(unmeasured(host, c, "timeout", f"the suite of its group "
                                          f"({len(group)} hosts) passed its "
                                          f"{meta['budget_s']:.0f}s budget and was "
                                          "stopped", nc=nc, plan=plan, evidence=meta))
                else:
                    log = Path(meta["log"])
                    tail = log.read_text()[-600:] if log.exists() else ""
                    got.append(unmeasured(host, c, "not-run", f"the suite produced no result "
                                          f"(pytest rc {meta['rc']}): {' '.join(tail.split())}",
                                          nc=nc, plan=plan, evidence=meta))
        return got

    def budget(group: list[str]) -> float:
        return sum(host_budget_s(checks, measured[h][1]) for h in group)

    def here(name: str, group: list[str]) -> list[CheckResult]:
        return complete(group, *run_group(name, group, inv.hosts_source(run_dir, group, name),
                                           checks, run_dir, budget(group), probes_dir, classes))

    def there(node: RemoteNode, named: list[tuple[str, list[str]]]) -> list[CheckResult]:
        # One job per node for all its groups: a job costs a transmit and a worker's and an
        # ansible-playbook's start-up on the node, a group only its pytest process there.
        groups = [remote.Group(name, group, budget(group)) for name, group in named]
        out: list[CheckResult] = []
        for g, (got, meta) in zip(groups, remote.run_node(
                node, job_owner, groups, inv, run_dir, classes, checks, probes_dir), strict=True):
            out += complete(g.hosts, got, meta)
        return out

    found: list[CheckResult] = [unmeasured(h, c, "not-run", "host has no fleetgate_class")
                                for h in unclassed for c in checks]
    found += [unmeasured(h, c, "not-run", f"not in the inventory ({inv.label}) any more")
              for h in gone for c in checks]
    if measured:
        # Each executor (this machine, every node) runs at most `forks` processes; a group's
        # hosts share one executor.
        by_executor: dict[str, list[str]] = {}
        for h in measured:
            by_executor.setdefault(nodes[h].name if h in nodes else "", []).append(h)
        tasks: list[Callable[[], list[CheckResult]]] = []
        n = 0
        for executor, part in by_executor.items():
            named = [(f"group-{n + i:03d}", g) for i, g in enumerate(_groups(part, forks))]
            n += len(named)
            if executor:
                tasks.append(functools.partial(there, nodes[part[0]], named))
            else:
                tasks += [functools.partial(here, name, g) for name, g in named]
        with ThreadPoolExecutor(max_workers=len(tasks)) as pool:
            for rs in pool.map(lambda task: task(), tasks):
                found.extend(rs)
    # One host's results together, in the order of `selected`, each host's in check order.
    host_order = {h: i for i, h in enumerate([*selected, *gone])}
    check_order = {c: i for i, c in enumerate(checks)}
    found.sort(key=lambda r: (host_order.get(r.host, len(host_order)),
                              check_order.get(r.check, len(check_order))))
    results = apply_relative(found, baseline, skip=skip_relative)
    run = SmokeRun(
        schema="fleetgate.smoke.result/v1", started_at=started_at,
        finished_at=datetime.now(UTC), wall_s=round(time.monotonic() - t0, 3),
        inventory=inv.label, limit=limit, node_class=node_class, checks=checks,
        hosts=[*selected, *gone], results=results, run_dir=str(run_dir),
        execution_nodes={h: nodes[h].name for h in measured if h in nodes})
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
