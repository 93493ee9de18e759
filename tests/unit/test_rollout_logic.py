"""Pure logic of the rollout controller: plan schema, wave assignment, budgets, window, and the
journal and lease on a real SQLite file. The controller on real hosts is
tests/integration/test_rollout.py."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.rollout import budgets
from fleetgate.rollout.journal import HostRow, Journal
from fleetgate.rollout.lease import Lease, LeaseHeld
from fleetgate.rollout.plan import RolloutPlan, Window, budget_count, load_plan
from fleetgate.rollout.waves import Assignment, Host, assign, step_sizes
from fleetgate.spec.loader import load_class
from tests.conftest import REPO, fleetgate
from tests.fixtures.rollout.plans import minimal_plan

BASE = minimal_plan("unit")


def plan(**over: Any) -> RolloutPlan:
    return RolloutPlan.model_validate({**BASE, **over})


def fleet(n: int, racks: int = 3) -> dict[str, Host]:
    return {f"h{i:02d}": Host(f"h{i:02d}", "lab-cpu",
                              {"rack": f"r{i % racks}", "zone": f"z{(i % racks) // 2}"},
                              ("pool_canary",) if i == 0 else ("pool_wave1",))
            for i in range(n)}


def rows(a: Assignment, states: dict[str, str] | None = None) -> dict[str, HostRow]:
    states = states or {}
    return {h: HostRow(h, a.wave_of(h), states.get(h, "pending"), "", 0, 0.0) for h in a.hosts}


# ------------------------------------------------------------------------------ plan schema

def write_plan(tmp_path: Path, doc: dict[str, Any]) -> Path:
    p = tmp_path / "plan.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


BAD_PLANS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown key", {**BASE, "concurency": 3}, "concurency"),
    ("both wave kinds", {**BASE, "waves": {"pools": ["a"], "steps": [1]}}, "waves"),
    ("budget word", {**BASE, "budgets": {"total": {"max_failed": "lots"}}},
     "budgets.total.max_failed"),
    ("negative budget", {**BASE, "budgets": {"per_wave": {"max_failed": -1}}},
     "budgets.per_wave.max_failed"),
    ("shell in extra var", {**BASE, "change": {"playbook": "examples/rollout/stamp-version.yml",
                                               "extra_vars": {"v": "1; rm -rf /"}}},
     "change"),
    ("playbook outside repo", {**BASE, "change": {"playbook": "../../etc/x.yml"}},
     "change.playbook"),
    ("missing playbook", {**BASE, "change": {"playbook": "playbooks/nope.yml"}},
     "change.playbook"),
    ("rollback mode without rollback", {**BASE, "on_failure": "rollback"}, "(top level)"),
    ("bad window time", {**BASE, "window": {"start": "25:00", "end": "06:00"}},
     "window.start"),
    ("bad time zone", {**BASE, "window": {"start": "22:00", "end": "06:00",
                                          "timezone": "Mars/Olympus"}}, "window"),
    ("unknown gate", {**BASE, "gates": {"checks": ["gemm", "vibes"]}}, "gates.checks"),
    ("pattern with space", {**BASE, "targets": {"inventory": "i.yml",
                                                "patterns": ["a b"]}}, "targets.patterns"),
    ("concurrency zero", {**BASE, "concurrency": 0}, "concurrency"),
    ("step zero", {**BASE, "waves": {"steps": [0, "100%"]}}, "waves.steps"),
    ("target path relative", {**BASE, "change": {
        "playbook": "examples/rollout/stamp-version.yml",
        "target": {"files": {"etc/x": "1"}}}}, "change.target.files"),
    ("budget over 100%", {**BASE, "budgets": {"total": {"max_failed": "150%"}}},
     "budgets.total.max_failed"),
    ("step over 100%", {**BASE, "waves": {"steps": [1, "250%"]}}, "waves.steps"),
    ("empty pools", {**BASE, "waves": {"pools": []}}, "waves"),
    ("empty steps", {**BASE, "waves": {"steps": []}}, "waves"),
    ("window day", {**BASE, "window": {"start": "22:00", "end": "06:00", "days": ["fun"]}},
     "window.days"),
    ("window not a time", {**BASE, "window": {"start": "late", "end": "06:00"}},
     "window.start"),
    ("canary unknown check", {**BASE, "gates": {"baseline_hosts": 2}, "canary": {
        "metrics": [{"name": "vibes.level", "direction": "higher"}]}}, "(top level)"),
    ("canary without baseline hosts", {**BASE, "canary": {
        "metrics": [{"name": "gemm.tflops", "direction": "higher"}]}}, "(top level)"),
    ("canary bad direction", {**BASE, "gates": {"baseline_hosts": 2}, "canary": {
        "metrics": [{"name": "gemm.tflops", "direction": "up"}]}}, "canary.metrics"),
    ("approval wave zero", {**BASE, "approvals": {"before_waves": [0]}},
     "approvals.before_waves"),
    ("class dir outside repo", {**BASE, "change": {
        "playbook": "examples/rollout/stamp-version.yml", "classes": "/etc"}},
     "change.classes"),
    ("from_class without a class", {**BASE, "targets": {"inventory": "inv.yml"}, "change": {
        "playbook": "examples/rollout/stamp-version.yml", "target": {"from_class": True}}},
     "change.target.from_class"),
    ("from_class, class not in its directory", {**BASE, "targets": {
        "inventory": "inv.yml", "class": "lab-vm"}, "change": {
        "playbook": "playbooks/kernel-update.yml", "classes": "examples/bad-blas/classes",
        "target": {"from_class": True}}}, "change.target.from_class"),
    ("from_class contradicted", {**BASE, "targets": {"inventory": "inv.yml", "class": "lab-vm"},
                                 "change": {
        "playbook": "playbooks/kernel-update.yml", "classes": "examples/kernel-update/classes",
        "target": {"from_class": True, "kernel_release": "6.1.0-1-cloud-amd64"}}},
     "change.target.kernel_release"),
    ("from_class, unknown class", {**BASE, "targets": {
        "inventory": "inv.yml", "class": "no-such-class"}, "change": {
        "playbook": "examples/rollout/stamp-version.yml", "target": {"from_class": True}}},
     "change.target.from_class: targets.class: unknown class 'no-such-class'"),
    ("from_class version contradicted", {**BASE, "rollback": {
        "playbook": "playbooks/apply-class.yml",
        "target": {"from_class": True, "manifest": {"class_version": 7}}}},
     "rollback.target.manifest.class_version"),
]


@pytest.mark.parametrize(("what", "doc", "field"), BAD_PLANS, ids=[b[0] for b in BAD_PLANS])
def test_bad_plan_is_one_line_naming_file_and_field(tmp_path: Path, what: str,
                                                    doc: dict[str, Any], field: str) -> None:
    p = write_plan(tmp_path, doc)
    with pytest.raises(BadInput) as exc:
        load_plan(p)
    msg = exc.value.one_line()
    assert str(p) in msg and field in msg and "\n" not in msg, (what, msg)


@pytest.mark.parametrize(("over", "field", "reason"), [
    ({"waves": {"steps": [1, "150%"]}}, "waves.steps[1]", "150% is over 100%"),
    ({"waves": {"steps": [0, "50%"]}}, "waves.steps[0]",
     "0 is not allowed: a step is a host count"),
    ({"waves": {"steps": ["half"]}}, "waves.steps[0]", "'half' is not allowed: a step is"),
    ({"budgets": {"total": {"max_failed": -1}}}, "budgets.total.max_failed",
     "-1 is not allowed: a failure budget is a count (0, 2) or a percentage"),
    ({"budgets": {"total": {"max_failed": "lots"}}}, "budgets.total.max_failed",
     "'lots' is not allowed: a failure budget"),
    ({"budgets": {"per_wave": {"max_failed": [1]}}}, "budgets.per_wave.max_failed",
     "Input should be a valid string or a valid integer, got list"),
])
def test_a_count_or_percentage_is_explained_not_pydantics_union(
        tmp_path: Path, over: dict[str, Any], field: str, reason: str) -> None:
    p = write_plan(tmp_path, {**BASE, **over})
    with pytest.raises(BadInput) as exc:
        load_plan(p)
    assert exc.value.field == field and exc.value.reason.startswith(reason), exc.value
    assert "constrained-" not in str(exc.value) and "function-" not in str(exc.value)


def test_bad_plan_through_the_cli_exits_2_without_traceback(tmp_path: Path) -> None:
    p = write_plan(tmp_path, {**BASE, "concurrency": "four"})
    proc = fleetgate("rollout", "plan", str(p))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"fleetgate: {p}: concurrency:")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


STATIC_INVENTORY = {"all": {
    "vars": {"ansible_host": "127.0.0.1", "ansible_port": 1},  # never contacted: plan only
    "hosts": {f"h{i}": {"fleetgate_class": "lab-cpu", "rack": f"r{i % 2}", "zone": "z"}
              for i in range(1, 5)},
    "children": {"pool_canary": {"hosts": {"h1": None}},
                 "pool_wave1": {"hosts": {"h2": None, "h3": None, "h4": None}},
                 "pool_dup": {"hosts": {"h1": None, "h2": None}}}}}

BAD_AGAINST_INVENTORY: list[tuple[str, dict[str, Any], str]] = [
    ("unknown group", {"waves": {"pools": ["pool_canary", "pool_nope"]}},
     "plan.yml: waves.pools: pool pool_nope has no targeted host"),
    ("host in two waves", {"waves": {"pools": ["pool_canary", "pool_dup", "pool_wave1"]}},
     "exactly one wave"),
    ("host in no wave", {"waves": {"pools": ["pool_canary"]}}, "in no pool: h2, h3, h4"),
    ("class matches nothing", {"targets": {"inventory": "inv.yml", "class": "lab-vm"}},
     "no host matches class lab-vm"),
    ("approval after the last wave", {"approvals": {"before_waves": [3]}}, "has 2 waves"),
    ("inventory missing", {"targets": {"inventory": "missing.yml"}}, "no such inventory"),
]


@pytest.mark.parametrize(("what", "over", "needle"), BAD_AGAINST_INVENTORY,
                         ids=[b[0] for b in BAD_AGAINST_INVENTORY])
def test_bad_plan_against_an_inventory_is_refused_before_any_host(
        tmp_path: Path, what: str, over: dict[str, Any], needle: str) -> None:
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(STATIC_INVENTORY))
    p = write_plan(tmp_path, {**BASE, **over})
    state = tmp_path / "state"
    # `start` plans first: the same refusal as `plan`, and then nothing may have started.
    proc = fleetgate("rollout", "start", str(p), env={"FLEETGATE_STATE_DIR": str(state)})
    assert proc.returncode == 2, (what, proc.stdout, proc.stderr)
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    # Nothing ran: no rollout in the journal, no batch directory.
    assert not (state / "rollouts" / "journal.db").exists() or not Journal(
        state / "rollouts" / "journal.db").rollouts()


def test_good_plan_loads_with_defaults(tmp_path: Path) -> None:
    p = load_plan(write_plan(tmp_path, BASE))
    assert p.on_failure == "halt" and p.concurrency == 5
    assert p.gates.inconclusive.policy == "halt" and p.budgets.total.max_failed == 0


def test_from_class_takes_the_target_from_the_class_the_run_applies() -> None:
    """The kernel example writes the new kernel only in lab-vm version 2: the change's target
    comes from that class, the rollback's from the inventory's lab-vm."""
    new = load_class(REPO / "examples" / "kernel-update" / "classes" / "lab-vm.yml")
    old = load_class(REPO / "inventory" / "classes" / "lab-vm.yml")
    assert (new.version, new.kernel.abi) != (old.version, old.kernel.abi)
    p = load_plan(REPO / "examples" / "kernel-update" / "rollout.yml")
    assert p.change.target.kernel_release == new.kernel.abi
    assert p.change.target.manifest == {"class_version": new.version}
    assert p.rollback is not None
    assert p.rollback.target.kernel_release == old.kernel.abi
    assert p.rollback.target.manifest == {"class_version": old.version}


def test_from_class_checks_no_kernel_on_container_classes_and_keeps_explicit_fields() -> None:
    p = load_plan(REPO / "examples" / "bad-blas" / "rollout.yml")
    new = load_class(REPO / "examples" / "bad-blas" / "classes" / "lab-cpu.yml")
    assert p.change.target.kernel_release is None  # containers run the host's kernel
    assert p.change.target.manifest == {"class_version": new.version,
                                        "verified.userland.blas": "reference"}
    assert p.rollback is not None and p.rollback.target.manifest["class_version"] == 1


def test_plan_without_from_class_is_left_as_written(tmp_path: Path) -> None:
    doc = {**BASE, "change": {"playbook": "examples/rollout/stamp-version.yml",
                              "target": {"manifest": {"class_version": 9}}}}
    assert load_plan(write_plan(tmp_path, doc)).change.target.manifest == {"class_version": 9}


# ------------------------------------------------------------------------------------ waves

def test_pools_give_one_wave_each_and_refuse_a_host_in_two() -> None:
    hosts = fleet(4)
    a = assign(plan().waves, hosts)
    assert a.waves == [["h00"], ["h01", "h02", "h03"]]
    twice = {**hosts, "h09": Host("h09", "lab-cpu", {}, ("pool_canary", "pool_wave1"))}
    with pytest.raises(BadInput, match="exactly one wave"):
        assign(plan().waves, twice)
    orphan = {**hosts, "h09": Host("h09", "lab-cpu", {}, ())}
    with pytest.raises(BadInput, match="in no pool: h09"):
        assign(plan().waves, orphan)
    nope = plan(waves={"pools": ["pool_canary", "pool_wave1", "pool_nope"]}).waves
    with pytest.raises(BadInput) as err:
        assign(nope, hosts, source="p.yml", where="plan.waves")
    assert err.value.one_line() == "p.yml: plan.waves.pools: pool pool_nope has no targeted host"


@pytest.mark.parametrize(("steps", "total", "sizes"), [
    ([1, 2, "5%", "25%", "100%"], 100, [1, 1, 3, 20, 75]),
    ([1, 2, "5%", "25%", "100%"], 8, [1, 1, 6]),  # 5% and 25% of 8 add no host past 2
    ([1, "50%"], 10, [1, 4, 5]),                          # the rest becomes a last wave
    ([20], 6, [6]),
])
def test_steps_are_cumulative(steps: list[int | str], total: int, sizes: list[int]) -> None:
    got, notes = step_sizes(steps, total)
    assert got == sizes and sum(got) == total
    if len(sizes) < len(steps):
        assert notes


def test_step_waves_spread_early_waves_across_domains() -> None:
    hosts = fleet(12, racks=4)
    a = assign(plan(waves={"steps": [1, 5, "100%"], "diversity": ["zone", "rack"]}).waves,
               hosts)
    assert [len(w) for w in a.waves] == [1, 4, 7]
    every_host = [h for w in a.waves for h in w]
    assert sorted(every_host) == sorted(hosts) and len(set(every_host)) == 12
    second = a.waves[1]
    assert {hosts[h].domains["rack"] for h in second} == {"r0", "r1", "r2", "r3"}


# ---------------------------------------------------------------------------------- budgets

@pytest.mark.parametrize(("rule", "covered", "want"), [(0, 10, 0), ("2", 10, 2), ("10%", 10, 1),
                                                       ("10%", 9, 0), ("50%", 3, 1)])
def test_budget_counts_round_down(rule: int | str, covered: int, want: int) -> None:
    assert budget_count(rule, covered) == want


def test_batch_never_holds_more_than_remaining_budget_plus_one() -> None:
    p = plan(concurrency=10, budgets={"per_wave": {"max_failed": 2}, "total": {"max_failed": 5}})
    a = assign(p.waves, fleet(11))
    lim = budgets.limits(p, a)
    assert len(budgets.next_batch(p, lim, a, rows(a), 2)) == 3
    r = rows(a, {"h01": "failed_held"})
    assert budgets.next_batch(p, lim, a, r, 2) == ["h02", "h03"]
    r = rows(a, {"h01": "failed_held", "h02": "rolled_back"})
    assert budgets.next_batch(p, lim, a, r, 2) == ["h03"]
    r = rows(a, {"h01": "failed_held", "h02": "failed_held", "h03": "failed_held"})
    assert budgets.breaches(lim, a, r) == ["wave 2 budget exceeded: 3 failed > 2 tolerated"]
    assert budgets.next_batch(p, lim, a, r, 2) == []


def test_zero_budget_means_one_host_at_a_time_and_per_domain_caps() -> None:
    p = plan(concurrency=8, budgets={"per_wave": {"max_failed": "50%"},
                                     "total": {"max_failed": "50%"},
                                     "per_domain": {"key": "rack", "max_failed": 0}})
    a = assign(p.waves, fleet(9))
    lim = budgets.limits(p, a)
    batch = budgets.next_batch(p, lim, a, rows(a), 2)
    assert len({a.hosts[h].domains["rack"] for h in batch}) == len(batch) == 3
    r = rows(a, {"h03": "failed_held", "h04": "failed_held"})
    assert "rack r0 budget exceeded: 1 failed > 0 tolerated" in budgets.breaches(lim, a, r)


# ----------------------------------------------------------------------------------- window

@pytest.mark.parametrize(("start", "end", "days", "when", "open_"), [
    ("22:00", "06:00", ["mon"], "2026-11-30T23:30:00+00:00", True),   # Monday night
    ("22:00", "06:00", ["mon"], "2026-12-01T05:59:00+00:00", True),   # after midnight, Tue
    ("22:00", "06:00", ["mon"], "2026-12-01T06:00:00+00:00", False),
    ("22:00", "06:00", ["mon"], "2026-11-30T05:00:00+00:00", False),  # belongs to Sunday
    ("09:00", "17:00", ["mon", "tue"], "2026-11-30T12:00:00+00:00", True),
    ("09:00", "17:00", ["tue"], "2026-11-30T12:00:00+00:00", False),
])
def test_window(start: str, end: str, days: list[str], when: str, open_: bool) -> None:
    w = Window.model_validate({"start": start, "end": end, "days": days})
    assert w.is_open(dt.datetime.fromisoformat(when)) is open_


def test_window_honours_time_zone() -> None:
    w = Window.model_validate({"start": "22:00", "end": "23:00", "timezone": "Europe/Kyiv"})
    assert w.is_open(dt.datetime.fromisoformat("2026-11-30T20:30:00+00:00"))
    assert not w.is_open(dt.datetime.fromisoformat("2026-11-30T22:30:00+00:00"))


# --------------------------------------------------------------------------- journal, lease

def test_journal_records_transitions_in_order_and_survives_reopen(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout("r-1", "unit", "/inv.yml", {"waves": [["a"], ["b"]]}, [["a"], ["b"]])
    j.set_host("r-1", "a", "applying")
    j.set_host("r-1", "a", "healthy", "ok")
    j.close()
    j2 = Journal(tmp_path / "j.db")
    assert j2.query("PRAGMA journal_mode")[0][0] == "wal"
    hs = j2.hosts("r-1")
    assert (hs["a"].state, hs["b"].state) == ("healthy", "pending")
    moves = [(e["data"]["from"], e["data"]["to"]) for e in j2.events("r-1", kinds=("host",))]
    assert moves == [("pending", "applying"), ("applying", "healthy")]


def test_lease_refuses_live_holder_and_takes_over_expired_or_dead(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    first = Lease(j, "r-1", ["rollout:r-1"], ttl_s=60)
    first.acquire()
    with pytest.raises(LeaseHeld, match=f"pid {os.getpid()}"):
        Lease(j, "r-1", ["rollout:r-1"]).acquire()
    # Another machine's controller whose TTL ran out: taken over, and said so.
    with j.tx() as db:
        db.execute("UPDATE leases SET hostname='elsewhere', pid=1, expires_at=?",
                   (time.time() - 5,))
    notes = Lease(j, "r-1", ["rollout:r-1"]).acquire()
    assert notes and "expired" in notes[0] and "elsewhere" in notes[0]
    # A dead controller on this machine: taken over at once, without waiting for the TTL.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with j.tx() as db:
        db.execute("UPDATE leases SET hostname=?, pid=?, expires_at=?",
                   (os.uname().nodename, dead.pid, time.time() + 600))
    notes = Lease(j, "r-1", ["rollout:r-1"]).acquire()
    assert "process gone" in notes[0]


def test_lease_heartbeat_notices_a_takeover(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    mine = Lease(j, "r-1", ["rollout:r-1"], ttl_s=0.6)
    mine.acquire()
    mine.start_heartbeat()
    with j.tx() as db:
        db.execute("UPDATE leases SET token='someone-else'")
    assert mine.lost.wait(3)
    mine.release()
