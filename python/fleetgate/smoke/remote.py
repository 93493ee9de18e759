"""The groups of the smoke suite one execution node measures, as one job in ansible-runner's
streaming protocol (runner/remote.py: transmit here, `ansible-runner worker` there, process
here).

The job's project carries what the suite needs and a node does not have:
- this controller's own fleetgate package, so the node runs exactly this suite and judge;
- the class files of the hosts, which set their thresholds;
- the smoke_probes role's probes, whose digest the suite expects to find on each host;
- the hosts' inventory as the controller resolved it.

The node's runner environment has the suite's Python dependencies (system/recipes.py
SMOKE_RUNTIME, the lab's execution-node image). The play (playbooks/smoke-suite.yml) runs
smoke/on_node.py there, which runs the groups' pytest processes and writes their results
files into the job's artifact directory; the worker streams it back with the events. The
hosts are measured from the node, next to them, and the controller only reads a stream. A
node that is lost mid-job leaves its hosts' checks inconclusive, as any host that could not
be measured.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from fleetgate.runner import ansible
from fleetgate.runner.inventory import Inventory
from fleetgate.runner.remote import RemoteJob, RemoteNode, static_inventory
from fleetgate.site import SITE_FILE, content_root
from fleetgate.smoke.model import CheckResult, read_results
from fleetgate.smoke.probeset import role_probes_dir
from fleetgate.smoke.thresholds import Check
from fleetgate.spec.loader import resolve_class

PLAYBOOK = "smoke-suite.yml"
PACKAGE = Path(__file__).resolve().parents[1]  # python/fleetgate, or site-packages/fleetgate
# The job outlives the suite's own budget by this much: the transmit, the worker's start and
# the stream back, on a busy node.
JOB_SLACK_S = 120.0


def _tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "content"))


class NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    hosts: list[str]
    budget_s: float


class NodeSpec(BaseModel):
    """What a smoke job asks of its node (smoke/remote.py writes it)."""

    model_config = ConfigDict(extra="forbid")

    groups: list[NodeGroup]
    checks: list[Check]
    probes_dir: str
    answer: str  # the hosts' inventory as the controller resolved it (JSON)
    classes: str
    out: str


@dataclass(frozen=True)
class Group:
    """One pytest process on the node: its hosts and its budget."""

    name: str
    hosts: list[str]
    budget_s: float


def bundle(project: Path, inv: Inventory, groups: Sequence[Group], classes: Path | None, *,
           checks: Sequence[str], probes_dir: str, out: str) -> None:
    """The job's project directory: the play, the package, the hosts' classes, the probes'
    reference copy, the hosts' inventory as resolved here (hosts.json, and hosts.yml for
    Ansible's own tools on the node), a site file, and what the node runs (spec.json,
    smoke/on_node.py); `out` is where the node writes, relative to the project."""
    project.mkdir(parents=True)
    shutil.copy2(content_root() / "playbooks" / PLAYBOOK, project / PLAYBOOK)
    (project / "roles").mkdir()  # the play uses none: runner/remote.py adds none then
    _tree(PACKAGE, project / "python" / "fleetgate")
    probes = project / "content" / "roles" / "smoke_probes" / "files" / "probes"
    _tree(role_probes_dir(), probes)
    (project / "classes").mkdir()
    hosts = [h for g in groups for h in g.hosts]
    names = sorted({str(inv.hostvars[h].get("fleetgate_class")) for h in hosts
                    if inv.hostvars.get(h, {}).get("fleetgate_class")})
    for name in names:
        path, _ = resolve_class(name, classes)
        shutil.copy2(path, project / "classes" / path.name)
    (project / "hosts.yml").write_text(
        yaml.safe_dump(static_inventory(inv.narrowed(hosts)), sort_keys=False))
    (project / "hosts.json").write_text(json.dumps(inv.answer_for(hosts)))
    # The project is the suite's site there: its classes are the ones copied here.
    (project / SITE_FILE).write_text("# Written by fleetgate for a smoke job (smoke/remote.py).\n"
                                     "fleetgate: 1\nclasses: classes\n")
    spec = NodeSpec(groups=[NodeGroup(name=g.name, hosts=g.hosts, budget_s=g.budget_s)
                            for g in groups], checks=list(checks), probes_dir=probes_dir,
                    answer="hosts.json", classes="classes", out=out)
    (project / "spec.json").write_text(spec.model_dump_json())


def run_node(node: RemoteNode, owner: str, groups: Sequence[Group], inv: Inventory,
             run_dir: Path, classes: Path | None, checks: Sequence[str], probes_dir: str
             ) -> list[tuple[list[CheckResult], dict[str, Any]]]:
    """Every group of one node in one job, their pytest processes side by side there. Per
    group, what the controller's own group run returns (smoke.runner.run_group), with the
    node and the job."""
    job = RemoteJob(node=node, job=f"smoke-{uuid.uuid4().hex[:8]}", owner=owner,
                    timeout_s=max(g.budget_s for g in groups) + JOB_SLACK_S)
    project = run_dir / f"{node.name}-{job.job}"
    started = time.monotonic()
    hosts = [h for g in groups for h in g.hosts]
    bundle(project, inv, groups, classes, checks=checks, probes_dir=probes_dir,
           out=f"../artifacts/{job.job}/smoke")
    result = ansible.run(
        inventory=inv.narrowed(hosts), playbook=project / PLAYBOOK, runs_base=project,
        extravars={"fleetgate_smoke_timeout_s": math.ceil(job.timeout_s)},
        timeout=math.ceil(job.timeout_s), on_remote=job)
    back = result.run_dir / "artifacts" / job.job / "smoke"
    wall = round(time.monotonic() - started, 3)
    out: list[tuple[list[CheckResult], dict[str, Any]]] = []
    for g in groups:
        meta: dict[str, Any] = {"rc": None, "killed": False, "hosts": g.hosts,
                                "budget_s": round(g.budget_s, 3)}
        try:
            meta.update(json.loads((back / f"{g.name}.meta.json").read_text()))
        except (OSError, ValueError):
            meta["lost"] = result.error or (
                f"the job ended (ansible-runner status {result.status}, rc {result.rc}) "
                f"without this group's end")
        # The node's paths mean nothing here: the log is read from what came back.
        meta.update(execution_node=node.name, job=job.job, job_wall_s=wall,
                    log=str(back / f"{g.name}.log"), run_dir=str(result.run_dir))
        out.append((read_results(back / f"{g.name}.jsonl"), meta))
    return out
