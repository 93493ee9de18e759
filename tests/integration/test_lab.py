"""The real lab: 6 podman container hosts and 1 qemu VM, reached over SSH through ansible-runner.

Nothing here is mocked: hosts are real sshd processes on loopback, the VM boots the pinned
Debian kernel under TCG, and faults are real (stopped containers, dropped packets).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.spec.loader import load_class
from tests.conftest import REPO, LabHandle, fleetgate
from tests.integration.conftest import LabFactory

pytestmark = pytest.mark.lab

N_CONTAINERS = 6
N_VMS = 1


class Lab(LabHandle):
    def state(self) -> dict[str, Any]:
        return dict(json.loads((self.root / "state.json").read_text()))

    def ping(self) -> dict[str, str]:
        proc = self.run("fleet", "ping", "-i", self.inventory, "--json", check=False)
        data = json.loads(proc.stdout)
        return {h: r["outcome"] for h, r in data["hosts"].items()}


@pytest.fixture(scope="module")
def lab(lab_up: LabFactory) -> Iterator[Lab]:
    with lab_up("lab", containers=N_CONTAINERS, vms=N_VMS, handle=Lab) as lab:
        yield lab


def test_lab_up_prints_a_timestamped_line_per_stage(lab: Lab) -> None:
    # Piped (the test captures it), so these are the lines a CI log gets, as they happen.
    assert lab.up_output is not None
    *lines, last = lab.up_output.stdout.splitlines()
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z lab up: ", x)
                         for x in lines), lines
    text = [x.split(" lab up: ", 1)[1] for x in lines]
    assert text[1].startswith("container image ") and " ready (" in text[1], text
    names = [f"lab-c{i:02d}" for i in range(1, N_CONTAINERS + 1)] + ["lab-v01"]
    for h in names:
        started = next(i for i, x in enumerate(text) if x.startswith(f"{h} started ("))
        answered = next(i for i, x in enumerate(text) if x.startswith(f"{h} answers SSH ("))
        assert started < answered, text
    assert "lab-v01 started (vm, lab-vm, ssh port " in "\n".join(text)
    assert last.startswith(f"lab up: {len(names)} host(s); inventory "), last
    # What the tools said is in the log the first line names, private like all state.
    log = Path(text[0].split(": ", 1)[1]) if text[0].startswith("log ") else None
    assert log is not None and log.name == "lab.up.log", text[0]
    assert re.search(r"^\$ \S*podman run ", log.read_text(), re.M), log.read_text()[:2000]
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_every_host_answers_ansible_ping(lab: Lab) -> None:
    outcomes = lab.ping()
    assert len(outcomes) == N_CONTAINERS + N_VMS
    assert set(outcomes.values()) == {"ok"}, outcomes


def test_inventory_is_standard_ansible(lab: Lab) -> None:
    ansible_inventory = Path(sys.executable).parent / "ansible-inventory"
    out = subprocess.run([str(ansible_inventory), "-i", lab.inventory, "--list"],
                         capture_output=True, text=True, check=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    inv = json.loads(out.stdout)
    assert len(inv["class_lab_cpu"]["hosts"]) == N_CONTAINERS
    assert inv["class_lab_vm"]["hosts"] == ["lab-v01"]
    pools = [h for g in ("pool_canary", "pool_wave1", "pool_wave2") for h in inv[g]["hosts"]]
    assert sorted(pools) == sorted(inv["_meta"]["hostvars"]), "each host in exactly one pool"
    for host, hv in inv["_meta"]["hostvars"].items():
        assert hv["ansible_host"] == "127.0.0.1", host
        assert hv["rack"] and hv["zone"], host
        assert "StrictHostKeyChecking=yes" in hv["ansible_ssh_common_args"]
        assert "StrictHostKeyChecking=no" not in hv["ansible_ssh_common_args"]


def test_ssh_trust_is_per_lab_and_per_host(lab: Lab) -> None:
    key = lab.root / "ssh" / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    known = (lab.root / "ssh" / "known_hosts").read_text().splitlines()
    assert len(known) == N_CONTAINERS + N_VMS
    blobs = {line.split()[2] for line in known}
    assert len(blobs) == len(known), "every host has its own host key"


def test_vm_boots_the_pinned_kernel(lab: Lab) -> None:
    pin = load_class(REPO / "inventory" / "classes" / "lab-vm.yml").kernel.abi
    proc = lab.run("fleet", "facts", "-i", lab.inventory, "--limit", "lab_vms", "--json")
    facts = json.loads(proc.stdout)["hosts"]
    assert facts["lab-v01"]["kernel"] == pin
    assert facts["lab-v01"]["class"] == "lab-vm"


def test_stop_fault_takes_down_exactly_that_host(lab: Lab) -> None:
    lab.run("lab", "fault", "lab-c03", "stop")
    try:
        outcomes = lab.ping()
        assert outcomes.pop("lab-c03") == "unreachable"
        assert set(outcomes.values()) == {"ok"}, outcomes
    finally:
        lab.run("lab", "heal", "lab-c03")
    assert lab.ping()["lab-c03"] == "ok"


def test_cut_network_makes_host_unreachable_until_healed(lab: Lab) -> None:
    lab.run("lab", "fault", "lab-c02", "cut-network")
    try:
        proc = lab.run("fleet", "ping", "-i", lab.inventory, "--limit", "lab-c02", "--json",
                       check=False)
        assert proc.returncode == 1
        assert json.loads(proc.stdout)["hosts"]["lab-c02"]["outcome"] == "unreachable"
    finally:
        lab.run("lab", "heal", "lab-c02")
    assert lab.ping()["lab-c02"] == "ok"


def test_fault_on_unknown_host_is_one_line_bad_input(lab: Lab) -> None:
    proc = lab.run("lab", "fault", "no-such-host", "stop", check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no-such-host" in proc.stderr
    proc = lab.run("lab", "fault", "lab-c01", "melt", check=False)
    assert proc.returncode == 2 and "unknown fault kind" in proc.stderr


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_down_leaves_nothing(lab: Lab) -> None:
    state = lab.state()
    ports = [h["port"] for h in state["hosts"]]
    control_dir = state["control_dir"]
    assert all(_listening(p) for p in ports)
    lab.run("lab", "down")
    assert not lab.root.exists()
    ps = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=io.fleetgate.lab={state['lab_id']}",
         "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    assert ps.stdout.strip() == ""
    qemu = subprocess.run(["pgrep", "-af", "qemu-system"], capture_output=True, text=True)
    assert str(lab.root) not in qemu.stdout
    assert not any(_listening(p) for p in ports)
    assert not Path(control_dir).exists()
    # The lab dir is gone, and a second `down` is a harmless no-op.
    assert lab.run("lab", "down").returncode == 0


def test_inventory_file_is_plain_yaml(tmp_path: Path) -> None:
    # Guard for the non-lab path: a broken inventory is one line and exit 2, nothing runs.
    bad = tmp_path / "inv.yml"
    bad.write_text("all: [unclosed\n")
    proc = fleetgate("fleet", "ping", "-i", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr
