"""Your fleet, your repo: fleetgate as an operator installs it, on the real lab.

The wheel is built from this checkout and installed into a fresh venv outside it; a site made
by that venv's `fleetgate init` holds the class, a plan and its playbook; the lab's two hosts
are written as an INI inventory (class from a `class_<name>` group, pools as groups, connection
settings as host and group vars). Every command then runs from the site, not the checkout, and
must see the same hosts, classes and verdicts as the checkout's fleetgate does through the
lab's own YAML inventory. An inventory directory (group_vars/class_lab_cpu.yml) plus a
`constructed` source that groups by zone gives the same again.

The venv is a real `pip install` of the wheel and its dependencies (pinned by
requirements.lock, so pip takes them from the cache `make venv` filled): fleetgate's code and
content come from the wheel only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, LabHandle, fleetgate
from tests.integration.conftest import GoldenImages, LabFactory

pytestmark = pytest.mark.lab

HOSTS = ["lab-c01", "lab-c02"]


def _ini_value(v: object) -> str:
    text = str(v)
    return f"'{text}'" if any(c in text for c in " =#;") else text


def ini_from_lab(doc: dict[str, Any]) -> str:
    """The lab's YAML inventory as the INI file an operator would keep."""
    top = doc["all"]
    lines = ["[all:vars]"] + [f"{k}={_ini_value(v)}" for k, v in top["vars"].items()]
    for group, body in top["children"].items():
        lines += ["", f"[{group}]"]
        for host in body["hosts"]:
            hv = {k: v for k, v in top["hosts"][host].items() if k != "fleetgate_class"}
            lines.append(" ".join([host, *(f"{k}={_ini_value(v)}" for k, v in hv.items())]))
    return "\n".join(lines) + "\n"


class Fleet:
    def __init__(self, lab: LabHandle, venv: Path, site: Path):
        self.lab, self.venv, self.site = lab, venv, site
        # Nothing of the checkout: no FLEETGATE_HOME, the venv's bin first on PATH.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
        self.env["PATH"] = f"{venv / 'bin'}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["COLUMNS"] = "200"

    def run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / "fleetgate"), *args], cwd=self.site,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)

    def json(self, *args: str) -> Any:
        proc = self.run(*args)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fleet(golden: GoldenImages, lab_up: LabFactory,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("yourfleet")
    wheels = work / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(wheels), str(REPO)], capture_output=True, text=True,
                           timeout=600, check=False, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout + built.stderr
    # Bytecode Ansible or Python wrote beside the checkout's content is no part of the wheel
    # (pyproject.toml exclude-package-data): stale, and compiled again on the host anyway.
    (whl,) = wheels.glob("fleetgate-*.whl")
    pyc = [n for n in zipfile.ZipFile(whl).namelist() if n.endswith(".pyc")]
    assert not pyc, pyc[:5]
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # A real install: the wheel and its dependencies, at the versions the lock pins (pip's
    # cache holds them after `make venv`).
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c",
                           str(REPO / "requirements.lock"), str(whl)],
                          capture_output=True, text=True, timeout=900, check=False,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    with lab_up("yourfleet", containers=len(HOSTS), images=(golden.build("lab-cpu"),),
                golden=golden) as lab:
        site = work / "site"
        f = Fleet(lab, venv, work)
        init = f.run("init", str(site), "--class", "lab-cpu")
        assert init.returncode == 0, init.stderr
        f.site = site
        doc = yaml.safe_load(Path(lab.inventory).read_text())
        (site / "inventory" / "hosts.ini").write_text(ini_from_lab(doc))
        (site / "playbooks" / "stamp-version.yml").write_text(
            (REPO / "examples" / "rollout" / "stamp-version.yml").read_text())
        yield f


def test_the_installed_tool_runs_from_the_site_not_the_checkout(fleet: Fleet) -> None:
    where = fleet.json("site", "-o", "json")
    assert where["site"]["path"] == str(fleet.site.resolve())
    content = Path(where["content"]["path"])
    assert content.is_relative_to(fleet.venv) and not content.is_relative_to(REPO)
    assert (content / "roles" / "kernel_pin" / "tasks" / "main.yml").is_file()
    assert (content / "plugins" / "module_utils" / "fleetgate_parsers.py").is_file()
    assert not (content / "plugins" / "module_utils" / "fleetgate_parsers.py").is_symlink()
    validate = fleet.run("spec", "validate")
    assert validate.returncode == 0 and "1 class(es) valid" in validate.stdout, validate.stderr


def test_ini_inventory_gives_the_same_hosts_classes_and_verdicts(fleet: Fleet) -> None:
    ours = fleet.json("fleet", "facts", "--json")["hosts"]  # the site's default inventory
    lab = fleetgate("fleet", "facts", "-i", str(fleet.lab.inventory), "--json",
                    env=fleet.lab.env, check=True)
    theirs = json.loads(lab.stdout)["hosts"]
    assert sorted(ours) == sorted(theirs) == HOSTS
    for h in HOSTS:
        assert ours[h]["class"] == theirs[h]["class"] == "lab-cpu"
        assert ours[h]["kernel"] == theirs[h]["kernel"]

    def verdicts(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
        return {(r["host"], r["check"]): r["status"] for r in doc["results"]}

    smoke = fleet.json("smoke", "run", "--only", "discovery,stack", "--json")
    ref = fleetgate("smoke", "run", "-i", str(fleet.lab.inventory), "--only", "discovery,stack",
                    "--json", env=fleet.lab.env)
    assert verdicts(smoke) == verdicts(json.loads(ref.stdout))
    assert set(verdicts(smoke).values()) == {"pass"}


def test_inventory_directory_with_group_vars_and_constructed_zones(fleet: Fleet) -> None:
    """The same hosts as an inventory directory: the INI file, group_vars/class_lab_cpu.yml
    and a `constructed` source grouping hosts by zone. Same hosts, classes, smoke verdicts and
    waves as the INI file alone, plus the zone groups."""
    d = fleet.site / "inventory-dir"
    (d / "group_vars").mkdir(parents=True)
    ini = (fleet.site / "inventory" / "hosts.ini").read_text()
    assert "[class_lab_cpu]" in ini
    (d / "hosts.ini").write_text(ini)
    # The class group's own vars file, where an operator keeps what a class's hosts share.
    (d / "group_vars" / "class_lab_cpu.yml").write_text("rack: rack-from-group-vars\n")
    (d / "zz-zones.yml").write_text(yaml.safe_dump({
        "plugin": "ansible.builtin.constructed", "strict": True,
        "keyed_groups": [{"key": "zone", "prefix": "zone"}]}))
    in_dir = fleet.json("fleet", "hosts", "-i", str(d), "-o", "json")["hosts"]
    in_ini = fleet.json("fleet", "hosts", "-o", "json")["hosts"]
    assert sorted(in_dir) == sorted(in_ini) == HOSTS
    zones = {h: v["zone"] for h, v in yaml.safe_load(
        Path(fleet.lab.inventory).read_text())["all"]["hosts"].items()}
    for h in HOSTS:
        assert in_dir[h]["class"] == in_ini[h]["class"] == "lab-cpu"
        # keyed_groups names the group as Ansible sanitizes it: zone-a -> zone_zone_a.
        group = "zone_" + re.sub(r"[^A-Za-z0-9_]", "_", zones[h])
        assert group in in_dir[h]["groups"], in_dir[h]
        assert not any(g.startswith("zone_") for g in in_ini[h]["groups"])
    ping = fleet.run("fleet", "ping", "-i", str(d), "--limit", "zone_*", "--json")
    assert ping.returncode == 0, ping.stderr
    assert sorted(json.loads(ping.stdout)["hosts"]) == HOSTS

    def verdicts(*inventory: str) -> dict[tuple[str, str], str]:
        doc = fleet.json("smoke", "run", *inventory, "--only", "discovery", "--json")
        return {(r["host"], r["check"]): r["status"] for r in doc["results"]}

    assert verdicts("-i", str(d)) == verdicts() == dict.fromkeys(
        [(h, "discovery") for h in HOSTS], "pass")
    plan = fleet.site / "plans" / "dir.yml"
    plan.write_text(yaml.safe_dump({
        "name": "dir", "targets": {"inventory": "../inventory/hosts.ini", "class": "lab-cpu"},
        "change": {"playbook": "playbooks/stamp-version.yml",
                   "extra_vars": {"stamp_version": "dir-1"},
                   "target": {"files": {"/var/lib/fleetgate-example/version": "dir-1"}}},
        "waves": {"steps": [1, "100%"]}, "gates": {"checks": ["discovery"]}},
        sort_keys=False))
    from_ini = fleet.json("rollout", "plan", str(plan), "--json")
    from_dir = fleet.json("rollout", "plan", str(plan), "-i", str(d), "--json")
    assert from_dir["waves"] == from_ini["waves"] == [["lab-c01"], ["lab-c02"]]


def test_plan_and_start_a_rollout_from_the_site(fleet: Fleet) -> None:
    plan = fleet.site / "plans" / "stamp.yml"
    plan.write_text(yaml.safe_dump({
        "name": "stamp-site",
        "targets": {"inventory": "../inventory/hosts.ini", "class": "lab-cpu"},
        "change": {"playbook": "playbooks/stamp-version.yml",
                   "extra_vars": {"stamp_version": "site-1"},
                   "target": {"files": {"/var/lib/fleetgate-example/version": "site-1"}}},
        "waves": {"steps": [1, "100%"]},
        "budgets": {"per_wave": {"max_failed": 0}, "total": {"max_failed": 0}},
        "gates": {"checks": ["discovery"]},
    }, sort_keys=False))
    planned = fleet.json("rollout", "plan", str(plan), "--json")
    assert planned["waves"] == [["lab-c01"], ["lab-c02"]]
    started = fleet.run("rollout", "start", str(plan), "--id", "site-1", "--json")
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr
    status = json.loads(started.stdout)
    assert status["state"] == "completed"
    assert {h: s["state"] for h, s in status["hosts"].items()} == dict.fromkeys(
        HOSTS, "healthy")
    # The journal is the site's, where fleetgate.yml says state lives.
    assert (fleet.site / ".fleetgate" / "rollouts" / "journal.db").is_file()
    for h in HOSTS:
        assert fleet.lab.ssh(h, "cat /var/lib/fleetgate-example/version").strip() == "site-1"


def test_plain_ansible_applies_the_class_through_the_collection(fleet: Fleet,
                                                                 tmp_path: Path) -> None:
    """No fleetgate command and no checkout: ansible-galaxy installs the built collection,
    and ansible-playbook applies the class by FQCN, the class coming from the site through the
    collection's vars plugin."""
    built = subprocess.run([sys.executable, str(REPO / "scripts" / "build-collection.py"),
                            "--out", str(tmp_path / "dist")], capture_output=True, text=True,
                           timeout=300, check=False, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stderr
    tarball = Path(built.stdout.strip())
    env = {**fleet.env, "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"),
           "ANSIBLE_VARS_ENABLED": "host_group_vars,fleetgate.fleet.fleetgate_class",
           "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1",
           "FLEETGATE_SITE": str(fleet.site)}
    env.pop("ANSIBLE_CONFIG", None)
    bindir = fleet.venv / "bin"
    install = subprocess.run([str(bindir / "ansible-galaxy"), "collection", "install",
                              str(tarball), "-p", str(tmp_path / "collections")], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             check=False, stdin=subprocess.DEVNULL)
    assert install.returncode == 0, install.stdout + install.stderr
    (tmp_path / "site.yml").write_text(
        "- name: Bring the lab hosts to their class, by FQCN\n"
        "  ansible.builtin.import_playbook: fleetgate.fleet.apply_class\n")
    play = subprocess.run([str(bindir / "ansible-playbook"), "-i",
                           str(fleet.site / "inventory" / "hosts.ini"), "site.yml"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                          check=False, stdin=subprocess.DEVNULL)
    assert play.returncode == 0, play.stdout[-4000:] + play.stderr[-2000:]
    for h in HOSTS:
        assert re.search(rf"^{h}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", play.stdout,
                         re.M), play.stdout[-3000:]
        manifest = json.loads(fleet.lab.ssh(h, "cat /etc/fleetgate/manifest.json"))
        assert manifest["class"] == "lab-cpu" and manifest["drift"] == []
