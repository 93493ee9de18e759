"""Stage 4 of the walk: NIC counters over the sample window and the NCCL interface choice.

NCCL_SOCKET_IFNAME and NCCL_IB_HCA follow NCCL's own matching rules: a comma-separated list
of prefixes, `^` in front excludes instead of selects, `=` in front asks for exact names; an
HCA may carry a `:port` suffix.
"""

from __future__ import annotations

from typing import Any

from fleetgate.triage.decisions import DECISIONS, NOTES
from fleetgate.triage.evidence import Evidence, NcclVar
from fleetgate.triage.model import Finding, StageResult, stage

COUNTERS = (("rx", "errors"), ("rx", "dropped"), ("rx", "missed"), ("tx", "errors"),
            ("tx", "dropped"), ("tx", "carrier"))


def select(spec: str, names: list[str]) -> list[str]:
    """The names an NCCL interface/HCA spec selects, in NCCL's matching rules."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    prefixes = [p.split(":")[0] for p in body.split(",") if p]

    def hit(name: str) -> bool:
        return any(name == p if exact else name.startswith(p) for p in prefixes)

    return [n for n in names if hit(n) != exclude]


def _counter_findings(before: dict[str, Any] | None, after: dict[str, Any],
                      window_s: float) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    notes: list[str] = []
    for name, link in after.items():
        if "LOOPBACK" in link["flags"]:
            continue
        prev = (before or {}).get(name)
        for direction, counter in COUNTERS:
            now = link[direction].get(counter)
            if now is None:
                continue
            then = prev[direction].get(counter) if prev else None
            if then is not None and now > then:
                findings.append(Finding("nic-drops", f"{name}: {direction.upper()} {counter} "
                                        f"+{now - then} during the {window_s:.1f}s sample",
                                        {"interface": name, "counter": f"{direction}.{counter}",
                                         "before": then, "after": now}))
            elif now > 0:
                packets = link[direction].get("packets")
                notes.append(f"{name}: {now} {direction.upper()} {counter} since boot"
                             + (f" (of {packets} packets)" if packets else "")
                             + "; watch whether it grows under load")
    return findings, notes


def _nccl_findings(ev: Evidence, links: dict[str, Any]) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    notes: list[str] = []
    if not ev.nccl:
        return [], [NOTES["nccl-unset"]]
    shown = ", ".join(f"{k}={v.value}" for k, v in sorted(ev.nccl.items()))
    notes.append(f"NCCL environment: {shown}")
    ifname = ev.nccl.get("NCCL_SOCKET_IFNAME")
    if ifname is not None:
        chosen = select(ifname.value, sorted(links))
        usable = [n for n in chosen if "LOOPBACK" not in links[n]["flags"]
                  and links[n]["state"] in ("UP", "UNKNOWN")]
        have = ", ".join(sorted(links)) or "none"
        if not chosen:
            findings.append(Finding("nccl-nic", f"NCCL_SOCKET_IFNAME={ifname.value} (from "
                                    f"{ifname.source}) matches no interface here (have: {have})",
                                    {"value": ifname.value, "source": ifname.source,
                                     "interfaces": sorted(links)}))
        elif not usable:
            findings.append(Finding("nccl-nic", f"NCCL_SOCKET_IFNAME={ifname.value} (from "
                                    f"{ifname.source}) selects only loopback or down "
                                    f"interfaces: {', '.join(chosen)}",
                                    {"value": ifname.value, "selected": chosen}))
    hca = ev.nccl.get("NCCL_IB_HCA")
    ib_off = ev.nccl.get("NCCL_IB_DISABLE", NcclVar("0", "default")).value == "1"
    if hca is not None and not ib_off:
        devices = ev.infiniband or []
        if not select(hca.value, devices):
            findings.append(Finding("nccl-nic", f"NCCL_IB_HCA={hca.value} (from {hca.source}) "
                                    "matches no RDMA device in /sys/class/infiniband (have: "
                                    f"{', '.join(devices) or 'none'})",
                                    {"value": hca.value, "devices": devices}))
    if "NCCL_DEBUG" not in ev.nccl:
        notes.append("NCCL_DEBUG is not set: set NCCL_DEBUG=INFO to see the interface NCCL "
                     "picks")
    return findings, notes


def comms(ev: Evidence) -> StageResult:
    before, after = ev.tools["ip_link_0"], ev.tools["ip_link_1"]
    tools = {"ip -s link": after.status if after.ok else before.status}
    links = after if after.ok else before
    if not links.ok:
        return stage("comms", "inconclusive", f"cannot read NIC counters: {links.describe()}",
                     tools=tools)
    counters, notes = _counter_findings(before.data if before.ok and after.ok else None,
                                        links.data, ev.window_s)
    nccl, nccl_notes = _nccl_findings(ev, links.data)
    findings = nccl + counters  # a wrong NIC explains a hang before any counter does
    notes += nccl_notes
    if findings:
        return stage("comms", "problem", findings[0].message, findings=findings, notes=notes,
                     tools=tools, decision=DECISIONS[findings[0].kind])
    nics = [n for n, link in links.data.items() if "LOOPBACK" not in link["flags"]]
    return stage("comms", "ok", f"no errors or drops on {', '.join(nics) or 'no NIC'} during "
                 f"the {ev.window_s:.1f}s sample", notes=notes, tools=tools)
