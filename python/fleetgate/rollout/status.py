"""A rollout's status, built from the journal alone: what `status`, `--json`, reports, the
webhook and the metrics file show. Nothing here asks a host; the journal is the record.

Besides the raw rows, a status says where the fleet stands in words an on-call reads at 3 am
(hosts by what happened to them, grouped when they share a reason) and, after a halt or an
abort, the exact commands that come next.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Callable
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.isotime import iso
from fleetgate.rollout.journal import FAILED_HOST, Journal
from fleetgate.rollout.lease import holder

# What happened to a host, in an operator's words; the order is the order a reader wants.
FLEET_STATES = {
    "healthy": "changed and verified",
    "rolled_back": "rolled back and verified on the old version",
    "failed_held": "held out of service",
    "drain_failed": "unchanged: its drain failed (the reason says how the node was left)",
    "draining": "in flight (draining)",
    "applying": "in flight (applying)",
    "verifying": "in flight (verifying)",
    "rolling_back": "in flight (rolling back)",
    "pending": "untouched (pending)",
    "skipped": "untouched (skipped)",
}

# Event kinds `rollout history` shows by default; Ansible's per-task events only on request.
DEFAULT_HISTORY_KINDS = ("rollout", "started", "host", "canary", "approval_needed", "approve",
                         "abort", "reconcile", "reconcile_host", "soak", "baseline", "gate_retry")
HISTORY_KINDS = (*DEFAULT_HISTORY_KINDS, "batch", "smoke", "hoststate", "ansible",
                 "lease", "notify_error", "listener_error", "remote_job")


# The command that comes next for a host held out of service, given the rollout's inventory and
# the host. This package knows Ansible inventories only: it diagnoses the host. The CLI knows
# other kinds (a lab's, which heals its own hosts) and passes its own.
HeldStep = Callable[[str, str], str]


def diagnose_step(inventory: str, host: str) -> str:
    return f"fleetgate diagnose -i {shlex.quote(inventory)} --limit {host}"


def summary(j: Journal, rid: str, *, held_step: HeldStep = diagnose_step) -> dict[str, Any]:
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
    s: dict[str, Any] = {
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
    s["groups"] = groups(s)
    s["fleet"] = fleet_lines(s)
    s["next_steps"] = next_steps(s, art, has_canary=bool((art.get("plan") or {}).get("canary")),
                                 held_step=held_step)
    return s


def groups(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Hosts that share a state and a reason, in FLEET_STATES order: four skipped hosts are
    one entry with one reason, not four copies of it."""
    by: dict[tuple[str, str], list[str]] = {}
    for h, d in s["hosts"].items():
        by.setdefault((d["state"], d["reason"]), []).append(h)
    order = list(FLEET_STATES)
    keys = sorted(by, key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1]))
    return [{"state": st, "reason": why, "hosts": by[(st, why)]} for st, why in keys]


def fleet_lines(s: dict[str, Any]) -> list[str]:
    """One line per kind of outcome: count, what it means, which hosts, why."""
    out: list[str] = []
    for g in s["groups"]:
        words = FLEET_STATES.get(g["state"], g["state"])
        line = f"{len(g['hosts'])} {words}: {', '.join(g['hosts'])}"
        out.append(line + (f" ({g['reason']})" if g["reason"] else ""))
    return out


def next_steps(s: dict[str, Any], art: dict[str, Any], *, has_canary: bool,
               held_step: HeldStep = diagnose_step) -> list[str]:
    """The exact commands that follow where the rollout stands (empty while it runs well)."""
    rid = s["id"]
    q = shlex.quote
    state = s["state"]
    if state == "completed":
        return [f"fleetgate rollout report {rid} --html {rid}.html --md {rid}.md"]
    if state not in ("halted", "aborted"):
        if s["phase"] == "awaiting approval":
            return [f"fleetgate rollout approve {rid} --wave {s['wave']} --reason TEXT"]
        if s["controller"] and not s["controller"]["alive"]:
            return [f"fleetgate rollout resume {rid}"]
        return []
    out: list[str] = []
    failed_waves = sorted({d["wave"] for d in s["hosts"].values()
                           if d["state"] in FAILED_HOST})
    if has_canary:
        out += [f"fleetgate rollout explain {rid} --wave {k}" for k in failed_waves]
    out.append(f"fleetgate rollout history {rid} --kind host")
    out += [held_step(s["inventory"], h) for h, d in s["hosts"].items()
            if d["state"] == "failed_held"]
    if s["resumable"]:
        out.append(f"fleetgate rollout resume {rid}")
    elif any(d["state"] in ("skipped", "pending", "drain_failed") for d in s["hosts"].values()):
        # A finished rollout never restarts; the untouched hosts go in a new plan.
        plan_file = art.get("plan_file") or "PLAN.yml"
        out.append(f"fleetgate rollout plan {q(str(plan_file))}")
    out.append(f"fleetgate rollout report {rid} --html {rid}.html --md {rid}.md")
    return out


# ---------------------------------------------------------------------------- history

def _text(v: Any) -> str:
    """A value as plain text: strings bare, structures as compact JSON, never a repr."""
    if isinstance(v, str):
        return " ".join(v.split())
    return json.dumps(v, sort_keys=True, default=str, separators=(",", ":"))


def _hosts_text(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{h} {o}" for h, o in v.items())
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return _text(v)


def history_line(e: dict[str, Any]) -> str:
    """One journal event as one readable line: ISO time, kind, wave, host, what happened."""
    d = e["data"]
    who = f" {e['host']}" if e.get("host") else ""
    wave = f" w{e['wave']}" if e.get("wave") else ""
    kind = e["kind"]
    why = f" ({_text(d['reason'])})" if d.get("reason") else ""
    if kind == "host":
        text = f"{d.get('from')} -> {d.get('to')}{why}"
    elif kind == "rollout":
        text = str(d.get("state", "")) + (f" [{d['phase']}]" if d.get("phase") else "") + why
        if d.get("batch"):
            text += f" batch: {_hosts_text(d['batch'])}"
    elif kind == "batch":
        text = f"{d.get('batch')} {d.get('state')}" + (
            f" hosts: {_hosts_text(d['hosts'])}" if "hosts" in d else "") + (
            f" pid {d['pid']}" if "pid" in d else "") + (
            f" rc {d['rc']}" if "rc" in d else "") + (
            f" error: {_text(d['error'])}" if d.get("error") else "")
    elif kind == "ansible":
        text = f"{d.get('event')} task \"{_text(d.get('task') or '')}\"" + (
            f" changed {str(d['changed']).lower()}" if "changed" in d else "") + (
            f": {_text(d['msg'])}" if d.get("msg") else "")
    elif kind == "smoke":
        r = d["result"]
        text = f"{d.get('label')} {r['check']} {r['status']}: {_text(r['reason'])}"
    elif kind == "canary":
        v = d.get("verdict") or {}
        text = (f"{str(v.get('outcome', 'skipped')).upper()}"
                + (f" score {v['score']}" if v.get("score") is not None else "")
                + f": {_text(v.get('reason') or d.get('reason') or '')}")
    elif kind in ("approve", "abort"):
        # Who and why; a signature's proof (the SSH signature itself) stays in --json.
        text = f"by {_text(d.get('by') or '?')}" + (" (signed)" if d.get("proof") else "") + why
    elif kind in ("hoststate", "reconcile_host"):
        st = d.get("state") if kind == "hoststate" else d.get("host_state")
        label = d.get("label") or "reconcile"
        text = f"{label}: " + (f"kernel {st.get('kernel_release')}" if isinstance(st, dict)
                               else f"not read ({_text(d.get('why') or '?')})")
    else:
        text = " ".join(f"{k} {_hosts_text(v) if k == 'hosts' else _text(v)}"
                        for k, v in d.items())
    return f"#{e['seq']} {iso(e['ts'])} {kind}{wave}{who}: {text}"
