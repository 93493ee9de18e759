"""A host's device identity: what must be equal for two hosts (or two GPUs) to share engine
and compile caches, and what `fleet drift` compares inside a class.

Read from the triage collector's identity mode (nvidia-smi / amd-smi, one entry per GPU, with
the VBIOS) when the tools answered, else from node_manifest's fingerprint (cpu classes: the
CPU model is the device).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fleetgate.smoke import parsers as smoke_parsers
from fleetgate.triage.evidence import Collection


@dataclass(frozen=True, order=True)
class Device:
    model: str | None
    pci_id: str | None
    compute_capability: str | None
    vbios: str | None
    driver: str | None

    def hardware(self) -> tuple[str | None, ...]:
        """What makes two devices different hardware (the driver is software)."""
        return (self.model, self.pci_id, self.compute_capability, self.vbios)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _nvidia(c: Collection) -> list[Device] | None:
    out = c.commands.get("nvidia_smi_query")
    if out is None or out.status != "ok":
        return None
    try:
        rows = smoke_parsers.parse_nvidia_smi_csv(out.stdout)
    except smoke_parsers.ParseError:
        return None
    return [Device(r.get("name"), r.get("pci_id"), r.get("compute_cap"), r.get("vbios_version"),
                   r.get("driver_version")) for r in rows]


def _amd(c: Collection) -> list[Device] | None:
    out = c.commands.get("amd_smi_static")
    if out is None or out.status != "ok":
        return None
    try:
        doc = smoke_parsers.parse_amd_smi_json(out.stdout)
    except smoke_parsers.ParseError:
        return None
    return [Device(g.get("name"), g.get("pci_id"), g.get("gfx_version"), g.get("vbios_version"),
                   g.get("driver_version") or doc.get("driver_version"))
            for g in doc.get("gpus", [])]


def devices(backend: str, identity: Collection | None,
            fingerprint: dict[str, Any] | None) -> list[Device]:
    """One entry per GPU (or one for the CPU of a cpu class); [] when nothing could be read."""
    if identity is not None:
        found = _nvidia(identity) if backend == "nvidia" else (
            _amd(identity) if backend == "amd" else None)
        if found:
            return found
    if not fingerprint:
        return []
    pci = fingerprint.get("pci_ids") or []
    return [Device(fingerprint.get("device_model"), ",".join(pci) or None,
                   fingerprint.get("compute_capability"), None, fingerprint.get("driver"))]
