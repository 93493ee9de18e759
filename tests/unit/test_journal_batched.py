"""A batch's transition is one transaction with one statement for its rows and one for its
events (Journal.set_hosts, events_at_once): the events must be exactly those one INSERT per
host wrote (order, seq, data), listeners must see each with its real seq after the commit,
and each host may carry its own reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.rollout.journal import Journal

RID = "batched-test-01"


def test_listeners_see_each_event_of_a_batch_with_its_seq(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "b", "/inv.yml", {"plan": {}}, [["a1"], ["b1", "b2", "b3"]])
    heard: list[dict[str, Any]] = []
    j.listeners.append(heard.append)
    j.own(RID)
    j.set_hosts(RID, ["b1", "b2", "b3"], "applying", batch="apply-1")
    j.event(RID, "note", {"x": 1})
    j.set_hosts(RID, ["b1", "b3"], "failed_held",
                {"b1": "gemm slow", "b3": "password=hunter2 in output", "b2": "unused"})
    j.events_at_once(RID, "smoke", [("b2", {"label": "verify"}), ("a1", {"label": "x"})], wave=2)
    stored = [e for e in j.events(RID) if e["kind"] != "rollout"]
    assert [(e["seq"], e["kind"], e["host"], e["wave"], e["data"]) for e in heard] == [
        (e["seq"], e["kind"], e["host"], e["wave"], e["data"]) for e in stored]
    assert [(e["host"], e["data"].get("from"), e["data"].get("to")) for e in stored[:3]] == [
        ("b1", "pending", "applying"), ("b2", "pending", "applying"),
        ("b3", "pending", "applying")]
    assert stored[0]["data"]["batch"] == "apply-1"
    fresh = Journal(tmp_path / "j.db").hosts(RID)
    assert fresh == j.hosts(RID)
    assert (fresh["b1"].reason, fresh["b2"].state, fresh["b3"].state) == (
        "gemm slow", "applying", "failed_held")
    assert "hunter2" not in fresh["b3"].reason  # each host's own reason is redacted too
    assert len({e["seq"] for e in stored}) == len(stored)


def test_an_empty_transition_writes_nothing(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "b", "/inv.yml", {"plan": {}}, [["a1"]])
    before = j.events(RID)
    j.set_hosts(RID, [], "healthy")
    j.events_at_once(RID, "smoke", [])
    assert j.events(RID) == before


def test_a_rollout_call_that_changes_nothing_writes_only_its_event(tmp_path: Path) -> None:
    """The rollouts row holds the artifact, megabytes at fleet scale: the next batch of the
    same wave and phase must not rewrite it, yet its event (which batch, when) is kept."""
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "b", "/inv.yml", {"plan": {}}, [["a1", "a2"]])
    j.set_rollout(RID, "running", wave=1, phase="applying", batch=["a1"])
    first = j.rollout(RID)
    changes = j.query("SELECT total_changes()")[0][0]
    j.set_rollout(RID, "running", wave=1, phase="applying", batch=["a2"])
    # One INSERT (the event), no UPDATE of the row.
    assert j.query("SELECT total_changes()")[0][0] - changes == 1
    assert j.rollout(RID) == first
    batches = [e["data"]["batch"] for e in j.events(RID, kinds=("rollout",))
               if "batch" in e["data"]]
    assert batches == [["a1"], ["a2"]]
    j.set_rollout(RID, "running", wave=1, phase="applying", reason="slow", batch=["a2"])
    row = j.rollout(RID)
    assert row is not None and row.reason == "slow" and row.updated_at >= first.updated_at  # type: ignore[union-attr]


def test_status_and_batch_reads_use_indexes(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")

    def plan(sql: str, n: int) -> str:
        return " ".join(str(r[3]) for r in j.query("EXPLAIN QUERY PLAN " + sql, (1,) * n))

    # A batch's own hosts' events: by host, never a scan of every event of the kind.
    assert "events_by_host" in plan("SELECT seq FROM events INDEXED BY events_by_host WHERE"
                                    " rollout_id=? AND seq>? AND kind IN (?) AND host IN (?,?)"
                                    " ORDER BY seq", 5)
    assert "events_by_kind" in plan("SELECT seq, data FROM events WHERE rollout_id=? AND seq>?"
                                    " AND kind IN (?) ORDER BY seq", 3)
    assert "hosts_by_wave" in plan("SELECT host, wave, state FROM hosts WHERE rollout_id=?"
                                   " ORDER BY wave, host", 1)
    assert "batches_by_state" in plan("SELECT id FROM batches WHERE rollout_id=? AND"
                                      " state=? ORDER BY started_at", 2)
    assert "requests_by_kind" in plan("SELECT wave FROM requests WHERE rollout_id=? AND"
                                      " kind=? ORDER BY id", 2)


def test_an_owner_reads_its_rollout_row_from_its_copy_and_the_row_stays_true(
        tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "b", "/inv.yml", {"plan": {}}, [["a1"], ["b1"]])
    j.set_rollout(RID, "running", wave=1, phase="applying")
    j.own(RID)
    j.set_rollout(RID, "running", wave=1, phase="applying", batch=["a1"])  # no change
    j.set_rollout(RID, "running", wave=2, phase="applying", batch=["b1"])
    j.set_rollout(RID, "soaking", phase="soak until 12:00:00Z")  # wave kept: 2
    row = Journal(tmp_path / "j.db").rollout(RID)
    assert row is not None
    assert (row.state, row.wave, row.phase) == ("soaking", 2, "soak until 12:00:00Z")
    j.disown(RID)
    j.set_rollout(RID, "halted", reason="x", resumable=True)
    row = Journal(tmp_path / "j.db").rollout(RID)
    assert row is not None and (row.state, row.wave, row.resumable) == ("halted", 2, True)
