"""Real faults for lab hosts, and their healing. Nothing here fakes a result:

- stop: the container is stopped / the VM is powered off.
- throttle-cpu: `podman update --cpus` caps the container's CFS quota, so GEMM really slows.
- cut-network: every packet that is not loopback is dropped inside the host's network
  namespace (container), or the VM's NIC link is set down in qemu.
- hang-probe: the tools a smoke probe calls first (lscpu, nvidia-smi, amd-smi, rocm-smi) are
  shadowed in /usr/local/bin by a shim that blocks forever and ignores SIGTERM, as
  nvidia-smi does on a wedged GPU; the probe's watchdog must answer "timeout" by itself.
  Healing deletes the shims.
- nccl-bad-nic: /etc/environment gains NCCL_SOCKET_IFNAME naming an interface no lab host has,
  the classic wrong-NIC setting that hangs multi-node training. Healing removes the lines.
- drift-package: a file that the class's pinned kernel package installed
  (/boot/config-ABI) is edited by hand, so `dpkg --verify` of the pinned package fails, as
  after a hand "fix" on a live host. The original is kept aside and put back on healing.
  Needs the pinned kernel installed (apply-class) first.
"""

from __future__ import annotations

import os

from fleetgate.errors import BadInput
from fleetgate.lab.keys import CONNECT_TIMEOUT_S, ssh_argv
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import FaultKind, LabHost
from fleetgate.lab.vm_hosts import monitor_command, start_vm, stop_vm
from fleetgate.spec.loader import resolve_class
from fleetgate.system.podman import Podman
from fleetgate.system.procs import require_tool, run

THROTTLED_CPUS = "0.05"
HANG_TOOLS = ("lscpu", "nvidia-smi", "amd-smi", "rocm-smi")
HANG_MARK = "fleetgate lab fault hang-probe"
# Blocks like a tool stuck on a wedged device: ignores TERM/INT/HUP (inherited by sleep), so
# only SIGKILL of the process group ends it.
HANG_SHIM = f"#!/bin/sh\n# {HANG_MARK}\ntrap '' TERM INT HUP\nwhile :; do sleep 3600; done\n"
CUT_RULES = (["INPUT", "!", "-i", "lo", "-j", "DROP"], ["OUTPUT", "!", "-o", "lo", "-j", "DROP"])
# Faults set and undone through the host's own shell: they need it running and reachable.
SHELL_FAULTS = ("hang-probe", "nccl-bad-nic", "drift-package")
NCCL_MARK = "# fleetgate lab fault nccl-bad-nic"
NCCL_BAD_IFNAME = "ib9"  # no lab host has an InfiniBand-named interface
DRIFT_MARK = "# fleetgate lab fault drift-package: edited by hand"
DRIFT_BACKUP = "/var/lib/fleetgate-lab/drift-package.orig"


def _netns_iptables(podman: Podman, host: LabHost, op: str) -> None:
    nsenter = require_tool("nsenter", "util-linux")
    iptables = require_tool("iptables", "iptables")
    pid = podman.container_pid(host.runtime_name)
    for rule in CUT_RULES:
        run([nsenter, "-t", str(pid), "-n", iptables, op, *rule], timeout=30)


def _host_shell(paths: LabPaths, podman: Podman, host: LabHost, script: str) -> None:
    if host.kind == "container":
        podman("exec", host.runtime_name, "/bin/sh", "-c", script, timeout=30)
    else:
        run(ssh_argv(paths, host, script), timeout=30 + CONNECT_TIMEOUT_S[host.kind])


def _hang_probe(paths: LabPaths, podman: Podman, host: LabHost, on: bool) -> None:
    if on:
        script = "".join(
            f"printf '%s' \"$1\" > /usr/local/bin/{t} && chmod 0755 /usr/local/bin/{t}; "
            for t in HANG_TOOLS)
        script = f"set -e; {script}"
        argv_script = f"sh -c {_quote(script)} hang {_quote(HANG_SHIM)}"
        _host_shell(paths, podman, host, argv_script)
    else:
        # Only files that carry the mark: a real tool installed there is never touched.
        _host_shell(paths, podman, host, " ".join(
            f"grep -qs {_quote(HANG_MARK)} /usr/local/bin/{t} && rm -f /usr/local/bin/{t};"
            for t in HANG_TOOLS) + " true")


def _nccl_bad_nic(paths: LabPaths, podman: Podman, host: LabHost, on: bool) -> None:
    if on:
        lines = f"{NCCL_MARK}\nNCCL_SOCKET_IFNAME={NCCL_BAD_IFNAME}\n"
        _host_shell(paths, podman, host, f"printf '%s' {_quote(lines)} >> /etc/environment")
    else:
        # The marker line and the one after it; nothing else in the file is touched.
        _host_shell(paths, podman, host, "test ! -f /etc/environment || sed -i "
                    f"{_quote('/^' + NCCL_MARK + '$/,+1d')} /etc/environment")


def _drift_package(paths: LabPaths, podman: Podman, host: LabHost, on: bool) -> None:
    # The ABI comes from the schema-validated class: only [0-9A-Za-z._-] reach the shell.
    _, nc = resolve_class(host.node_class)
    target = f"/boot/config-{nc.kernel.abi}"
    if on:
        _host_shell(paths, podman, host, (
            f"if [ ! -f {target} ]; then echo 'drift-package: {target} is missing: the "
            f"pinned kernel package of {nc.name} is not installed (apply the class first)' >&2; "
            f"exit 3; fi; mkdir -p {os.path.dirname(DRIFT_BACKUP)} && "
            f"cp -p {target} {DRIFT_BACKUP} && printf '%s\\n' {_quote(DRIFT_MARK)} >> {target}"))
    else:
        _host_shell(paths, podman, host, f"if [ -f {DRIFT_BACKUP} ]; then cp -p {DRIFT_BACKUP} "
                    f"{target} && rm -f {DRIFT_BACKUP}; fi")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def inject(paths: LabPaths, podman: Podman, host: LabHost, kind: FaultKind) -> None:
    if kind in host.faults:
        raise BadInput(f"fault {kind} is already active", source=host.name, field="fault")
    if "stop" in host.faults:
        raise BadInput("host is stopped; heal it first", source=host.name, field="fault")
    if kind == "stop":
        if host.kind == "container":
            podman("stop", "--time", "2", host.runtime_name)
        else:
            stop_vm(paths, host)
            host.supervisor_pid = None
    elif kind == "throttle-cpu":
        if host.kind != "container":
            raise BadInput("throttle-cpu needs a container host", source=host.name, field="fault")
        podman("update", "--cpus", THROTTLED_CPUS, host.runtime_name)
    elif kind == "cut-network":
        if host.kind == "container":
            _netns_iptables(podman, host, "-I")
        else:
            monitor_command(paths, host, "set_link n0 off")
    elif kind in SHELL_FAULTS:
        if "cut-network" in host.faults:
            raise BadInput("host network is cut; heal it first", source=host.name, field="fault")
        if kind == "hang-probe":
            _hang_probe(paths, podman, host, on=True)
        elif kind == "nccl-bad-nic":
            _nccl_bad_nic(paths, podman, host, on=True)
        else:
            _drift_package(paths, podman, host, on=True)
    host.faults.append(kind)


def heal(paths: LabPaths, podman: Podman, host: LabHost) -> list[str]:
    healed: list[str] = []
    if "stop" in host.faults and "cut-network" in host.faults:
        # A restarted host comes back with a fresh network namespace / NIC: the cut is gone.
        host.faults.remove("cut-network")
        healed.append("cut-network")
    # Shell faults are healed last, through the host's own shell, once the host runs again.
    for kind in sorted(host.faults, key=lambda k: (k != "stop", k in SHELL_FAULTS)):
        if kind == "stop":
            if host.kind == "container":
                podman("start", host.runtime_name)
            else:
                host.supervisor_pid = start_vm(paths, host)
        elif kind == "throttle-cpu":
            # `--cpus 0` does not clear a quota on podman 4.3; a quota of every host CPU does.
            podman("update", "--cpus", str(os.cpu_count() or 1), host.runtime_name)
        elif kind == "cut-network":
            if host.kind == "container":
                _netns_iptables(podman, host, "-D")
            else:
                monitor_command(paths, host, "set_link n0 on")
        elif kind == "hang-probe":
            _hang_probe(paths, podman, host, on=False)
        elif kind == "nccl-bad-nic":
            _nccl_bad_nic(paths, podman, host, on=False)
        elif kind == "drift-package":
            _drift_package(paths, podman, host, on=False)
        host.faults.remove(kind)
        healed.append(kind)
    return healed
