"""Kubernetes drain and undrain: the kubectl argv and where it runs, by the real playbooks under
ansible-playbook. No API server can run on these machines, so kubectl is a stand-in on PATH
that records its argv; nothing here was run against a real cluster (README says so).

The GPU nodes are unreachable on purpose (127.0.0.1 port 1): a task that was not delegated to
the control host would fail on them as unreachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
KUBECTL = """#!/bin/sh
exec python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$KUBECTL_LOG"
"""


def run_playbooks(tmp_path: Path, *playbooks: str, extra: tuple[str, ...] = ()
                  ) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "kubectl").write_text(KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    log = tmp_path / "kubectl.log"
    log.unlink(missing_ok=True)
    unreachable = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {
        "gpu-n1": {**unreachable, "fleetgate_k8s_node": "n1.example"},
        "gpu-n2": {**unreachable, "fleetgate_k8s_node": "n2.example",
                   "fleetgate_k8s_control_host": "cp1"},
        "cp1": {"ansible_connection": "local"},
    }}}))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "KUBECTL_LOG": str(log), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inv), "--limit", "gpu-n1,gpu-n2", "--forks", "1",
         *extra, *(str(REPO / "playbooks" / p) for p in playbooks)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
        stdin=subprocess.DEVNULL)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def test_cordon_drain_and_uncordon_run_on_the_control_host_with_the_standard_flags(
        tmp_path: Path) -> None:
    proc, calls = run_playbooks(tmp_path, "drain.yml", "undrain.yml",
                                extra=("-e", "fleetgate_drain_timeout=77"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for node in ("n1.example", "n2.example"):
        mine = [c for c in calls if node in c]
        assert mine == [
            ["cordon", node],
            # PDBs are respected: evictions, never --disable-eviction or --force.
            ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=77s"],
            ["uncordon", node],
        ], calls
    # Delegated: the default control host is the Ansible controller, a host may name its own.
    for task in ("Cordon", "Drain", "Uncordon"):
        assert "changed: [gpu-n1 -> localhost]" in _task_output(proc.stdout, task)
        assert "changed: [gpu-n2 -> cp1]" in _task_output(proc.stdout, task)
    assert "unreachable=0" in proc.stdout and "failed=0" in proc.stdout


def test_a_drain_timeout_that_is_not_seconds_is_refused_before_kubectl_runs(
        tmp_path: Path) -> None:
    proc, calls = run_playbooks(tmp_path, "drain.yml",
                                extra=("-e", "fleetgate_drain_timeout=10m; rm -rf /"))
    assert proc.returncode != 0
    assert "refusing scheduler settings" in proc.stdout
    assert calls == []


def _task_output(stdout: str, task: str) -> str:
    """The lines of the Kubernetes task whose name starts with `task`."""
    parts = stdout.split("TASK [")
    return "".join(p for p in parts if p.startswith(f"{task} the Kubernetes node"))
