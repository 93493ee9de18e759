#!/usr/bin/python3
"""Drain a Slurm node and wait until its jobs have ended, or resume it; run on the slurmctld
host (the tasks delegate there), where scontrol has the cluster's own credentials.

DRAIN only stops new jobs: a node is safe to reboot once Slurm reports it DRAINED, with no job
left on it, not while it is DRAINING. Each drain carries fleetgate's reason, and only a node
whose reason is that same reason is ever resumed: a node an operator (or another rollout)
drained stays as they left it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: fleetgate_slurm_node
short_description: Drain a Slurm node until its jobs end (with a deadline), or resume it
description:
  - C(state=drained) sets DRAIN with I(reason) unless the node is already drained, then polls
    C(scontrol show node -o) until the node is DRAINED (no job left on it). At I(timeout_s) it
    fails, naming the jobs still running (C(squeue -w)), after resuming the node if this
    drain was fleetgate's.
  - C(state=resumed) resumes the node only if its reason is I(reason); any other drain is left
    alone (changed=false).
options:
  node:
    description: Slurm NodeName.
    type: str
    required: true
  state:
    description: drained or resumed.
    type: str
    choices: [drained, resumed]
    required: true
  reason:
    description: fleetgate's drain reason, C(fleetgate: <rollout id> <change>).
    type: str
    required: true
  timeout_s:
    description: How long the node's jobs may take to end (state=drained).
    type: int
    default: 600
  poll_s:
    description: Seconds between two looks at the node.
    type: float
    default: 2
author: fleetgate
"""

import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleetgate_hostcmd import run

NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
REASON_RE = re.compile(r"^fleetgate: [A-Za-z0-9_.:/ -]{1,200}$")
# `scontrol show node -o`: one line of Key=Value fields; a value may hold spaces (Reason) or
# '=' (CfgTRES=cpu=1,mem=1M), so a field starts only where a space is followed by Key=.
FIELD_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
# Slurm appends "[user@time]" to a reason when it shows it.
REASON_STAMP_RE = re.compile(r"\s*\[[^\]]*@[^\]]*\]\s*$")
# Base states with no job on the node: with the DRAIN flag these are what sinfo calls
# "drained". ALLOCATED/MIXED (or the COMPLETING flag) with DRAIN is still "draining".
IDLE_BASES = ("IDLE", "DOWN", "FUTURE", "UNKNOWN")
CMD_TIMEOUT_S = 30
# After RESUME slurmctld marks the node not responding until its slurmd answers a ping (a
# second or two): the state reported is the one after that, not the transient.
SETTLE_S = 15.0


def parse_node(text: str) -> dict[str, str]:
    """The fields of one `scontrol show node -o` line, Reason without its [user@time] stamp."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    keys = list(FIELD_RE.finditer(line))
    fields: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        fields[m.group(1)] = line[m.end():end].strip()
    if "Reason" in fields:
        fields["Reason"] = REASON_STAMP_RE.sub("", fields["Reason"])
    return fields


def state_parts(state: str) -> tuple[str, set[str]]:
    """"IDLE+DRAIN" -> ("IDLE", {"DRAIN"}); a trailing '*' (not responding) is a flag too."""
    parts = [p for p in state.upper().split("+") if p]
    base = parts[0] if parts else ""
    flags = set(parts[1:])
    if base.endswith("*"):
        base = base[:-1]
        flags.add("NOT_RESPONDING")
    return base, flags


def is_draining_or_drained(state: str) -> bool:
    base, flags = state_parts(state)
    return "DRAIN" in flags or base in ("DRAINED", "DRAINING", "DRAIN")


def is_drained(state: str) -> bool:
    """No job left on a node that takes no new ones (sinfo's "drained")."""
    base, flags = state_parts(state)
    if base == "DRAINED":
        return True
    return "DRAIN" in flags and base in IDLE_BASES and "COMPLETING" not in flags


def parse_jobs(text: str) -> list[dict[str, str]]:
    """`squeue -h -o '%i %j %u'` lines -> [{id, name, user}]."""
    jobs: list[dict[str, str]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            jobs.append({"id": parts[0], "name": " ".join(parts[1:-1]), "user": parts[-1]})
    return jobs


def describe_jobs(jobs: list[dict[str, str]]) -> str:
    return ", ".join(f"job {j['id']} '{j['name']}' ({j['user']})" for j in jobs) or "no job"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Slurm:
    """scontrol and squeue on this host; any failure ends the module with its stderr."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def _run(self, argv: list[str]) -> str:
        got = run(argv, CMD_TIMEOUT_S)
        if not got.ok:
            detail = got.stderr.strip() or got.stdout.strip() or got.status
            self.module.fail_json(msg=f"{' '.join(argv[:2])} failed on the Slurm controller: "
                                      f"{detail}", rc=got.rc)
        return str(got.stdout)

    def node(self, name: str) -> dict[str, str]:
        fields = parse_node(self._run(["scontrol", "show", "node", "-o", name]))
        if fields.get("NodeName") != name:
            self.module.fail_json(msg=f"scontrol show node {name}: no such node")
        return fields

    def jobs(self, name: str) -> list[dict[str, str]]:
        return parse_jobs(self._run(["squeue", "-h", "-w", name, "-o", "%i %j %u"]))

    def update(self, name: str, *settings: str) -> None:
        self._run(["scontrol", "update", f"NodeName={name}", *settings])

    def resume(self, name: str, poll_s: float = 1.0) -> str:
        """RESUME, then the node's state once slurmd has answered (or SETTLE_S passed)."""
        self.update(name, "State=RESUME")
        deadline = time.monotonic() + SETTLE_S
        while True:
            state = self.node(name).get("State", "")
            if "NOT_RESPONDING" not in state_parts(state)[1] or time.monotonic() >= deadline:
                return state
            time.sleep(poll_s)


def drain(module: Any, slurm: Slurm, node: str, reason: str, timeout_s: int,
          poll_s: float) -> None:
    started = time.monotonic()
    before = slurm.node(node)
    jobs_at_start = slurm.jobs(node)
    already = is_draining_or_drained(before.get("State", ""))
    ours = not already or before.get("Reason", "") == reason
    if not already:
        slurm.update(node, "State=DRAIN", f"Reason={reason}")
    # Someone else's drain (an operator's, another rollout's) is waited on like ours: the node
    # is out of service either way. Its reason stays, so undrain will not resume it.
    result = {"node": node, "reason": reason, "drained_by_fleetgate": ours,
              "drain_issued": not already, "state_before": before.get("State", ""),
              "reason_before": before.get("Reason", ""), "jobs_at_start": jobs_at_start}
    deadline = started + timeout_s
    while True:
        cur = slurm.node(node)
        if is_drained(cur.get("State", "")):
            module.exit_json(changed=not already, state=cur.get("State", ""),
                             drained_at=now_iso(),
                             waited_s=round(time.monotonic() - started, 1), **result)
        if time.monotonic() >= deadline:
            break
        time.sleep(max(0.1, min(poll_s, deadline - time.monotonic())))
    running = slurm.jobs(node)
    resumed_at = now_iso() if ours else None
    if ours:
        after = slurm.resume(node)
        then = f"node resumed by fleetgate (now {after})"
    else:
        after = cur.get("State", "")
        then = (f"node left {after} as its owner drained it "
                f"(reason {before.get('Reason', '')!r})")
    module.fail_json(
        msg=f"drain of Slurm node {node} timed out after {timeout_s}s, still running there: "
            f"{describe_jobs(running)}; nothing applied; {then}",
        changed=not already, state=after, timed_out=True, jobs=running,
        resumed_at=resumed_at,
        waited_s=round(time.monotonic() - started, 1), **result)


def resume(module: Any, slurm: Slurm, node: str, reason: str) -> None:
    cur = slurm.node(node)
    state = cur.get("State", "")
    common = {"node": node, "state_before": state, "reason_before": cur.get("Reason", "")}
    if not is_draining_or_drained(state):
        module.exit_json(changed=False, state=state, resumed=False,
                         why="not drained", **common)
    if cur.get("Reason", "") != reason:
        module.exit_json(changed=False, state=state, resumed=False,
                         why=f"drained by someone else (reason {cur.get('Reason', '')!r}); "
                             "left drained", **common)
    at = now_iso()
    state = slurm.resume(node)
    module.exit_json(changed=True, state=state, resumed=True, resumed_at=at, **common)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "state": {"type": "str", "required": True, "choices": ["drained", "resumed"]},
            "reason": {"type": "str", "required": True},
            "timeout_s": {"type": "int", "default": 600},
            "poll_s": {"type": "float", "default": 2.0},
        },
    )
    p = module.params
    if not NODE_RE.match(p["node"]):
        module.fail_json(msg=f"refusing a Slurm node name that is not a plain name: {p['node']!r}")
    if not REASON_RE.match(p["reason"]):
        module.fail_json(msg=f"refusing a drain reason outside 'fleetgate: [A-Za-z0-9_.:/ -]': "
                             f"{p['reason']!r}")
    if p["timeout_s"] < 1 or p["poll_s"] <= 0:
        module.fail_json(msg="timeout_s must be >= 1 and poll_s > 0")
    slurm = Slurm(module)
    if p["state"] == "drained":
        drain(module, slurm, p["node"], p["reason"], p["timeout_s"], p["poll_s"])
    else:
        resume(module, slurm, p["node"], p["reason"])


if __name__ == "__main__":
    main()
