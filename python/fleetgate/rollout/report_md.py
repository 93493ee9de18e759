"""`fleetgate rollout report --md`: a short Markdown summary to paste into a change ticket.

Outcome, reason, host counts by state, failed hosts with their reasons, one line per canary
verdict. The HTML report has the evidence; this is what a reviewer reads first.
"""

from __future__ import annotations

import re

from fleetgate.rollout import report_data as rd
from fleetgate.rollout.journal import FAILED_HOST, Journal
from fleetgate.rollout.status import summary

# Characters that would turn an Ansible message into Markdown markup, raw HTML, an entity or a
# ticket-system mention; escaped, never stripped, so the text reads the same. Line-start
# markers (#, -, +) need no escape: data never starts a line here.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~@&])")
MAX_REASON = 400


def md(text: object) -> str:
    flat = " ".join(str(text).split())
    if len(flat) > MAX_REASON:
        flat = flat[:MAX_REASON] + "…"
    return _MD_SPECIAL.sub(r"\\\1", flat)


def render(j: Journal, rid: str) -> str:
    row, events = rd.load(j, rid)
    s = summary(j, rid)
    end = rd.end_of(row, events)
    counts = ", ".join(f"{n} {state}" for state, n in sorted(s["counts"].items()))
    b = s["budget"]
    lines = [
        f"### Rollout {md(rid)} ({md(row.name)}): **{s['state'].upper()}**",
        "",
        f"- **Outcome:** {md(s['state'])}" + (" (resumable)" if s["resumable"] else "")
        + f", wave {s['wave']} of {len(s['waves'])}",
        f"- **Reason:** {md(s['reason']) if s['reason'] else '-'}",
        f"- **Change:** {md(row.artifact['plan']['change']['playbook'])}, plan "
        f"{md(row.artifact.get('hash', '?'))}",
        f"- **When:** {rd.when(row.created_at)} to {rd.when(end)} "
        f"({rd.duration(end - row.created_at)})",
        f"- **Hosts:** {len(s['hosts'])} ({counts})",
        f"- **Budget:** {b['failed']} failed of {b['tolerated']} tolerated",
    ]
    failed = {h: d for h, d in s["hosts"].items() if d["state"] in FAILED_HOST}
    lines += ["", "**Failed hosts**" if failed else "**Failed hosts:** none"]
    lines += [f"- {md(h)} (wave {d['wave']}, {d['state']}): {md(d['reason'])}"
              for h, d in failed.items()]
    verdicts = rd.judgements(events)
    lines += ["", "**Canary verdicts**" if verdicts else "**Canary verdicts:** none recorded"]
    for jd in verdicts:
        why = (jd.verdict or {}).get("reason") or jd.skipped or ""
        failing = [m["name"] for m in (jd.verdict or {}).get("metrics", [])
                   if m.get("outcome") == "fail"]
        lines.append(f"- wave {jd.wave} ({md(', '.join(jd.hosts))}): **{jd.outcome.upper()}**"
                     + (f", failed {md(', '.join(failing))}" if failing else "")
                     + f": {md(why)}")
    return "\n".join(lines) + "\n"
