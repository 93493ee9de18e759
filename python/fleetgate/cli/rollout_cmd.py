"""`fleetgate rollout`: plan, start, watch, approve, abort and resume staged rollouts.

Exit codes of start/resume: 0 completed, 10 halted, 11 aborted, 12 another controller holds
the lease, 1 error, 2 bad input (nothing ran).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from fleetgate.cli.output import console, esc, print_json
from fleetgate.errors import BadInput, FleetgateError
from fleetgate.rollout import artifact as artifacts
from fleetgate.rollout import metrics as rollout_metrics
from fleetgate.rollout import notify, report_data
from fleetgate.rollout.engine import Controller
from fleetgate.rollout.journal import TERMINAL_ROLLOUT, Journal
from fleetgate.rollout.lease import LeaseHeld, holder
from fleetgate.rollout.status import history_line, summary

app = typer.Typer(help="Staged rollouts: canary pools and waves, gates, budgets, halt.",
                  no_args_is_help=True)

EXIT_BY_STATE = {"completed": 0, "halted": 10, "aborted": 11}
STATE_COLOUR = {"healthy": "green", "failed_held": "red", "rolled_back": "magenta",
                "skipped": "dim", "pending": "white", "completed": "green", "halted": "red",
                "aborted": "red"}

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
IdArg = Annotated[str, typer.Argument(help="Rollout id (see `rollout list`).")]
MetricsOpt = Annotated[Path | None, typer.Option(
    "--metrics-file", help="Keep a node_exporter textfile (*.prom) of the rollout up to date.")]
# The environment variable keeps a webhook's token out of `ps` and shell history.
WebhookOpt = Annotated[str | None, typer.Option(
    "--webhook", envvar="FLEETGATE_ROLLOUT_WEBHOOK", show_default=False,
    help="POST JSON here on halt, rollback, approval needed, completion and abort.")]


def _journal() -> Journal:
    return Journal()


def _say(as_json: bool) -> Any:
    return (lambda _m: None) if as_json else (lambda m: console.print(esc(m)))


def _target_text(t: dict[str, Any]) -> str:
    """What the controller checks on a host after the change (or the rollback)."""
    parts = [f"kernel {t['kernel_release']}"] if t.get("kernel_release") else []
    parts += [f"{k}={v}" for k, v in sorted(t.get("packages", {}).items())]
    parts += [f"manifest {k}={v}" for k, v in sorted(t.get("manifest", {}).items())]
    parts += [f"{k}={v}" for k, v in sorted(t.get("files", {}).items())]
    text = ", ".join(parts) or "(none: the playbook's own result only)"
    return text + (" (from the class)" if t.get("from_class") else "")


def _plan_table(doc: dict[str, Any]) -> Table:
    t = Table("wave", "hosts", "domains", "budget", title=f"rollout plan {doc['plan']['name']}")
    for k, members in enumerate(doc["waves"], start=1):
        doms = sorted({"/".join(doc["hosts"][h]["domains"].values()) for h in members})
        t.add_row(str(k), esc(", ".join(members)), esc(", ".join(doms)),
                  esc(doc["budgets"]["per_wave"][k - 1]))
    return t


@app.command()
def plan(
    plan_file: Annotated[Path, typer.Argument(help="Rollout plan YAML.")],
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i",
                                                   help="Overrides the plan's inventory.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the artifact."
                                             )] = None,
    as_json: JsonOpt = False,
) -> None:
    """Dry run: resolve hosts and waves, print budgets, window and gates, write the artifact
    that `rollout start` takes. Touches no host."""
    doc = artifacts.build(plan_file, inventory)
    path = artifacts.write(doc, out)
    if as_json:
        print_json({**doc, "artifact": str(path)})
        return
    p = doc["plan"]
    console.print(_plan_table(doc))
    for n in doc["notes"]:
        console.print(f"note: {esc(n)}")
    console.print(f"change: {esc(p['change']['playbook'])} {esc(p['change']['extra_vars'])}")
    console.print(f"  target: {esc(_target_text(p['change']['target']))}")
    console.print(f"on failure: {p['on_failure']}"
                  + (f" (rollback: {esc(p['rollback']['playbook'])})" if p["rollback"] else ""))
    if p["rollback"]:
        console.print(f"  rollback target: {esc(_target_text(p['rollback']['target']))}")
    console.print(f"concurrency: {p['concurrency']} per batch, capped by remaining budget + 1")
    console.print(f"total budget: {esc(doc['budgets']['total'])}")
    for line in (doc["budgets"].get("per_domain") or {}).values():
        console.print(f"domain budget: {esc(line)}")
    g = p["gates"]
    console.print(f"gates: {', '.join(g['checks']) or '(none)'}; retries {g['retries']}; "
                  f"inconclusive: {g['inconclusive']['policy']}"
                  + (f" x{g['inconclusive']['retries']}" if g["inconclusive"]["policy"] == "retry"
                     else "")
                  + (f"; baseline {g['baseline_hosts']} host(s) of later waves"
                     if g["baseline_hosts"] else ""))
    w = p["window"]
    console.print("window: " + (f"{w['start']}-{w['end']} {w['timezone']} {','.join(w['days'])}"
                                f" (when closed: {w['when_closed']})" if w else "always open"))
    console.print(f"soak: {p['soak']['seconds']}s between waves"
                  + (", smoke re-run at the end" if p["soak"]["rerun_smoke"] else ""))
    if p["approvals"]["before_waves"]:
        console.print("approvals before waves: "
                      + ", ".join(map(str, p["approvals"]["before_waves"])))
    console.print(f"artifact: {esc(path)}")


def _check_telemetry(metrics_file: Path | None, webhook: str | None) -> None:
    """Bad telemetry flags stop the command before the rollout exists or moves."""
    if metrics_file is not None:
        rollout_metrics.check_path(metrics_file)
    if webhook is not None:
        notify.check_url(webhook)


def _run(j: Journal, rid: str, *, resume: bool, as_json: bool, lease_ttl: float,
         metrics_file: Path | None = None, webhook: str | None = None) -> None:
    ctl = Controller(j, rid, lease_ttl_s=lease_ttl, log=_say(as_json))
    if metrics_file is not None:
        rollout_metrics.attach(j, rid, metrics_file)
    notifier = notify.attach(j, rid, webhook, log=_say(as_json)) if webhook else None
    try:
        state = ctl.run(resume=resume)
    finally:
        if notifier is not None:
            notifier.close()
    s = summary(j, rid)
    if as_json:
        print_json(s)
    else:
        console.print(_status_view(s))
    raise typer.Exit(EXIT_BY_STATE.get(state, 1))


@app.command()
def start(
    plan_file: Annotated[Path, typer.Argument(help="Plan artifact (from `rollout plan`) or a "
                                                   "plan YAML.")],
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", "-i", help="Overrides a plan YAML's inventory (not an artifact's).")
                         ] = None,
    rollout_id: Annotated[str | None, typer.Option("--id", help="Choose the rollout id.")] = None,
    lease_ttl: Annotated[float, typer.Option(min=3, max=3600, help="Lease TTL in seconds.")
                         ] = 30.0,
    as_json: JsonOpt = False,
    metrics_file: MetricsOpt = None,
    webhook: WebhookOpt = None,
) -> None:
    """Start a rollout and drive it to completed, halted or aborted."""
    _check_telemetry(metrics_file, webhook)
    doc = artifacts.load(plan_file, inventory)
    rid = artifacts.check_id(rollout_id) if rollout_id else artifacts.new_id(doc["plan"]["name"])
    j = _journal()
    if j.rollout(rid) is not None:
        raise BadInput("a rollout with this id exists; use `rollout resume`", source="--id",
                       field=rid)
    # The inventory scope must be free before the rollout even exists in the journal.
    scope = f"inventory:{doc['inventory']}"
    h = holder(j, scope)
    if h and h["alive"]:
        raise LeaseHeld(f"held by controller pid {h['pid']} on {h['host']} (rollout "
                        f"{h['rollout']})", source=scope)
    j.create_rollout(rid, doc["plan"]["name"], doc["inventory"], doc, doc["waves"])
    _say(as_json)(f"rollout {rid}: {len(doc['hosts'])} hosts in {len(doc['waves'])} waves")
    _run(j, rid, resume=False, as_json=as_json, lease_ttl=lease_ttl,
         metrics_file=metrics_file, webhook=webhook)


@app.command()
def resume(
    rollout_id: IdArg,
    lease_ttl: Annotated[float, typer.Option(min=3, max=3600)] = 30.0,
    as_json: JsonOpt = False,
    metrics_file: MetricsOpt = None,
    webhook: WebhookOpt = None,
) -> None:
    """Carry on a rollout whose controller died (or that halted resumably: interrupt, window).
    Reconciles in-flight hosts with what they actually run before anything else."""
    _check_telemetry(metrics_file, webhook)
    j = _journal()
    row = j.rollout(artifacts.check_id(rollout_id))
    if row is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    if row.state in TERMINAL_ROLLOUT and not row.resumable:
        # Idempotent: resuming a finished rollout reports how it finished.
        _say(as_json)(f"rollout {rollout_id} is already {row.state}; nothing to resume")
        s = summary(j, rollout_id)
        print_json(s) if as_json else console.print(_status_view(s))
        raise typer.Exit(EXIT_BY_STATE[row.state])
    _run(j, rollout_id, resume=True, as_json=as_json, lease_ttl=lease_ttl,
         metrics_file=metrics_file, webhook=webhook)


def _status_view(s: dict[str, Any]) -> Group:
    t = Table("wave", "host", "state", "gates", "applies", "reason",
              title=f"{s['id']}: {s['state']}" + (f" (wave {s['wave']}, {s['phase']})"
                                                 if s["phase"] else ""))
    for h, d in s["hosts"].items():
        colour = STATE_COLOUR.get(d["state"], "yellow")
        gates = " ".join(f"{c}:{v}" for c, v in d["gates"].items())
        t.add_row(str(d["wave"]), esc(h), f"[{colour}]{d['state']}[/{colour}]", esc(gates),
                  str(d["applies"]), esc(d["reason"][:120]))
    b = s["budget"]
    lines: list[Table | str] = [
        t, f"budget: {b['failed']} failed of {b['tolerated']} tolerated (rollout); per wave: "
        + "; ".join(f"w{w['wave']} {w['failed']}/{w['tolerated']}" for w in s["waves"])]
    if s["reason"]:
        lines.append(f"reason: {esc(s['reason'])}")
    c = s["controller"]
    if c:
        lines.append(f"controller: pid {c['pid']} on {esc(c['host'])}"
                     + ("" if c["alive"] else " (lease expired: resume to take over)"))
    return Group(*lines)


@app.command()
def status(
    rollout_id: IdArg,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until the rollout ends.")
                     ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Waves, host states, gate verdicts and budget used, from the journal."""
    j = _journal()
    s = summary(j, artifacts.check_id(rollout_id))
    if as_json:
        print_json(s)
        return
    if not watch:
        console.print(_status_view(s))
        return
    with Live(_status_view(s), console=console, refresh_per_second=2) as live:
        while s["state"] not in TERMINAL_ROLLOUT or s["resumable"]:
            time.sleep(1)
            s = summary(j, rollout_id)
            live.update(_status_view(s))
            if s["state"] in TERMINAL_ROLLOUT:
                break


@app.command()
def approve(
    rollout_id: IdArg,
    wave: Annotated[int, typer.Option("--wave", min=1, help="The wave to let start.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the journal).")],
) -> None:
    """Approve a manual gate before a wave."""
    j = _journal()
    row = j.rollout(artifacts.check_id(rollout_id))
    if row is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    if wave > len(row.artifact["waves"]):
        raise BadInput(f"the rollout has {len(row.artifact['waves'])} waves", source="--wave",
                       field=str(wave))
    if not reason.strip():
        raise BadInput("an approval needs a reason", source="--reason")
    j.request(rollout_id, "approve", reason.strip(), wave=wave)
    console.print(f"wave {wave} of {esc(rollout_id)} approved")


@app.command()
def abort(
    rollout_id: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the journal).")
                      ] = "operator abort",
) -> None:
    """Stop a rollout: no new hosts start, in-flight hosts finish, pending hosts are skipped."""
    j = _journal()
    row = j.rollout(artifacts.check_id(rollout_id))
    if row is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    if row.state in TERMINAL_ROLLOUT and not row.resumable:
        raise FleetgateError(f"rollout is already {row.state}", source=rollout_id)
    j.request(rollout_id, "abort", reason)
    h = holder(j, f"rollout:{rollout_id}")
    if h and h["alive"]:
        console.print(f"abort requested; controller pid {h['pid']} stops at its next safe point")
        return
    inflight = [x for x, r in j.hosts(rollout_id).items()
                if r.state in ("draining", "applying", "verifying", "rolling_back")]
    if inflight:
        console.print("no live controller, but hosts were in flight ("
                      f"{esc(', '.join(inflight))}): run `fleetgate rollout resume "
                      f"{esc(rollout_id)}` to reconcile them; it will then stop as aborted")
        raise typer.Exit(1)
    for x, r in j.hosts(rollout_id).items():
        if r.state == "pending":
            j.set_host(rollout_id, x, "skipped", f"rollout aborted: {reason}")
    j.set_rollout(rollout_id, "aborted", reason=f"aborted by {os.environ.get('USER', '?')}: "
                  f"{reason}")
    console.print(f"rollout {esc(rollout_id)} aborted")


@app.command()
def history(
    rollout_id: IdArg,
    kind: Annotated[list[str] | None, typer.Option("--kind", help="Only these event kinds.")
                    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay the journal: every transition, batch, Ansible event and gate verdict."""
    j = _journal()
    if j.rollout(artifacts.check_id(rollout_id)) is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    events = j.events(rollout_id, kinds=tuple(kind) if kind else None)
    if as_json:
        print_json(events)
        return
    for e in events:
        print(history_line(e))


@app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """Every rollout in the journal."""
    rows = _journal().rollouts()
    if as_json:
        print_json([{"id": r.id, "name": r.name, "state": r.state, "wave": r.wave,
                     "reason": r.reason, "created_at": r.created_at} for r in rows])
        return
    t = Table("id", "name", "state", "wave", "reason")
    for r in rows:
        colour = STATE_COLOUR.get(r.state, "yellow")
        t.add_row(esc(r.id), esc(r.name), f"[{colour}]{r.state}[/{colour}]", str(r.wave),
                  esc(r.reason[:100]))
    console.print(t)


# ------------------------------------------------------------------- reports and telemetry

def _write_out(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", source=path) from None


@app.command()
def report(
    rollout_id: IdArg,
    html_out: Annotated[Path | None, typer.Option(
        "--html", help="Write the self-contained HTML report here.")] = None,
    md_out: Annotated[Path | None, typer.Option(
        "--md", help="Write a short Markdown summary here (for a change ticket).")] = None,
) -> None:
    """Write a rollout's report: one HTML page that opens offline, and/or Markdown.

    The page holds the plan, a wave timeline, canary distributions with their verdicts,
    every host's final state and reason, and versions before and after."""
    # Imported here: matplotlib costs every other `fleetgate` command half a second.
    from fleetgate.rollout import report_html, report_md

    if html_out is None and md_out is None:
        raise BadInput("give --html OUT, --md OUT or both", source="rollout report")
    for p in (html_out, md_out):
        if p is not None and not p.parent.is_dir():
            raise BadInput("no such directory", source=p, field=str(p.parent))
    j = _journal()
    rid = artifacts.check_id(rollout_id)
    # Render both before writing either: a bad id leaves no half-written pair behind.
    texts = [(p, r.render(j, rid)) for p, r in ((html_out, report_html), (md_out, report_md))
             if p is not None]
    for p, text in texts:
        _write_out(p, text)
        console.print(f"wrote {esc(p)}")


@app.command()
def explain(
    rollout_id: IdArg,
    wave: Annotated[int, typer.Option("--wave", help="The wave whose canary verdicts to "
                                                     "explain.")],
    as_json: JsonOpt = False,
) -> None:
    """Why each canary verdict of a wave came out as it did.

    Per metric: the medians, the shift against its tolerance and the Mann-Whitney test;
    then the gate's decision."""
    j = _journal()
    rid = artifacts.check_id(rollout_id)
    text = report_data.explain_wave(j, rid, wave)  # validates the id and the wave
    if as_json:
        _, events = report_data.load(j, rid)
        print_json([{"wave": x.wave, "hosts": x.hosts, "baseline_hosts": x.baseline_hosts,
                     "ts": x.ts, "outcome": x.outcome, "explanation": x.explanation,
                     "verdict": x.verdict} for x in report_data.judgements(events, wave)])
        return
    print(text)


@app.command("serve-metrics")
def serve_metrics(
    rollout_ids: Annotated[list[str] | None, typer.Argument(
        help="Rollouts to export (default: every rollout in the journal).")] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="TCP port (0: any free port).")] = 9464,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Serve Prometheus /metrics for rollouts, read from the journal on each scrape.

    Listens on 127.0.0.1 unless --bind says otherwise."""
    ids = [artifacts.check_id(r) for r in rollout_ids or []]
    rollout_metrics.serve(_journal(), ids, bind, port, lambda m: console.print(esc(m)))
