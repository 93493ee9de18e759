"""An apply batch run here reads its hosts before their change inside its own Ansible run
(rollout/before.py InRun, playbooks/rollout-before.yml). The batch worker, ansible-runner,
Ansible and the journal are real; the hosts are this machine over the local connection, and
one that refuses SSH."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.rollout import ahead, before, worker
from fleetgate.rollout.hostread import Wanted
from fleetgate.rollout.journal import Journal
from fleetgate.system.procs import proc_start

RID = "r1"


@pytest.fixture
def batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(tmp_path / "state"))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {
        "localhost": local,
        # Nothing listens on port 1: the host never answers.
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1},
    }}}))
    play = tmp_path / "change.yml"
    count = ("import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT count(*)"
             " FROM events WHERE kind='hoststate'\").fetchone()[0])")
    play.write_text(yaml.safe_dump([{"name": "Change", "hosts": "all", "gather_facts": False,
                                     "tasks": [
        # What the journal holds at the moment the change starts on the host.
        {"name": "Count the readings", "changed_when": False, "register": "readings",
         "ansible.builtin.command": {"argv": [sys.executable, "-c", count,
                                              str(tmp_path / "journal.db")]}},
        {"name": "Change the host", "ansible.builtin.copy": {
            "content": "{{ readings.stdout }}\n",
            "dest": f"{tmp_path}/{{{{ inventory_hostname }}}}.changed"}}]}]))
    version = tmp_path / "version"
    version.write_text("7\n")
    j = Journal(tmp_path / "journal.db")
    j.create_rollout(RID, "t", str(inv), {}, [["localhost", "gone"]])
    return {"tmp": tmp_path, "journal": j, "version": version,
            "spec": {"rollout_id": RID, "wave": 1, "journal": str(tmp_path / "journal.db"),
                     "inventory": str(inv), "playbook": str(play), "limit": "localhost,gone",
                     "forks": 2, "timeout": 120,
                     "read_before": Wanted(files=[str(version)]).model_dump()}}


def _run(b: dict[str, Any], bid: str) -> worker.BatchResult:
    bdir = b["tmp"] / bid
    bdir.mkdir()
    spec = worker.BatchSpec.model_validate({**b["spec"], "batch_id": bid})
    (bdir / worker.SPEC).write_text(spec.model_dump_json())
    worker.run_batch(bdir)
    res = worker.read_result(bdir)
    assert res is not None
    return res


def test_the_readings_are_journalled_before_any_host_is_changed(batch: dict[str, Any]
                                                                ) -> None:
    res = _run(batch, "apply-1")
    assert {h: v.outcome for h, v in res.hosts.items()} == {
        "localhost": "changed", "gone": "unreachable"}, res
    events = batch["journal"].events(RID)
    readings = {e["host"]: e for e in events if e["kind"] == "hoststate"}
    assert set(readings) == {"localhost", "gone"}
    here = readings["localhost"]["data"]
    assert here["label"] == "before" and here["why"] is None
    assert here["state"]["kernel_release"] == os.uname().release
    assert here["state"]["files"] == {str(batch["version"]): "7"}
    gone = readings["gone"]["data"]
    assert gone["state"] is None and gone["why"].startswith("unreachable: "), gone
    # The order the journal holds: every reading, then the first change.
    changes = [e["seq"] for e in events if e["kind"] == "ansible"
               and e["data"].get("task") == "Change the host"
               and e["data"]["event"] == "runner_on_ok"]
    assert len(changes) == 1
    assert max(r["seq"] for r in readings.values()) < min(changes)
    assert (batch["tmp"] / "apply-1" / worker.BEFORE_RECORDED).exists()
    # The run itself waited: when the change started, both readings were in the journal.
    assert (batch["tmp"] / "localhost.changed").read_text() == "2\n"


def test_a_host_applied_again_keeps_its_first_reading(batch: dict[str, Any]) -> None:
    _run(batch, "apply-1")
    batch["version"].write_text("8\n")
    res = _run(batch, "apply-2")
    assert res.hosts["localhost"].outcome == "ok"  # the change was already there
    readings = [e for e in batch["journal"].events(RID) if e["kind"] == "hoststate"]
    assert sorted(e["host"] for e in readings) == ["gone", "localhost"]
    assert {e["data"]["state"]["files"][str(batch["version"])]
            for e in readings if e["data"]["state"]} == {"7"}


def test_a_run_that_never_reaches_its_wait_still_journals_why(batch: dict[str, Any]) -> None:
    bad = batch["tmp"] / "broken.yml"
    bad.write_text("- hosts: all\n  tasks: [{name: x, no_such_module_anywhere: {}}]\n")
    batch["spec"]["playbook"] = str(bad)
    res = _run(batch, "apply-1")
    assert res.rc != 0 and not any(v.outcome in ("ok", "changed") for v in res.hosts.values())
    readings = {e["host"]: e["data"] for e in batch["journal"].events(RID)
                if e["kind"] == "hoststate"}
    # The change's playbook did not parse, so the run read nothing; each host says why.
    assert set(readings) == {"localhost", "gone"}
    assert all(d["state"] is None and d["why"].startswith("no answer (") for d in readings.values())
    assert not (batch["tmp"] / "apply-1" / worker.BEFORE_RECORDED).exists()
    assert not list(batch["tmp"].glob("*.changed"))


def test_a_slow_host_keeps_its_reason_under_the_free_strategy(
        batch: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A site's ansible.cfg may make `free` the default strategy. The fast host must not
    reach the wait first and have the readings journalled without the slow one's: the slow
    host's reading is its own real reason, not a lost "no answer"."""
    # A listener that never accepts: the kernel completes the TCP handshake and ssh then
    # waits for a banner that never comes, until its 3 s timeout.
    with socket.create_server(("127.0.0.1", 0), backlog=8) as stall:
        inv = yaml.safe_load(Path(batch["spec"]["inventory"]).read_text())
        inv["all"]["hosts"]["gone"] = {"ansible_host": "127.0.0.1",
                                       "ansible_port": stall.getsockname()[1],
                                       "ansible_ssh_timeout": 3}
        Path(batch["spec"]["inventory"]).write_text(yaml.safe_dump(inv))
        monkeypatch.setenv("ANSIBLE_STRATEGY", "free")
        res = _run(batch, "apply-1")
    assert {h: v.outcome for h, v in res.hosts.items()} == {
        "localhost": "changed", "gone": "unreachable"}, res
    readings = {e["host"]: e["data"] for e in batch["journal"].events(RID)
                if e["kind"] == "hoststate"}
    assert readings["localhost"]["state"] is not None
    gone = readings["gone"]
    assert gone["state"] is None and gone["why"].startswith("unreachable: "), gone
    assert "no answer" not in gone["why"], gone


# A run started ahead of its turn and held until its controller releases it (rollout/ahead.py):
# the worker is a real subprocess here, as the controller spawns it.
RELEASE_TASK = "Wait for the controller's release of this batch"


def _owner(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start": proc_start(pid)}


def _spawn_held(b: dict[str, Any], bid: str, owner: dict[str, Any]) -> tuple[Path, int]:
    bdir = b["tmp"] / bid
    bdir.mkdir()
    return bdir, worker.spawn(bdir, {**b["spec"], "batch_id": bid, "owner": owner})


def _events(bdir: Path) -> list[dict[str, Any]]:
    """The run's events so far: ansible-runner writes each to job_events/ as it comes (the
    run's events.jsonl is written through a buffer)."""
    out = []
    for p in bdir.glob("runs/*/artifacts/*/job_events/*.json"):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue  # being written
    return out


def _until_held(bdir: Path, pid: int) -> None:
    """Until the run waits at its release; then a while longer, to see it stays there."""
    deadline = time.monotonic() + 60
    while not any(e.get("event") == "playbook_on_task_start"
                  and (e.get("event_data") or {}).get("task") == RELEASE_TASK
                  for e in _events(bdir)):
        assert time.monotonic() < deadline, (bdir / "worker.log").read_text()
        assert worker.worker_alive(bdir) or not (bdir / worker.PIDFILE).exists(), pid
        time.sleep(0.05)
    time.sleep(1.0)


def _touched_nothing(b: dict[str, Any], bdir: Path) -> None:
    assert not [e for e in _events(bdir) if str(e.get("event")).startswith("runner_on_")
                and (e.get("event_data") or {}).get("task") != RELEASE_TASK]
    assert [e["kind"] for e in b["journal"].events(RID)] == ["rollout"]  # its creation only
    assert not list(b["tmp"].glob("*.changed"))


def test_a_run_held_ahead_touches_no_host_and_journals_nothing_until_released(
        batch: dict[str, Any]) -> None:
    bdir, pid = _spawn_held(batch, "apply-held", _owner(os.getpid()))
    _until_held(bdir, pid)
    _touched_nothing(batch, bdir)
    assert not (bdir / worker.RESULT).exists()
    assert ahead.claim(bdir, ahead.GO) == ahead.GO
    doc = worker.wait(bdir, spawned_pid=pid)
    assert doc is not None, (bdir / "worker.log").read_text()
    assert {h: v["outcome"] for h, v in doc["hosts"].items()} == {
        "localhost": "changed", "gone": "unreachable"}, doc
    events = batch["journal"].events(RID)
    # What the run did while held is journalled too, once released, and in its order.
    tasks = [e["data"]["task"] for e in events if e["kind"] == "ansible"
             and e["data"]["event"] == "playbook_on_task_start"]
    assert tasks[:3] == [RELEASE_TASK, "Read kernel, manifest, package versions and version "
                         "files", before.RECORDED_TASK], tasks
    # ... in one transaction at the release, with the release wait's own end (its first
    # event after it): so with one commit's timestamp.
    ans = [e for e in events if e["kind"] == "ansible"]
    end = next(i for i, e in enumerate(ans) if e["data"].get("task") == RELEASE_TASK
               and e["data"]["event"] == "runner_on_ok")
    assert end >= 2 and len({e["ts"] for e in ans[:end + 1]}) == 1, ans[:end + 1]
    assert {e["host"] for e in events if e["kind"] == "hoststate"} == {"localhost", "gone"}
    assert (batch["tmp"] / "localhost.changed").read_text() == "2\n"


def test_a_cancelled_run_ends_having_touched_no_host(batch: dict[str, Any]) -> None:
    bdir, pid = _spawn_held(batch, "apply-held", _owner(os.getpid()))
    _until_held(bdir, pid)
    assert ahead.claim(bdir, ahead.CANCEL) == ahead.CANCEL
    assert worker.wait(bdir, spawned_pid=pid) is None  # no result: it was never a batch
    _touched_nothing(batch, bdir)
    assert ahead.claim(bdir, ahead.GO) == ahead.CANCEL  # a release after that is refused
    assert not worker.may_have_run(bdir)


def test_a_held_run_whose_controller_dies_ends_having_touched_no_host(
        batch: dict[str, Any]) -> None:
    controller = subprocess.Popen(["sleep", "120"])
    try:
        bdir, pid = _spawn_held(batch, "apply-held", _owner(controller.pid))
        _until_held(bdir, pid)
    finally:
        controller.kill()
        controller.wait()
    assert worker.wait(bdir, spawned_pid=pid) is None
    _touched_nothing(batch, bdir)
    assert ahead.said(bdir) == ahead.ENDED  # its own last word: never released
    assert not worker.may_have_run(bdir)


def test_the_held_run_is_handed_over_only_for_exactly_its_batch(tmp_path: Path) -> None:
    """A guess that turned out wrong costs a cancel, never a different change."""
    spec = {"limit": "a,b", "wave": 2, "playbook": "change.yml"}
    live = subprocess.Popen(["sleep", "120"])
    try:
        for want, taken in [((spec, ("k",)), True),
                            (({**spec, "limit": "a"}, ("k",)), False),  # other hosts
                            (({**spec, "wave": 3}, ("k",)), False),  # another wave
                            (({**spec, "playbook": "other.yml"}, ("k",)), False),
                            ((spec, ("inventory edited",)), False),
                            ((spec, None), False)]:
            bdir = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
            bdir.mkdir()
            a = ahead.Ahead()
            a.hold(ahead.Held("apply-x", bdir, live.pid, spec, ("k",)))
            got = a.take(*want)
            assert (got is not None) == taken, want
            assert ahead.said(bdir) == (None if taken else ahead.CANCEL), want
        # A held run that ended by itself (its own word) is not handed over either.
        a.hold(ahead.Held("apply-y", bdir, live.pid, spec, ("k",)))
        (bdir / ahead.RELEASE).unlink(missing_ok=True)
        ahead.claim(bdir, ahead.ENDED)
        assert a.take(spec, ("k",)) is None
    finally:
        live.kill()
        live.wait()
