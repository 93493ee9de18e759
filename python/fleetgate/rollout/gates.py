"""The gates a changed host must pass: its target state, the smoke checks (with the plan's
retry policies), then canary analysis, each canary host judged on its own.

Functions of the controller (engine.Controller): they read its plan and journal, measure
through it, and return verdicts; the controller acts on them (healthy, fail, inconclusive).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgate.rollout import canary_gate, hoststate, measure
from fleetgate.rollout.canary import (
    CanarySection,
    GateVerdict,
    explain,
    judge_samples,
    judge_self,
    no_reference,
)
from fleetgate.rollout.target import Target
from fleetgate.smoke.model import CheckResult, by_host

if TYPE_CHECKING:
    from fleetgate.rollout.engine import Controller

Verdicts = tuple[list[str], dict[str, str], dict[str, str]]


def why(results: list[CheckResult]) -> str:
    return "; ".join(f"gate {r.check} {r.status}: {r.reason}" for r in results)


def verify(ctl: Controller, hosts: list[str], k: int, target: Target, *, label: str) -> Verdicts:
    """Target check, then smoke gates with the plan's retry policies.
    Returns (good, failed with reason, inconclusive with reason)."""
    failed: dict[str, str] = {}
    unsure: dict[str, str] = {}
    todo = list(hosts)
    if not target.empty:
        states, why_not = hoststate.probe(ctl.inventory, todo, [target],
                                          runs_base=ctl.dir / "runs")
        for h in todo:
            st = states[h]
            ctl.j.event(ctl.rid, "hoststate", {"label": label, "state": st,
                                               "why": why_not.get(h)}, host=h, wave=k)
            if st is None:
                unsure[h] = f"could not read host state: {why_not[h]}"
            elif diff := hoststate.mismatches(target, st):
                failed[h] = f"not at target after {label}: " + "; ".join(diff)
        todo = [h for h in todo if h not in failed and h not in unsure]
    s_failed, s_unsure = smoke(ctl, todo, k, label=label)
    failed.update(s_failed)
    unsure.update(s_unsure)
    good = [h for h in hosts if h not in failed and h not in unsure]
    return good, failed, unsure


def smoke(ctl: Controller, hosts: list[str], k: int, *, label: str
          ) -> tuple[dict[str, str], dict[str, str]]:
    """The plan's smoke checks on `hosts`, with its retry policies: a failed gate is measured
    again `retries` times, an inconclusive one `inconclusive.retries` times under `retry`.
    Returns (failed with reason, inconclusive with reason); a host in neither passed."""
    failed: dict[str, str] = {}
    unsure: dict[str, str] = {}
    gates = ctl.plan.gates
    fail_tries = gates.retries
    unsure_tries = gates.inconclusive.retries if gates.inconclusive.policy == "retry" else 0
    todo = list(hosts)
    while todo and gates.checks:
        mine = by_host(ctl._smoke(todo, k, label=label).results)
        next_round: list[str] = []
        for h in todo:
            bad = [r for r in mine.get(h, []) if r.status == "fail"]
            odd = [r for r in mine.get(h, []) if r.status == "inconclusive"]
            if (bad and fail_tries > 0) or (not bad and odd and unsure_tries > 0):
                next_round.append(h)
            elif bad:
                failed[h] = why(bad)
            elif odd:
                unsure[h] = why(odd)
        if not next_round:
            break
        ctl.j.event(ctl.rid, "gate_retry", {"hosts": next_round, "label": label}, wave=k)
        fail_tries -= 1
        unsure_tries -= 1
        todo = next_round
    return failed, unsure


def _judge_host(ctl: Controller, c: CanarySection, h: str, mine: list[CheckResult]
                ) -> GateVerdict:
    """One canary host's samples against the wave's reference, on their own."""
    after = canary_gate.samples(c, mine)
    ref = ctl.reference
    if c.mode == "self" or ref.mode == "self":
        before = ctl.before.get(h)
        if not before:
            return no_reference(c, f"no before-change samples of {h} to compare with",
                                mode="self", host=h)
        return judge_self(c, canary_gate.samples(c, before), after, source=h, host=h)
    if not ref.results:
        return no_reference(c, ref.missing or "no reference hosts were measured",
                            mode=ref.mode, host=h)
    return judge_samples(c, canary_gate.samples(c, ref.results), after, mode=ref.mode,
                         source=h, host=h, reference_hosts=ref.hosts)


def canary(ctl: Controller, hosts: list[str], k: int) -> Verdicts:
    """Judge each canary of the batch on its own; a batch is the sum of its hosts' verdicts.
    The plan's inconclusive policy may re-measure the hosts without a verdict."""
    c = ctl.plan.canary
    if c is None or not hosts:
        return hosts, {}, {}
    inc = ctl.plan.gates.inconclusive
    tries = inc.retries if inc.policy == "retry" else 0
    passed: list[str] = []
    failed: dict[str, str] = {}
    unsure: dict[str, str] = {}
    todo = list(hosts)
    while todo:
        measured = measure.measure(ctl, todo, k, label="canary",
                                   checks=canary_gate.checks_for(c))
        again: list[str] = []
        mine = by_host(measured)
        for h in todo:
            v = _judge_host(ctl, c, h, mine.get(h, []))
            ctl.j.event(ctl.rid, "canary", {"hosts": hosts, "verdict": v.model_dump(mode="json"),
                                            "explanation": explain(v)}, host=h, wave=k)
            failing = [m.name for m in v.metrics if m.outcome == "fail"]
            if v.outcome == "pass":
                passed.append(h)
            elif v.outcome == "fail":
                failed[h] = (f"canary analysis failed ({', '.join(failing) or 'score'}): "
                             f"{v.reason}")
            elif tries > 0:
                again.append(h)
            else:
                unsure[h] = f"canary analysis inconclusive: {v.reason}"
        if again:
            ctl.j.event(ctl.rid, "gate_retry", {"hosts": again, "label": "canary"}, wave=k)
        tries -= 1
        todo = again
    return passed, failed, unsure
