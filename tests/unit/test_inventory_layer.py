"""The one inventory layer: real `ansible-inventory` (local, no hosts contacted) on INI, YAML
directories with group_vars/host_vars, scripts and several sources at once."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from fleetgate.errors import BadInput
from fleetgate.runner import inventory as layer
from fleetgate.runner.inventory import resolve_inventory
from tests.conftest import REPO, fleetgate

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


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            inventory_calls: list[list[str]]) -> list[list[str]]:
    """inventory_calls, with a state dir of this test's own and an empty process cache."""
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(tmp_path / "state"))
    layer._CACHE.clear()
    return inventory_calls


def _new_process() -> None:
    layer._CACHE.clear()


def test_an_answer_kept_on_disk_serves_the_next_process_until_anything_it_depends_on_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ini: Path,
        counted: list[list[str]]) -> None:
    """The next fleetgate process (a command, a batch worker) reuses an answer from the state
    dir only while the sources' contents, group_vars beside them, the node classes and the
    ANSIBLE_* environment are what they were; it is kept privately."""
    first = resolve_inventory(ini)
    [kept] = (tmp_path / "state" / layer.CACHE_DIR).glob("*.json")
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert oct(kept.parent.stat().st_mode & 0o777) == "0o700"
    _new_process()
    assert resolve_inventory(ini).doc == first.doc and len(counted) == 1

    # Same size and mtime, other content: asked again.
    st = ini.stat()
    ini.write_text(INI.replace("rack=r2", "rack=r3"))
    os.utime(ini, ns=(st.st_atime_ns, st.st_mtime_ns))
    _new_process()
    assert resolve_inventory(ini).hostvars["m1"]["rack"] == "r3" and len(counted) == 2

    # A group_vars file added beside the INI file.
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("site_note: edited\n")
    _new_process()
    assert resolve_inventory(ini).hostvars["m1"]["site_note"] == "edited" and len(counted) == 3

    # The node classes the vars plugin reads, and Ansible's environment.
    classes = tmp_path / "classes"
    shutil.copytree(REPO / "inventory" / "classes", classes)
    monkeypatch.setenv("FLEETGATE_CLASSES_DIR", str(classes))
    _new_process()
    resolve_inventory(ini)
    (classes / "note.txt").write_text("x\n")
    _new_process()
    resolve_inventory(ini)
    monkeypatch.setenv("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    _new_process()
    resolve_inventory(ini)
    assert len(counted) == 6
    _new_process()
    resolve_inventory(ini, limit="c1")
    assert len(counted) == 7
    _new_process()
    assert resolve_inventory(ini, limit="c1").hosts == ["c1"] and len(counted) == 7


def test_a_kept_answer_is_validated_again_and_a_bad_one_is_asked_for_afresh(
        tmp_path: Path, ini: Path, counted: list[list[str]]) -> None:
    resolve_inventory(ini)
    [kept] = (tmp_path / "state" / layer.CACHE_DIR).glob("*.json")
    rec = json.loads(kept.read_text())
    rec["doc"]["_meta"]["hostvars"]["m1"]["ansible_host"] = "-oProxyCommand=x"
    kept.write_text(json.dumps(rec))
    _new_process()
    assert resolve_inventory(ini).hostvars["m1"]["ansible_host"] == "127.0.0.1"
    assert len(counted) == 2
    kept.write_text("{not json")
    _new_process()
    assert resolve_inventory(ini).hosts == ["c1", "m1"] and len(counted) == 3


def test_no_answer_is_kept_for_a_script_or_for_plaintext_credentials(
        tmp_path: Path, counted: list[list[str]]) -> None:
    script = tmp_path / "dyn.py"
    script.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps("
                      "{'g': {'hosts': ['s1']}, '_meta': {'hostvars': {}}}))\n")
    script.chmod(0o755)
    assert resolve_inventory(script).hosts == ["s1"]
    secret = tmp_path / "secret.ini"
    secret.write_text("h1 ansible_host=127.0.0.1 ansible_password=hunter2hunter2\n")
    assert "h1" in resolve_inventory(secret).hosts
    # A key file is a path, not a credential: that answer is kept.
    keyed = tmp_path / "keyed.ini"
    keyed.write_text("h2 ansible_host=127.0.0.1 ansible_ssh_private_key_file=/k/id\n")
    resolve_inventory(keyed)
    [kept] = (tmp_path / "state" / layer.CACHE_DIR).glob("*.json")
    assert "h2" in kept.read_text() and "hunter2" not in kept.read_text()


def test_testinfra_primed_with_the_resolution_sees_what_ansible_inventory_says(
        tmp_path: Path, ini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoke suite hands testinfra the controller's answer (smoke/session.py) instead of
    letting it start ansible-inventory on the stand-in script again: the hosts and variables
    testinfra then connects with are the ones ansible-inventory gives for that script."""
    from testinfra.utils.ansible_runner import AnsibleRunner

    from fleetgate.smoke.session import prime_inventory

    inv = resolve_inventory(ini)
    script = inv.hosts_source(tmp_path, ["c1", "m1"], "g")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}"
                       f"{os.environ.get('PATH', '')}")
    asked = AnsibleRunner(str(script))  # testinfra's own way: runs ansible-inventory
    assert asked.inventory["_meta"]["hostvars"]
    primed_source = str(tmp_path / "primed.py")
    shutil.copy(script, primed_source)
    prime_inventory(primed_source, layer.stand_in_answer(script))
    # No ansible-inventory can run now: the primed runner must not need one.
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    primed = AnsibleRunner.get_runner(primed_source)
    for pattern in ("c1", "m1", "all", "gpu"):
        assert primed.get_hosts(pattern) == asked.get_hosts(pattern), pattern
    for host in ("c1", "m1"):
        mine, theirs = primed.get_variables(host), asked.get_variables(host)
        for key in ("ansible_host", "ansible_port", "rack", "inventory_hostname"):
            assert mine.get(key) == theirs.get(key), (host, key)
        assert sorted(mine["group_names"]) == sorted(theirs["group_names"])
