"""Stages 1-3 of the walk as pure functions of the evidence (stage 4 is in comms.py).

Each returns "problem" only for something measured bad, "inconclusive" when the signal it
needs could not be read, "n/a" when the stage does not apply to the backend (a cpu host has
no GPU to under-utilise), and "ok" otherwise. Thresholds are module constants so tests and
readers see the same numbers.
"""

from __future__ import annotations

from typing import Any

from fleetgate.triage.decisions import DECISIONS, NOTES
from fleetgate.triage.evidence import Evidence, Tool
from fleetgate.triage.model import Finding, StageResult, stage

GPU_BACKENDS = ("nvidia", "amd")
SM_LOW_PCT = 40.0  # article task 4: SM 18-19% is "low"
MEM_BUSY_PCT = 60.0
FB_BUSY_MB = 1024.0  # dmon fb in MB: more than this held means a workload is resident
DISK_UTIL_PCT = 90.0
DISK_IOWAIT_PCT = 5.0  # article task 11: iowait 9.44% with %util 98 is the saturated case
IOWAIT_PCT = 20.0
CPU_BUSY_PCT = 90.0  # context for low SM only: a busy CPU beside busy GPUs is no problem
THROTTLED_RATIO = 0.2
MIN_PERIODS = 5


def _tools(ev: Evidence, *keys: str) -> dict[str, str]:
    return {ev.tools[k].name: ev.tools[k].status for k in keys}


def _decide(findings: list[Finding]) -> str | None:
    return DECISIONS[findings[0].kind] if findings else None


# --------------------------------------------------------------------------------------------
# 1. device health and visibility

def _visibility(ev: Evidence) -> tuple[list[Finding], str | None, str]:
    """(findings, inconclusive reason, summary) of the vendor's device listing."""
    if ev.backend == "nvidia":
        listing = ev.tools["nvidia_smi_list"]
        count = len(listing.data) if listing.ok else 0
        vendor_tool = "nvidia-smi"
    else:
        listing = ev.tools["rocminfo"]
        count = listing.data["gpu_agent_count"] if listing.ok else 0
        vendor_tool = "rocminfo"
    on_bus = [d for d in ev.pci_gpus or [] if d["vendor"] == ev.backend]
    if listing.status == "missing":
        return [Finding("gpu-missing", f"{vendor_tool} is not installed on a host of an "
                        f"{ev.backend} class: the driver stack is missing",
                        {"on_pci_bus": len(on_bus)})], None, ""
    if listing.status in ("failed", "unparsed"):
        kind = "rocm-unhealthy" if ev.backend == "amd" else "gpu-missing"
        return [Finding(kind, f"{listing.describe()}: the driver cannot enumerate devices",
                        {"on_pci_bus": len(on_bus)})], None, ""
    if listing.status != "ok":
        return [], (f"{listing.describe()}: a wedged GPU or driver hangs it; read the kernel "
                    "log"), ""
    findings = []
    if count < ev.expected_gpus:
        findings.append(Finding("gpu-missing", f"{count} of {ev.expected_gpus} GPUs visible "
                                f"to {vendor_tool}", {"visible": count,
                                                      "expected": ev.expected_gpus}))
    if len(on_bus) > count:
        findings.append(Finding("gpu-missing", f"{len(on_bus)} {ev.backend} GPU(s) on the PCI "
                                f"bus but {vendor_tool} lists {count}",
                                {"on_pci_bus": [d["address"] for d in on_bus],
                                 "visible": count}))
    return findings, None, f"{count} of {ev.expected_gpus} GPU(s) visible"


def _kernel_findings(log: Tool) -> list[Finding]:
    if not log.ok:
        return []
    data: dict[str, Any] = log.data
    out = []
    fatal = [x for x in data["xids"] if x["severity"] == "fatal"]
    for xid in fatal[-3:]:
        out.append(Finding("kernel-gpu-error", f"Xid {xid['xid']} ({xid['name']}) on "
                           f"{xid['pci']}", {"line": xid["line"]}))
    if not fatal:
        for line in data["bus_drops"][-1:]:
            out.append(Finding("kernel-gpu-error", "a GPU has fallen off the bus",
                               {"line": line}))
    for ev in [e for e in data["events"] if e["severity"] == "fatal"][-3:]:
        out.append(Finding("kernel-gpu-error", f"kernel log: {ev['kind']}", {"line": ev["line"]}))
    return out


def device(ev: Evidence) -> StageResult:
    tools = {**_tools(ev, "nvidia_smi_list", "rocminfo"), "kernel log": ev.kernel_log.status}
    notes = []
    if not ev.kernel_log.ok:
        notes.append(f"kernel log unreadable ({ev.kernel_log.detail}); the kernel withholds "
                     "it from containers (no CAP_SYSLOG) and, with dmesg_restrict, from "
                     "non-root users")
    elif ev.kernel_log.data["xid_count"]:
        notes.append(f"{ev.kernel_log.data['xid_count']} Xid line(s) in the kernel log, none "
                     "fatal")
    kernel = _kernel_findings(ev.kernel_log)
    if ev.backend not in GPU_BACKENDS:
        stray = list(ev.pci_gpus or [])
        if stray:
            notes.append(f"{len(stray)} GPU(s) on the PCI bus of a {ev.backend}-class host: "
                         "is the class right?")
        gpu_tools = [t for t in ("nvidia_smi_list", "rocminfo", "amd_smi_static")
                     if ev.tools[t].status != "missing"]
        notes += [ev.tools[t].describe() for t in gpu_tools if not ev.tools[t].ok]
        summary = ("no GPU tools (cpu backend)" if not gpu_tools
                   else f"GPU tools present on a {ev.backend}-class host")
        if ev.backend == "none":
            summary = summary.replace("cpu backend", "backend none")
        if kernel:
            return stage("device", "problem", kernel[0].message, findings=kernel, notes=notes,
                         tools=tools, decision=_decide(kernel))
        return stage("device", "n/a", summary, notes=notes, tools=tools)
    findings, unclear, summary = _visibility(ev)
    findings = kernel + findings  # a bus error explains a missing GPU, not the reverse
    if findings:
        return stage("device", "problem", findings[0].message, findings=findings, notes=notes,
                     tools=tools, decision=_decide(findings))
    if unclear:
        return stage("device", "inconclusive", unclear, notes=notes, tools=tools)
    return stage("device", "ok", f"{summary}; no Xid, bus or reset errors in the kernel log"
                 if ev.kernel_log.ok else summary, notes=notes, tools=tools)


# --------------------------------------------------------------------------------------------
# 2. under-utilisation

def _cpu_note(ev: Evidence) -> list[str]:
    if ev.cpu is None:
        return []
    return [f"CPU {ev.cpu['busy']:.0f}% busy, iowait {ev.cpu['iowait']:.1f}% over "
            f"{ev.window_s:.1f}s"]


def _gpu_samples(ev: Evidence) -> tuple[Tool, dict[int, dict[str, Any]]]:
    if ev.backend == "nvidia":
        dmon = ev.tools["nvidia_smi_dmon"]
        if not dmon.ok:
            return dmon, {}
        fb_mb = (dmon.data["units"].get("fb") or "MB").upper() == "MB"
        per = {}
        for idx, m in dmon.data["per_gpu"].items():
            fb = m.get("fb")
            per[int(idx)] = {"sm": m.get("sm"), "mem": m.get("mem"),
                             "resident": fb is not None and fb_mb and fb > FB_BUSY_MB}
        return dmon, per
    metric = ev.tools["amd_smi_metric"]
    if not metric.ok:
        return metric, {}
    return metric, {i: {**m, "resident": False} for i, m in metric.data.items()}


def _suspect(ev: Evidence) -> str:
    """The feeding-side hint the article gives for low SM, from the same sample window."""
    if ev.cpu is None:
        return ""
    if ev.cpu["iowait"] >= DISK_IOWAIT_PCT:
        return f"; CPU iowait {ev.cpu['iowait']:.0f}%: suspect storage feeding the loaders"
    if ev.cpu["busy"] >= CPU_BUSY_PCT:
        return f"; CPU {ev.cpu['busy']:.0f}% busy: suspect CPU-bound data loaders"
    return f"; CPU {ev.cpu['busy']:.0f}% busy: suspect sync points, small batches or Python"


def utilisation(ev: Evidence) -> StageResult:
    notes = _cpu_note(ev)
    if ev.backend not in GPU_BACKENDS:
        return stage("utilisation", "n/a", f"no GPU to sample ({ev.backend} backend)")
    source, per = _gpu_samples(ev)
    tools = {source.name: source.status}
    if not source.ok:
        return stage("utilisation", "inconclusive", f"cannot sample the GPUs: "
                     f"{source.describe()}", notes=notes, tools=tools)
    active = {i: m for i, m in per.items()
              if (m["sm"] or 0) > 0 or (m["mem"] or 0) > 0 or m["resident"]}
    if not active:
        return stage("utilisation", "ok", f"{len(per)} GPU(s) idle (SM 0%): no workload "
                     "running to judge", notes=notes, tools=tools)
    low = {i: m for i, m in active.items() if m["sm"] is not None and m["sm"] < SM_LOW_PCT}
    if not low:
        sms = ", ".join(f"GPU{i} {m['sm']:.0f}%" for i, m in active.items()
                        if m["sm"] is not None)
        return stage("utilisation", "ok", f"SM busy: {sms}", notes=notes, tools=tools)
    findings = []
    for i, m in low.items():
        mem = m["mem"] if m["mem"] is not None else 0.0
        kind = "memory-bound" if mem >= MEM_BUSY_PCT else "low-sm"
        findings.append(Finding(kind, f"GPU{i} SM {m['sm']:.0f}% (memory {mem:.0f}%) while a "
                                f"workload runs{_suspect(ev)}", {"gpu": i, **m}))
    findings.sort(key=lambda f: f.kind != "low-sm")
    return stage("utilisation", "problem", findings[0].message, findings=findings, notes=notes,
                 tools=tools, decision=_decide(findings))


# --------------------------------------------------------------------------------------------
# 3. feeding: storage, CPU, NUMA, PCIe

def _disk(ev: Evidence) -> list[Finding]:
    io = ev.tools["iostat"]
    if not io.ok:
        return []
    out = []
    for report in io.data["live"]:
        iowait = (report["cpu"] or {}).get("iowait") or (ev.cpu or {}).get("iowait") or 0.0
        for dev, m in report["devices"].items():
            util = m.get("util") or 0.0
            await_ms = max(m.get("r_await") or 0.0, m.get("w_await") or 0.0)
            if util >= DISK_UTIL_PCT and iowait >= DISK_IOWAIT_PCT:
                out.append(Finding("disk-saturated", f"{dev} {util:.0f}% busy, await "
                                   f"{await_ms:.1f} ms, iowait {iowait:.1f}%",
                                   {"device": dev, "util": util, "await_ms": await_ms,
                                    "iowait": iowait}))
    return out[-1:]


def _cpu_findings(ev: Evidence) -> list[Finding]:
    out = []
    cg = ev.cgroup or {}
    quota, throttle = cg.get("quota_cpus"), cg.get("throttle") or {}
    cpus = ev.cpus_allowed
    ratio, periods = throttle.get("ratio"), throttle.get("periods") or 0
    throttled = ratio is not None and periods >= MIN_PERIODS and ratio >= THROTTLED_RATIO
    if quota is not None and (quota < 1.0 or throttled) and (cpus is None or quota < cpus):
        detail = (f"; throttled in {throttle['throttled']} of {periods} periods "
                  f"({throttle['throttled_s']:.2f}s)" if periods else "")
        out.append(Finding("cpu-throttled", f"CPU capped at {quota:g} of "
                           f"{cpus if cpus is not None else '?'} CPUs by the cgroup quota"
                           f"{detail}", {"quota_cpus": quota, "cpus": cpus, **throttle}))
    if ev.cpu is not None and ev.cpu["iowait"] >= IOWAIT_PCT:
        out.append(Finding("iowait", f"CPU iowait {ev.cpu['iowait']:.0f}% over "
                           f"{ev.window_s:.1f}s", dict(ev.cpu)))
    return out


def _layout_notes(ev: Evidence) -> list[str]:
    notes = []
    topo = ev.tools["nvidia_smi_topo"]
    if topo.ok:
        nodes = sorted({v for v in topo.data["numa_affinity"].values() if v is not None})
        if len(nodes) > 1:
            notes.append(f"{NOTES['numa-split']} (NUMA nodes {', '.join(nodes)})")
    lscpu = ev.tools["lscpu"]
    if lscpu.ok and (lscpu.data.get("numa_nodes") or 1) > 1 and not notes:
        notes.append(f"{NOTES['numa-multi']} ({lscpu.data['numa_nodes']} NUMA nodes)")
    return notes


def feeding(ev: Evidence) -> StageResult:
    keys = ["iostat", "mpstat", "lscpu"] + (["nvidia_smi_topo"] if ev.backend == "nvidia"
                                            else [])
    tools = _tools(ev, *keys)
    notes = [f"{ev.tools[k].name}: missing" + (" (sysstat is not installed)"
                                               if k in ("iostat", "mpstat") else "")
             if ev.tools[k].status == "missing" else ev.tools[k].describe()
             for k in keys if not ev.tools[k].ok]
    notes += _layout_notes(ev) + _cpu_note(ev)
    findings = _disk(ev) + _cpu_findings(ev)
    if findings:
        return stage("feeding", "problem", findings[0].message, findings=findings, notes=notes,
                     tools=tools, decision=_decide(findings))
    if ev.cpu is None and not ev.tools["iostat"].ok and not ev.tools["mpstat"].ok:
        return stage("feeding", "inconclusive", "neither /proc/stat nor iostat/mpstat could "
                     "be read", notes=notes, tools=tools)
    quota = (ev.cgroup or {}).get("quota_cpus")
    summary = "storage and CPU keep up" + (f" (cgroup CPU quota {quota:g} CPUs)" if quota
                                           else "")
    return stage("feeding", "ok", summary, notes=notes, tools=tools)
