"""`fleetgate rollout report --html`: one self-contained HTML page per rollout.

The page must open from a ticket attachment on a machine with no network: styles are inline,
plots are inline SVG, there is no script, and a Content-Security-Policy forbids fetching
anything, so even a URL that slipped into the data cannot make the page call home. Every
value from the journal (host names, Ansible messages, reasons) goes through html.escape.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from fleetgate.isotime import duration
from fleetgate.judge.compare import sides
from fleetgate.rollout import report_data as rd
from fleetgate.rollout import report_plots
from fleetgate.rollout.journal import FAILED_HOST, Journal
from fleetgate.rollout.plan import change_label
from fleetgate.rollout.status import HeldStep, diagnose_step, history_line, summary

MAX_CANARY_FIGURES = 40
MAX_VERSION_ROWS = 60  # per group of hosts
LOG_KINDS = ("rollout", "approval_needed", "approve", "abort", "baseline", "soak", "reconcile",
             "gate_retry", "notify_error", "listener_error")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;
 color:#1d2327;background:#fff;line-height:1.4}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;border-bottom:2px solid #dde3e8;
 padding-bottom:4px;margin-top:1.8em}h3{font-size:1.02em;margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}
th,td{border:1px solid #dde3e8;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f6f8;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;border:1px solid #dde3e8;padding:8px 10px;white-space:pre-wrap;
 word-break:break-word;font-size:.85em}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.92em}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;font-weight:600;color:#fff;
 background:#6c757d}
.s-completed,.s-healthy,.s-pass{background:#1a7f37}.s-halted,.s-failed_held,.s-fail,
.s-aborted{background:#cf222e}.s-drain_failed{background:#bc4c00}.s-rolled_back{background:#8250df}.s-skipped,.s-pending,
.s-nodata{background:#8c959f}.s-running,.s-soaking,.s-applying,.s-verifying,.s-draining,
.s-rolling_back{background:#bf8700}.s-inconclusive{background:#bf8700}
.muted{color:#6a737d}.changed{font-weight:600;background:#fff8c5}
figure{margin:.6em 0 1.2em}figure svg{max-width:100%;height:auto}figure.wide svg{width:100%}
td code{white-space:nowrap}table.versions td code,table.manifest td{white-space:normal;
 overflow-wrap:anywhere}details summary{cursor:pointer;color:#57606a}
figcaption{font-size:.85em;color:#57606a}
.score{display:inline-block;margin-left:.5em;padding:2px 12px;border-radius:6px;color:#fff;
 font-size:1.35em;font-weight:700}.score small{font-size:.6em;font-weight:400}
.summary td:first-child{font-weight:600;white-space:nowrap}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def badge(state: str) -> str:
    return f'<span class="badge s-{esc(state)}">{esc(state)}</span>'


def table(head: Sequence[str] | None, rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """`rows` are already-escaped HTML cells; `head` is plain text (None: no header row)."""
    out = [f'<table class="{esc(cls)}">']
    if head:
        out.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
                   + "</tr></thead>")
    out.append("<tbody>")
    out.extend("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    out.append("</tbody></table>")
    return "".join(out)


def value(v: Any) -> str:
    """A plan value, escaped: mappings as `k: v` lines, lists comma-separated."""
    if v is None or v == {} or v == []:
        return '<span class="muted">none</span>'
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, dict):
        return "<br>".join(f"<code>{esc(k)}</code>: {value(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(esc(json.dumps(x) if isinstance(x, dict | list) else x) for x in v)
    return esc(v)


# ------------------------------------------------------------------------------- sections

def _header(s: dict[str, Any], row_created: float, end: float, change: str = "",
            who: dict[str, str] | None = None) -> str:
    counts = ", ".join(f"{badge(k)} {n}" for k, n in sorted(s["counts"].items()))
    b = s["budget"]
    who = who or {"by": "unknown", "git": "unknown"}
    rows = [("change", f"<strong>{esc(change)}</strong>" if change else "-"),
            ("outcome", badge(s["state"]) + (" (resumable)" if s["resumable"] else "")),
            ("reason", esc(s["reason"]) if s["reason"] else '<span class="muted">-</span>'),
            ("wave", f"{s['wave']} of {len(s['waves'])}"
             + (f" ({esc(s['phase'])})" if s["phase"] else "")),
            ("hosts", f"{len(s['hosts'])}: {counts}"),
            ("budget used", f"{b['failed']} failed of {b['tolerated']} tolerated (rollout); "
             + "; ".join(f"wave {w['wave']}: {w['failed']}/{w['tolerated']}"
                         for w in s["waves"])),
            ("started", esc(rd.when(row_created))),
            ("last journal entry", f"{esc(rd.when(end))} ({esc(duration(end - row_created))}"
             " after start)"),
            ("inventory", f"<code>{esc(s['inventory'])}</code>"),
            ("started by", f"<code>{esc(who['by'])}</code> at git <code>{esc(who['git'])}"
             "</code>")]
    return ("<section id=summary>" + table(None, [(esc(k), v) for k, v in rows], "summary")
            + "</section>")


def _target(t: dict[str, Any]) -> str:
    parts = {"kernel": t.get("kernel_release"), "packages": t.get("packages"),
             "manifest": t.get("manifest"), "files": t.get("files")}
    shown = {k: v for k, v in parts.items() if v}
    return value(shown) if shown else '<span class="muted">no target: not checked</span>'


def _plan(art: dict[str, Any]) -> str:
    p = art["plan"]
    c, rb, g = p["change"], p.get("rollback"), p["gates"]
    rows: list[tuple[str, str]] = [
        ("plan", f"<code>{esc(p['name'])}</code>" + (f": {esc(p['description'])}"
                                                     if p.get("description") else "")),
        ("change", f"<code>{esc(change_label(c))}</code>, timeout {esc(c['timeout_s'])}s"
         f"<br>extra vars: {value(c.get('extra_vars'))}<br>target: {_target(c['target'])}"),
        ("rollback", (f"playbook <code>{esc(rb['playbook'])}</code><br>extra vars: "
                      f"{value(rb.get('extra_vars'))}<br>target: {_target(rb['target'])}")
         if rb else '<span class="muted">each host re-imaged to the image it ran before</span>'
         if c.get("image") else '<span class="muted">none</span>'),
        ("on failure", esc(p["on_failure"])),
        ("targets", value(p["targets"])),
        ("waves", value(p["waves"])),
        ("concurrency", f"{esc(p['concurrency'])} hosts per batch, capped by remaining "
         "budget + 1"),
        ("budgets", value(p["budgets"]) + "<br>" + esc(art["budgets"]["total"]) + " (rollout)"),
        ("gates", f"checks: {value(g['checks'])}; retries {esc(g['retries'])}; inconclusive: "
         f"{esc(g['inconclusive']['policy'])}"
         + (f" x{esc(g['inconclusive']['retries'])}" if g["inconclusive"]["policy"] == "retry"
            else "") + f"; baseline hosts {esc(g['baseline_hosts'])}"),
        ("canary", _canary_plan(p.get("canary"))),
        ("soak", f"{esc(p['soak']['seconds'])}s between waves"
         + (", smoke re-run at the end" if p["soak"]["rerun_smoke"] else "")),
        ("window", (f"{esc(p['window']['start'])}-{esc(p['window']['end'])} "
                    f"{esc(p['window']['timezone'])} {esc(','.join(p['window']['days']))}, "
                    f"when closed: {esc(p['window']['when_closed'])}")
         if p.get("window") else "always open"),
        ("approvals", "before wave(s) " + value(p["approvals"]["before_waves"])
         if p["approvals"]["before_waves"] else '<span class="muted">none</span>'),
        ("drain", value(p.get("drain"))),
        ("artifact", f"<code>{esc(art.get('hash', '?'))}</code> planned "
         f"{esc(art.get('planned_at', '?'))} from <code>{esc(art.get('plan_file', '?'))}</code>"),
    ]
    waves = table(["wave", "hosts", "budget"], (
        (str(k), esc(", ".join(members)), esc(art["budgets"]["per_wave"][k - 1]))
        for k, members in enumerate(art["waves"], start=1)))
    return ("<section id=plan><h2>Plan</h2>" + table(None, rows, "summary")
            + "<h3>Resolved waves</h3>" + waves + "</section>")


def _canary_plan(c: dict[str, Any] | None) -> str:
    if not c:
        return '<span class="muted">no canary analysis</span>'
    head = (f"mode {esc(c['mode'])}, {esc(c['repeats'])} repeats, alpha {esc(c['alpha'])}, "
            f"min samples {esc(c['min_samples'])}, uncertainty limit "
            f"{esc(c.get('uncertainty_limit', c.get('max_baseline_cv')))}, last wave "
            f"{esc(c.get('last_wave', '-'))},"
            f" pass score &ge; {esc(c['pass_threshold'])}, marginal &ge; "
            f"{esc(c['marginal_threshold'])}")
    metrics = table(["metric", "better", "critical", "weight", "tolerance"], (
        (f"<code>{esc(m['name'])}</code>", esc(m["direction"]), value(m["critical"]),
         esc(m["weight"]), f"{100 * m['tolerance']:g}%") for m in c["metrics"]))
    return head + metrics


def _timeline(s: dict[str, Any], row_created: float, end: float,
              bars: list[rd.Bar]) -> str:
    out = ["<section id=timeline><h2>Wave timeline</h2>"]
    if not bars:
        out.append("<p>No host started: nothing to draw.</p></section>")
        return "".join(out)
    hosts = [(h, d["wave"], d["state"]) for h, d in s["hosts"].items()]
    out.append("<figure class=wide>" + report_plots.timeline_svg(bars, hosts, row_created, end)
               + "<figcaption>Each host's steps from its journal transitions; black lines are "
               "the Ansible batches that ran for it; soak is its wave's soak phase. Rows are "
               "labelled wave, host and final state.</figcaption></figure>")
    if len(hosts) > report_plots.MAX_HOSTS:
        out.append(f"<p>The chart shows the first {report_plots.MAX_HOSTS} of {len(hosts)} "
                   "hosts; the host table lists every host.</p>")
    out.append("</section>")
    return "".join(out)


def _num(x: Any, fmt: str = "{:.4g}") -> str:
    return esc(fmt.format(x)) if isinstance(x, int | float) else '<span class="muted">-</span>'


def _metric_table(verdict: dict[str, Any]) -> str:
    ref, new = sides(verdict.get("mode", "baseline"))
    return table(["metric", "outcome", f"{ref} median", f"{new} median", "shift",
                  "tolerance", "p-value", f"n {new}/{ref}", "reason"], (
        (f"<code>{esc(m['name'])}</code>", badge(m["outcome"]), _num(m.get("baseline_median")),
         _num(m.get("canary_median")), _num(m.get("relative_shift"), "{:+.1%}"),
         f"{100 * m['tolerance']:g}%", _num(m.get("p_value"), "{:.2g}"),
         f"{esc(m['n_canary'])}/{esc(m['n_baseline'])}", esc(m["reason"]))
        for m in verdict.get("metrics", [])))


def _canary(art: dict[str, Any], events: list[dict[str, Any]],
            dists: list[rd.Distribution]) -> str:
    out = ["<section id=canary><h2>Canary analysis</h2>"]
    found = rd.judgements(events)
    if not art["plan"].get("canary") and not found:
        out.append("<p>The plan has no canary section: no canary analysis ran.</p></section>")
        return "".join(out)
    if not found:
        out.append("<p>No canary verdict was reached in this rollout.</p>")
    by_group: dict[str, list[rd.Distribution]] = {}
    for d in dists:
        by_group.setdefault(d.group, []).append(d)
    figures = 0
    for jd in found:
        title = rd.group_title(jd)
        v = jd.verdict or {}
        mode = v.get("mode", "baseline")
        if mode == "self":
            against = " against each host's own samples from before the change"
        elif jd.baseline_hosts:
            kind = "promoted hosts" if mode == "promoted" else "baseline"
            against = f" against {kind} {esc(', '.join(jd.baseline_hosts))}"
        else:
            against = ""
        score = v.get("score") if isinstance(v.get("score"), int | float) else None
        out.append(f"<h3>Wave {jd.wave}: {esc(', '.join(jd.hosts))} {badge(jd.outcome)}"
                   + (f' <span class="score s-{esc(jd.outcome)}">score {score:.1f}'
                      f"<small> / 100 (pass ≥ {esc(v.get('pass_threshold', '?'))})</small>"
                      "</span>" if score is not None else "") + "</h3>"
                   f"<p class=muted>{'judged' if jd.verdict else 'recorded'} "
                   f"{esc(rd.when(jd.ts))}{against}</p>")
        group = by_group.pop(title, [])
        if group and figures < MAX_CANARY_FIGURES:
            figures += 1
            out.append("<figure>" + report_plots.distribution_svg(
                title, group, outcome=jd.outcome, score=score)
                       + "<figcaption>Samples per metric; dotted: the baseline median; dashed "
                       "red: the tolerance the canary median must not cross.</figcaption>"
                       "</figure>")
        out.append(f"<pre>{esc(jd.explanation)}</pre>")
        if jd.verdict:
            out.append(_metric_table(jd.verdict))
    for title, group in by_group.items():
        out.append(f"<h3>{esc(title)}</h3><p>Samples were measured under the labels baseline "
                   "and canary, but no verdict was recorded (the controller stopped first). "
                   "Lines use the plan's tolerances.</p>")
        if figures < MAX_CANARY_FIGURES:
            figures += 1
            out.append("<figure>" + report_plots.distribution_svg(title, group) + "</figure>")
    if figures >= MAX_CANARY_FIGURES:
        out.append(f"<p>Plots are drawn for the first {MAX_CANARY_FIGURES} judgements only; "
                   "every explanation is listed.</p>")
    out.append("</section>")
    return "".join(out)


def _hosts(s: dict[str, Any]) -> str:
    rows = ((str(d["wave"]), f"<code>{esc(h)}</code>", badge(d["state"]), esc(d["reason"]),
             str(d["applies"]),
             esc(" ".join(f"{c}:{v}" for c, v in d["gates"].items())))
            for h, d in s["hosts"].items())
    failed = [h for h, d in s["hosts"].items() if d["state"] in FAILED_HOST]
    note = (f"<p>{len(failed)} failed host(s): {esc(', '.join(failed))}.</p>" if failed
            else "<p>No host failed.</p>")
    return ("<section id=hosts><h2>Hosts</h2>" + note
            + table(["wave", "host", "final state", "reason", "applies", "last gates"], rows)
            + "</section>")


def _drain(events: list[dict[str, Any]]) -> str:
    stories = rd.drain_stories(events)
    if not stories:
        return ""
    rows = ((f"<code>{esc(h)}</code>", "<br>".join(esc(x) for x in said))
            for h, said in stories.items())
    return ("<section id=drain><h2>Drain</h2>" + table(["host", "drained, waited, resumed"], rows)
            + "</section>")


def _versions(s: dict[str, Any], events: list[dict[str, Any]]) -> str:
    out = ["<section id=versions><h2>Versions before and after</h2>"]
    seen = rd.versions(events)
    if not seen:
        out.append("<p>No host state was recorded: no host reached its change. Versions "
                   "before and after are unknown.</p></section>")
        return "".join(out)
    out.append("<p>What changed on each host between the controller's reading just before "
               "its change and its last reading (kernel, <code>/etc/fleetgate/manifest.json"
               "</code>, packages and files the targets name). Every value read is folded "
               "away under the host's row.</p>")
    if not rd.any_manifest(events):
        out.append("<p>No host reported a manifest (<code>/etc/fleetgate/manifest.json</code> "
                   "absent).</p>")
    # Hosts whose change reads the same share a row: a fleet of 400 identical hosts is one
    # row, and the odd one out stands alone.
    groups: dict[Any, list[str]] = {}
    for h in s["hosts"]:
        r = seen.get(h)
        key = None if r is None else (r[0].label, tuple(map(str, rd.changes(*r))))
        groups.setdefault(key, []).append(h)
    rows: list[Sequence[str]] = []
    for key, hosts in groups.items():
        names = _host_list(hosts)
        if key is None:
            rows.append((names, '<span class="muted">never read</span>', ""))
            continue
        first, last = seen[hosts[0]]
        diff = rd.changes(first, last)
        if first.label != "before":
            what = ('<span class="muted">not read before its change (journal of an older '
                    f"fleetgate); first read at {esc(first.label)}</span>")
        elif not diff:
            what = '<span class="muted">unchanged</span>'
        else:
            what = "<br>".join(
                f'<span class="changed">{esc(c.item)}</span> <code>{esc(c.old)}</code> → '
                f"<code>{esc(c.new)}</code>" for c in diff[:MAX_VERSION_ROWS])
        rows.append((names, what, _manifest(first, last)))
    out.append(table(["hosts", "changed (before → after)", "full readings"], rows,
                     "versions"))
    out.append("</section>")
    return "".join(out)


def _host_list(hosts: list[str], most: int = 12) -> str:
    shown = ", ".join(f"<code>{esc(h)}</code>" for h in hosts[:most])
    return shown + (f" and {len(hosts) - most} more" if len(hosts) > most else "")


def _manifest(first: rd.Reading, last: rd.Reading) -> str:
    """Both readings in full, folded: evidence for whoever asks, not a wall for everyone."""
    keys = list(dict.fromkeys([*first.fields, *last.fields]))
    rows = [(f"<code>{esc(k)}</code>", esc(first.fields.get(k, "-")),
             esc(last.fields.get(k, "-"))) for k in keys[:MAX_VERSION_ROWS * 2]]
    return (f"<details><summary>{len(keys)} values</summary>"
            + table(["item", f"{first.label} {rd.when(first.ts)}",
                     f"{last.label} {rd.when(last.ts)}"], rows, "manifest")
            + "</details>")


def _next(s: dict[str, Any]) -> str:
    if not s["next_steps"] and s["state"] not in ("halted", "aborted"):
        return ""
    fleet = "".join(f"<li>{esc(x)}</li>" for x in s["fleet"])
    steps = "".join(f"<li><code>{esc(x)}</code></li>" for x in s["next_steps"])
    return ("<section id=next><h2>Where the fleet stands and what to run next</h2>"
            + (f"<ul>{fleet}</ul>" if s["state"] in ("halted", "aborted") else "")
            + (f"<ol>{steps}</ol>" if steps else "") + "</section>")


def _log(events: list[dict[str, Any]]) -> str:
    lines = [history_line(e) for e in events if e["kind"] in LOG_KINDS]
    return ("<section id=log><h2>Rollout log</h2><p class=muted>Rollout-level journal entries "
            "as <code>fleetgate rollout history</code> prints them; host, batch, smoke and "
            "Ansible events are in the journal.</p><pre>" + esc("\n".join(lines))
            + "</pre></section>")


def render(j: Journal, rid: str, *, held_step: HeldStep = diagnose_step) -> str:
    row, events = rd.load(j, rid)
    s = summary(j, rid, held_step=held_step)
    end = rd.end_of(row, events)
    title = f"Rollout {rid} ({row.name}): {row.state}"
    body = [
        f"<h1>{esc(title)}</h1>",
        _header(s, row.created_at, end, rd.change_statement(row, events), rd.started(events)),
        _next(s),
        _plan(row.artifact),
        _timeline(s, row.created_at, end, rd.timeline(row, events)),
        _canary(row.artifact, events, rd.distributions(row, events)),
        _hosts(s),
        _drain(rd.drain_events(j, rid)),
        _versions(s, events),
        _log(events),
        f"<footer class=muted>Generated {esc(rd.when(time.time()))} by fleetgate from the "
        f"journal <code>{esc(j.path)}</code>.</footer>",
    ]
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name=viewport content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
            + "\n".join(body) + "</main></body></html>\n")
