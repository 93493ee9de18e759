"""The smoke suite on an execution node (smoke/remote.py), with sh in place of ssh: the job's
project, transmit, `ansible-runner worker`, the play that runs pytest from the shipped
package, the stream back through process. Only the transport is replaced. The host measured
is this machine (`localhost`, the one host the suite lets connect locally), with the probes
installed in a temporary directory: once from here and once from the "node". The lab test
(tests/integration/test_execution_nodes.py) runs the same path over SSH to real node
containers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.runner import remote
from fleetgate.runner.inventory import EXEC_NODES_GROUP, Inventory
from fleetgate.runner.remote import member_node
from fleetgate.smoke import remote as smoke_remote
from fleetgate.smoke.probeset import probe_files
from fleetgate.smoke.runner import run_smoke
from tests.conftest import REPO

CLASSES = REPO / "inventory" / "classes"


def _inventory(tmp_path: Path, hosts: tuple[str, ...] = ("a1", "a2", "a3")) -> Inventory:
    hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
          "fleetgate_class": "lab-cpu"}
    return Inventory((tmp_path / "inv.yml",), None, {
        "_meta": {"hostvars": {**{h: hv for h in hosts},
                               "x1": {"ansible_host": "127.0.0.1"},
                               "x2": {"ansible_host": "127.0.0.1"}}},
        "all": {"children": ["g1", EXEC_NODES_GROUP]}, "g1": {"hosts": list(hosts)},
        EXEC_NODES_GROUP: {"hosts": ["x1", "x2"]}})


def _verdicts(run: object) -> dict[tuple[str, str], tuple[str, str, str]]:
    doc = json.loads(run.to_json())  # type: ignore[attr-defined]
    return {(r["host"], r["check"]): (r["status"], r["probe_status"], r["reason"])
            for r in doc["results"]}


def test_a_node_measures_what_the_controller_measures(tmp_path: Path, node_home: Path) -> None:
    probes = tmp_path / "probes"
    probes.mkdir()
    for name, data in probe_files().items():
        (probes / name).write_bytes(data)
    inv = _inventory(tmp_path, ("localhost",))
    kw = {"only": ["discovery", "stack"], "probes_dir": str(probes), "classes": CLASSES}
    here = run_smoke(inv, runs_base=tmp_path / "here", **kw)  # type: ignore[arg-type]
    there = run_smoke(inv, runs_base=tmp_path / "there", on_nodes=["x2"],
                      **kw)  # type: ignore[arg-type]
    # The execution nodes run jobs for the fleet; they are never measured.
    assert here.hosts == there.hosts == ["localhost"]
    assert here.execution_nodes == {}
    assert there.execution_nodes == {"localhost": "x2"}
    # The same verdicts, each measured by the suite its side ran: the probes answered (a
    # result judged against the class, whatever this machine is), on both sides.
    assert _verdicts(there) == _verdicts(here)
    assert {v[1] for v in _verdicts(here).values()} == {"ok"}, _verdicts(here)
    # The node kept nothing of the collected job; the controller has its stream and the
    # results file the worker sent back.
    assert list((node_home / remote.JOBS_DIR).iterdir()) == []
    returned = list(Path(str(there.run_dir)).glob("x2-smoke-*/*/artifacts/smoke-*/smoke/*"))
    assert sorted(p.name for p in returned if p.name.startswith("group-000")) == [
        "group-000.jsonl", "group-000.log", "group-000.meta.json"]
    # The hosts' variables (the inventory stand-ins) stayed on the node, in the project the
    # worker deleted: the stream carries results, logs and how each group ended.
    assert not [p for p in returned if "inventory" in p.name or p.suffix == ".py"], returned


def test_a_node_that_never_takes_the_job_leaves_its_hosts_inconclusive(
        tmp_path: Path, node_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "ssh_argv", lambda node, script: [
        "sh", "-c", "echo 'ssh: connect to host 127.0.0.1 port 22: Connection refused' >&2; "
        "exit 255"])
    run = run_smoke(_inventory(tmp_path, ("a1",)), only=["discovery", "stack"],
                    runs_base=tmp_path / "runs", on_nodes=["x1"], classes=CLASSES)
    assert run.execution_nodes == {"a1": "x1"}
    for r in run.results:
        assert (r.status, r.probe_status) == ("inconclusive", "not-run"), r
        assert "execution node x1" in r.reason and "Connection refused" in r.reason, r.reason


def test_only_members_of_the_group_are_execution_nodes(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    with pytest.raises(BadInput, match=f"a1 is not in inventory group {EXEC_NODES_GROUP}"):
        member_node(inv, "a1", source="--execution-node", field="a1")
    assert member_node(inv, "x2", source="--execution-node", field="x2").name == "x2"


def test_the_job_carries_the_suite_the_classes_and_the_group_only(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    project = tmp_path / "project"
    smoke_remote.bundle(project, inv, [smoke_remote.Group("g0", ["a1"], 60),
                                       smoke_remote.Group("g1", ["a3"], 60)], CLASSES,
                        checks=["discovery"], probes_dir="/opt/p", out="../artifacts/j/smoke")
    assert (project / "python" / "fleetgate" / "smoke" / "suite" / "conftest.py").is_file()
    assert not list(project.rglob("__pycache__"))
    assert not (project / "python" / "fleetgate" / "content").exists()
    assert [p.name for p in (project / "classes").iterdir()] == ["lab-cpu.yml"]
    assert (project / "content" / "roles" / "smoke_probes" / "files" / "probes").is_dir()
    answer = json.loads((project / "hosts.json").read_text())
    assert sorted(answer["_meta"]["hostvars"]) == ["a1", "a3"]
    assert answer["g1"]["hosts"] == ["a1", "a3"] and EXEC_NODES_GROUP not in answer
    assert list(yaml.safe_load((project / "hosts.yml").read_text())["all"]["hosts"]) == [
        "a1", "a3"]
    spec = smoke_remote.NodeSpec.model_validate_json((project / "spec.json").read_text())
    assert [(g.name, g.hosts) for g in spec.groups] == [("g0", ["a1"]), ("g1", ["a3"])]
    assert (spec.checks, spec.probes_dir, spec.out) == (["discovery"], "/opt/p",
                                                        "../artifacts/j/smoke")
    assert list((project / "roles").iterdir()) == []
