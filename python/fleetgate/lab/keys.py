"""SSH trust for the lab: one client key per lab, one host key per host, a lab known_hosts.

Host keys are generated here, before the host exists, and written to known_hosts at the same
time; connections then run with StrictHostKeyChecking=yes, never with checking disabled.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import LabHost
from fleetgate.system.procs import require_tool, run

# Seconds to wait for the TCP connect and the SSH banner. A container answers in well under a
# second, and a short wait keeps a cut host "unreachable" within seconds. A VM is emulated
# (TCG) and, right after boot on a loaded 2-core machine, its sshd can take longer than 5 s to
# fork and send its banner: CI once failed a whole VM test module on "Connection timed out
# during banner exchange" one command after the VM had answered.
CONNECT_TIMEOUT_S = {"container": 5, "vm": 30}


def _keygen(path: Path, comment: str) -> None:
    keygen = require_tool("ssh-keygen", "openssh-client")
    path.parent.mkdir(parents=True, exist_ok=True)
    run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], timeout=30)
    os.chmod(path, 0o600)


def ensure_client_key(paths: LabPaths) -> Path:
    if not paths.ssh_key.exists():
        _keygen(paths.ssh_key, f"fleetgate-lab-{paths.lab_id}")
    os.chmod(paths.ssh_key.parent, 0o700)
    return paths.ssh_key


def host_key(paths: LabPaths, host: str) -> Path:
    key = paths.host_dir(host) / "ssh_host_ed25519_key"
    if not key.exists():
        _keygen(key, f"root@{host}")
    return key


def write_known_hosts(paths: LabPaths, entries: dict[int, Path]) -> None:
    """entries: loopback port -> host private key; the public half goes to known_hosts."""
    lines = []
    for port, key in sorted(entries.items()):
        kind, blob = Path(f"{key}.pub").read_text().split()[:2]
        lines.append(f"[127.0.0.1]:{port} {kind} {blob}\n")
    paths.known_hosts.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.known_hosts.with_suffix(".tmp")
    tmp.write_text("".join(lines))
    os.chmod(tmp, 0o600)
    os.replace(tmp, paths.known_hosts)


def new_control_dir() -> str:
    """Where a lab's SSH multiplexing sockets live: short (sun_path holds 108 bytes), private
    (mkdtemp: 0700, unpredictable name) and recorded in the lab state, so `lab down` can close
    every master connection the lab's Ansible runs opened."""
    return tempfile.mkdtemp(prefix="fgcp-")


def close_control_masters(control_dir: str | None) -> None:
    if not control_dir:
        return
    cdir = Path(control_dir)
    if not cdir.is_dir():
        return
    for sock in cdir.iterdir():
        run([require_tool("ssh", "openssh-client"), "-o", f"ControlPath={sock}", "-O", "exit",
             "lab-host"], timeout=10, check=False)
    shutil.rmtree(cdir, ignore_errors=True)


def ssh_options(paths: LabPaths, kind: str = "container") -> list[str]:
    return [
        "-o", "BatchMode=yes",
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={paths.known_hosts}",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S[kind]}",
        # A cut network must surface as "unreachable" within seconds, also on a multiplexed
        # connection that was opened before the cut.
        "-o", "ServerAliveInterval=5",
        "-o", "ServerAliveCountMax=3",
    ]


def ssh_argv(paths: LabPaths, host: LabHost, *command: str) -> list[str]:
    ssh = require_tool("ssh", "openssh-client")
    return [ssh, *ssh_options(paths, host.kind), "-i", str(paths.ssh_key), "-p", str(host.port),
            "root@127.0.0.1", *command]
