"""A batch's result comes at its run's recap, before ansible-playbook and ansible-runner exit
(runner/ansible.py recap_result, rollout/worker.py run_batch and Exits). ansible-runner,
Ansible, the batch worker and the journal are real; the hosts are this machine over the
local connection, and one that refuses SSH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.rollout import worker
from fleetgate.rollout.journal import Journal
from fleetgate.runner import ansible
from fleetgate.runner.ansible import HostResult

RID = "r1"


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(tmp_path / "state"))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {
        "localhost": local,
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1},  # nothing listens on 1
    }}}))
    play = tmp_path / "change.yml"
    play.write_text(yaml.safe_dump([{"name": "Change", "hosts": "all", "gather_facts": False,
                                     "tasks": [
        {"name": "Change the host", "ansible.builtin.copy": {
            "content": "x\n", "dest": f"{tmp_path}/{{{{ inventory_hostname }}}}.changed"}},
        {"name": "Fail when asked", "ansible.builtin.fail": {"msg": "broken on purpose"},
         "when": "fail_here | default(false)"}]}]))
    return {"tmp": tmp_path, "inventory": inv, "playbook": play}


@pytest.mark.parametrize(("fail", "limit", "outcomes", "rc"), [
    (False, "localhost", {"localhost": "changed"}, 0),
    (True, "localhost", {"localhost": "failed"}, 2),
    (True, "localhost,gone", {"localhost": "failed", "gone": "unreachable"}, 4),
])
def test_the_recap_says_what_the_finished_run_says(fleet: dict[str, Any], fail: bool,
                                                   limit: str, outcomes: dict[str, str],
                                                   rc: int) -> None:
    seen: list[ansible.RunResult] = []
    r = ansible.run(inventory=fleet["inventory"], playbook=fleet["playbook"], forks=2,
                    limit=limit, extravars={"fail_here": fail}, runs_base=fleet["tmp"] / "runs",
                    on_recap=seen.append)
    assert len(seen) == 1
    at = seen[0]
    assert {h: v.outcome for h, v in r.hosts.items()} == outcomes, r.hosts
    assert {h: (v.outcome, v.task, v.message) for h, v in at.hosts.items()} == {
        h: (v.outcome, v.task, v.message) for h, v in r.hosts.items()}
    assert (at.rc, at.status, at.error) == (r.rc, r.status, r.error) == (
        rc, "successful" if rc == 0 else "failed", "")


def test_recap_outcomes_and_rc_follow_ansible_playbook() -> None:
    stats = {"processed": {"a": 1, "b": 1, "c": 1}, "ok": {"a": 1, "b": 1},
             "changed": {"b": 1}, "failures": {"c": 1}, "dark": {}}
    hosts = {"c": HostResult("c", "ok")}
    at = ansible.recap_result(Path("/r"), hosts, stats, [])
    assert {h: v.outcome for h, v in at.hosts.items()} == {
        "a": "ok", "b": "changed", "c": "failed"}
    assert (at.rc, at.status) == (2, "failed")
    assert hosts["c"].outcome == "ok"  # the run's own record is not touched
    dark = ansible.recap_result(Path("/r"), {}, {**stats, "dark": {"a": 1}}, ["e1", "e2"])
    assert (dark.rc, dark.hosts["a"].outcome, dark.error) == (4, "unreachable", "e2")
    clean = ansible.recap_result(Path("/r"), {}, {"processed": {"a": 1}, "ok": {"a": 1}}, [])
    assert (clean.rc, clean.status) == (0, "successful")


def _spawn(fleet: dict[str, Any], playbook: Path) -> tuple[Path, int]:
    db = fleet["tmp"] / "journal.db"
    j = Journal(db)
    j.create_rollout(RID, "t", str(fleet["inventory"]), {}, [["localhost", "gone"]])
    j.close()
    bdir = fleet["tmp"] / "apply-1"
    bdir.mkdir()
    pid = worker.spawn(bdir, {"rollout_id": RID, "batch_id": "apply-1", "wave": 1,
                              "journal": str(db), "inventory": str(fleet["inventory"]),
                              "playbook": str(playbook), "limit": "localhost,gone",
                              "forks": 2, "timeout": 120})
    return bdir, pid


def test_the_worker_leaves_its_result_before_ansible_exits(fleet: dict[str, Any]) -> None:
    bdir, pid = _spawn(fleet, fleet["playbook"])
    doc = worker.wait(bdir, spawned_pid=pid)
    assert doc is not None, (bdir / "worker.log").read_text()
    assert doc["at_recap"] is True
    assert {h: v["outcome"] for h, v in doc["hosts"].items()} == {
        "localhost": "changed", "gone": "unreachable"}, doc
    exits = worker.Exits()
    exits.add_if_at_recap(bdir, doc, child=pid)
    assert exits.pending == 1
    exits.wait(lambda msg: pytest.fail(msg))
    assert not worker.worker_alive(bdir)
    [rc_file] = Path(doc["run_dir"]).glob("artifacts/*/rc")
    # ansible-runner writes its rc once ansible-playbook has exited: after the result.
    assert (bdir / worker.RESULT).stat().st_mtime_ns < rc_file.stat().st_mtime_ns
    assert rc_file.read_text() == str(doc["rc"])
    # Once waited for, the run is wholly over: its command artifact trimmed to our own env.
    [command] = Path(doc["run_dir"]).glob("artifacts/*/command")
    assert "HOME" not in json.loads(command.read_text())["env"]
    assert worker.read_result(bdir) == worker.BatchResult.model_validate(doc)  # written once
    # The journal had the whole run, recap included, before the result was there.
    j = Journal(fleet["tmp"] / "journal.db")
    events = [e["data"]["event"] for e in j.events(RID, kinds=("ansible",))]
    assert events[-1] == "playbook_on_stats", events


def test_a_run_with_no_recap_leaves_its_result_at_its_end(fleet: dict[str, Any]) -> None:
    bad = fleet["tmp"] / "broken.yml"
    bad.write_text("- hosts: all\n  tasks: [{name: x, no_such_module_anywhere: {}}]\n")
    bdir, pid = _spawn(fleet, bad)
    doc = worker.wait(bdir, spawned_pid=pid)
    assert doc is not None and doc["at_recap"] is False and doc["rc"] != 0, doc
    assert "no_such_module_anywhere" in doc["error"]
    assert os.path.exists(bdir / worker.RESULT)


SLOW_EXIT = '''
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Keeps ansible-playbook alive after its recap, as a slow exit would."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "slow_exit"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_stats(self, stats):
        time.sleep(3)
'''


def test_a_worker_found_after_a_crash_at_its_recap_is_waited_for(
        fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed controller (rollout/reconcile.py) that finds a batch's result left at the
    recap by a worker it did not start waits for that worker's exit like one of its own."""
    plugins = fleet["tmp"] / "callbacks"
    plugins.mkdir()
    (plugins / "slow_exit.py").write_text(SLOW_EXIT)
    # Ansible calls its stdout callback (ansible-runner's, which emits the recap) first.
    monkeypatch.setenv("ANSIBLE_CALLBACK_PLUGINS", str(plugins))
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "slow_exit")
    bdir, _pid = _spawn(fleet, fleet["playbook"])
    doc = worker.wait(bdir)  # as reconcile waits: by the pid file, not as the parent
    assert doc is not None and doc["at_recap"] is True, (bdir / "worker.log").read_text()
    assert worker.worker_alive(bdir), "the run was meant to be still exiting"
    exits = worker.Exits()
    exits.add_if_at_recap(bdir, doc)
    assert exits.pending == 1
    exits.wait(lambda msg: pytest.fail(msg))
    assert not worker.worker_alive(bdir)
    [command] = Path(doc["run_dir"]).glob("artifacts/*/command")
    assert "HOME" not in json.loads(command.read_text())["env"]
    # A result not given at the recap, or a worker long gone, is not waited on.
    nothing = worker.Exits()
    nothing.add_if_at_recap(bdir, doc)
    nothing.add_if_at_recap(bdir, {**doc, "at_recap": False})
    assert nothing.pending == 0
