"""`fleetgate rollout report --md`: a short Markdown summary to paste into a change ticket.

It leads with one line that states the change, class, outcome, hosts by state, duration,
operator and git revision; then where the fleet stands, what to run next, the hosts, the
canary verdicts and where the HTML report is. Plain Markdown only (headings, lists, bold,
code spans), the subset GitHub, GitLab and Jira's Markdown importers all render: no tables,
no HTML, and no backslash escapes, which Jira shows literally. Journal text goes inside code
spans, where nothing is markup, so an Ansible message cannot turn into a link or a mention.
"""

from __future__ import annotations

from pathlib import Path

from fleetgate.isotime import duration
from fleetgate.rollout import report_data as rd
from fleetgate.rollout.journal import Journal
from fleetgate.rollout.plan import change_label
from fleetgate.rollout.status import FLEET_STATES, HeldStep, diagnose_step, summary


def code(text: object) -> str:
    """Journal text as a code span: one line, whole (a change ticket quotes the reason a
    host failed; a cut one loses the part that names the job or the package), backticks
    replaced (a span cannot escape them in every renderer)."""
    flat = " ".join(str(text).split()).replace("`", "'")
    return f"`{flat}`" if flat else "`-`"


def render(j: Journal, rid: str, *, html_path: Path | None = None,
           held_step: HeldStep = diagnose_step) -> str:
    row, events = rd.load(j, rid)
    s = summary(j, rid, held_step=held_step)
    end = rd.end_of(row, events)
    who = rd.started(events)
    plan = row.artifact.get("plan") or {}
    node_class = (plan.get("targets") or {}).get("class") or "any class"
    counts = ", ".join(f"{n} {state}" for state, n in sorted(s["counts"].items()))
    change = rd.change_statement(row, events)
    lines = [
        f"**{s['state'].upper()}**: {code(change)} on class {code(node_class)}, "
        f"{len(s['hosts'])} hosts ({counts}), {duration(end - row.created_at)}, "
        f"by {code(who['by'])} at git {code(who['git'])}",
        "",
        f"### Rollout {code(rid)} (plan {code(row.name)})",
        "",
        f"- Outcome: {s['state']}" + (" (resumable)" if s["resumable"] else "")
        + f", wave {s['wave']} of {len(s['waves'])}",
    ]
    if s["reason"]:
        lines.append(f"- Reason: {code(s['reason'])}")
    lines += [
        f"- Change: {code(change_label(plan.get('change', {})))}, plan hash "
        f"{code(row.artifact.get('hash', '?'))}",
        f"- When: {rd.when(row.created_at)} to {rd.when(end)}",
        f"- Budget: {s['budget']['failed']} failed of {s['budget']['tolerated']} tolerated",
    ]
    if html_path is not None:
        # A link a ticket system renders, and the path itself for a reader on the controller.
        where = html_path.resolve()
        lines.append(f"- HTML report: [{where.name}]({where.as_uri()}) {code(where)}")
    lines += ["", "**Hosts**", ""]
    for g in s["groups"]:
        hosts = ", ".join(code(h) for h in g["hosts"])
        lines.append(f"- {len(g['hosts'])} {FLEET_STATES.get(g['state'], g['state'])}: "
                     f"{hosts}" + (f": {code(g['reason'])}" if g["reason"] else ""))
    diffs = [(h, rd.changes(a, b)) for h, (a, b) in rd.versions(events).items()
             if a.label == "before"]
    if diffs:
        # Hosts whose change reads the same share one line.
        alike: dict[str, list[str]] = {}
        for h, cs in diffs:
            alike.setdefault("; ".join(code(c) for c in cs) or "unchanged", []).append(h)
        lines += ["", "**Versions (before → after)**", ""]
        lines += [f"- {', '.join(code(h) for h in hs)}: {what}" for what, hs in alike.items()]
    stories = rd.drain_stories(rd.drain_events(j, rid))
    if stories:
        lines += ["", "**Drain**", ""]
        lines += [f"- {code(h)}: " + "; ".join(code(x) for x in said)
                  for h, said in stories.items()]
    if s["next_steps"]:
        lines += ["", "**Next steps**", ""]
        lines += [f"- {code(c)}" for c in s["next_steps"]]
    verdicts = rd.judgements(events)
    lines += ["", "**Canary verdicts**" if verdicts else "**Canary verdicts:** none recorded"]
    if verdicts:
        lines.append("")
    for jd in verdicts:
        why = (jd.verdict or {}).get("reason") or jd.skipped or ""
        failing = [m["name"] for m in (jd.verdict or {}).get("metrics", [])
                   if m.get("outcome") == "fail"]
        lines.append(f"- wave {jd.wave} ({', '.join(code(h) for h in jd.hosts)}): "
                     f"**{jd.outcome.upper()}**"
                     + (f", failed {', '.join(code(m) for m in failing)}" if failing else "")
                     + f": {code(why)}")
    return "\n".join(lines) + "\n"
