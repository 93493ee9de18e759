"""The triage commands through the real CLI: replayed collections, and bad input that must end
in one line and exit 2 with nothing run (no Ansible run directory is ever created)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import fleetgate

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"FLEETGATE_STATE_DIR": str(tmp_path / "state")}


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    # Port 1 on loopback: nothing listens, so a run that does start finds the host unreachable.
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 127.0.0.1\n"
                   "      ansible_port: 1\n      fleetgate_class: lab-cpu\n"
                   "  vars:\n    ansible_user: root\n")
    return inv


def one_line_error(proc: object, *needles: str) -> None:
    rc, err = proc.returncode, proc.stderr  # type: ignore[attr-defined]
    assert rc == 2, (rc, proc.stdout, err)  # type: ignore[attr-defined]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleetgate"), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


def nothing_ran(env: dict[str, str]) -> None:
    runs = Path(env["FLEETGATE_STATE_DIR"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def test_replay_healthy_lab_host_json(env: dict[str, str]) -> None:
    proc = fleetgate("diagnose", "--from", str(FIX / "lab-saved-healthy.json"), "--json",
                     env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    walk = doc["hosts"]["lab-c01"]
    assert (doc["exit_code"], walk["verdict"], walk["backend"]) == (0, "clean", "cpu")
    assert walk["stages"][0]["summary"] == "no GPU tools (cpu backend)"


def test_replay_throttled_lab_host_prints_the_decision(env: dict[str, str]) -> None:
    proc = fleetgate("diagnose", "--from", str(FIX / "lab-saved-throttle-cpu.json"), env=env)
    assert proc.returncode == 1, proc.stderr
    assert "CPU capped at 0.05 of 2 CPUs" in proc.stdout
    assert "decision: CPU throttling masquerades as a slow GPU" in proc.stdout


def test_replay_of_a_raw_collector_document(env: dict[str, str], tmp_path: Path) -> None:
    saved = json.loads((FIX / "lab-saved-nccl-bad-nic.json").read_text())
    raw = tmp_path / "collected.json"
    raw.write_text(json.dumps(saved["collection"]))
    proc = fleetgate("diagnose", "--from", str(raw), "--backend", "cpu", "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["hosts"]["collected"]["stopped_at"] == "comms"


@pytest.mark.parametrize(("text", "needle"), [
    ("not json", "not JSON"),
    ('{"schema": "fleetgate.triage.collect/v1", "commands": 3}', "not a triage collection"),
    ('{"schema": "something/v9"}', "not a triage collection: schema"),
    ('[1, 2]', "not a triage collection"),
])
def test_malformed_collection_is_bad_input(env: dict[str, str], tmp_path: Path, text: str,
                                           needle: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    one_line_error(fleetgate("diagnose", "--from", str(bad), env=env), str(bad), needle)


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("duration_s",), -3.0, "duration_s: Input should be greater than or equal to 0"),
    (("timeout_s",), -1, "timeout_s: Input should be greater than or equal to 0"),
    (("commands", "dmesg", "duration_s"), -0.5, "commands.dmesg.duration_s: Input should be"),
    (("facts", "cpu_count"), -2, "facts.cpu_count: Input should be greater than or equal to 1"),
    (("facts", "cpus_allowed"), 0, "facts.cpus_allowed: Input should be greater than"),
])
def test_an_impossible_time_or_cpu_count_is_bad_input(env: dict[str, str], tmp_path: Path,
                                                      path: tuple[str, ...], value: float,
                                                      needle: str) -> None:
    saved = json.loads((FIX / "lab-saved-healthy.json").read_text())
    where = saved["collection"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    bad = tmp_path / "triage-h1.json"
    bad.write_text(json.dumps(saved))
    one_line_error(fleetgate("diagnose", "--from", str(bad), env=env), str(bad),
                   f"not a triage collection: {needle}")


def test_diagnose_bad_inputs(env: dict[str, str], inventory: Path, tmp_path: Path) -> None:
    one_line_error(fleetgate("diagnose", "-i", str(tmp_path / "nope.yml"), "--limit", "h1",
                             env=env), "no such file")
    one_line_error(fleetgate("diagnose", "-i", str(inventory), "--limit", "h1;reboot",
                             env=env), "--limit")
    one_line_error(fleetgate("diagnose", "-i", str(inventory), "--limit", "nosuchhost",
                             env=env), "no host in the inventory matches")
    one_line_error(fleetgate("diagnose", "-i", str(inventory), env=env), "--limit HOST")
    one_line_error(fleetgate("diagnose", "-i", str(inventory), "--limit", "h1", "--backend",
                             "cpu", env=env), "only apply to --from")
    one_line_error(fleetgate("diagnose", "-i", str(inventory), "--limit", "h1",
                             "--command-timeout", "0", env=env), "--command-timeout")
    one_line_error(fleetgate("diagnose", "--from", str(FIX / "lab-saved-healthy.json"),
                             "--backend", "tpu", env=env), "--backend")
    nothing_ran(env)


def test_cache_key_bad_inputs(env: dict[str, str], inventory: Path) -> None:
    one_line_error(fleetgate("fleet", "cache-key", "h1", "-i", str(inventory), "--engine",
                             "tensorrt", env=env), "--engine")
    one_line_error(fleetgate("fleet", "cache-key", "h1", "-i", str(inventory), env=env),
                   "--engine")
    one_line_error(fleetgate("fleet", "cache-key", "h*", "-i", str(inventory), "--engine",
                             "tensorrt=10.3", env=env), "not a single host name")
    one_line_error(fleetgate("fleet", "cache-key", "nosuch", "-i", str(inventory), "--engine",
                             "tensorrt=10.3", env=env), "no host in the inventory matches")
    one_line_error(fleetgate("fleet", "cache-key", "h1", "-i", str(inventory), "--engine",
                             "tensorrt=10.3", "--runtime", "cuda", env=env), "--runtime")
    nothing_ran(env)


def test_drift_and_warmup_bad_inputs(env: dict[str, str], inventory: Path,
                                     tmp_path: Path) -> None:
    one_line_error(fleetgate("fleet", "drift", "-i", str(tmp_path / "nope.yml"), env=env),
                   "no such file")
    bad_class = tmp_path / "bad-class.yml"
    bad_class.write_text("all:\n  hosts:\n    h1:\n      fleetgate_class: No-Such!\n")
    one_line_error(fleetgate("fleet", "drift", "-i", str(bad_class), env=env))
    one_line_error(fleetgate("preflight", "warmup", "-i", str(inventory), "--import",
                             "os;reboot", env=env), "--import")
    one_line_error(fleetgate("preflight", "warmup", "-i", str(inventory), "--class",
                             "no-such-class", env=env), "unknown class")
    one_line_error(fleetgate("preflight", "warmup", "-i", str(inventory), "--class",
                             "nvidia-h200-580", env=env), "no host of class nvidia-h200-580")
    nothing_ran(env)


def test_unreachable_host_is_inconclusive_exit_4(env: dict[str, str], inventory: Path) -> None:
    proc = fleetgate("diagnose", "-i", str(inventory), "--limit", "h1", "--json", env=env,
                     timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    walk = json.loads(proc.stdout)["hosts"]["h1"]
    assert walk["verdict"] == "inconclusive"
    assert walk["reason"].startswith("could not collect: unreachable")
    assert {s["status"] for s in walk["stages"]} == {"inconclusive"}
    drift = fleetgate("fleet", "drift", "-i", str(inventory), "--json", env=env, timeout=120)
    assert drift.returncode == 4, drift.stdout + drift.stderr
    assert json.loads(drift.stdout)["hosts"]["h1"]["status"] == "inconclusive"
