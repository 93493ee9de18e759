"""The lab's Slurm cluster as files and inventory (lab/slurm.py, lab/inventory.py); the daemons
themselves run in tests/integration/test_slurm_drain.py."""

from __future__ import annotations

from pathlib import Path

from fleetgate.lab.inventory import inventory_dict
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.slurm import HOSTS_MARK, hosts_lines, node_states, slurm_conf
from fleetgate.lab.state import LabHost, LabState, SlurmCluster
from tests.conftest import REPO


def test_slurm_conf_has_the_settings_that_work_without_cgroups() -> None:
    conf = dict(line.split("=", 1) for line in slurm_conf("lab-c01", ["lab-c01", "lab-c02"])
                .splitlines() if line and not line.startswith(("#", "NodeName", "Partition")))
    assert conf["SlurmctldHost"] == "lab-c01" and conf["SlurmUser"] == "slurm"
    assert conf["ProctrackType"] == "proctrack/linuxproc"
    assert conf["TaskPlugin"] == "task/none"
    assert conf["JobAcctGatherType"] == "jobacct_gather/none"
    assert conf["ReturnToService"] == "2"
    assert "NodeName=lab-c01,lab-c02 " in slurm_conf("lab-c01", ["lab-c01", "lab-c02"])


def test_hosts_lines_are_marked_so_a_rerun_replaces_them() -> None:
    lines = hosts_lines({"lab-c02": "10.88.0.3", "lab-c01": "10.88.0.2"}).splitlines()
    assert lines == [f"10.88.0.2 lab-c01 {HOSTS_MARK}", f"10.88.0.3 lab-c02 {HOSTS_MARK}"]


def test_node_states_from_real_scontrol_output() -> None:
    fixtures = REPO / "tests" / "fixtures" / "slurm"
    text = "".join((fixtures / n).read_text() for n in ("show-node-idle.txt",
                                                       "show-node-idle-drain.txt"))
    # Both captures are of lab-c02; the later line wins.
    assert node_states(text) == {"lab-c02": "IDLE+DRAIN"}


def test_inventory_marks_slurm_nodes_and_their_controller(tmp_path: Path) -> None:
    def host(name: str) -> LabHost:
        return LabHost(name=name, kind="container", node_class="lab-cpu", port=2222,
                       rack="rack1", zone="zone-a", pool="pool_canary", image="img",
                       runtime_name=name)

    state = LabState(lab_id="abc123", hosts=[host("lab-c01"), host("lab-c02"), host("lab-v01")],
                     slurm=SlurmCluster(controller="lab-c01", nodes=["lab-c01", "lab-c02"]))
    inv = inventory_dict(LabPaths(tmp_path), state)["all"]
    for h in ("lab-c01", "lab-c02"):
        assert inv["hosts"][h]["fleetgate_slurm_node"] == h
        assert inv["hosts"][h]["fleetgate_slurm_controller"] == "lab-c01"
    assert "fleetgate_slurm_node" not in inv["hosts"]["lab-v01"]
    assert set(inv["children"]["slurm_nodes"]["hosts"]) == {"lab-c01", "lab-c02"}
    plain = inventory_dict(LabPaths(tmp_path), state.model_copy(update={"slurm": None}))["all"]
    assert "slurm_nodes" not in plain["children"]
    assert not any("fleetgate_slurm_node" in v for v in plain["hosts"].values())
