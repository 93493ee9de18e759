"""State is private and secrets never reach it: a journal, a plan artifact and a real batch
worker (ansible-runner, on localhost) in a fresh state dir leave nothing another user can
read, and a secret var the playbook prints, echoes and fails with is in no file and no report."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.rollout import artifact, report_html, report_md, worker
from fleetgate.rollout.engine import Controller, require_secrets, rollout_dir
from fleetgate.rollout.journal import Journal
from fleetgate.runner import redact
from fleetgate.runner.ansible import SECRET_VARS_FILE
from fleetgate.runner.private_state import private_umask, replace_private
from fleetgate.runner.secret_vars import SecretRef, resolve
from tests.conftest import fleetgate
from tests.privacy import assert_private_tree, find_secret, open_paths

SECRET = "rt-7f3a9c1e-registry-token"  # one value only this file uses
KEYLIKE = "plainvalue-4d2b"  # printed as api_key=..., masked by the key pattern
HIDDEN = "nolog-output-91c"  # printed by a no_log task

INVENTORY = {"all": {"children": {"pool_canary": {"hosts": {"localhost": {
    "ansible_connection": "local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}

PLAYBOOK = [{"hosts": "all", "gather_facts": True, "tasks": [
    {"name": "Show the token", "ansible.builtin.debug": {"msg": "token is {{ registry_token }}"}},
    {"name": "Echo the token", "ansible.builtin.command": "echo {{ registry_token }}",
     "changed_when": False},
    {"name": "Hidden", "ansible.builtin.command": f"echo {HIDDEN}", "no_log": True,
     "changed_when": False},
    {"name": "Credential-looking output", "ansible.builtin.debug": {"msg": f"api_key={KEYLIKE}"}},
    {"name": "Hand the token to the host", "ansible.builtin.copy": {
        "content": "{{ registry_token }}", "dest": "{{ out_dir }}/token.txt"}},
    {"name": "Fail quoting the token",
     "ansible.builtin.fail": {"msg": "registry refused {{ registry_token }}"}},
]}]


def _plan(inventory: str) -> dict[str, Any]:
    return {"name": "private", "targets": {"inventory": inventory},
            "change": {"playbook": "examples/rollout/stamp-version.yml",
                       "extra_vars": {"stamp_version": "2"},
                       "secret_vars": {"registry_token": {"env": "REGISTRY_TOKEN"}}},
            "waves": {"pools": ["pool_canary"]}}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)  # noqa: S103 - as an older fleetgate (umask 022) left it
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(state))
    monkeypatch.setenv("REGISTRY_TOKEN", SECRET)
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    (tmp_path / "plan.yml").write_text(yaml.safe_dump(_plan("inv.yml")))
    (tmp_path / "out").mkdir()
    return {"state": state, "root": tmp_path}


def test_a_rollout_batch_leaves_private_state_and_no_secret(site: dict[str, Path]) -> None:
    state, root = site["state"], site["root"]
    doc = artifact.build(root / "plan.yml", None)
    art = artifact.write(doc, None)
    assert art.is_relative_to(state)
    assert doc["plan"]["change"]["secret_vars"]["registry_token"]["env"] == "REGISTRY_TOKEN"

    require_secrets(doc["plan"], "test")  # what start and the controller do first
    j = Journal()
    rid = "private-test-0001"
    j.create_rollout(rid, "private", doc["inventory"], doc, doc["waves"])
    bdir = rollout_dir(rid) / "batches" / "apply-1"
    with private_umask():  # the controller's own umask (Controller.run)
        bdir.mkdir(parents=True)
    j.start_batch("apply-1", rid, 1, "apply", ["localhost"], bdir)
    pid = worker.spawn(bdir, {
        "rollout_id": rid, "batch_id": "apply-1", "wave": 1, "journal": str(j.path),
        "inventory": str(root / "inv.yml"), "playbook": str(root / "play.yml"),
        "limit": "localhost", "extravars": {"out_dir": str(root / "out")},
        "secret_vars": doc["plan"]["change"]["secret_vars"], "forks": 1, "timeout": 120})
    res = worker.wait(bdir, spawned_pid=pid)
    assert res is not None, (bdir / "worker.log").read_text()
    run_dir = Path(res["run_dir"])
    assert not (run_dir / SECRET_VARS_FILE).exists()  # gone by the result, at the recap
    # The rest of the run (its artifacts trimmed, made private) is over once the worker has
    # exited, which the controller waits for before it ends.
    exits = worker.Exits()
    exits.add_if_at_recap(bdir, res, child=pid)
    assert exits.pending == 1  # its result came at the recap
    exits.wait(pytest.fail)
    # As a worker killed mid-run would leave it: the controller removes it with the batch.
    (run_dir / SECRET_VARS_FILE).write_text(f"registry_token: {SECRET}\n")
    os.chmod(run_dir / SECRET_VARS_FILE, 0o600)
    Controller(j, rid)._close_batch("apply-1", 1, bdir, res)
    # A reason quoting the secret, as a careless message would: the journal masks it.
    j.set_host(rid, "localhost", "failed_held", f"apply failed: {res['hosts']['localhost']}"
               f" (token {SECRET})")

    # The secret did reach Ansible, and the failing task's message was kept, masked.
    assert (root / "out" / "token.txt").read_text() == SECRET
    host = res["hosts"]["localhost"]
    assert host["outcome"] == "failed" and host["message"] == f"registry refused {redact.MASK}"
    failed = [e for e in j.events(rid, kinds=("ansible",)) if e["data"]["event"] ==
              "runner_on_failed"]
    assert failed and failed[0]["data"]["msg"] == f"registry refused {redact.MASK}"
    assert j.hosts(rid)["localhost"].reason.endswith(f"(token {redact.MASK})")
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    hidden = [e for e in events if e.get("event_data", {}).get("task") == "Hidden"
              and e["event"] == "runner_on_ok"]
    assert hidden and hidden[0]["event_data"]["res"] == {"censored": redact.CENSORED}
    command = json.loads(next(run_dir.glob("artifacts/*/command")).read_text())
    assert "REGISTRY_TOKEN" not in command["env"] and "ANSIBLE_CONFIG" in command["env"]

    j.close()
    reports = [report_md.render(Journal(), rid), report_html.render(Journal(), rid)]
    # The host's failure (with the masked secret) is in both, so its absence below counts.
    assert all("registry refused" in r and "token" in r for r in reports)
    for needle in (SECRET, KEYLIKE, HIDDEN):
        assert not find_secret(state, needle), needle
        assert not any(needle in r for r in reports), needle
    assert_private_tree(state)
    assert stat.S_IMODE(art.stat().st_mode) == 0o600


def test_an_open_state_dir_and_journal_are_made_private_on_open(
        site: dict[str, Path]) -> None:
    state = site["state"]
    (state / "rollouts").mkdir(mode=0o755)
    os.chmod(state / "rollouts", 0o755)  # noqa: S103 - state from before the rule
    old = state / "rollouts" / "journal.db"
    sqlite3.connect(old).close()
    os.chmod(old, 0o644)
    Journal().close()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    # The rollouts dir predates the rule: not ours to chmod one by one, but unreachable
    # through the private root. A new state dir has nothing open at all.
    assert open_paths(state) == [f"0755 {state / 'rollouts'}"]


def test_a_missing_secret_is_bad_input_before_the_rollout_exists(
        site: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REGISTRY_TOKEN")
    proc = fleetgate("rollout", "start", str(site["root"] / "plan.yml"),
                     env={"FLEETGATE_STATE_DIR": str(site["state"])})
    assert proc.returncode == 2, proc.stderr
    assert "change.secret_vars.registry_token" in proc.stderr
    assert "REGISTRY_TOKEN is not set" in proc.stderr and "Traceback" not in proc.stderr
    assert Journal().rollouts() == []


def test_a_secret_file_must_be_the_operators_alone(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(SECRET + "\n")
    os.chmod(f, 0o644)
    ref = {"registry_token": SecretRef(file=str(f))}
    with pytest.raises(BadInput) as exc:
        resolve(ref, source="plan.yml", section="change")
    assert exc.value.field == "change.secret_vars.registry_token"
    assert "0644" in exc.value.reason
    os.chmod(f, 0o600)
    assert resolve(ref, source="plan.yml", section="change") == {"registry_token": SECRET}
    (tmp_path / "short").write_text("abc")
    os.chmod(tmp_path / "short", 0o600)
    with pytest.raises(BadInput, match="shorter than"):
        resolve({"t": SecretRef(file=str(tmp_path / "short"))}, source="p", section="change")


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_a_secret_file_that_is_not_a_file_is_refused_without_blocking(
        tmp_path: Path, kind: str) -> None:
    f = tmp_path / "token"
    if kind == "a FIFO":
        os.mkfifo(f, 0o600)  # no writer: a blocking open would wait forever
    else:
        f.mkdir(mode=0o700)
    with pytest.raises(BadInput) as exc:
        resolve({"registry_token": SecretRef(file=str(f))}, source="plan.yml", section="change")
    assert "must be a regular file of yours" in exc.value.reason
    assert f"it is {kind}, 0600" in exc.value.reason or f"it is {kind}, 0700" in exc.value.reason


def test_redactor_masks_secrets_and_credential_text_but_not_metrics() -> None:
    r = redact.Redactor()
    r.add_secrets(["s3cr3t-\"quoted\"-value"])
    assert r.text('echo s3cr3t-"quoted"-value') == f"echo {redact.MASK}"
    assert r.text(json.dumps({"x": 's3cr3t-"quoted"-value'})) == f'{{"x": "{redact.MASK}"}}'
    assert r.text("password=hunter2 user=bob") == f"password={redact.MASK} user=bob"
    assert r.text('"api_key": "a b"') == f'"api_key": "{redact.MASK}"'
    for kept in ("tokens_per_s=812.5", "gemm pass: 3 of 3", "status: pass"):
        assert r.text(kept) == kept
    assert r.keyed({"vault_password": "x", "n": 1}) == {"vault_password": redact.MASK, "n": 1}
    assert r.data({"tokens_per_s": 1.0}) == {"tokens_per_s": 1.0}
    with pytest.raises(ValueError, match="cannot be masked"):
        r.add_secrets(["abc"])


def test_private_umask_nests_across_threads_and_restores() -> None:
    before = os.umask(0o022)
    try:
        entered, leave = threading.Event(), threading.Event()

        def other() -> None:
            with private_umask():
                entered.set()
                leave.wait(5)

        t = threading.Thread(target=other)
        with private_umask():
            t.start()
            assert entered.wait(5)
        # The first user is out while the thread is still inside: still private.
        assert os.umask(0o077) == 0o077
        leave.set()
        t.join()
        assert os.umask(0o022) == 0o022  # the last one out restored the process's own
    finally:
        os.umask(before)


def test_replace_private_leaves_a_whole_0600_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "d" / "result.json"
    replace_private(target, "first")
    target.chmod(0o644)  # an old, more open file is replaced, not reused
    replace_private(target, "second")
    assert target.read_text() == "second"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert oct(target.parent.stat().st_mode & 0o777) == "0o700"
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]
