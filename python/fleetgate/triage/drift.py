"""Fleet drift as pure functions: each host's live state against its class and against the
manifest it carries, and hardware that differs between hosts of one class.

A host drifts when:
- it has no class, or no (readable) /etc/fleetgate/manifest.json, or a manifest of another
  class, or a manifest that recorded drift when it was written;
- a pinned version (kernel package, default boot kernel, driver, DKMS, container runtime and
  toolkit) differs from its class (node_manifest's own verify);
- a verified version, the package list or the device fingerprint differs from the manifest;
- `dpkg --verify` finds files of a pinned package changed by hand;
- its devices are not the class's (model, PCI ID, compute capability; GPU classes).
A class has mixed hardware when its hosts' devices differ in model, PCI ID, compute
capability or VBIOS -- the engine caches of story 2 must not be shared across them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from fleetgate.spec.schema import NodeClass
from fleetgate.triage.identity import Device

HostStatus = Literal["clean", "drift", "inconclusive"]
_VERIFY_RE = re.compile(r"^(?P<flags>\S{9}|missing)\s+(?:(?P<conf>c)\s+)?(?P<path>/.*)$")


@dataclass
class Drift:
    kind: str
    field: str
    expected: Any
    actual: Any
    message: str


@dataclass
class HostState:
    """What the drift playbook returned for one host (None where it could not be read)."""

    host: str
    class_name: str | None
    outcome: str  # ansible outcome: ok, failed, unreachable ...
    message: str = ""
    live: dict[str, Any] | None = None  # node_manifest verify
    recorded: dict[str, Any] | None = None
    recorded_error: str | None = None  # the manifest exists but is not JSON / not an object
    dpkg_verify: str = ""
    devices: list[Device] = field(default_factory=list)


@dataclass
class HostDrift:
    host: str
    class_name: str | None
    status: HostStatus
    reason: str
    drift: list[Drift]
    devices: list[dict[str, Any]]


def parse_dpkg_verify(text: str) -> list[dict[str, Any]]:
    """`dpkg --verify` lines: `??5??????   /path`, `??5?????? c /etc/conf`, `missing   /path`."""
    out = []
    for line in text.splitlines():
        m = _VERIFY_RE.match(line.strip())
        if m:
            out.append({"path": m.group("path"), "conffile": bool(m.group("conf")),
                        "missing": m.group("flags") == "missing",
                        "checksum_changed": m.group("flags")[2:3] == "5"})
    return out


def _class_drift(live: dict[str, Any]) -> list[Drift]:
    return [Drift("version", str(d.get("field")), d.get("expected"), d.get("actual"),
                  f"{d.get('field')}: class pins {d.get('expected')!r}, host has "
                  f"{d.get('actual')!r}") for d in live.get("drift") or []]


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(f"{prefix}.{k}", v))
        return out
    return {prefix: value}


# verified.kernel.running follows the machine a container runs on, and previous is history:
# neither says the host changed.
_IGNORED = ("verified.kernel.running", "verified.kernel.previous", "fingerprint.kernel")


def _manifest_drift(live: dict[str, Any], recorded: dict[str, Any]) -> list[Drift]:
    out = []
    for part, kind in (("verified", "version"), ("fingerprint", "hardware")):
        now, then = _flat(part, live.get(part) or {}), _flat(part, recorded.get(part) or {})
        for key in sorted(set(now) | set(then)):
            if key in _IGNORED or now.get(key) == then.get(key):
                continue
            out.append(Drift(kind, key, then.get(key), now.get(key),
                             f"{key}: manifest recorded {then.get(key)!r}, host now has "
                             f"{now.get(key)!r}"))
    old, new = recorded.get("package_list_sha256"), live.get("package_list_sha256")
    if old != new:
        out.append(Drift("package-list", "package_list_sha256", old, new,
                         "the package list changed since the manifest was written (packages "
                         "installed, removed or upgraded by hand)"))
    return out


def _hardware_vs_class(nc: NodeClass, devices: list[Device]) -> list[Drift]:
    acc = nc.accelerator
    if acc.backend not in ("nvidia", "amd") or not devices:
        return []
    out = []
    if len(devices) != acc.count:
        out.append(Drift("hardware", "accelerator.count", acc.count, len(devices),
                         f"{len(devices)} GPU(s), the class has {acc.count}"))
    for dev in sorted(set(devices)):
        if acc.pci_ids and dev.pci_id not in acc.pci_ids:
            out.append(Drift("hardware", "accelerator.pci_ids", acc.pci_ids, dev.pci_id,
                             f"PCI ID {dev.pci_id} is not one of the class's {acc.pci_ids}"))
        if acc.compute_capability and dev.compute_capability != acc.compute_capability:
            out.append(Drift("hardware", "accelerator.compute_capability",
                             acc.compute_capability, dev.compute_capability,
                             f"compute capability {dev.compute_capability}, the class has "
                             f"{acc.compute_capability}"))
    return out


def host_drift(state: HostState, nc: NodeClass | None) -> HostDrift:
    devs = [d.to_dict() for d in state.devices]

    def result(status: HostStatus, reason: str, drift: list[Drift]) -> HostDrift:
        return HostDrift(state.host, state.class_name, status, reason, drift, devs)

    if state.outcome not in ("ok", "changed"):
        return result("inconclusive", f"could not read the host: {state.outcome}"
                      + (f": {state.message}" if state.message else ""), [])
    drift: list[Drift] = []
    if nc is None:
        drift.append(Drift("no-class", "fleetgate_class", "a node class", None,
                           "the host has no fleetgate_class: nothing pins what it runs"))
    if state.live is not None:
        drift += _class_drift(state.live)
    if state.recorded_error is not None:
        drift.append(Drift("no-manifest", "/etc/fleetgate/manifest.json", "a manifest",
                           state.recorded_error, f"the manifest is unreadable: "
                           f"{state.recorded_error}"))
    elif state.recorded is None:
        drift.append(Drift("no-manifest", "/etc/fleetgate/manifest.json", "a manifest", None,
                           "no /etc/fleetgate/manifest.json: the host was never built from "
                           "an image or applied from its class"))
    else:
        rec = state.recorded
        if nc is not None and rec.get("class") != nc.name:
            drift.append(Drift("manifest-class", "class", nc.name, rec.get("class"),
                               f"the manifest is for class {rec.get('class')!r}"))
        elif nc is not None and rec.get("class_version", nc.version) != nc.version:
            # manifests from before class versions carry none: nothing to compare then
            drift.append(Drift("manifest-class", "class_version", nc.version,
                               rec.get("class_version"), f"the manifest is for version "
                               f"{rec.get('class_version')} of {nc.name}, the class is at "
                               f"{nc.version}"))
        if rec.get("drift"):
            drift.append(Drift("manifest-drift", "drift", [], rec["drift"],
                               f"the manifest recorded {len(rec['drift'])} drift entr"
                               f"{'y' if len(rec['drift']) == 1 else 'ies'} when written"))
        if state.live is not None:
            drift += _manifest_drift(state.live, rec)
    for entry in parse_dpkg_verify(state.dpkg_verify):
        what = "missing" if entry["missing"] else "changed by hand"
        drift.append(Drift("modified-package", entry["path"], "as packaged", what,
                           f"{entry['path']} of a pinned package is {what} (dpkg --verify)"))
    if nc is not None:
        drift += _hardware_vs_class(nc, state.devices)
    if drift:
        return result("drift", drift[0].message, drift)
    return result("clean", "matches its class and its manifest", [])


@dataclass
class ClassHardware:
    name: str
    hosts: list[str]
    variants: list[dict[str, Any]]  # each: device identity and the hosts that have it

    @property
    def mixed(self) -> bool:
        return len(self.variants) > 1


def class_hardware(states: list[HostState]) -> list[ClassHardware]:
    """Per class, the distinct device identities among its hosts (GPUs within one host too)."""
    by_class: dict[str, dict[tuple[Any, ...], list[str]]] = defaultdict(lambda: defaultdict(list))
    members: dict[str, list[str]] = defaultdict(list)
    for s in states:
        if s.class_name is None or not s.devices:
            continue
        members[s.class_name].append(s.host)
        for hw in sorted({d.hardware() for d in s.devices}, key=str):
            by_class[s.class_name][hw].append(s.host)
    out = []
    for name in sorted(by_class):
        variants = [{"model": hw[0], "pci_id": hw[1], "compute_capability": hw[2],
                     "vbios": hw[3], "hosts": hosts}
                    for hw, hosts in sorted(by_class[name].items(), key=lambda kv: str(kv[0]))]
        out.append(ClassHardware(name, members[name], variants))
    return out


def mixed_drift(hw: ClassHardware) -> list[Drift]:
    if not hw.mixed:
        return []
    parts = "; ".join(f"{v['model']} {v['pci_id']} cc {v['compute_capability']} vbios "
                      f"{v['vbios']} on {', '.join(v['hosts'])}" for v in hw.variants)
    return [Drift("mixed-hardware", "devices", "one device identity per class",
                  hw.variants, f"class {hw.name} mixes hardware: {parts}")]


def to_dict(d: HostDrift) -> dict[str, Any]:
    return asdict(d)
