"""A controller that owns its rollout reads host rows from memory (Journal.own): the copy
must say exactly what the database says after every kind of write, a failed write must leave
it as the database is, and another handle (`rollout status` in another process) keeps
reading the database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fleetgate.rollout.journal import Journal

RID = "owned-test-0001"
WAVES = [["h1"], ["h2", "h3"], [f"h{i}" for i in range(4, 20)]]


def journal(path: Path) -> Journal:
    j = Journal(path)
    j.create_rollout(RID, "owned", "/inv.yml", {"plan": {}}, WAVES)
    return j


def test_the_owned_copy_follows_every_write(tmp_path: Path) -> None:
    j = journal(tmp_path / "j.db")
    j.own(RID)
    j.set_hosts(RID, ["h1"], "applying")
    j.start_batch("apply-1", RID, 1, "apply", ["h1"], tmp_path)
    j.batch_spawned("apply-1", RID, 4242)
    j.batch_spawned("apply-1", RID, 4242)  # a second report of the same spawn counts once
    j.set_host(RID, "h1", "healthy", "verified")
    j.set_hosts(RID, ["h2", "h3"], "rolled_back", "gemm 12% slower")
    j.start_batch("rollback-1", RID, 2, "rollback", ["h2", "h3"], tmp_path)
    j.batch_spawned("rollback-1", RID, 4343)  # not an apply: no application counted
    owned = j.hosts(RID)
    fresh = Journal(tmp_path / "j.db").hosts(RID)
    assert owned == fresh
    assert list(owned) == list(fresh)  # the same order: wave, then host
    assert (owned["h1"].state, owned["h1"].applies, owned["h1"].reason) == (
        "healthy", 1, "verified")
    assert owned["h2"].state == "rolled_back" and owned["h2"].applies == 0
    # The "from" of each transition came from the copy, and matches the database's history.
    moves = [(e["host"], e["data"]["from"], e["data"]["to"])
             for e in j.events(RID, kinds=("host",))]
    assert moves == [("h1", "pending", "applying"), ("h1", "applying", "healthy"),
                     ("h2", "pending", "rolled_back"), ("h3", "pending", "rolled_back")]


def test_a_caller_cannot_change_the_copy(tmp_path: Path) -> None:
    j = journal(tmp_path / "j.db")
    j.own(RID)
    rows = j.hosts(RID)
    rows.pop("h1")
    assert "h1" in j.hosts(RID)


def test_a_write_that_fails_leaves_the_copy_as_the_database_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    j = journal(tmp_path / "j.db")
    j.own(RID)

    def broken_event(*_: object, **__: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    # Every event write fails, one at a time or a batch's at once (after the rows' UPDATE).
    monkeypatch.setattr(j, "_event", broken_event)
    monkeypatch.setattr(j, "_events", broken_event)
    with pytest.raises(sqlite3.OperationalError):
        j.set_hosts(RID, ["h2", "h3"], "applying")
    monkeypatch.undo()
    assert j.hosts(RID)["h2"].state == "pending"
    assert Journal(tmp_path / "j.db").hosts(RID)["h2"].state == "pending"


def test_another_handle_reads_the_database_and_disown_reads_it_again(tmp_path: Path) -> None:
    j = journal(tmp_path / "j.db")
    j.own(RID)
    other = Journal(tmp_path / "j.db")
    j.set_host(RID, "h4", "applying")
    assert other.hosts(RID)["h4"].state == "applying"
    # Written behind the owner's back (what no process may do while a lease is held):
    # the owner does not see it until it disowns, which is why only the lease holder owns.
    other.set_host(RID, "h5", "skipped", "by hand")
    assert j.hosts(RID)["h5"].state == "pending"
    j.disown(RID)
    assert j.hosts(RID)["h5"].state == "skipped"
