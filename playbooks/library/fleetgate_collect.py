#!/usr/bin/python3
"""fleetgate triage collector: gather, on one host, what `fleetgate diagnose` and `fleetgate
fleet drift` read, and return it as one JSON document (the module's `collection`).

It only collects: every decision (and every parser but the device identity query) lives on the
controller, in python/fleetgate/triage, where it is tested against recorded outputs. So it
stays small, standard library only, and safe on any host:
- every command runs through fleetgate_hostcmd: its own process group and a deadline
  (timeout, 10 s by default), SIGKILLed whole at the deadline, because a tool stuck on a
  wedged GPU (or the lab's hang-probe shim) ignores SIGTERM and its children would keep our
  pipes open;
- a tool that is not installed is reported as "missing", never as a failure;
- once nvidia-smi has hung, the other nvidia-smi calls are not started: a wedged driver
  would only hang them too, and the host's verdict does not need three timeouts.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleetgate_collect
short_description: Collect triage evidence (device tools, kernel log, CPU, cgroup, links)
description:
  - Read-only; supports check mode. Runs each tool under its own deadline and returns every
    command's status, rc, stdout and stderr and a few files, as C(collection)
    (schema C(fleetgate.triage.collect/v1)); C(fleetgate diagnose) and C(fleetgate fleet drift)
    parse it on the controller.
options:
  mode:
    description: C(diagnose) collects everything; C(identity) only the devices' identity.
    type: str
    choices: [diagnose, identity]
    default: diagnose
  timeout:
    description: Seconds each command may run.
    type: float
    default: 10
author: fleetgate
"""

EXAMPLES = r"""
- name: Read the devices' identity
  fleetgate_collect:
    mode: identity
  register: identity
"""

RETURN = r"""
collection:
  description: The collector's document, schema C(fleetgate.triage.collect/v1).
  returned: always
  type: dict
"""

import os
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleetgate_hostcmd import CmdResult
from ansible.module_utils.fleetgate_hostcmd import run as run_command
from ansible.module_utils.fleetgate_parsers import NVIDIA_IDENTITY_QUERY

SCHEMA = "fleetgate.triage.collect/v1"
MAX_STDOUT = 2_000_000
MAX_STDERR = 4_000

# name -> argv. Sampling commands (dmon, iostat, mpstat) run between the two snapshots of
# /proc/stat, the cgroup CPU counters and `ip -s link`, so those deltas cover the same window.
IDENTITY = (
    ("nvidia_smi_query", ["nvidia-smi", NVIDIA_IDENTITY_QUERY, "--format=csv"]),
    ("amd_smi_static", ["amd-smi", "static", "--asic", "--vbios", "--driver", "--json"]),
)
DEVICE = (
    ("nvidia_smi_list", ["nvidia-smi", "-L"]),
    *IDENTITY,
    ("rocminfo", ["rocminfo"]),
    ("dmesg", ["dmesg", "-T"]),
    ("journalctl_k", ["journalctl", "-k", "-b", "--no-pager", "-n", "5000"]),
)
SAMPLING = (
    ("nvidia_smi_dmon", ["nvidia-smi", "dmon", "-s", "pucvmet", "-d", "1", "-c", "5"]),
    ("amd_smi_metric", ["amd-smi", "metric", "--usage", "--json"]),
    ("iostat", ["iostat", "-xz", "1", "3"]),
    ("mpstat", ["mpstat", "1", "1"]),
)
LAYOUT = (
    ("nvidia_smi_topo", ["nvidia-smi", "topo", "-m"]),
    ("lscpu", ["lscpu"]),
)
# The CPU quota of the cgroup the host's processes run in (v2 and v1 layouts): a container
# or VM slice capped below its CPUs starves data loaders the way a slow GPU never would.
CGROUP_LIMITS = (
    ("cgroup2_cpu_max", "/sys/fs/cgroup/cpu.max"),
    ("cgroup1_cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
    ("cgroup1_cfs_period_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
)
CGROUP_STATS = (
    ("cgroup2_cpu_stat", "/sys/fs/cgroup/cpu.stat"),
    ("cgroup1_cpu_stat", "/sys/fs/cgroup/cpu/cpu.stat"),
)
ENV_FILES = (
    ("etc_environment", "/etc/environment"),
    ("etc_nccl_conf", "/etc/nccl.conf"),
    ("home_nccl_conf", os.path.expanduser("~/.nccl.conf")),
)
MIN_WINDOW_S = 2.0


def run(argv: list[str], timeout: float) -> dict[str, object]:
    got: CmdResult = run_command(argv, timeout)
    result: dict[str, object] = {"argv": argv, "rc": got.rc, "status": got.status,
                                 "duration_s": got.duration_s,
                                 "stdout": got.stdout[-MAX_STDOUT:],
                                 "stderr": got.stderr[-MAX_STDERR:]}
    return result


def read(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return {"path": path, "text": fh.read(MAX_STDOUT), "error": None}
    except OSError as exc:
        return {"path": path, "text": None, "error": exc.strerror or str(exc)}


def pci_devices() -> dict[str, object]:
    """One line per PCI function: address vendor device class numa_node (sysfs, no lspci)."""
    base = "/sys/bus/pci/devices"
    try:
        names = sorted(os.listdir(base))
    except OSError as exc:
        return {"path": base, "text": None, "error": exc.strerror or str(exc)}
    lines = []
    for name in names:
        fields = []
        for attr in ("vendor", "device", "class", "numa_node"):
            got = read(os.path.join(base, name, attr))["text"]
            fields.append(str(got).strip() if got is not None else "-")
        lines.append(" ".join([name, *fields]))
    return {"path": base, "text": "".join(line + "\n" for line in lines), "error": None}


def listing(path: str) -> dict[str, object]:
    try:
        return {"path": path, "text": "".join(n + "\n" for n in sorted(os.listdir(path))),
                "error": None}
    except OSError as exc:
        return {"path": path, "text": None, "error": exc.strerror or str(exc)}


class Collector:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.commands: dict[str, dict[str, object]] = {}
        self.nvidia_hung = False

    def cmd(self, name: str, argv: list[str]) -> None:
        if argv[0] == "nvidia-smi" and self.nvidia_hung:
            self.commands[name] = {"argv": argv, "status": "skipped", "rc": None, "stdout": "",
                                   "stderr": "nvidia-smi already hung once on this host",
                                   "duration_s": 0.0}
            return
        self.commands[name] = got = run(argv, self.timeout)
        if argv[0] == "nvidia-smi" and got["status"] == "timeout":
            self.nvidia_hung = True


def snapshot(c: Collector, files: dict[str, dict[str, object]], suffix: str) -> None:
    files["proc_stat_" + suffix] = read("/proc/stat")
    for name, path in CGROUP_STATS:
        files[f"{name}_{suffix}"] = read(path)
    c.cmd("ip_link_" + suffix, ["ip", "-s", "link"])


def collect(mode: str, timeout: float) -> dict[str, object]:
    started = time.time()
    t0 = time.monotonic()
    c = Collector(timeout)
    files: dict[str, dict[str, object]] = {}
    if mode == "identity":
        for name, argv in IDENTITY:
            c.cmd(name, list(argv))
    else:
        for name, argv in DEVICE:
            c.cmd(name, list(argv))
        files["pci_devices"] = pci_devices()
        files["infiniband"] = listing("/sys/class/infiniband")
        for name, path in (*ENV_FILES, *CGROUP_LIMITS):
            files[name] = read(path)
        snapshot(c, files, "0")
        w0 = time.monotonic()
        for name, argv in SAMPLING:
            c.cmd(name, list(argv))
        rest = MIN_WINDOW_S - (time.monotonic() - w0)
        if rest > 0:  # no sampling tool ran: still measure CPU and links over a window
            time.sleep(rest)
        snapshot(c, files, "1")
        for name, argv in LAYOUT:
            c.cmd(name, list(argv))
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = None
    return {
        "schema": SCHEMA,
        "mode": mode,
        "started_at": round(started, 3),
        "duration_s": round(time.monotonic() - t0, 3),
        "timeout_s": timeout,
        "facts": {"hostname": os.uname().nodename, "kernel": os.uname().release,
                  "cpu_count": os.cpu_count(), "cpus_allowed": allowed,
                  "python": sys.version.split()[0]},
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "commands": c.commands,
        "files": files,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["diagnose", "identity"], "default": "diagnose"},
            "timeout": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    timeout = module.params["timeout"]
    if not 1 <= timeout <= 120:
        module.fail_json(msg=f"timeout must be between 1 and 120, got {timeout:g}")
    module.exit_json(changed=False, collection=collect(module.params["mode"], timeout))


if __name__ == "__main__":
    main()
