"""The plan artifact: a plan with its hosts and waves resolved, what `rollout plan` writes and
`rollout start` runs. Starting from an artifact means the waves an operator reviewed are the
waves that run; if the inventory has moved since, start refuses instead of re-planning
silently.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.rollout import budgets
from fleetgate.rollout.plan import RolloutPlan, describe_budget, inventory_path, load_plan
from fleetgate.rollout.waves import Assignment, assign, resolve_hosts
from fleetgate.runner.ansible import state_dir

SCHEMA = "fleetgate.rollout.plan/v1"
ROLLOUT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,80}$")


def _hosts_doc(a: Assignment) -> dict[str, Any]:
    return {h.name: {"class": h.node_class, "domains": h.domains, "groups": list(h.groups)}
            for h in a.hosts.values()}


def fingerprint(hosts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(hosts, sort_keys=True).encode()).hexdigest()[:16]


def build(plan_file: Path, inventory: Path | None) -> dict[str, Any]:
    plan = load_plan(plan_file)
    inv = inventory_path(plan, plan_file, inventory)
    hosts = resolve_hosts(plan, inv)
    a = assign(plan.waves, hosts)
    for k in plan.approvals.before_waves:
        if k > len(a.waves):
            raise BadInput(f"approval before wave {k}, but the plan has {len(a.waves)} waves",
                           source=plan_file, field="approvals.before_waves")
    lim = budgets.limits(plan, a)
    b = plan.budgets
    budget_text: dict[str, Any] = {
        "per_wave": [describe_budget(b.per_wave.max_failed, len(w)) for w in a.waves],
        "total": describe_budget(b.total.max_failed, len(a.hosts)),
    }
    if b.per_domain is not None:
        budget_text["per_domain"] = {v: f"{b.per_domain.key}={v}: tolerates {n} failed; halts "
                                        f"when failed > {n}" for v, n in lim.per_domain.items()}
    hosts_doc = _hosts_doc(a)
    doc = {
        "schema": SCHEMA,
        "plan_file": str(plan_file.resolve()),
        "inventory": str(inv),
        "planned_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "plan": plan.model_dump(mode="json", by_alias=True),
        "hosts": hosts_doc,
        "hosts_fingerprint": fingerprint(hosts_doc),
        "waves": a.waves,
        "notes": a.notes,
        "budgets": budget_text,
        "limits": {"per_wave": lim.per_wave, "total": lim.total, "per_domain": lim.per_domain},
    }
    doc["hash"] = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return doc


def write(doc: dict[str, Any], out: Path | None) -> Path:
    path = out or state_dir() / "rollouts" / "plans" / f"{doc['plan']['name']}-{doc['hash']}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", source=path) from None
    return path


def load(path: Path, inventory: Path | None = None) -> dict[str, Any]:
    """A plan YAML is planned now; an artifact JSON is checked against the live inventory."""
    if not path.is_file():
        raise BadInput("no such file", source=path)
    if path.suffix in (".yml", ".yaml"):
        return build(path, inventory)
    if inventory is not None:
        raise BadInput("an artifact already names its inventory; re-plan to change it",
                       source="--inventory")
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"not a plan artifact: {exc}", source=path) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadInput(f"not a plan artifact (schema is not {SCHEMA})", source=path,
                       field="schema")
    body = {k: v for k, v in doc.items() if k != "hash"}
    if hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] != doc.get(
            "hash"):
        raise BadInput("the artifact was edited after planning; run `rollout plan` again",
                       source=path, field="hash")
    plan = RolloutPlan.model_validate(doc["plan"])
    live = _hosts_doc(Assignment([], resolve_hosts(plan, Path(doc["inventory"]))))
    if fingerprint(live) != doc["hosts_fingerprint"]:
        added = sorted(set(live) - set(doc["hosts"]))
        gone = sorted(set(doc["hosts"]) - set(live))
        raise BadInput("the inventory changed since this plan was made"
                       + (f" (new: {', '.join(added)})" if added else "")
                       + (f" (gone: {', '.join(gone)})" if gone else "")
                       + "; run `rollout plan` again", source=doc["inventory"])
    return doc


def new_id(name: str) -> str:
    return f"{name[:40]}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def check_id(rid: str) -> str:
    if not ROLLOUT_ID_RE.fullmatch(rid):
        raise BadInput("a rollout id is lower-case letters, digits and dashes", source="ID",
                       field=repr(rid))
    return rid
