"""The one inventory layer: real `ansible-inventory` (local, no hosts contacted) on INI, YAML
directories with group_vars/host_vars, scripts and several sources at once."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fleetgate.errors import BadInput
from fleetgate.runner import inventory as layer
from fleetgate.runner.inventory import resolve_inventory
from tests.conftest import fleetgate

INI = """\
[pool_canary]
c1 ansible_host=127.0.0.1 ansible_port=1 rack=r1 fleetgate_class=lab-cpu

[pool_main]
m1 ansible_host=127.0.0.1 ansible_port=1 rack=r2

[gpu:children]
pool_main
"""


@pytest.fixture
def ini(tmp_path: Path) -> Path:
    """INI above, as tmp_path/hosts.ini."""
    path = tmp_path / "hosts.ini"
    path.write_text(INI)
    return path


@pytest.fixture
def inventory_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of each command the inventory layer runs (ansible-inventory), as it runs it:
    how a test counts resolutions."""
    calls: list[list[str]] = []
    real = layer.subprocess.run

    def counting(argv: list[str], **kw: object) -> object:
        calls.append(argv)
        return real(argv, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(layer.subprocess, "run", counting)
    return calls


def _dir_inventory(root: Path) -> Path:
    d = root / "inv.d"
    (d / "group_vars").mkdir(parents=True)
    (d / "host_vars").mkdir()
    (d / "hosts.yml").write_text("all:\n  children:\n    pool_extra:\n      hosts:\n"
                                 "        x1: {ansible_host: 127.0.0.1}\n"
                                 "        x2: {ansible_host: 127.0.0.1}\n")
    (d / "group_vars" / "pool_extra.yml").write_text("rack: r9\nzone: z1\n")
    (d / "host_vars" / "x2.yml").write_text("rack: r7\n")
    return d


def test_ini_and_a_directory_resolve_as_ansible_sees_them(tmp_path: Path, ini: Path) -> None:
    inv = resolve_inventory(ini)
    assert inv.hosts == ["c1", "m1"]
    assert inv.hostvars["c1"]["rack"] == "r1" and inv.hostvars["c1"]["ansible_port"] == 1
    # The fleetgate_class vars plugin ran: the class's pins are host vars.
    assert inv.hostvars["c1"]["fleetgate_accelerator"]["backend"] == "cpu"
    assert "fleetgate_accelerator" not in inv.hostvars["m1"]
    assert inv.groups_of()["m1"] == ["all", "gpu", "pool_main"]

    d = _dir_inventory(tmp_path)
    both = resolve_inventory([ini, d])
    assert both.hosts == ["c1", "m1", "x1", "x2"]
    assert both.hostvars["x1"]["rack"] == "r9" and both.hostvars["x2"]["rack"] == "r7"
    assert both.hostvars["x2"]["zone"] == "z1"
    assert resolve_inventory([ini, d], "pool_extra:&gpu").hosts == []
    assert resolve_inventory([ini, d], "pool_extra").hosts == ["x1", "x2"]


def test_a_script_inventory_and_the_one_host_stand_in(tmp_path: Path, ini: Path) -> None:
    script = tmp_path / "dyn.py"
    script.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({{'web': "
                      "{'hosts': ['s1']}, '_meta': {'hostvars': {'s1': {'rack': 'r3'}}}}))\n")
    script.chmod(0o755)
    inv = resolve_inventory([script, ini])
    assert inv.hostvars["s1"]["rack"] == "r3" and "c1" in inv.hosts
    # testinfra resolves again, one process per group of hosts: each gets a script that
    # answers with those hosts alone, their variables and groups as resolved here, whatever
    # the sources were.
    for group in (["s1"], ["m1"], ["s1", "m1"]):
        script = inv.hosts_source(tmp_path, group, "-".join(group))
        some = resolve_inventory(script)
        assert os.access(script, os.X_OK)
        assert sorted(some.hosts) == sorted(group)
        for host in group:
            assert some.hostvars[host] == inv.hostvars[host]
            assert some.groups_of()[host] == inv.groups_of()[host]
    assert "c1" not in resolve_inventory(inv.hosts_source(tmp_path, ["s1", "m1"], "x")).hosts
    assert "gpu" in inv.groups_of()["m1"]  # through pool_main's parent, kept in the stand-in


def test_resolved_once_per_command_and_again_after_an_edit(
        ini: Path, inventory_calls: list[list[str]]) -> None:
    calls = inventory_calls
    first = resolve_inventory(ini)
    assert resolve_inventory(ini) is first and len(calls) == 1
    ini.write_text(INI + "\n[late]\nl1\n")
    os.utime(ini, ns=(1, 1))  # a different mtime even on a coarse clock
    assert "l1" in resolve_inventory(ini).hosts and len(calls) == 2


@pytest.mark.parametrize(("text", "reason"), [
    ("[broken\nh1 =\n", "failed to parse inventory source"),
    ("[g]\nbad$host\n", "host name has characters outside"),
])
def test_bad_inventories_are_one_line_bad_input(tmp_path: Path, text: str, reason: str) -> None:
    bad = tmp_path / "bad.ini"
    bad.write_text(text)
    with pytest.raises(BadInput) as exc:
        resolve_inventory(bad)
    assert reason in str(exc.value) and str(bad) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_and_odd_sources(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file or directory"):
        resolve_inventory(tmp_path / "nope.ini")
    with pytest.raises(BadInput, match="no inventory given"):
        resolve_inventory([])
    with pytest.raises(BadInput, match="host pattern has characters"):
        resolve_inventory(tmp_path, "a;rm -rf /")


def test_fleet_commands_take_ini_inventories(tmp_path: Path, ini: Path) -> None:
    """`fleet facts -i hosts.ini` used to fail with a YAML error; now Ansible reads the INI
    (the host is unreachable: port 1), and a broken INI is exit 2 before any run."""
    env = {"FLEETGATE_STATE_DIR": str(tmp_path / "state")}
    proc = fleetgate("fleet", "ping", "-i", str(ini), "--limit", "c1", "--json", env=env,
                     timeout=180)
    assert proc.returncode == 1, proc.stderr
    assert '"c1"' in proc.stdout and "unreachable" in proc.stdout
    bad = tmp_path / "bad.ini"
    bad.write_text("[broken\nh1 =\n")
    env = {"FLEETGATE_STATE_DIR": str(tmp_path / "state2")}
    proc = fleetgate("fleet", "facts", "-i", str(bad), env=env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert str(bad) in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "state" / "runs").is_dir() and not (tmp_path / "state2").exists()


def test_a_resolution_handed_over_is_reused_only_while_its_files_are_unchanged(
        tmp_path: Path, ini: Path, inventory_calls: list[list[str]]) -> None:
    """The controller hands a batch worker its resolution (rollout/worker.py): the worker
    asks ansible-inventory only when a source file, or the group_vars/host_vars beside an
    INI file, changed since; what it reuses is validated again."""
    calls = inventory_calls
    record = tmp_path / "batch" / layer.RESOLUTION_FILE
    assert layer.save_resolution(resolve_inventory(ini), record)
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    layer._CACHE.clear()  # as in a new process
    loaded = layer.load_resolution(record)
    assert loaded is not None and loaded.hosts == ["c1", "m1"]
    assert resolve_inventory(ini) is loaded and len(calls) == 1

    # A group_vars file added beside the INI file: the record no longer counts.
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("site_note: edited\n")
    layer._CACHE.clear()
    assert layer.load_resolution(record) is None
    assert resolve_inventory(ini).hostvars["m1"]["site_note"] == "edited" and len(calls) == 2

    # A record that was tampered with is validated again on load, like a fresh answer.
    layer.save_resolution(resolve_inventory(ini), record)
    doc = json.loads(record.read_text())
    doc["doc"]["_meta"]["hostvars"]["m1"]["ansible_host"] = "-oProxyCommand=x"
    record.write_text(json.dumps(doc))
    layer._CACHE.clear()
    with pytest.raises(BadInput, match="ansible_host"):
        layer.load_resolution(record)

    # Edited source, missing or corrupt record: resolve again.
    layer.save_resolution(resolve_inventory(ini), record)
    ini.write_text(INI + "\n[late]\nl1\n")
    os.utime(ini, ns=(1, 1))
    assert layer.load_resolution(record) is None
    record.write_text("{not json")
    assert layer.load_resolution(record) is None
    assert layer.load_resolution(tmp_path / "absent.json") is None

    # A script's answer is not its file's: never handed over.
    script = tmp_path / "dyn.py"
    script.write_text(f"#!{sys.executable}\nprint('{{}}')\n")
    script.chmod(0o755)
    other = tmp_path / "other.json"
    assert not layer.save_resolution(layer.Inventory((script,), None, {}), other)
    assert not other.exists()
