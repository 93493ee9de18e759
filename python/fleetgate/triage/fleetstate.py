"""Read live state for drift and cache keys: one run of playbooks/drift.yml over the
selected hosts, folded into one HostState per host."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.runner import ansible
from fleetgate.runner.inventory import Inventory, Sources, resolve_inventory
from fleetgate.site import content_root
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass
from fleetgate.triage import evidence
from fleetgate.triage.drift import HostState
from fleetgate.triage.identity import devices

REPORT_TASK = "Report the live state"


def pinned_packages(nc: NodeClass) -> list[str]:
    """The Debian packages a class pins (what `dpkg --verify` checks on its hosts)."""
    pkgs = [f"linux-image-{nc.kernel.abi}"]
    if nc.kernel.headers:
        pkgs.append(f"linux-headers-{nc.kernel.abi}")
    pkgs += list(nc.driver.packages) + [m.package for m in nc.dkms]
    if nc.runtime.engine != "none":
        pkgs.append(ENGINE_PACKAGES[nc.runtime.engine])
    if nc.runtime.gpu_toolkit != "none":
        pkgs.append(nc.runtime.gpu_toolkit)
    return sorted(set(pkgs))


def classes_of(hostvars: dict[str, dict[str, Any]]) -> dict[str, NodeClass | None]:
    """Host -> its class (None without one). A class that does not load is bad input."""
    out: dict[str, NodeClass | None] = {}
    cache: dict[str, NodeClass] = {}
    for host, hv in hostvars.items():
        name = hv.get("fleetgate_class")
        if not name:
            out[host] = None
            continue
        if name not in cache:
            try:
                cache[name] = resolve_class(str(name))[1]
            except BadInput as exc:
                raise BadInput(exc.reason, source=host, field="fleetgate_class") from None
        out[host] = cache[name]
    return out


def _recorded(b64: Any) -> tuple[dict[str, Any] | None, str | None]:
    if not b64:
        return None, None
    try:
        doc = json.loads(base64.b64decode(str(b64)))
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"not JSON ({type(exc).__name__})"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    return doc, None


def _identity(value: Any) -> evidence.Collection | None:
    try:
        return evidence.load_collection(evidence.collection_text(value))
    except evidence.MalformedCollection:
        return None  # the fingerprint from node_manifest still identifies the devices


@dataclass
class Selection:
    inventory: Inventory
    limit: str | None
    classes: dict[str, NodeClass | None]  # host -> class


def select(inventory: Sources, limit: str | None) -> Selection:
    """Hosts and their classes, all validated; nothing has run on any host yet."""
    inv = resolve_inventory(inventory, limit)
    hostvars = inv.hostvars
    if not hostvars:
        raise BadInput("no host in the inventory matches", source=inv.label,
                       field=f"--limit {limit}" if limit else None)
    return Selection(inv, limit, classes_of(hostvars))


def read_states(sel: Selection, *, runs_base: Path | None = None
                ) -> tuple[Path, list[HostState]]:
    inv, limit, classes = sel.inventory, sel.limit, sel.classes
    pinned = {nc.name: pinned_packages(nc) for nc in classes.values() if nc is not None}
    reports: dict[str, dict[str, Any]] = {}

    def on_event(event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("task") == REPORT_TASK:
            msg = (data.get("res") or {}).get("msg") or {}
            if isinstance(msg, dict) and isinstance(msg.get("fleetgate_drift"), dict):
                reports[str(data.get("host"))] = msg["fleetgate_drift"]

    result = ansible.run(inventory=inv, playbook=content_root() / "playbooks" / "drift.yml",
                         limit=limit, extravars={"drift_pinned": pinned}, on_event=on_event,
                         runs_base=runs_base, timeout=900)
    states = []
    for host, nc in classes.items():
        hr = result.hosts.get(host)
        rep = reports.get(host)
        name = nc.name if nc is not None else None
        if rep is None:
            states.append(HostState(host, name, hr.outcome if hr else "failed",
                                    hr.message if hr else result.error or "no result"))
            continue
        live = rep.get("live") if isinstance(rep.get("live"), dict) else None
        recorded, rec_error = _recorded(rep.get("recorded_b64"))
        backend = nc.accelerator.backend if nc is not None else "none"
        fingerprint = (live or {}).get("fingerprint")
        states.append(HostState(
            host, name, "ok", live=live, recorded=recorded, recorded_error=rec_error,
            dpkg_verify=str(rep.get("dpkg_verify") or ""),
            devices=devices(backend, _identity(rep.get("identity")),
                            fingerprint if isinstance(fingerprint, dict) else None)))
    return result.run_dir, states
