"""A rollout's status, built from the journal alone: what `status`, `--json`, reports and the
metrics file show. Nothing here asks a host; the journal is the record."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.rollout.journal import FAILED_HOST, Journal
from fleetgate.rollout.lease import holder


def summary(j: Journal, rid: str) -> dict[str, Any]:
    row = j.rollout(rid)
    if row is None:
        raise BadInput("no such rollout in the journal", source=str(j.path), field=rid)
    hosts = j.hosts(rid)
    gates: dict[str, dict[str, str]] = {}
    for e in j.events(rid, kinds=("smoke",)):
        r = e["data"]["result"]
        if e["data"].get("label") == "baseline":
            continue
        gates.setdefault(r["host"], {})[r["check"]] = r["status"]
    art = row.artifact
    failed = [h for h, r in hosts.items() if r.state in FAILED_HOST]
    waves = []
    for k, members in enumerate(art["waves"], start=1):
        states = Counter(hosts[h].state for h in members)
        waves.append({"wave": k, "hosts": members, "states": dict(states),
                      "failed": sum(states[s] for s in FAILED_HOST),
                      "tolerated": art["limits"]["per_wave"][k - 1]})
    lease = holder(j, f"rollout:{rid}")
    return {
        "schema": "fleetgate.rollout.status/v1",
        "id": rid, "name": row.name, "state": row.state, "wave": row.wave, "phase": row.phase,
        "reason": row.reason, "resumable": row.resumable, "inventory": row.inventory,
        "created_at": row.created_at, "updated_at": row.updated_at,
        "controller": lease,
        "waves": waves,
        "budget": {"failed": len(failed), "tolerated": art["limits"]["total"],
                   "per_wave": art["budgets"]["per_wave"], "total": art["budgets"]["total"]},
        "hosts": {h: {"wave": r.wave, "state": r.state, "reason": r.reason,
                      "applies": r.applies, "gates": gates.get(h, {})}
                  for h, r in hosts.items()},
        "counts": dict(Counter(r.state for r in hosts.values())),
    }


def history_line(e: dict[str, Any]) -> str:
    """One journal event as one readable line."""
    d = e["data"]
    who = f" {e['host']}" if e.get("host") else ""
    wave = f" w{e['wave']}" if e.get("wave") else ""
    kind = e["kind"]
    if kind == "host":
        text = f"{d.get('from')} -> {d.get('to')}" + (
            f" ({d['reason']})" if d.get("reason") else "")
    elif kind == "rollout":
        text = d.get("state", "") + (f" [{d['phase']}]" if d.get("phase") else "") + (
            f" ({d['reason']})" if d.get("reason") else "")
    elif kind == "batch":
        text = f"{d.get('batch')} {d.get('state')}" + (
            f" hosts={d['hosts']}" if "hosts" in d else "") + (
            f" pid={d['pid']}" if "pid" in d else "") + (
            f" rc={d['rc']}" if "rc" in d else "") + (
            f" error={d['error']}" if d.get("error") else "")
    elif kind == "ansible":
        text = f"{d.get('event')} task={d.get('task')!r}" + (
            f" changed={d['changed']}" if "changed" in d else "") + (
            f" msg={d['msg']!r}" if d.get("msg") else "")
    elif kind == "smoke":
        r = d["result"]
        text = f"{d.get('label')} {r['check']} {r['status']}: {r['reason']}"
    else:
        text = " ".join(f"{k}={v}" for k, v in d.items())
    return f"#{e['seq']} {e['ts']:.3f} {kind}{wave}{who}: {text}"
