"""The plan artifact: a plan with its hosts and waves resolved, what `rollout plan` writes and
`rollout start` runs. Starting from an artifact means the waves an operator reviewed are the
waves that run; if the inventory has moved since, start refuses instead of re-planning
silently.

An artifact is a file anyone with write access could edit between review and start, so
loading one trusts nothing in it:

- It must be authentic. By default its `mac` must be this state dir's HMAC of its body
  (rollout/artifact_mac.py): planned here and not edited since. Where the site names
  `security.allowed_signers`, an `ARTIFACT.sig` beside it (`rollout sign`, an SSH signature
  in namespace fleetgate-plan) by an allowed key is proof instead, so CI can plan and sign
  and any controller can start it; a signature that does not verify is refused, never
  skipped. With `security.require_signed_artifacts` only the signature counts: an unsigned
  artifact, or a plan YAML, is refused, and the MAC may be another controller's.
- It must pass every check planning ran: the schema (duplicate JSON keys refused), the plan's
  paths and classes (plan.check_plan), the hosts against the live inventory, and waves,
  budgets and limits recomputed from them.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleetgate.errors import BadInput, validation_error
from fleetgate.inputs import read_input
from fleetgate.rollout import artifact_mac, budgets, execution_nodes, signing
from fleetgate.rollout.plan import (
    RolloutPlan,
    check_plan,
    describe_budget,
    inventory_path,
    load_plan,
)
from fleetgate.rollout.waves import HOST_RE, Assignment, Host, assign, resolve_hosts
from fleetgate.runner.ansible import state_dir
from fleetgate.runner.inventory import resolve_inventory
from fleetgate.runner.private_state import write_private
from fleetgate.site import current_site

SCHEMA = "fleetgate.rollout.plan/v1"
# Compared again after every other check: these are derived from the plan and the hosts.
DERIVED = ("waves", "notes", "budgets", "limits")

HostName = Annotated[str, StringConstraints(pattern=HOST_RE.pattern)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class HostDoc(_Doc):
    node_class: str | None = Field(alias="class")
    domains: dict[str, str]
    groups: list[str]


class BudgetText(_Doc):
    per_wave: list[str]
    total: str
    per_domain: dict[str, str] | None = None


class LimitsDoc(_Doc):
    per_wave: list[int]
    total: int
    per_domain: dict[str, int]


class Artifact(_Doc):
    """Every key `build` writes, each required: a missing or ill-typed one is bad input."""

    schema_: Literal["fleetgate.rollout.plan/v1"] = Field(alias="schema")
    plan_file: str
    inventory: str
    planned_at: str
    plan: RolloutPlan
    hosts: dict[HostName, HostDoc]
    hosts_fingerprint: str
    waves: list[list[HostName]]
    notes: list[str]
    budgets: BudgetText
    limits: LimitsDoc
    # Short and unkeyed: names the file, authenticates nothing.
    hash: str
    mac: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def _hosts_doc(a: Assignment) -> dict[str, Any]:
    return {h.name: {"class": h.node_class, "domains": h.domains, "groups": list(h.groups)}
            for h in a.hosts.values()}


def fingerprint(hosts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(hosts, sort_keys=True).encode()).hexdigest()[:16]


def _derive(plan: RolloutPlan, hosts: dict[str, Host], *, source: Path, prefix: str
            ) -> dict[str, Any]:
    """What an artifact holds besides the plan, from the plan and the hosts: planning writes
    it, loading recomputes it and compares."""
    a = assign(plan.waves, hosts, source=source, where=f"{prefix}waves")
    for k in plan.approvals.before_waves:
        if k > len(a.waves):
            raise BadInput(f"approval before wave {k}, but the plan has {len(a.waves)} waves",
                           source=source, field=f"{prefix}approvals.before_waves")
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
    return {
        "hosts": hosts_doc,
        "hosts_fingerprint": fingerprint(hosts_doc),
        "waves": a.waves,
        "notes": a.notes,
        "budgets": budget_text,
        "limits": {"per_wave": lim.per_wave, "total": lim.total, "per_domain": lim.per_domain},
    }


def _hosts(plan: RolloutPlan, inv: Path, *, source: Path, prefix: str) -> dict[str, Host]:
    """The plan's hosts, and its execution nodes checked against them and the inventory."""
    hosts = resolve_hosts(plan, inv)
    if plan.execution is not None:
        execution_nodes.check(plan, hosts, resolve_inventory(inv), source=source,
                              prefix=prefix)
    return hosts


def _body(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "mac"}


def build(plan_file: Path, inventory: Path | None) -> dict[str, Any]:
    plan = load_plan(plan_file)
    inv = inventory_path(plan, plan_file, inventory)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "plan_file": str(plan_file.resolve()),
        "inventory": str(inv),
        "planned_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "plan": plan.model_dump(mode="json", by_alias=True),
        **_derive(plan, _hosts(plan, inv, source=plan_file, prefix=""), source=plan_file,
                  prefix=""),
    }
    doc["hash"] = hashlib.sha256(artifact_mac.canonical(doc)).hexdigest()[:16]
    doc["mac"] = artifact_mac.mac(doc)
    Artifact.model_validate(doc)  # what `load` demands; failing here is a bug, not bad input
    return doc


def write(doc: dict[str, Any], out: Path | None) -> Path:
    path = out or state_dir() / "rollouts" / "plans" / f"{doc['plan']['name']}-{doc['hash']}.json"
    try:
        write_private(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")  # state: 0600
        # A signature of what was there before would only make `start` refuse the new one.
        signing.signature_path(path).unlink(missing_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", source=path) from None
    return path


def parse(raw: bytes, path: Path) -> dict[str, Any]:
    """The artifact's JSON with each key once: with a duplicate, a reviewer reading the file
    sees the first value and a JSON parser takes the last."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise BadInput("duplicate key in the artifact JSON", source=path, field=k)
            out[k] = v
        return out

    def no_constant(name: str) -> NoReturn:
        raise ValueError(f"{name} is not JSON")

    def finite(text: str) -> float:
        # 1e999 is valid JSON that Python reads as inf, which no artifact can hold (its MAC
        # is over strict JSON).
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text} is out of range for a number")
        return value

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=unique,
                         parse_constant=no_constant, parse_float=finite)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(f"not a plan artifact: {exc}", source=path) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadInput(f"not a plan artifact (schema is not {SCHEMA})", source=path,
                       field="schema")
    return doc


def _read(path: Path) -> bytes:
    # Regular files only, capped, UTF-8: a FIFO named as an artifact must not block `start`.
    return read_input(path).encode("utf-8")


def authenticate(path: Path, raw: bytes, doc: dict[str, Any]) -> str:
    """How `raw` (the bytes `doc` was parsed from, so nothing can change in between) is
    trusted: by an allowed signature, or by this state dir's MAC. See the module's docstring."""
    site = current_site()
    signers = site.allowed_signers
    sig = signing.signature_path(path)
    if signers is not None and (sig.exists() or site.config.security.require_signed_artifacts):
        if not sig.exists():
            raise BadInput("unsigned, and this site starts only signed artifacts "
                           "(security.require_signed_artifacts); sign it with `fleetgate "
                           f"rollout sign {path} --key KEY`", source=path, field="signature")
        signer = signing.verify(raw, read_input(sig), signers, signing.ARTIFACT_NAMESPACE,
                                source=sig)
        return f"signed by {signer}"
    artifact_mac.verify(_body(doc), doc.get("mac"), source=path)
    return "planned with this state dir's key"


def _in_plan(exc: BadInput, path: Path) -> NoReturn:
    """A plan check's error, with its field where the plan sits in the artifact."""
    if exc.source != str(path):  # about another file (a broken class): keep it as it is
        raise exc
    raise BadInput(exc.reason, source=path, field=f"plan.{exc.field}" if exc.field else "plan")


def _check_waves(art: Artifact, path: Path) -> None:
    if not art.waves:
        raise BadInput("a rollout has at least one wave", source=path, field="waves")
    seen: dict[str, int] = {}
    for k, members in enumerate(art.waves, start=1):
        where = f"waves[{k - 1}]"
        if not members:
            raise BadInput(f"wave {k} is empty", source=path, field=where)
        for h in members:
            if h in seen:
                raise BadInput(f"{h} is in waves {seen[h]} and {k}; a host is in exactly one "
                               "wave", source=path, field=where)
            if h not in art.hosts:
                raise BadInput(f"{h} is in wave {k} but not among the artifact's hosts",
                               source=path, field=where)
            seen[h] = k
    left = sorted(set(art.hosts) - set(seen))
    if left:
        raise BadInput(f"in no wave: {', '.join(left)}; a host is in exactly one wave",
                       source=path, field="hosts")


def check(doc: dict[str, Any], path: Path) -> Artifact:
    """Every check planning ran, again, on an artifact's content."""
    try:
        art = Artifact.model_validate(doc)
    except ValidationError as exc:
        raise validation_error(exc, path) from None
    try:
        plan = check_plan(art.plan, path)
    except BadInput as exc:
        _in_plan(exc, path)
    if plan != art.plan:
        raise BadInput("the targets its class gives have changed since planning; run `rollout "
                       "plan` again", source=path, field="plan")
    inv = Path(art.inventory)
    if not inv.is_absolute() or not (inv.is_file() or inv.is_dir()):
        raise BadInput("no such inventory file or directory", source=path, field="inventory")
    _check_waves(art, path)
    hosts = {n: h.model_dump(by_alias=True) for n, h in art.hosts.items()}
    if fingerprint(hosts) != art.hosts_fingerprint:
        raise BadInput("does not match the artifact's hosts", source=path,
                       field="hosts_fingerprint")
    live = _hosts(plan, inv, source=path, prefix="plan.")
    live_doc = _hosts_doc(Assignment([], live))
    if live_doc != hosts:
        added = sorted(set(live_doc) - set(hosts))
        gone = sorted(set(hosts) - set(live_doc))
        moved = sorted(h for h in set(hosts) & set(live_doc) if hosts[h] != live_doc[h])
        raise BadInput("the inventory changed since this plan was made"
                       + (f" (new: {', '.join(added)})" if added else "")
                       + (f" (gone: {', '.join(gone)})" if gone else "")
                       + (f" (class, domains or groups of: {', '.join(moved)})" if moved else "")
                       + "; run `rollout plan` again", source=art.inventory, field="hosts")
    try:
        derived = _derive(plan, live, source=path, prefix="plan.")
    except BadInput as exc:
        if exc.source == str(path):
            raise
        # The wave assignment's own refusals (a host in two pools) name no file.
        raise BadInput(exc.reason, source=path,
                       field=f"plan.{exc.field}" if exc.field else "plan") from None
    have = {"waves": art.waves, "notes": art.notes,
            "budgets": art.budgets.model_dump(exclude_none=True),
            "limits": art.limits.model_dump()}
    for key in DERIVED:
        if have[key] != derived[key]:
            raise BadInput("not what the plan gives for these hosts; run `rollout plan` again",
                           source=path, field=key)
    return art


def load(path: Path, inventory: Path | None = None) -> tuple[dict[str, Any], str]:
    """The artifact to start and how it is trusted. A plan YAML is planned now; an artifact
    JSON must be authentic and pass every check planning ran, against the live inventory."""
    raw = _read(path)
    if path.suffix in (".yml", ".yaml"):
        if current_site().config.security.require_signed_artifacts:
            raise BadInput("this site starts only signed artifacts (security."
                           "require_signed_artifacts): `rollout plan` it, `rollout sign` the "
                           "artifact, and start that", source=path)
        return build(path, inventory), f"planned now from {path}"
    if inventory is not None:
        raise BadInput("an artifact already names its inventory; re-plan to change it",
                       source="--inventory")
    doc = parse(raw, path)
    trust = authenticate(path, raw, doc)
    check(doc, path)
    return doc, trust


def load_to_sign(path: Path) -> tuple[bytes, dict[str, Any]]:
    """An artifact `rollout sign` may vouch for: planned with this state dir's key, unedited,
    and passing every check; its exact bytes are what gets signed."""
    if path.suffix in (".yml", ".yaml"):
        raise BadInput("sign the artifact `rollout plan` wrote, not the plan YAML", source=path)
    raw = _read(path)
    doc = parse(raw, path)
    artifact_mac.verify(_body(doc), doc.get("mac"), source=path)
    check(doc, path)
    return raw, doc


def new_id(name: str) -> str:
    return f"{name[:40]}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


