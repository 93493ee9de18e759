"""Execution nodes without a lab: the plan's `execution` section, affinity (zone -> node),
its checks against an inventory (one line naming file, field and reason), the values that
reach the remote shell, and the streaming protocol itself (real transmit, worker and process
through the node-side scripts, run by a local `sh` in place of ssh)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.lab import fleet
from fleetgate.lab import inventory as lab_inventory
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import LabHost, LabState, load_state, save_state
from fleetgate.rollout import execution_nodes, worker
from fleetgate.rollout.journal import Journal
from fleetgate.rollout.lease import Lease
from fleetgate.rollout.plan import RolloutPlan, load_plan
from fleetgate.rollout.waves import Host
from fleetgate.runner import ansible, remote
from fleetgate.runner.inventory import EXEC_NODES_GROUP, Inventory
from fleetgate.system import recipes
from tests.conftest import REPO, fleetgate
from tests.fixtures.rollout.plans import minimal_plan
from tests.privacy import assert_private_tree, find_secret

BASE = minimal_plan("unit-exec", execution={"nodes": {"za": "x1", "zb": "x2"}})

INVENTORY: dict[str, Any] = {"all": {
    "vars": {"ansible_host": "127.0.0.1", "ansible_port": 1},  # never contacted: plan only
    "hosts": {**{f"h{i}": {"fleetgate_class": "lab-cpu", "rack": f"r{i}",
                           "zone": "za" if i < 3 else "zb"} for i in range(1, 5)},
              "x1": {"ansible_port": 2201}, "x2": {"ansible_port": 2202},
              "x3": {"ansible_port": 2203}},
    "children": {"pool_canary": {"hosts": {"h1": None}},
                 "pool_wave1": {"hosts": {"h2": None, "h3": None, "h4": None}},
                 EXEC_NODES_GROUP: {"hosts": {"x1": None, "x2": None}}}}}


def hosts() -> dict[str, Host]:
    return {f"h{i}": Host(f"h{i}", "lab-cpu", {"zone": "za" if i < 3 else "zb"},
                          ("pool_wave1",)) for i in range(1, 5)}


def write(tmp_path: Path, doc: dict[str, Any], inv: dict[str, Any] | None = None) -> Path:
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inv or INVENTORY))
    p = tmp_path / "plan.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


# -------------------------------------------------------------------------- plan and affinity

@pytest.mark.parametrize(("execution", "field"), [
    ({"nodes": {}}, "execution"),
    ({"nodes": {"za": "-oProxyCommand=x"}}, "execution.nodes.za"),
    ({"nodes": {"z a": "x1"}}, "execution.nodes"),
    ({"nodes": {"za": "x1"}, "domian": "zone"}, "execution.domian"),
    ({"nodes": {"za": "x1"}, "domain": "Zone!"}, "execution.domain"),
])
def test_bad_execution_section_is_one_line_naming_the_field(
        tmp_path: Path, execution: dict[str, Any], field: str) -> None:
    p = write(tmp_path, {**BASE, "execution": execution})
    with pytest.raises(BadInput) as exc:
        load_plan(p)
    msg = exc.value.one_line()
    assert str(p) in msg and field in msg and "\n" not in msg, msg


def test_affinity_picks_the_node_of_each_hosts_zone_and_splits_batches_by_node() -> None:
    ex = RolloutPlan.model_validate(BASE).execution
    assert ex is not None
    hs = hosts()
    assert [execution_nodes.node_of(ex, hs[h]) for h in hs] == ["x1", "x1", "x2", "x2"]
    assert execution_nodes.by_node(ex, hs, ["h1", "h3", "h2"]) == {"x1": ["h1", "h2"],
                                                                  "x2": ["h3"]}
    with pytest.raises(BadInput, match="zone=zc, which no execution node serves"):
        execution_nodes.node_of(ex, Host("h9", "lab-cpu", {"zone": "zc"}, ()))


@pytest.mark.parametrize(("execution", "needle"), [
    ({"nodes": {"za": "x1", "zb": "x9"}},
     "plan.yml: execution.nodes.zb: x9 is not in inventory group fleetgate_execution_nodes "
     "(members: x1, x2)"),
    ({"nodes": {"za": "x1", "zb": "x3"}}, "x3 is not in inventory group"),
    ({"nodes": {"za": "x1"}},
     "plan.yml: execution.nodes: zone=zb (hosts h3, h4) has no execution node"),
    ({"nodes": {"za": "x1", "zb": "h4"}}, "h4 is not in inventory group"),
    ({"domain": "rack", "nodes": {"r1": "x1"}}, "rack=r2 (hosts h2) has no execution node"),
])
def test_plan_against_the_inventory_refuses_unknown_nodes_and_unserved_zones(
        tmp_path: Path, execution: dict[str, Any], needle: str) -> None:
    p = write(tmp_path, {**BASE, "execution": execution})
    proc = fleetgate("rollout", "plan", str(p), env={"FLEETGATE_STATE_DIR": str(tmp_path / "s")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_node_that_is_also_a_target_is_refused(tmp_path: Path) -> None:
    inv = yaml.safe_load(yaml.safe_dump(INVENTORY))
    inv["all"]["children"][EXEC_NODES_GROUP]["hosts"]["h4"] = None
    p = write(tmp_path, {**BASE, "execution": {"nodes": {"za": "x1", "zb": "h4"}}}, inv)
    proc = fleetgate("rollout", "plan", str(p), env={"FLEETGATE_STATE_DIR": str(tmp_path / "s")})
    assert proc.returncode == 2
    assert "execution.nodes.zb: h4 is an execution node and also a target" in proc.stderr


def test_a_nodes_connection_values_are_checked_like_any_hosts(tmp_path: Path) -> None:
    inv = yaml.safe_load(yaml.safe_dump(INVENTORY))
    inv["all"]["hosts"]["x2"]["ansible_ssh_common_args"] = "-o ProxyCommand=nc"
    p = write(tmp_path, BASE, inv)
    proc = fleetgate("rollout", "plan", str(p), env={"FLEETGATE_STATE_DIR": str(tmp_path / "s")})
    assert proc.returncode == 2 and "ProxyCommand" in proc.stderr, proc.stderr
    with pytest.raises(BadInput, match="ansible_host"):
        remote.node_from_hostvars("x1", {"ansible_host": "-oProxyCommand=x"}, source="inv")
    node = remote.node_from_hostvars("x1", {"ansible_port": 2201, "ansible_user": "root",
                                            "ansible_ssh_common_args": "-o BatchMode=yes"},
                                     source="inv")
    argv = remote.ssh_argv(node, "true")
    assert argv[-2:] == ["x1", "true"] and "2201" in argv and "root" in argv


def test_a_good_plan_with_execution_nodes_plans(tmp_path: Path) -> None:
    p = write(tmp_path, BASE)
    proc = fleetgate("rollout", "plan", str(p), "--json",
                     env={"FLEETGATE_STATE_DIR": str(tmp_path / "s")})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("job", "owner"), [
    ("apply-1234567", "r1-x"), ("apply-12345678; rm -rf ~", "r1-x"), ("apply-12345678", "$(id)"),
    ("../apply-12345678", "r1-x"), ("apply-12345678", "R1"),
])
def test_only_checked_names_reach_the_remote_shell(job: str, owner: str) -> None:
    for script in (remote.start_script, remote.collect_script, remote.state_script):
        with pytest.raises(ValueError, match="does not match"):
            script(job, owner)
    with pytest.raises(ValueError):
        remote.attach_script(job, owner, 0)


def test_the_execution_node_image_installs_the_lock_versions() -> None:
    lock = (REPO / "requirements.lock").read_text()
    assert f"ansible-core=={recipes.ANSIBLE_CORE_VERSION}\n" in lock
    assert f"ansible-runner=={recipes.ANSIBLE_RUNNER_VERSION}\n" in lock
    for pin in recipes.SMOKE_RUNTIME:
        assert f"{pin}\n" in lock, pin


# ------------------------------------------------------ the protocol, with sh in place of ssh

def _job(job: str = "apply-0123abcd", owner: str = "unit-exec-1") -> remote.RemoteJob:
    node = remote.RemoteNode(name="x1", address="127.0.0.1")
    return remote.RemoteJob(node, job, owner, timeout_s=120)


def test_start_is_once_only_and_the_job_dir_is_private_and_owned(node_home: Path) -> None:
    job = _job()
    run = subprocess.run(remote.ssh_argv(job.node, remote.start_script(job.job, job.owner)),
                         input=b'{"kwargs": {}}\n{"eof": true}\n', capture_output=True,
                         check=False)
    assert run.returncode == 0 and run.stdout.strip() == b"started", run.stderr
    again = subprocess.run(remote.ssh_argv(job.node, remote.start_script(job.job, job.owner)),
                           input=b"", capture_output=True, check=False)
    assert again.stdout.strip() == b"exists"
    other = subprocess.run(remote.ssh_argv(job.node, remote.start_script(job.job, "other-r")),
                           input=b"", capture_output=True, check=False)
    assert other.returncode == remote.REFUSED and b"belongs to rollout unit-exec-1" in other.stderr
    d = node_home / remote.JOBS_DIR / job.job
    assert (d / "owner").read_text() == "unit-exec-1\n"
    assert (d.stat().st_mode & 0o077) == 0
    assert remote.job_state(_job(owner="other-r")) == "unknown"
    assert remote.job_state(_job(job="apply-ffffffff")) == "absent"


def _playbook(tmp_path: Path, where: str = "project") -> Path:
    pb = tmp_path / where / "touch.yml"
    pb.parent.mkdir(parents=True)
    pb.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False, "tasks": [
            {"name": "count", "ansible.builtin.shell": "sleep 1; echo {{ word }} >> "
             f"{tmp_path}/applies.log", "changed_when": True}]}]))
    return pb


def _inventory(tmp_path: Path) -> Inventory:
    hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return Inventory((tmp_path / "inv.yml",), None,
                     {"_meta": {"hostvars": {"a1": hv, "a2": hv}},
                      "all": {"children": ["g1"]}, "g1": {"hosts": ["a1", "a2"]}})


def test_a_run_on_a_node_folds_events_like_a_local_run_and_reattaches(
        tmp_path: Path, node_home: Path) -> None:
    events: list[dict[str, Any]] = []
    job = _job()
    r = ansible.run(inventory=_inventory(tmp_path), playbook=_playbook(tmp_path), limit="a1,a2",
                    extravars={"word": "one"}, forks=2, runs_base=tmp_path / "runs",
                    on_event=events.append, timeout=60, on_remote=job)
    assert r.rc == 0 and r.ok, (r.status, r.error)
    assert {h: v.outcome for h, v in r.hosts.items()} == {"a1": "changed", "a2": "changed"}
    assert any(e.get("event") == "playbook_on_stats" for e in events)
    assert list(r.run_dir.glob(f"artifacts/{job.job}/job_events/*.json"))
    # Collected: the node keeps nothing of a job the controller holds the result of.
    assert not (node_home / remote.JOBS_DIR / job.job).exists()
    assert (tmp_path / "applies.log").read_text().split() == ["one", "one"]

    # A job whose follower died: a second follower (attach_only) gets the whole stream, and
    # nothing runs twice.
    job2 = _job("apply-0badf00d")
    payload = (tmp_path / "payload").open("w+b")
    kwargs = {"private_data_dir": str(tmp_path / "unused"), "ident": job2.job,
              "limit": "a1", "extravars": {"word": "two"}, "envvars": {}}
    with payload:
        remote.transmit(kwargs, _inventory(tmp_path), _playbook(tmp_path, "p2"), {}, payload)
    subprocess.run(remote.ssh_argv(job2.node, remote.start_script(job2.job, job2.owner)),
                   input=(tmp_path / "payload").read_bytes(), check=True, capture_output=True)
    time.sleep(0.5)
    job2.attach_only = True
    r2 = ansible.run(inventory=_inventory(tmp_path), playbook=_playbook(tmp_path, "p3"),
                     limit="a1", forks=1, runs_base=tmp_path / "runs", timeout=60,
                     on_remote=job2)
    assert r2.ok and r2.hosts["a1"].outcome == "changed", (r2.status, r2.error)
    assert (tmp_path / "applies.log").read_text().split() == ["one", "one", "two"]


def test_a_node_that_goes_away_leaves_every_host_unreachable(
        tmp_path: Path, node_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "RETRY_S", 0.1)
    # The node refuses every connection (as a stopped node's closed port does).
    monkeypatch.setattr(remote, "ssh_argv", lambda node, script: ["sh", "-c", "exit 255"])
    r = ansible.run(inventory=_inventory(tmp_path), playbook=_playbook(tmp_path), limit="a1,a2",
                    extravars={"word": "x"}, forks=2, runs_base=tmp_path / "runs", timeout=60,
                    on_remote=_job())
    assert {h: v.outcome for h, v in r.hosts.items()} == {"a1": "unreachable",
                                                          "a2": "unreachable"}
    assert re.search(r"execution node x1: the job did not start \(ssh exit 255", r.error), r.error


def test_a_secret_var_reaches_the_node_but_nothing_the_controller_keeps(
        tmp_path: Path, node_home: Path) -> None:
    secret = "s3cr3t-exec-node-token"
    pb = tmp_path / "leak" / "leak.yml"
    pb.parent.mkdir()
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "print it", "ansible.builtin.debug": {"msg": "token {{ tok }}"}},
        {"name": "use it", "ansible.builtin.shell": f"echo {{{{ tok }}}} > {tmp_path}/got"}]}]))
    r = ansible.run(inventory=_inventory(tmp_path), playbook=pb, limit="a1", forks=1,
                    runs_base=tmp_path / "runs", timeout=60, on_remote=_job(),
                    secrets={"tok": secret})
    assert r.ok, (r.status, r.error)
    assert (tmp_path / "got").read_text().strip() == secret  # the play had the value
    assert find_secret(tmp_path / "runs", secret) == []
    assert_private_tree(tmp_path / "runs")
    assert not (node_home / remote.JOBS_DIR / "apply-0123abcd").exists()


def test_a_worker_without_the_rollouts_current_lease_never_touches_the_remote_job(
        tmp_path: Path, node_home: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    lease = Lease(journal, "unit-exec-1", ["rollout:unit-exec-1"])
    lease.acquire()
    bdir = tmp_path / "batch"
    bdir.mkdir()
    spec = worker.BatchSpec(
        rollout_id="unit-exec-1", batch_id="apply-0123abcd", wave=1,
        journal=str(journal.path), inventory=str(tmp_path / "inv.yml"),
        playbook=str(_playbook(tmp_path)), limit="a1", forks=1, timeout=60,
        execution_node=remote.RemoteNode(name="x1", address="127.0.0.1"),
        lease_token="a-controller-that-lost-it")
    (bdir / worker.SPEC).write_text(spec.model_dump_json())
    for attach in (False, True):
        worker.run_batch(bdir, attach=attach)
        assert worker.read_result(bdir) is None
    assert not (node_home / remote.JOBS_DIR).exists()
    lease.release()


def test_a_lab_execution_node_takes_no_fault_that_would_reach_the_machines_network(
        tmp_path: Path) -> None:
    paths = LabPaths(tmp_path / "lab")
    node = LabHost(name="lab-x01", kind="container", node_class="lab-cpu", port=2222, rack="",
                   zone="", pool="", image="img", runtime_name="fgxxxxxx-lab-x01")
    host = node.model_copy(update={"name": "lab-c01", "port": 2223, "zone": "zone-a"})
    save_state(paths.state, LabState(lab_id=paths.lab_id, hosts=[host], execution_nodes=[node]))
    for kind in ("cut-network", "hang-probe", "nccl-bad-nic", "drift-package"):
        with pytest.raises(BadInput, match="an execution node takes only stop or throttle-cpu"):
            fleet.fault(paths, "lab-x01", kind)  # type: ignore[arg-type]
    inv = lab_inventory.inventory_dict(paths, load_state(paths.state) or LabState(lab_id="x"))
    assert inv["all"]["children"][EXEC_NODES_GROUP] == {"hosts": {"lab-x01": None}}
    assert "fleetgate_class" not in inv["all"]["hosts"]["lab-x01"]  # never a rollout target
