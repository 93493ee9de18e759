"""Every kind of Ansible inventory source gives fleetgate the same fleet, and a source that
could put a shell word or an option on a command line is one line of bad input. Real
`ansible-inventory` throughout (local, no host is contacted), with the checkout's vars plugin."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.runner.inventory import Inventory, resolve_inventory
from tests.conftest import REPO

# n1-n3 take their class from the class group, n4 from its own host var.
HOSTS: dict[str, dict[str, Any]] = {
    "n1": {"ansible_port": 2201, "rack": "r1", "zone": "z1"},
    "n2": {"ansible_port": 2202, "rack": "r1", "zone": "z1"},
    "n3": {"ansible_port": 2203, "rack": "r2", "zone": "z2"},
    "n4": {"ansible_port": 2204, "rack": "r3", "zone": "z2", "fleetgate_class": "lab-vm"},
}
CLASS_GROUP = ["n1", "n2", "n3"]
POOLS = {"pool_canary": ["n1"], "pool_main": ["n2", "n3", "n4"]}
ALL_VARS = {"ansible_host": "127.0.0.1", "ansible_user": "root"}
EXPECTED = {
    "n1": ("lab-cpu", "z1", "r1", 2201, ["class_lab_cpu", "pool_canary"]),
    "n2": ("lab-cpu", "z1", "r1", 2202, ["class_lab_cpu", "pool_main"]),
    "n3": ("lab-cpu", "z2", "r2", 2203, ["class_lab_cpu", "pool_main"]),
    "n4": ("lab-vm", "z2", "r3", 2204, ["pool_main"]),
}


@pytest.fixture(autouse=True)
def _checkout_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The vars plugin reads node classes from the checkout whatever the working directory.
    monkeypatch.setenv("FLEETGATE_HOME", str(REPO))
    monkeypatch.setenv("FLEETGATE_SITE", str(REPO))


def summary(inv: Inventory) -> dict[str, tuple[Any, ...]]:
    groups = inv.groups_of()
    out = {}
    for host, hv in inv.hostvars.items():
        assert hv["ansible_host"] == "127.0.0.1" and hv["ansible_user"] == "root", host
        mine = [g for g in groups[host] if g.startswith(("class_", "pool_"))]
        out[host] = (hv.get("fleetgate_class"), hv.get("zone"), hv.get("rack"),
                     hv.get("ansible_port"), mine)
    return out


def _ini_line(host: str, hv: dict[str, Any]) -> str:
    return " ".join([host, *(f"{k}={v}" for k, v in hv.items())])


def ini_text(hosts: dict[str, dict[str, Any]] = HOSTS) -> str:
    lines = ["[class_lab_cpu]", *(_ini_line(h, hosts[h]) for h in CLASS_GROUP if h in hosts)]
    lines += ["[ungrouped]", *(_ini_line(h, hv) for h, hv in hosts.items()
                               if h not in CLASS_GROUP)]
    for pool, members in POOLS.items():
        lines += [f"[{pool}]", *(h for h in members if h in hosts)]
    lines += ["[all:vars]", *(f"{k}={v}" for k, v in ALL_VARS.items())]
    return "\n".join(lines) + "\n"


def as_ini(d: Path) -> Path:
    path = d / "hosts.ini"
    path.write_text(ini_text())
    return path


def as_yaml(d: Path) -> Path:
    children: dict[str, Any] = {"class_lab_cpu": {"hosts": {h: HOSTS[h] for h in CLASS_GROUP}}}
    children.update({pool: {"hosts": dict.fromkeys(members)} for pool, members in POOLS.items()})
    doc = {"all": {"vars": ALL_VARS, "hosts": {"n4": HOSTS["n4"]}, "children": children}}
    path = d / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def as_directory(d: Path) -> Path:
    inv = d / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    groups = ["[class_lab_cpu]", *CLASS_GROUP, "[ungrouped]", "n4 fleetgate_class=lab-vm"]
    for pool, members in POOLS.items():
        groups += [f"[{pool}]", *members]
    groups += ["[all:vars]", "ansible_host=127.0.0.1"]
    (inv / "hosts.ini").write_text("\n".join(groups) + "\n")
    (inv / "group_vars" / "class_lab_cpu.yml").write_text("ansible_user: root\n")
    for host, hv in HOSTS.items():
        own = {k: v for k, v in hv.items() if k != "fleetgate_class"}
        if host not in CLASS_GROUP:
            own["ansible_user"] = "root"
        (inv / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(own))
    return inv


def as_script(d: Path) -> Path:
    doc = {"class_lab_cpu": {"hosts": CLASS_GROUP},
           **{pool: {"hosts": members} for pool, members in POOLS.items()},
           "all": {"vars": ALL_VARS},
           "_meta": {"hostvars": HOSTS}}
    path = d / "dynamic.py"
    path.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"if sys.argv[1:] == ['--list']:\n    print({json.dumps(doc)!r})\n"
                    "else:\n    print('{}')\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("build", [as_ini, as_yaml, as_directory, as_script],
                         ids=["ini", "yaml", "directory", "script"])
def test_every_source_kind_gives_the_same_fleet(tmp_path: Path, build: Any) -> None:
    inv = resolve_inventory(build(tmp_path))
    assert inv.hosts == ["n1", "n2", "n3", "n4"]
    assert summary(inv) == EXPECTED
    # The class came through the vars plugin, not just as a name.
    assert inv.hostvars["n1"]["fleetgate_accelerator"]["backend"] == "cpu"
    assert inv.hostvars["n4"]["fleetgate_class_lab_kind"] == "vm"


def test_a_constructed_source_adds_zone_groups(tmp_path: Path) -> None:
    zones = tmp_path / "zones.yml"
    zones.write_text(yaml.safe_dump({"plugin": "ansible.builtin.constructed", "strict": True,
                                     "keyed_groups": [{"key": "zone", "prefix": "zone"}]}))
    inv = resolve_inventory([as_ini(tmp_path), zones])
    assert summary(inv) == EXPECTED
    assert inv.doc["zone_z1"]["hosts"] == ["n1", "n2"]
    assert inv.doc["zone_z2"]["hosts"] == ["n3", "n4"]
    assert resolve_inventory(inv, "zone_z2:&class_lab_cpu").hosts == ["n3"]


def test_several_sources_merge_into_one_fleet(tmp_path: Path) -> None:
    first, second = tmp_path / "a.ini", tmp_path / "b.ini"
    first.write_text(ini_text({h: HOSTS[h] for h in ("n1", "n2")}))
    second.write_text(ini_text({h: HOSTS[h] for h in ("n3", "n4")}))
    (tmp_path / "d").mkdir()
    inv = resolve_inventory([first, second, as_script(tmp_path / "d")])
    assert summary(inv) == EXPECTED
    assert inv.label == f"{first},{second},{tmp_path / 'd' / 'dynamic.py'}"


def test_what_the_lab_writes_is_accepted(tmp_path: Path) -> None:
    """The lab's connection settings, an IPv6 literal and a port that a JSON source gives as
    text all pass: strict means shell-safe, not narrower than a real fleet."""
    doc = {"all": {"vars": {"ansible_user": "root",
                            "ansible_ssh_private_key_file": "/var/lib/fleetgate lab/id_ed25519",
                            "ansible_ssh_common_args": "-o UserKnownHostsFile=/x/known_hosts "
                                                      "-o ControlPath=/tmp/cm/%C",
                            "ansible_python_interpreter": "/usr/bin/python3"},
                   "hosts": {"lab-1": {"ansible_host": "127.0.0.1", "ansible_port": 40022,
                                       "fleetgate_class": "lab-cpu"},
                             "v6": {"ansible_host": "fe80::1", "ansible_port": "22"},
                             "gpu0.dc1": {"ansible_host": "gpu0.dc1.example.com"}}}}
    path = tmp_path / "lab.yml"
    path.write_text(yaml.safe_dump(doc))
    assert resolve_inventory(path).hosts == ["gpu0.dc1", "lab-1", "v6"]


def _yaml_host(**hv: Any) -> str:
    return yaml.safe_dump({"all": {"hosts": {"h1": hv}}})


BAD: list[tuple[str, str, str | None, str, str | None]] = [
    # (id, file name, its text (None: not written), reason fragment, field)
    ("host-semicolon", "h.yml", _yaml_host(ansible_host="10.0.0.1;reboot"),
     "is not a host name or IP address", "hosts.h1.ansible_host"),
    ("host-subshell", "h.yml", _yaml_host(ansible_host="$(reboot)"),
     "is not a host name or IP address", "hosts.h1.ansible_host"),
    ("host-backtick", "h.yml", _yaml_host(ansible_host="`reboot`"),
     "is not a host name or IP address", "hosts.h1.ansible_host"),
    ("host-space", "h.yml", _yaml_host(ansible_host="10.0.0.1 -oProxyCommand=sh"),
     "is not a host name or IP address", "hosts.h1.ansible_host"),
    ("host-newline", "h.yml", _yaml_host(ansible_host="10.0.0.1\nreboot"),
     r"'10.0.0.1\nreboot'", "hosts.h1.ansible_host"),
    ("host-option", "h.yml", _yaml_host(ansible_host="-oProxyCommand=sh"),
     "not starting with '-'", "hosts.h1.ansible_host"),
    ("old-host-spelling", "h.ini", "h1 ansible_ssh_host=a|b\n",
     "is not a host name or IP address", "hosts.h1.ansible_ssh_host"),
    ("port-0", "h.ini", "h1 ansible_port=0\n", "not a port number in 1..65535",
     "hosts.h1.ansible_port"),
    ("port-70000", "h.ini", "h1 ansible_port=70000\n", "not a port number in 1..65535",
     "hosts.h1.ansible_port"),
    ("port-abc", "h.ini", "h1 ansible_port=abc\n", "'abc' is not a port number",
     "hosts.h1.ansible_port"),
    ("port-bool", "h.yml", _yaml_host(ansible_port=True), "is not a port number",
     "hosts.h1.ansible_port"),
    ("user-option", "h.ini", "h1 ansible_user=-oProxyCommand\n", "is not a user name",
     "hosts.h1.ansible_user"),
    ("user-shell", "h.yml", _yaml_host(ansible_user="root;id"), "is not a user name",
     "hosts.h1.ansible_user"),
    ("key-file-newline", "h.yml", _yaml_host(ansible_ssh_private_key_file="/k\n-oX"),
     "has a control character", "hosts.h1.ansible_ssh_private_key_file"),
    # The vars plugin refuses a host's own class var before it becomes a path...
    ("class-traversal", "h.ini", "h1 fleetgate_class=../../etc/passwd\n",
     "'../../etc/passwd'", None),
    # ...and one a group gave: the plugin refuses it on the group, before any host sees it.
    ("class-traversal-group-var", "h.ini",
     "h1\n[all:vars]\nfleetgate_class=../../etc/passwd\n",
     "group all: fleetgate_class '../../etc/passwd' is not a node class name", None),
    ("class-group-unknown", "h.ini", "[class_no_such_class]\nh1\n",
     "no node class named 'no-such-class'", None),
    ("script-exit-1", "dyn.sh", "#!/bin/sh\necho 'cmdb unreachable' >&2\nexit 1\n",
     "'script' plugin: Inventory script returned non-zero exit code 1. "
     "(its stderr: cmdb unreachable)", None),
    ("script-garbage", "dyn.sh", "#!/bin/sh\necho 'Welcome to the CMDB'\n",
     "'script' plugin: Unable to get JSON decoder", None),
    ("ini-syntax", "h.ini", "[broken\nh1 =\n", "failed to parse inventory source with the "
     "'ini' plugin", None),
    ("empty-directory", "empty/", "", "the directory holds no inventory file", None),
    ("host-name-space", "h.yml", yaml.safe_dump({"all": {"hosts": {"h 1": {}}}}),
     "host name has characters outside", "hosts.'h 1'"),
    ("host-name-semicolon", "h.ini", "[g]\nh1;reboot\n", "host name has characters outside",
     "hosts.'h1;reboot'"),
    ("yaml-list", "h.yml", "- h1\n- h2\n", "'yaml' plugin: YAML inventory has invalid "
     "structure, it should be a dictionary, got: list", None),
    ("missing-file", "nope.ini", None, "no such file or directory", None),
]


@pytest.mark.parametrize(("name", "text", "reason", "field"), [c[1:] for c in BAD],
                         ids=[c[0] for c in BAD])
def test_bad_inventory_is_one_line_bad_input(tmp_path: Path, name: str, text: str | None,
                                             reason: str, field: str | None) -> None:
    source = tmp_path / name.rstrip("/")
    if name.endswith("/"):
        source.mkdir()
    elif text is not None:
        source.write_text(text)
        if name.endswith(".sh"):
            source.chmod(0o755)
    with pytest.raises(BadInput) as exc:
        resolve_inventory(source)
    line = str(exc.value)
    assert line.startswith(f"{source}: ") and "\n" not in line, line
    assert reason in line, line
    if field:
        assert exc.value.field == field, line


def test_the_failing_source_is_named_and_every_problem_counted(tmp_path: Path) -> None:
    good = as_ini(tmp_path)
    bad = tmp_path / "dyn.sh"
    bad.write_text("#!/bin/sh\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(BadInput) as exc:
        resolve_inventory([good, bad])
    assert exc.value.source == str(bad) and "non-zero exit code 3" in exc.value.reason
    two = tmp_path / "two.ini"
    two.write_text("a ansible_port=0 ansible_user=-x\nb ansible_host=$(id)\n")
    with pytest.raises(BadInput) as exc:
        resolve_inventory(two)
    assert exc.value.field == "hosts.a.ansible_port" and exc.value.reason.endswith(
        "(and 2 more)")


def test_a_non_blocking_stdin_does_not_stop_the_inventory(tmp_path: Path) -> None:
    """ssh leaves the stdin it inherits non-blocking, and Ansible refuses to start on one: a
    CI job (or a pytest-xdist lane) that ran ssh before must still resolve its inventory."""
    import os
    import subprocess
    import sys

    ini = tmp_path / "h.ini"
    ini.write_text("[class_lab_cpu]\nh1 ansible_host=10.0.0.1\n")
    script = ("import fcntl, os, sys\n"
              "fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)\n"
              "from pathlib import Path\n"
              "from fleetgate.runner.inventory import resolve_inventory\n"
              "print(resolve_inventory(Path(sys.argv[1])).hosts)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(ini)], stdin=subprocess.PIPE,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "FLEETGATE_HOME": str(REPO)}, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "h1" in proc.stdout
