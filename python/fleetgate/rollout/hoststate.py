"""Ask hosts what they are actually running (rollout/hostread.py), and compare it with a
plan's target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.image.manifest import manifest_digest
from fleetgate.rollout import hostread
from fleetgate.rollout.target import Target
from fleetgate.runner import ansible
from fleetgate.site import content_root

PROBE_PLAYBOOK = "playbooks/rollout-probe.yml"


def probe(inventory: Path, hosts: list[str], targets: list[Target], *,
          runs_base: Path) -> tuple[dict[str, dict[str, Any] | None], dict[str, str]]:
    """Host -> its reported state, or None with a reason when it could not be asked."""
    want = hostread.wanted(targets)
    r = ansible.run(inventory=inventory, playbook=content_root() / PROBE_PLAYBOOK,
                    limit=",".join(hosts), forks=max(1, len(hosts)), runs_base=runs_base,
                    extravars=hostread.extravars(want), timeout=300,
                    # Read-only and short: let it finish; the controller's own signal
                    # handlers stay in place and stop the rollout at its next safe point.
                    cancel=lambda: False)
    states: dict[str, dict[str, Any] | None] = {}
    why: dict[str, str] = {}
    for h in hosts:
        hr = r.hosts.get(h)
        found = [st for x in (hr.results if hr else [])
                 if (st := hostread.reading(x, want)) is not None]
        states[h] = found[-1] if found and hr and hr.outcome not in ("failed",
                                                                      "unreachable") else None
        if states[h] is not None:
            continue
        if hr is None:
            why[h] = f"no answer ({r.error or 'not in the run'})"
        elif hr.outcome in ("failed", "unreachable"):
            why[h] = f"{hr.outcome}: {hr.message}"
        else:
            why[h] = "not a whole reading (the host's shell printed something else)"
    return states, why


def _dig(doc: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def mismatches(target: Target, state: dict[str, Any]) -> list[str]:
    """Each way the host differs from the target, as a readable phrase; empty means at target."""
    out: list[str] = []
    if target.kernel_release and state.get("kernel_release") != target.kernel_release:
        out.append(f"kernel {state.get('kernel_release')} != {target.kernel_release}")
    for pkg, want in target.packages.items():
        have = (state.get("packages") or {}).get(pkg)
        if have != want:
            out.append(f"package {pkg} {have or 'not installed'} != {want}")
    manifest = state.get("manifest")
    for key, want_m in target.manifest.items():
        have_m = _dig(manifest, key) if manifest is not None else None
        if have_m != want_m:
            out.append(f"manifest {key} {have_m if manifest is not None else '(no manifest)'}"
                       f" != {want_m}")
    if target.manifest_sha256 is not None:
        have_d = manifest_digest(manifest) if isinstance(manifest, dict) else None
        if have_d != target.manifest_sha256:
            out.append("manifest is not its image's: " + (
                f"sha256 {have_d} != {target.manifest_sha256}" if have_d else "(no manifest)"))
    for path, want_f in target.files.items():
        have_f = (state.get("files") or {}).get(path)
        if have_f != want_f:
            out.append(f"{path} {have_f!r} != {want_f!r}")
    return out
