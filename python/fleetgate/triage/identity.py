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


# The collector's identity commands, per backend: command name -> parser kind.
_IDENTITY_COMMANDS = {"nvidia": ("nvidia_smi_query", "nvidia-smi-csv"),
                      "amd": ("amd_smi_static", "amd-smi")}


def _collected(backend: str, c: Collection) -> list[Device] | None:
    """The devices from the collector's identity command, read by the same identity function
    as node_manifest's fingerprint (fleetgate.smoke.parsers.gpu_identities)."""
    if backend not in _IDENTITY_COMMANDS:
        return None
    name, kind = _IDENTITY_COMMANDS[backend]
    out = c.commands.get(name)
    if out is None or out.status != "ok":
        return None
    try:
        return [Device(**d) for d in smoke_parsers.gpu_identities(kind, out.stdout)]
    except smoke_parsers.ParseError:
        return None


def devices(backend: str, identity: Collection | None,
            fingerprint: dict[str, Any] | None) -> list[Device]:
    """One entry per GPU (or one for the CPU of a cpu class); [] when nothing could be read."""
    if identity is not None:
        found = _collected(backend, identity)
        if found:
            return found
    if not fingerprint:
        return []
    pci = fingerprint.get("pci_ids") or []
    return [Device(fingerprint.get("device_model"), ",".join(pci) or None,
                   fingerprint.get("compute_capability"), None, fingerprint.get("driver"))]
