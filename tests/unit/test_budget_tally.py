"""The controller's budget counters (budgets.Tally) are kept incrementally, moved by every
host transition the journal commits: after any sequence of transitions they must equal a
full recount of the rows, and a controller that takes the rollout again (resume after a
crash) must rebuild exactly the journal's numbers. Budget decisions made from the tally must
be the decisions made from the rows."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fleetgate.rollout import budgets
from fleetgate.rollout.journal import HOST_STATES, Journal
from fleetgate.rollout.plan import RolloutPlan
from fleetgate.rollout.waves import Assignment, Host, assign

RID = "tally-test-0001"


def plan(**over: Any) -> RolloutPlan:
    return RolloutPlan.model_validate({
        "name": "tally", "targets": {"inventory": "inv.yml", "class": "lab-cpu"},
        "change": {"playbook": "examples/rollout/stamp-version.yml"},
        "waves": {"steps": [1, 5, "50%", "100%"], "diversity": ["zone", "rack"]},
        "concurrency": 7,
        "budgets": {"per_wave": {"max_failed": "20%"}, "total": {"max_failed": "10%"},
                    "per_domain": {"key": "rack", "max_failed": 1}}, **over})


def fleet(n: int) -> dict[str, Host]:
    return {f"h{i:03d}": Host(f"h{i:03d}", "lab-cpu", {"rack": f"r{i % 7}", "zone": f"z{i % 3}"})
            for i in range(n)}


def setup(tmp_path: Path, n: int = 60) -> tuple[RolloutPlan, Assignment, budgets.Limits,
                                                  Journal]:
    p = plan()
    a = assign(p.waves, fleet(n))
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "tally", "/inv.yml", {"plan": {}}, a.waves)
    return p, a, budgets.limits(p, a), j


def recount(lim: budgets.Limits, a: Assignment, j: Journal) -> dict[str, object]:
    return budgets.Tally(lim, a, Journal(j.path).hosts(RID)).snapshot()


@pytest.mark.parametrize("seed", range(6))
def test_kept_counters_equal_a_recount_after_random_transitions(tmp_path: Path,
                                                                seed: int) -> None:
    p, a, lim, j = setup(tmp_path)
    rng = random.Random(seed)  # noqa: S311  # a reproducible sequence, not a secret
    tally = budgets.Tally(lim, a)
    j.own(RID, tally)
    names = sorted(a.hosts)
    for step in range(40):
        hosts = rng.sample(names, rng.randint(1, 6))
        state = rng.choice(HOST_STATES)  # pending included: reconcile sends hosts back
        if rng.random() < 0.5:
            j.set_hosts(RID, hosts, state, {h: f"why {h}" for h in hosts})
        else:
            j.set_host(RID, hosts[0], state, "one")
        assert tally.snapshot() == recount(lim, a, j), step
        # Every decision made from the tally is the one a recount of the rows makes.
        rows = Journal(j.path).hosts(RID)
        assert budgets.breaches(lim, a, tally) == budgets.breaches(lim, a, rows)
        for k in range(1, len(a.waves) + 1):
            assert budgets.next_batch(p, lim, a, tally, k) == budgets.next_batch(
                p, lim, a, rows, k)


def test_a_resumed_controller_rebuilds_the_journals_counters(tmp_path: Path) -> None:
    _p, a, lim, j = setup(tmp_path)
    first = budgets.Tally(lim, a)
    j.own(RID, first)
    failing = a.waves[2][:3]
    j.set_hosts(RID, failing, "failed_held", "gemm slow")
    j.set_hosts(RID, a.waves[0], "healthy")
    j.set_host(RID, a.waves[1][0], "rolled_back", "rolled back")
    j.set_hosts(RID, a.waves[2][3:5], "applying")
    kept = first.snapshot()
    del j  # the controller dies (kill -9: nothing more is written)
    again = Journal(tmp_path / "j.db")
    resumed = budgets.Tally(lim, a)
    again.own(RID, resumed)
    assert resumed.snapshot() == kept == recount(lim, a, again)
    assert resumed.failed_total == 4
    assert resumed.failed_in_wave(3) == 3 and resumed.failed_in_wave(2) == 1
    # In flight is neither pending nor failed: reconcile decides, and the tally follows it.
    assert not set(a.waves[2][3:5]) & set(resumed.pending[2])
    again.set_hosts(RID, a.waves[2][3:5], "pending", "reconcile: never started")
    assert list(resumed.pending[2]) == [h for h in a.waves[2]
                                        if h not in failing]


def test_a_write_that_fails_moves_no_counter(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _p, a, lim, j = setup(tmp_path)
    tally = budgets.Tally(lim, a)
    j.own(RID, tally)
    before = tally.snapshot()

    def broken(*_: object, **__: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(j, "_event", broken)
    monkeypatch.setattr(j, "_events", broken)
    with pytest.raises(OSError, match="disk full"):
        j.set_hosts(RID, a.waves[1], "failed_held", "x")
    monkeypatch.undo()
    assert tally.snapshot() == before == recount(lim, a, j)


def test_disown_stops_the_watcher(tmp_path: Path) -> None:
    _p, a, lim, j = setup(tmp_path)
    tally = budgets.Tally(lim, a)
    j.own(RID, tally)
    j.disown(RID)
    j.set_host(RID, a.waves[0][0], "failed_held", "x")
    assert tally.failed_total == 0  # no longer this process's rollout: not counted here
    assert j.host(RID, a.waves[0][0]).state == "failed_held"  # type: ignore[union-attr]
    assert j.host(RID, "nope") is None
