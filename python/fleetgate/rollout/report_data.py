"""What a rollout report shows, derived from the journal alone: timeline bars, canary
judgements and their sample distributions, and the versions each host was seen running.

The HTML and Markdown renderers, `rollout explain` and the plots all read these, so every view
of a rollout tells the same story as `rollout history`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fleetgate.errors import BadInput
from fleetgate.rollout import canary_gate
from fleetgate.rollout.canary import CanarySection, GateVerdict, explain
from fleetgate.rollout.journal import Journal, RolloutRow
from fleetgate.rollout.plan import change_label
from fleetgate.runner import redact
from fleetgate.smoke.model import CheckResult

# Host states that are a step of the pipeline, drawn as a bar while the host is in them.
PHASE_OF_STATE = {"draining": "drain", "applying": "apply", "verifying": "verify",
                  "rolling_back": "rollback"}
# Rollout phases in which no host moves, drawn on their own row so a gap in the host rows
# reads as "waiting for approval", not as a stalled controller.
ROLLOUT_PHASES = {"measuring baseline": "baseline", "awaiting approval": "approval",
                  "waiting for window": "window"}
ROLLOUT_ROW = ""  # the host name of the rollout's own row


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def load(j: Journal, rid: str) -> tuple[RolloutRow, list[dict[str, Any]]]:
    """The rollout and all its events except ansible's (the run dirs keep those in full)."""
    row = j.rollout(rid)
    if row is None:
        raise BadInput("no such rollout in the journal", source=str(j.path), field=rid)
    kinds = ("rollout", "started", "host", "batch", "smoke", "hoststate", "canary", "baseline",
             "soak", "approval_needed", "approve", "abort", "reconcile", "reconcile_host",
             "gate_retry", "notify_error", "listener_error")
    # The journal redacts what it stores; this pass covers journals written before it did.
    events: list[dict[str, Any]] = redact.data(j.events(rid, kinds=kinds))
    return dataclasses.replace(row, reason=redact.text(row.reason)), events


def end_of(row: RolloutRow, events: list[dict[str, Any]]) -> float:
    """The latest moment the journal knows of: a report on a running rollout is 'as of' this,
    not 'as of now', so it never invents progress."""
    return max([row.updated_at, *(float(e["ts"]) for e in events)])


# --------------------------------------------------------------------------------- timeline

@dataclass(frozen=True)
class Bar:
    host: str
    phase: str  # drain | apply | verify | rollback | soak | batch
    start: float
    end: float
    open: bool = False  # still going when the journal ends


def timeline(row: RolloutRow, events: list[dict[str, Any]]) -> list[Bar]:
    """Each host's pipeline steps from its transitions, the ansible batches that ran for it,
    and the soak of its wave from the rollout's soaking phases."""
    end = end_of(row, events)
    bars: list[Bar] = []
    since: dict[str, tuple[str, float]] = {}
    started: dict[str, tuple[list[str], float]] = {}
    for e in events:
        d = e["data"]
        if e["kind"] == "host" and e["host"]:
            prev = since.get(e["host"])
            if prev and prev[0] in PHASE_OF_STATE:
                bars.append(Bar(e["host"], PHASE_OF_STATE[prev[0]], prev[1], e["ts"]))
            since[e["host"]] = (str(d.get("to")), e["ts"])
        elif e["kind"] == "batch" and d.get("state") == "started":
            started[str(d.get("batch"))] = (list(d.get("hosts") or []), e["ts"])
        elif e["kind"] == "batch" and d.get("state") == "done":
            hosts, t0 = started.pop(str(d.get("batch")), ([], e["ts"]))
            bars.extend(Bar(h, "batch", t0, e["ts"]) for h in hosts)
    for h, (state, t0) in since.items():
        if state in PHASE_OF_STATE:
            bars.append(Bar(h, PHASE_OF_STATE[state], t0, end, open=True))
    for hosts, t0 in started.values():
        bars.extend(Bar(h, "batch", t0, end, open=True) for h in hosts)
    bars.extend(_soaks(row, events, bars, end))
    bars.extend(_waits(events, end))
    return bars


def _waits(events: list[dict[str, Any]], end: float) -> list[Bar]:
    marks = [e for e in events if e["kind"] == "rollout"]
    out: list[Bar] = []
    for e, nxt in zip(marks, [*marks[1:], None], strict=True):
        phase = ROLLOUT_PHASES.get(str(e["data"].get("phase", "")))
        if phase:
            out.append(Bar(ROLLOUT_ROW, phase, e["ts"], nxt["ts"] if nxt else end,
                           open=nxt is None))
    return out


def _soaks(row: RolloutRow, events: list[dict[str, Any]], bars: list[Bar],
           end: float) -> list[Bar]:
    spans: list[tuple[int, float, float, bool]] = []
    current: tuple[int, float] | None = None
    for e in (x for x in events if x["kind"] == "rollout"):
        soaking = e["data"].get("state") == "soaking"
        if current and (not soaking or e["wave"] != current[0]):
            spans.append((current[0], current[1], e["ts"], False))
            current = None
        if soaking and current is None:
            current = (int(e["wave"] or 0), e["ts"])
    if current:
        spans.append((current[0], current[1], end, True))
    out: list[Bar] = []
    waves: list[list[str]] = row.artifact.get("waves", [])
    for k, t0, t1, still in spans:
        members = waves[k - 1] if 0 < k <= len(waves) else []
        # Only hosts that went through the pipeline soak; skipped ones never changed.
        worked = {b.host for b in bars if b.start <= t0}
        out.extend(Bar(h, "soak", t0, t1, open=still) for h in members if h in worked)
    return out


# --------------------------------------------------------------------------------- canary

# Smoke labels of canary measurements: reference sides, then the canaries.
MEASURED = ("baseline", "promoted", "before", "canary")

@dataclass
class Judgement:
    """One canary decision: one host's verdict on its own samples (a journal written before
    per-host judging may hold one verdict for a whole batch)."""

    wave: int
    hosts: list[str]
    ts: float
    verdict: dict[str, Any] | None
    explanation: str
    baseline_hosts: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def outcome(self) -> str:
        if self.verdict is None:
            return "skipped"
        return str(self.verdict.get("outcome", "?"))


def judgements(events: list[dict[str, Any]], wave: int | None = None) -> list[Judgement]:
    out: dict[tuple[int, str], Judgement] = {}
    baseline: dict[int, list[str]] = {}
    for e in events:
        k = int(e["wave"] or 0)
        if e["kind"] == "baseline":
            baseline[k] = list(e["data"].get("hosts") or [])
        if e["kind"] != "canary" or (wave is not None and k != wave):
            continue
        d = e["data"]
        verdict = d.get("verdict")
        key = (k, json.dumps([d.get("hosts"), verdict, d.get("reason")], sort_keys=True))
        j = out.get(key)
        if j is None:
            # One verdict per canary host (its own samples); older journals judged a batch.
            own = bool(verdict and (verdict.get("host") or verdict.get("mode") == "self"))
            hosts = [e["host"]] if e["host"] and own else list(d.get("hosts") or [])
            refs = (list(verdict.get("reference_hosts") or []) or baseline.get(k, [])
                    if verdict and verdict.get("mode") != "self" else [])
            out[key] = Judgement(k, hosts, e["ts"], verdict, _explanation(d), refs,
                                 None if verdict else str(d.get("reason", "skipped")))
        elif e["host"] and e["host"] not in j.hosts:
            j.hosts.append(e["host"])
    return list(out.values())


def _explanation(d: dict[str, Any]) -> str:
    """The text the controller recorded; re-rendered from the verdict when a journal written
    by an older fleetgate did not keep it."""
    if d.get("explanation"):
        return str(d["explanation"])
    if not d.get("verdict"):
        return f"canary analysis skipped: {d.get('reason', 'no reason recorded')}"
    try:
        return explain(GateVerdict.model_validate(d["verdict"]))
    except ValidationError:
        return f"gate: {str(d['verdict'].get('outcome', '?')).upper()} — " \
               f"{d['verdict'].get('reason', '')}"


@dataclass(frozen=True)
class Distribution:
    """One metric's two sample sets, as judged (or as measured, when no verdict exists)."""

    group: str
    metric: str
    direction: str
    tolerance: float
    ref_label: str
    new_label: str
    reference: list[float]
    candidate: list[float]
    outcome: str | None
    relative_shift: float | None = None
    p_value: float | None = None

    @property
    def ref_median(self) -> float | None:
        vals = sorted(self.reference)
        if not vals:
            return None
        mid = len(vals) // 2
        return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2

    @property
    def threshold(self) -> float | None:
        """The value a median must stay on the good side of: baseline median shifted by the
        tolerance in the bad direction."""
        m = self.ref_median
        if m is None:
            return None
        return m - abs(m) * self.tolerance if self.direction == "higher" \
            else m + abs(m) * self.tolerance


def _finite(xs: Iterable[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, int | float) and not isinstance(x, bool)]


def group_title(j: Judgement) -> str:
    return f"wave {j.wave}: {', '.join(j.hosts)}"


def distributions(row: RolloutRow, events: list[dict[str, Any]]) -> list[Distribution]:
    """From each canary verdict's own samples; for waves where no verdict was reached, from the
    smoke results measured under the labels baseline/canary (or before/canary)."""
    out: list[Distribution] = []
    judged: set[int] = set()
    for jd in judgements(events):
        if jd.verdict is None:
            continue
        judged.add(jd.wave)
        self_mode = jd.verdict.get("mode") == "self"
        for m in jd.verdict.get("metrics", []):
            out.append(Distribution(
                group_title(jd), str(m["name"]), str(m["direction"]), float(m["tolerance"]),
                "before" if self_mode else "baseline", "after" if self_mode else "canary",
                _finite(m.get("baseline") or []), _finite(m.get("canary") or []),
                str(m["outcome"]), m.get("relative_shift"), m.get("p_value")))
    section = _canary_section(row)
    if section is None:
        return out
    measured: dict[int, dict[str, list[CheckResult]]] = {}
    for e in events:
        label = e["data"].get("label") if e["kind"] == "smoke" else None
        if label in MEASURED and int(e["wave"] or 0) not in judged:
            try:
                r = CheckResult.model_validate(e["data"]["result"])
            except (ValidationError, KeyError):
                continue
            side = "canary" if label == "canary" else "reference"
            measured.setdefault(int(e["wave"] or 0), {}).setdefault(side, []).append(r)
    for k, sides in sorted(measured.items()):
        ref = canary_gate.samples(section, sides.get("reference", []))
        new = canary_gate.samples(section, sides.get("canary", []))
        for m in section.metrics:
            if ref[m.name] or new[m.name]:
                out.append(Distribution(f"wave {k}: measured, not judged", m.name, m.direction,
                                        m.tolerance, "baseline", "canary", ref[m.name],
                                        new[m.name], None))
    return out


def _canary_section(row: RolloutRow) -> CanarySection | None:
    raw = (row.artifact.get("plan") or {}).get("canary")
    if not raw:
        return None
    try:
        return CanarySection.model_validate(raw)
    except ValidationError:
        return None


# --------------------------------------------------------------------------------- versions

@dataclass(frozen=True)
class Reading:
    label: str
    ts: float
    fields: dict[str, str]


def flatten_state(state: dict[str, Any]) -> dict[str, str]:
    """A host state as `what -> version` pairs a person can compare line by line."""
    out: dict[str, str] = {}
    if state.get("kernel_release"):
        out["kernel"] = str(state["kernel_release"])

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k in sorted(v):
                walk(f"{prefix}.{k}", v[k])
        else:
            out[prefix] = json.dumps(v) if isinstance(v, list | bool) or v is None else str(v)

    if isinstance(state.get("manifest"), dict):
        walk("manifest", state["manifest"])
    for name, ver in sorted((state.get("packages") or {}).items()):
        out[f"package {name}"] = str(ver) if ver is not None else "not installed"
    for path, content in sorted((state.get("files") or {}).items()):
        out[f"file {path}"] = str(content) if content is not None else "absent"
    return out


def versions(events: list[dict[str, Any]]) -> dict[str, tuple[Reading, Reading]]:
    """Host -> (first, last) reading of what it runs. The controller reads each host just
    before its change (label `before`), then after each apply, rollback and reconcile; a
    journal from an older fleetgate has no `before`, and its first reading is already the
    new version."""
    seen: dict[str, list[Reading]] = {}
    for e in events:
        if not e["host"]:
            continue
        if e["kind"] == "hoststate":
            state, label = e["data"].get("state"), str(e["data"].get("label", "?"))
        elif e["kind"] == "reconcile_host":
            state, label = e["data"].get("host_state"), "reconcile"
        else:
            continue
        if isinstance(state, dict):
            seen.setdefault(e["host"], []).append(Reading(label, e["ts"], flatten_state(state)))
    return {h: (rs[0], rs[-1]) for h, rs in seen.items()}


@dataclass(frozen=True)
class Change:
    item: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.item} {self.old} → {self.new}"


# Manifest fields that differ between any two readings of a host, whatever changed: when the
# manifest was written, a hash of the whole package list, and the machine identity (an image
# built in a container records the build machine's). A real kernel-update journal showed
# them burying the one line that matters (tests/fixtures/rollout/demo-rollouts.sql); they
# stay in the full readings, folded away.
BOOKKEEPING = ("manifest.updated_at", "manifest.package_list_sha256", "manifest.fingerprint.")


def changes(first: Reading, last: Reading) -> list[Change]:
    """Only what differs between two readings, kernel first, bookkeeping left out."""
    keys = list(dict.fromkeys([*first.fields, *last.fields]))
    keys.sort(key=lambda k: (k != "kernel", k))
    return [Change(k, first.fields.get(k, "-"), last.fields.get(k, "-")) for k in keys
            if first.fields.get(k) != last.fields.get(k) and not k.startswith(BOOKKEEPING)]


def change_statement(row: RolloutRow, events: list[dict[str, Any]]) -> str:
    """The change in one phrase: what the hosts' own before/after readings say changed on
    most hosts (e.g. `kernel 6.1.0-55-cloud-amd64 → 6.1.0-57-cloud-amd64`); from the plan's
    rollback and change targets when no host was read before and after."""
    tally: dict[str, int] = {}
    for first, last in versions(events).values():
        if first.label != "before" or last.label == "before":
            continue
        for c in changes(first, last):
            if not c.item.startswith("manifest.") or c.item in ("manifest.class_version",):
                tally[str(c)] = tally.get(str(c), 0) + 1
    if tally:
        best = sorted(tally, key=lambda t: (-tally[t], not t.startswith("kernel"), t))[:3]
        return "; ".join(best)
    plan = row.artifact.get("plan") or {}
    new = (plan.get("change") or {}).get("target") or {}
    old = (plan.get("rollback") or {}).get("target") or {}
    parts: list[str] = []
    if new.get("kernel_release"):
        parts.append(f"kernel {old.get('kernel_release') or '?'} → {new['kernel_release']}")
    for pkg, ver in sorted((new.get("packages") or {}).items()):
        parts.append(f"{pkg} → {ver}")
    for key, val in sorted((new.get("manifest") or {}).items()):
        was = (old.get("manifest") or {}).get(key)
        parts.append(f"{key} {was} → {val}" if was is not None else f"{key} → {val}")
    for path, val in sorted((new.get("files") or {}).items()):
        parts.append(f"{path} → {val}")
    if parts:
        return "; ".join(parts[:3])
    change = plan.get("change") or {}
    return f"{change_label(change)} " + " ".join(
        f"{k}={v}" for k, v in sorted((change.get("extra_vars") or {}).items()))


def started(events: list[dict[str, Any]]) -> dict[str, str]:
    """Who started the rollout and from which git revision (journals since this field)."""
    for e in events:
        if e["kind"] == "started":
            return {"by": str(e["data"].get("by", "?")), "git": str(e["data"].get("git", "?"))}
    return {"by": "unknown", "git": "unknown"}


def any_manifest(events: list[dict[str, Any]]) -> bool:
    return any(isinstance((e["data"].get("state") or {}).get("manifest"), dict)
               for e in events if e["kind"] == "hoststate")


# --------------------------------------------------------------------------------- explain

def explain_wave(j: Journal, rid: str, wave: int) -> str:
    """Why each canary verdict of a wave came out as it did (`rollout explain`)."""
    row, events = load(j, rid)
    n = len(row.artifact.get("waves", []))
    if not 1 <= wave <= n:
        raise BadInput(f"the rollout has {n} wave(s)", source="--wave", field=str(wave))
    found = judgements(events, wave)
    if not found:
        states = {r.state for h, r in j.hosts(rid).items() if r.wave == wave}
        why = ("the plan has no canary section" if not row.artifact["plan"].get("canary")
               else "every host of the wave was skipped" if states == {"skipped"}
               else "the rollout has not reached this wave" if states <= {"pending"}
               else "no host of the wave reached canary analysis")
        return f"wave {wave}: no canary verdict ({why})"
    blocks = []
    for jd in found:
        who = "canary" if len(jd.hosts) == 1 else "canaries"
        head = f"wave {wave}, {when(jd.ts)}: {who} {', '.join(jd.hosts) or '-'}"
        if jd.verdict and jd.verdict.get("mode") == "promoted":
            head += (f" judged against hosts promoted in earlier waves "
                     f"{', '.join(jd.baseline_hosts)}")
        elif jd.baseline_hosts:
            head += f" judged against baseline {', '.join(jd.baseline_hosts)}"
        elif jd.verdict and jd.verdict.get("mode") == "self":
            head += " judged against their own before-samples"
        blocks.append(f"{head}: {jd.outcome.upper()}\n{jd.explanation}")
    return "\n\n".join(blocks)


def _jobs(jobs: Any) -> str:
    if not isinstance(jobs, list) or not jobs:
        return "no job"
    return ", ".join(f"job {j.get('id')} {j.get('name')!r} ({j.get('user')})"
                     for j in jobs if isinstance(j, dict))


def drain_events(j: Journal, rid: str) -> list[dict[str, Any]]:
    """The Slurm drain module's journaled results: ansible events, which `load` leaves out."""
    return [e for e in redact.data(j.events(rid, kinds=("ansible",)))
            if isinstance(e["data"].get("slurm"), dict)]


def drain_stories(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each host's drain, in order: drained at, waited for (and on which jobs), resumed at, or
    held out of service with fleetgate's reason. From the Slurm drain module's results that
    the batch workers journal (worker._compact)."""
    stories: dict[str, list[str]] = {}
    held: dict[str, str] = {}
    for e in events:
        d = e["data"].get("slurm") if e["kind"] == "ansible" else None
        if not isinstance(d, dict) or not e.get("host"):
            continue
        host, said = e["host"], stories.setdefault(e["host"], [])
        if "drained_at" in d:
            said.append(f"drained at {d['drained_at']} after waiting {d.get('waited_s', 0)}s "
                        f"on {_jobs(d.get('jobs_at_start'))}"
                        + ("" if d.get("drained_by_fleetgate", True)
                           else " (already drained by someone else)"))
            held[host] = str(d.get("reason", ""))
        elif d.get("timed_out"):
            said.append(f"drain timed out after {d.get('waited_s', 0)}s, still running: "
                        f"{_jobs(d.get('jobs'))}; "
                        + (f"resumed at {d['resumed_at']}" if d.get("resumed_at")
                           else "left as its owner drained it"))
            held.pop(host, None)
        elif d.get("resumed"):
            said.append(f"resumed at {d.get('resumed_at')}")
            held.pop(host, None)
        elif "resumed" in d:
            said.append(f"not resumed: {d.get('why', 'unknown')}")
    for host, reason in held.items():
        stories[host].append(f"held out of service: drained, reason {reason!r}")
    return stories
