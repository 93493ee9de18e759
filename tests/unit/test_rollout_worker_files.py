"""The batch worker's spec.json and result.json are pydantic models on both sides."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetgate.errors import BadInput
from fleetgate.rollout import worker

SPEC = {"rollout_id": "r1", "batch_id": "apply-1", "wave": 1, "journal": "/j.db",
        "inventory": "/inv.ini", "playbook": "/p.yml", "limit": "h1,h2", "extravars": {},
        "forks": 2, "timeout": 60, "env": {}}


def test_result_round_trip_and_absence(tmp_path: Path) -> None:
    assert worker.read_result(tmp_path) is None and worker.result(tmp_path) is None
    doc = worker.BatchResult(rc=0, status="successful", run_dir="/r", wall_s=1.5,
                             hosts={"h1": worker.HostRun(outcome="changed")})
    (tmp_path / worker.RESULT).write_text(doc.model_dump_json())
    assert worker.read_result(tmp_path) == doc
    plain = worker.result(tmp_path)
    assert plain is not None and plain["hosts"]["h1"]["outcome"] == "changed"


@pytest.mark.parametrize(("text", "field", "reason"), [
    ('{"rc": 0, "status": "ok", "hosts": {"h1": {"outcome": "exploded"}}}',
     "hosts.h1.outcome", "Input should be"),
    ('{"status": "ok"}', "rc", "required field is missing"),
    ('{"rc": 0, "sta', "(top level)", "Invalid JSON"),
])
def test_a_corrupt_result_is_one_line_naming_file_and_field(tmp_path: Path, text: str,
                                                           field: str, reason: str) -> None:
    (tmp_path / worker.RESULT).write_text(text)
    with pytest.raises(BadInput) as exc:
        worker.read_result(tmp_path)
    assert exc.value.source == str(tmp_path / worker.RESULT) and exc.value.field == field
    assert "corrupt batch result" in exc.value.reason and reason in exc.value.reason


def test_spawn_refuses_a_bad_spec_before_starting_anything(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="forks"):
        worker.spawn(tmp_path, {**SPEC, "forks": 0})
    with pytest.raises(BadInput, match="unknown key"):
        worker.spawn(tmp_path, {**SPEC, "limt": "h1"})
    assert not (tmp_path / worker.SPEC).exists() and not (tmp_path / "worker.log").exists()


def test_a_worker_with_a_corrupt_spec_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / worker.SPEC).write_text(json.dumps({**SPEC, "wave": "one"}))
    with pytest.raises(BadInput) as exc:
        worker.run_batch(tmp_path)
    assert exc.value.field == "wave" and "corrupt batch spec" in exc.value.reason


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_warm_worker_runs_the_batch_it_is_handed_as_a_spawned_one_would(
        tmp_path: Path) -> None:
    warm = worker.WarmWorkers(tmp_path / "warm")
    warm.start()
    first = warm._proc
    assert first is not None
    bdir = tmp_path / "batch"
    bdir.mkdir()
    spec = {**SPEC, "journal": str(tmp_path / "j.db"), "inventory": str(tmp_path / "no.ini")}
    pid = worker.spawn(bdir, spec, warm=warm)
    assert pid == first.pid and warm._proc is not None and warm._proc.pid != pid
    res = worker.wait(bdir, spawned_pid=pid)
    # The inventory is missing: the batch's own error, in its result, as ever.
    assert res is not None and res["rc"] == 1 and "no.ini" in res["error"]
    assert json.loads((bdir / worker.PIDFILE).read_text())["pid"] == pid
    assert (bdir / "worker.log").exists()
    spare = warm._proc.pid
    warm.close()
    assert _gone(spare) and not list((tmp_path / "warm").iterdir())


def test_a_warm_worker_whose_controller_is_gone_exits_without_touching_anything(
        tmp_path: Path) -> None:
    code = ("import sys, os; from pathlib import Path; from fleetgate.rollout import worker\n"
            f"w = worker.WarmWorkers(Path({str(tmp_path)!r}))\n"
            "w.start(); print(w._proc.pid, flush=True); os._exit(0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    pid = int(proc.stdout)
    deadline = time.monotonic() + 60
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)
    assert not list(tmp_path.rglob("worker.*"))
