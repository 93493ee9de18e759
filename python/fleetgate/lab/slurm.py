"""A real Slurm cluster on the lab's container hosts (`lab up --slurm`): MUNGE and slurmctld on
the first host, slurmd on every host (the controller is a compute node too), Debian's
Slurm 22.05 from the lab's Slurm base image (system/recipes.py: slurm_recipe).

Containers run no systemd, so the lab starts the daemons itself, in the order MUNGE needs:
munged on every host with one shared key, then slurmctld, then each slurmd. The settings are
the ones that work without cgroups (linuxproc process tracking, no task plugin, no job
accounting gatherer). Hosts find each other through /etc/hosts lines the lab writes: the
containers' bridge addresses, used only between the containers, as a cluster's own network;
Ansible and the tests still reach every host on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from fleetgate.errors import LabError
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import LabHost, SlurmCluster
from fleetgate.system.podman import Podman
from fleetgate.system.procs import run

CLUSTER = "fleetgate-lab"
READY_TIMEOUT_S = 90.0
MUNGE_KEY_BYTES = 1024
IN_HOST_DIR = "/run/fleetgate-slurm"  # where each host gets the lab's key, config and names
HOSTS_MARK = "# fleetgate lab slurm"
NODE_LINE_RE = re.compile(r"NodeName=(\S+) .*?\bState=(\S+)")

# Run inside a host as root: `sh -c SETUP setup ROLE`. Every step may run again (a re-run
# replaces the lab's /etc/hosts lines instead of adding more).
SETUP = f"""set -eu
d={IN_HOST_DIR}
hosts=$(grep -v '{HOSTS_MARK}$' /etc/hosts || true)
printf '%s\\n' "$hosts" > /etc/hosts
cat "$d/hosts" >> /etc/hosts
install -o munge -g munge -m 0400 "$d/munge.key" /etc/munge/munge.key
install -m 0644 "$d/slurm.conf" /etc/slurm/slurm.conf
install -d -o munge -g munge -m 0755 /run/munge
install -d -o slurm -g slurm -m 0755 /var/lib/slurm /var/lib/slurm/slurmctld /var/log/slurm
install -d -m 0755 /var/lib/slurm/slurmd
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
"""
DAEMON = {"slurmctld": "pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld",
          "slurmd": "pgrep -x slurmd >/dev/null || /usr/sbin/slurmd"}
# A container has no init to start its daemons after a reboot, so each Slurm host gets this
# script: what the lab ran to start its daemons, to run again. examples/rollout/
# stamp-version.yml (stamp_reboot) runs it after killing every process, the lab's stand-in for
# a reboot on a container host.
BOOT_SCRIPT = "/usr/local/sbin/fleetgate-lab-boot"
LOGS = {"slurmctld": "/var/log/slurm/slurmctld.log", "slurmd": "/var/log/slurm/slurmd.log"}


def boot_script(controller: bool) -> str:
    daemons = ([DAEMON["slurmctld"]] if controller else []) + [DAEMON["slurmd"]]
    return ("#!/bin/sh\n# Written by fleetgate lab (lab/slurm.py).\n" + SETUP
            + "\n".join(daemons) + "\n")


def slurm_conf(controller: str, nodes: list[str]) -> str:
    return f"""\
# Written by fleetgate lab (lab/slurm.py): a cluster of the lab's container hosts.
ClusterName={CLUSTER}
SlurmctldHost={controller}
SlurmUser=slurm
AuthType=auth/munge
# No cgroups in a lab container: track processes by /proc, bind nothing, gather nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# A resumed node (or one whose slurmd restarts) comes back to service by itself.
ReturnToService=2
SelectType=select/linear
SchedulerType=sched/backfill
MpiDefault=none
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile={LOGS["slurmctld"]}
SlurmdLogFile={LOGS["slurmd"]}
NodeName={",".join(nodes)} CPUs=1 State=UNKNOWN
PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def hosts_lines(addresses: dict[str, str]) -> str:
    return "".join(f"{ip} {name} {HOSTS_MARK}\n" for name, ip in sorted(addresses.items()))


def _exec(podman: Podman, host: LabHost, script: str, *args: str, timeout: float = 60) -> str:
    proc = podman("exec", host.runtime_name, "/bin/sh", "-c", script, "slurm-setup", *args,
                  timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise LabError(f"Slurm setup failed: {' / '.join(tail) or f'exit {proc.returncode}'}",
                       source=host.name)
    return proc.stdout


def _address(podman: Podman, host: LabHost) -> str:
    ip = podman("inspect", "--format", "{{.NetworkSettings.IPAddress}}",
                host.runtime_name).stdout.strip()
    if not ip:
        raise LabError("container has no bridge address for Slurm to use", source=host.name)
    return ip


def _write_files(paths: LabPaths, cluster: SlurmCluster, addresses: dict[str, str]) -> Path:
    d = paths.root / "slurm"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = d / "munge.key"
    if not key.exists():
        # The cluster's one shared secret: every munged must hold the same key.
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(MUNGE_KEY_BYTES))
    (d / "slurm.conf").write_text(slurm_conf(cluster.controller, cluster.nodes))
    (d / "hosts").write_text(hosts_lines(addresses))
    return d


def node_states(text: str) -> dict[str, str]:
    """`scontrol show node -o`: NodeName -> State, one line per node."""
    return {m.group(1): m.group(2) for m in map(NODE_LINE_RE.search, text.splitlines()) if m}


def start(podman: Podman, paths: LabPaths, hosts: list[LabHost]) -> SlurmCluster:
    """Configure and start the cluster on `hosts` (running, reachable containers); returns
    once every node reports IDLE to slurmctld."""
    cluster = SlurmCluster(controller=hosts[0].name, nodes=[h.name for h in hosts])
    src = _write_files(paths, cluster, {h.name: _address(podman, h) for h in hosts})
    for h in hosts:
        (src / "boot").write_text(boot_script(h is hosts[0]))
        run([podman.binary, "cp", f"{src}/.", f"{h.runtime_name}:{IN_HOST_DIR}"],
            env=podman.env, timeout=60)
        _exec(podman, h, SETUP + f'install -m 0755 "$d/boot" {BOOT_SCRIPT}\n')
    ctl = hosts[0]
    _exec(podman, ctl, DAEMON["slurmctld"])
    for h in hosts:
        _exec(podman, h, DAEMON["slurmd"])
    wait_ready(podman, ctl, cluster)
    return cluster


def wait_ready(podman: Podman, ctl: LabHost, cluster: SlurmCluster,
               timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        proc = podman("exec", ctl.runtime_name, "scontrol", "show", "node", "-o", check=False)
        states = node_states(proc.stdout) if proc.returncode == 0 else {}
        if states and all(states.get(n) == "IDLE" for n in cluster.nodes):
            return
        time.sleep(1)
    log = podman("exec", ctl.runtime_name, "tail", "-n", "3", LOGS["slurmctld"],
                 check=False).stdout.strip().replace("\n", " / ")
    seen = ", ".join(f"{n} {s}" for n, s in sorted(states.items())) or "no node answered"
    raise LabError(f"Slurm nodes not idle after {timeout:.0f}s ({seen}); slurmctld.log: {log}",
                   source=ctl.name)
