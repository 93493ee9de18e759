"""`fleetgate rollout`: plan, start, watch, approve, abort and resume staged rollouts.

Exit codes of start/resume/status: 0 completed, 10 halted, 11 aborted, 12 another controller
holds the lease, 1 error, 2 bad input (nothing ran).

Progress of start/resume comes from following the journal (rollout/progress.py), never from
inside the controller: the lines show exactly what is committed, as `history` would.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from fleetgate.cli import output as ui
from fleetgate.cli.options import finite, shared
from fleetgate.errors import BadInput, FleetgateError
from fleetgate.isotime import iso
from fleetgate.lab.paths import LabPaths
from fleetgate.revision import git_revision, operator
from fleetgate.rollout import signing
from fleetgate.rollout.journal import TERMINAL_ROLLOUT, Journal, check_id
from fleetgate.rollout.lease import LeaseHeld, holder
from fleetgate.rollout.status import (
    DEFAULT_HISTORY_KINDS,
    HISTORY_KINDS,
    diagnose_step,
    history_line,
    summary,
)
from fleetgate.runner.private_state import private_state_dir
from fleetgate.site import current_site

# The controller, the planner and the report builders (pydantic models, numpy, scipy, Ansible's
# runner) are imported by the commands that use them, not here: `status`, `history` and
# `list` are what CI and operators poll, and each call would pay their import.

app = typer.Typer(help="Staged rollouts: canary pools and waves, gates, budgets, halt.",
                  no_args_is_help=True)

EXIT_BY_STATE = {"completed": 0, "halted": 10, "aborted": 11}
STATE_COLOUR = {"healthy": "green", "failed_held": "red", "rolled_back": "magenta",
                "drain_failed": "yellow",
                "skipped": "dim", "pending": "white", "completed": "green", "halted": "red",
                "aborted": "red"}

JsonOpt = ui.JsonFlag
EXITS_RUN = ("0 completed, 10 halted, 11 aborted, 12 another controller holds the lease, "
             "1 error, 2 bad input (nothing ran), 130 interrupted")
EXITS_STATUS = ("0 completed or still running, 10 halted, 11 aborted, 1 error, "
                "2 bad input (no such rollout)")


class LogFormat(StrEnum):
    text = "text"
    json = "json"


LogFormatOpt = Annotated[LogFormat, typer.Option(
    "--log-format", help="Progress lines: text, or json (one object per line, for log "
    "shippers). On a terminal, text is a live view instead.", case_sensitive=False)]
LeaseTtlOpt = Annotated[float, typer.Option(min=3, max=3600, callback=finite,
                                            help="Lease TTL in seconds.")]
HeartbeatOpt = Annotated[float, typer.Option(
    "--heartbeat", min=1, max=60, callback=finite,
    help="Seconds between heartbeat lines while a phase runs.")]
IdArg = Annotated[str, typer.Argument(help="Rollout id (see `rollout list`).")]
MetricsOpt = Annotated[Path | None, typer.Option(
    "--metrics-file", help="Keep a node_exporter textfile (*.prom) of the rollout up to date.")]
# The environment variable keeps a webhook's token out of `ps` and shell history.
WebhookOpt = Annotated[str | None, typer.Option(
    "--webhook", envvar="FLEETGATE_ROLLOUT_WEBHOOK", show_default=False,
    help="POST JSON here on halt, rollback, approval needed, completion and abort.")]


def _journal() -> Journal:
    return Journal()


def held_step(inventory: str, host: str) -> str:
    """What to run for a held host: a lab's (an inventory `fleetgate lab up` wrote) heals it
    with `fleetgate lab heal`; any other host is diagnosed."""
    inv = Path(inventory)
    lab = LabPaths(inv.parent)
    if inv == lab.inventory and lab.marker.exists():
        return f"fleetgate lab --lab-dir {shlex.quote(str(lab.root))} heal {host}"
    return diagnose_step(inventory, host)


def _summary(j: Journal, rid: str) -> dict[str, Any]:
    return summary(j, rid, held_step=held_step)


def _say(as_json: bool) -> Any:
    return (lambda _m: None) if as_json else (lambda m: ui.console.print(ui.esc(m)))


def _target_text(t: dict[str, Any]) -> str:
    """What the controller checks on a host after the change (or the rollback)."""
    parts = [f"kernel {t['kernel_release']}"] if t.get("kernel_release") else []
    parts += [f"{k}={v}" for k, v in sorted(t.get("packages", {}).items())]
    parts += [f"manifest {k}={v}" for k, v in sorted(t.get("manifest", {}).items())]
    parts += [f"{k}={v}" for k, v in sorted(t.get("files", {}).items())]
    if t.get("manifest_sha256"):
        parts.append(f"whole manifest sha256 {t['manifest_sha256']} (the image's own)")
    text = ", ".join(parts) or "(none: the playbook's own result only)"
    return text + (" (from the class)" if t.get("from_class") else "")


def _plan_table(doc: dict[str, Any]) -> Table:
    t = Table("wave", "hosts", "domains", "budget", title=f"rollout plan {doc['plan']['name']}")
    for k, members in enumerate(doc["waves"], start=1):
        doms = sorted({"/".join(doc["hosts"][h]["domains"].values()) for h in members})
        t.add_row(str(k), ui.esc(", ".join(members)), ui.esc(", ".join(doms)),
                  ui.esc(doc["budgets"]["per_wave"][k - 1]))
    return t


def _output_value(value: str | None) -> ui.Output | None:
    """-o once named the artifact on `rollout plan`; a path given to it gets a hint."""
    if value is None:
        return None
    try:
        return ui.Output(value.lower())
    except ValueError:
        raise BadInput("-o is the output format (json, wide or table); write the artifact "
                       "with --out PATH", source="-o", field=value) from None


@app.command()
@ui.documented([
    "fleetgate rollout plan examples/rollout/kernel-update.plan.yml",
    "fleetgate rollout plan kernel-57.plan.yml -i inventory.yml --out kernel-57.json",
    "fleetgate rollout plan kernel-57.plan.yml -o json | jq .waves",
])
def plan(
    plan_file: Annotated[Path, typer.Argument(help="Rollout plan YAML.")],
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i",
                                                   help="Overrides the plan's inventory.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Where to write the artifact."
                                             )] = None,
    as_json: JsonOpt = False,
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="Output format: table, wide or json.", show_default=False)
                      ] = None,
) -> None:
    """Dry run: resolve hosts and waves, print budgets, window and gates, write the artifact
    that `rollout start` takes. Changes no host; an image change that rolls back asks each
    host which image it runs, and names every host it could not re-image back.

    The artifact carries a MAC keyed by this state dir (keys/artifact.key, made on first
    use): `start` refuses it if edited, or on another state dir unless signed (`rollout
    sign`)."""
    from fleetgate.rollout import artifact as artifacts
    from fleetgate.rollout.plan import change_label, drain_warnings
    form = ui.fmt(as_json, _output_value(output))
    doc = artifacts.build(plan_file, inventory)
    path = artifacts.write(doc, out)
    warnings = drain_warnings(doc["plan"].get("drain"))
    if doc["plan"]["change"].get("image") and doc["plan"]["on_failure"] == "rollback":
        from fleetgate.rollout import image_change

        warnings += image_change.rollback_gaps(
            Path(doc["inventory"]), sorted(doc["hosts"]),
            runs_base=private_state_dir() / "rollouts" / "plan-probes")
    if form is ui.Output.json:
        ui.print_json({**doc, "artifact": str(path), "warnings": warnings})
        return
    p = doc["plan"]
    if form is ui.Output.table:
        ui.console.print(_plan_table(doc))
    else:
        ui.print_rows(["wave", "hosts", "domains", "budget"], [
            [str(k), ", ".join(m), ", ".join(sorted({"/".join(doc["hosts"][h]["domains"]
                                                              .values()) for h in m})),
             doc["budgets"]["per_wave"][k - 1]] for k, m in enumerate(doc["waves"], start=1)],
            form, title=f"rollout plan {p['name']}")
    for n in doc["notes"]:
        ui.console.print(f"note: {ui.esc(n)}")
    for w in warnings:
        ui.console.print(f"[yellow]warning:[/yellow] {ui.esc(w)}")
    change = p["change"]
    ui.console.print(f"change: {ui.esc(change_label(change))} {ui.esc(change['extra_vars'])}")
    ui.console.print(f"  target: {ui.esc(_target_text(p['change']['target']))}")
    rollback = (f" (rollback: {ui.esc(p['rollback']['playbook'])})" if p["rollback"] else
                " (rollback: each host re-imaged to the image it ran before)"
                if change.get("image") else "")
    ui.console.print(f"on failure: {p['on_failure']}{rollback}")
    if p["rollback"]:
        ui.console.print(f"  rollback target: {ui.esc(_target_text(p['rollback']['target']))}")
    ui.console.print(f"concurrency: {p['concurrency']} per batch, capped by remaining budget + 1")
    ui.console.print(f"total budget: {ui.esc(doc['budgets']['total'])}")
    for line in (doc["budgets"].get("per_domain") or {}).values():
        ui.console.print(f"domain budget: {ui.esc(line)}")
    g = p["gates"]
    inconclusive = g["inconclusive"]
    ui.console.print(f"gates: {', '.join(g['checks']) or '(none)'}; retries {g['retries']}; "
                     f"inconclusive: {inconclusive['policy']}"
                     + (f" x{inconclusive['retries']}" if inconclusive["policy"] == "retry"
                        else "")
                     + (f"; baseline {g['baseline_hosts']} host(s) of later waves"
                        if g["baseline_hosts"] else ""))
    w = p["window"]
    ui.console.print("window: " + (f"{w['start']}-{w['end']} {w['timezone']} {','.join(w['days'])}"
                                   f" (when closed: {w['when_closed']})" if w else "always open"))
    ui.console.print(f"soak: {p['soak']['seconds']}s between waves"
                     + (", smoke re-run at the end" if p["soak"]["rerun_smoke"] else ""))
    if p["approvals"]["before_waves"]:
        ui.console.print("approvals before waves: "
                         + ", ".join(map(str, p["approvals"]["before_waves"])))
    ui.console.print(f"artifact: {ui.esc(path)}")
    if current_site().config.security.require_signed_artifacts:
        ui.console.print(f"sign it before start: fleetgate rollout sign {ui.esc(path)} --key KEY")


def _check_telemetry(metrics_file: Path | None, webhook: str | None) -> None:
    """Bad telemetry flags stop the command before the rollout exists or moves."""
    from fleetgate.rollout import metrics as rollout_metrics
    from fleetgate.rollout import notify
    if metrics_file is not None:
        rollout_metrics.check_path(metrics_file)
    if webhook is not None:
        notify.check_url(webhook)


def _writer(machine_stdout: bool) -> Any:
    # With -o json stdout carries one JSON document; the progress goes to stderr beside it.
    stream = sys.stderr if machine_stdout else sys.stdout

    def write(line: str) -> None:
        print(line, file=stream, flush=True)
    return write


@dataclass(frozen=True)
class Drive:
    """How a command that drives a rollout (start, resume) runs it and shows its progress."""

    out: ui.Output
    lease_ttl: float
    log_format: LogFormat = LogFormat.text
    heartbeat: float = 60.0
    metrics_file: Path | None = None
    webhook: str | None = None


def _drive(
    lease_ttl: LeaseTtlOpt = 30.0,
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
    log_format: LogFormatOpt = LogFormat.text,
    heartbeat: HeartbeatOpt = 60.0,
    metrics_file: MetricsOpt = None,
    webhook: WebhookOpt = None,
) -> Drive:
    out = ui.fmt(as_json, output)
    _check_telemetry(metrics_file, webhook)
    return Drive(out, lease_ttl, log_format, heartbeat, metrics_file, webhook)


# The options of the commands that drive a rollout, after their own; checked before either
# touches the journal.
drives = shared("drive", _drive)


def _run(j: Journal, rid: str, drive: Drive, *, resume: bool) -> None:
    from fleetgate.rollout import metrics as rollout_metrics
    from fleetgate.rollout import notify, progress
    from fleetgate.rollout.engine import Controller
    row = j.rollout(rid)
    waves = len(row.artifact["waves"]) if row else 0
    after = j.events(rid)[-1]["seq"] if resume and j.events(rid) else 0
    live_view = (drive.out is ui.Output.table and drive.log_format is LogFormat.text
                 and ui.console.is_terminal)
    write = _writer(drive.out is ui.Output.json)
    emit = progress.line_printer(drive.log_format.value, waves, write)

    def log(message: str) -> None:
        emit({"ts": iso(time.time()), "rollout": rid, "event": "log", "text": message})

    live: Live | None = None
    if live_view:
        # A terminal gets one live table instead of a scroll of lines.
        live = Live(_status_view(_summary(j, rid)), console=ui.console, refresh_per_second=2)

        def emit_live(_rec: dict[str, Any]) -> None:
            assert live is not None
            live.update(_status_view(_summary(j, rid)))
        follower = progress.Follower(j.path, rid, emit_live, heartbeat_s=drive.heartbeat,
                                     after=after)
        live.start()
    else:
        follower = progress.Follower(j.path, rid, emit, heartbeat_s=drive.heartbeat,
                                     after=after)
    ctl = Controller(j, rid, lease_ttl_s=drive.lease_ttl,
                     log=(lambda m: ui.console.print(ui.esc(m))) if live_view else log)
    if drive.metrics_file is not None:
        rollout_metrics.attach(j, rid, drive.metrics_file)
    notifier = (notify.attach(j, rid, drive.webhook, log=log, held_step=held_step)
                if drive.webhook else None)
    follower.start()
    try:
        state = ctl.run(resume=resume)
    finally:
        follower.stop()
        if live is not None:
            live.stop()
        if notifier is not None:
            notifier.close()
    _show_status(_summary(j, rid), drive.out)
    raise typer.Exit(EXIT_BY_STATE.get(state, 1))


@app.command()
@ui.documented([
    "fleetgate rollout start kernel-57.plan.yml",
    "fleetgate rollout start ~/.local/state/fleetgate/rollouts/plans/kernel-57-1f2e.json "
    "--id kernel-57-tue",
    "fleetgate rollout start plan.yml --log-format json --metrics-file /var/lib/node_exporter/"
    "fleetgate.prom",
    "fleetgate rollout start kernel-57.json   # kernel-57.json.sig beside it: signed by CI",
], EXITS_RUN)
@drives
def start(
    plan_file: Annotated[Path, typer.Argument(help="Plan artifact (from `rollout plan`) or a "
                                                   "plan YAML.")],
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", "-i", help="Overrides a plan YAML's inventory (not an artifact's).")
                         ] = None,
    rollout_id: Annotated[str | None, typer.Option("--id", help="Choose the rollout id.")] = None,
    *,
    drive: Drive,
) -> None:
    """Start a rollout and drive it to completed, halted or aborted, printing one timestamped
    line per transition (wave, host, phase, gate verdict, budget used) and a heartbeat while a
    phase runs.

    An artifact runs only if it is authentic (this state dir's MAC, or an ARTIFACT.sig by a
    key in the site's security.allowed_signers; only the signature with
    security.require_signed_artifacts) and passes every check planning ran, against the
    live inventory. Otherwise: exit 2, nothing ran."""
    from fleetgate.rollout import artifact as artifacts
    from fleetgate.rollout import progress
    from fleetgate.rollout.engine import require_secrets
    doc, trust = artifacts.load(plan_file, inventory)
    require_secrets(doc["plan"], str(plan_file))  # before the rollout is in the journal
    rid = check_id(rollout_id) if rollout_id else artifacts.new_id(doc["plan"]["name"])
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
    # Who started it, from which fleetgate, on what proof of the artifact: what a change
    # ticket must state.
    j.event(rid, "started", {"by": operator(), "git": git_revision(), "artifact": trust})
    first = {"ts": iso(time.time()), "rollout": rid, "event": "log",
             "text": f"rollout {rid}: {len(doc['hosts'])} hosts in {len(doc['waves'])} waves "
                     f"(artifact {trust})"}
    progress.line_printer(drive.log_format.value, len(doc["waves"]),
                          _writer(drive.out is ui.Output.json))(first)
    _run(j, rid, drive, resume=False)


@app.command()
@ui.documented([
    "fleetgate rollout resume kernel-57-20261201-0930-ab12",
    "fleetgate rollout resume kernel-57-20261201-0930-ab12 --log-format json",
], EXITS_RUN)
@drives
def resume(rollout_id: IdArg, *, drive: Drive) -> None:
    """Carry on a rollout whose controller died (or that halted resumably: interrupt, window).
    Reconciles in-flight hosts with what they actually run before anything else."""
    j = _journal()
    row = j.rollout(check_id(rollout_id))
    if row is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    if row.state in TERMINAL_ROLLOUT and not row.resumable:
        # Idempotent: resuming a finished rollout reports how it finished.
        if drive.out is not ui.Output.json:
            print(f"rollout {rollout_id} is already {row.state}; nothing to resume")
        _show_status(_summary(j, rollout_id), drive.out)
        raise typer.Exit(EXIT_BY_STATE[row.state])
    _run(j, rollout_id, drive, resume=True)


def _host_rows(s: dict[str, Any]) -> list[list[str]]:
    """One row per group of hosts sharing wave, state and reason: four skipped hosts with one
    reason are one row, not four copies of a wrapped paragraph."""
    rows: list[list[str]] = []
    for g in s["groups"]:
        by_wave: dict[tuple[int, str, int], list[str]] = {}
        for h in g["hosts"]:
            d = s["hosts"][h]
            gates = " ".join(f"{c}:{v}" for c, v in d["gates"].items())
            by_wave.setdefault((d["wave"], gates, d["applies"]), []).append(h)
        for (wave, gates, applies), hosts in sorted(by_wave.items()):
            rows.append([str(wave), ", ".join(hosts), g["state"], gates or "-", str(applies),
                         g["reason"] or "-"])
    return rows


def _status_lines(s: dict[str, Any]) -> list[str]:
    b = s["budget"]
    lines = [f"budget: {b['failed']} failed of {b['tolerated']} tolerated (rollout); per wave: "
             + "; ".join(f"w{w['wave']} {w['failed']}/{w['tolerated']}" for w in s["waves"])]
    if s["reason"]:
        lines.append(f"reason: {s['reason']}")
    c = s["controller"]
    if c:
        lines.append(f"controller: pid {c['pid']} on {c['host']}"
                     + ("" if c["alive"] else " (lease expired: resume to take over)"))
    if s["state"] in ("halted", "aborted"):
        lines.append("fleet now:")
        lines += [f"  {x}" for x in s["fleet"]]
    if s["next_steps"]:
        lines.append("next:")
        lines += [f"  {x}" for x in s["next_steps"]]
    return lines


def _title(s: dict[str, Any]) -> str:
    return f"{s['id']}: {s['state']}" + (f" (wave {s['wave']} of {len(s['waves'])}, "
                                          f"{s['phase']})" if s["phase"] else "")


def _status_view(s: dict[str, Any]) -> Group:
    t = Table("wave", "hosts", "state", "gates", "applies", "reason", title=_title(s))
    for c in t.columns:
        c.overflow = "fold"
    for r in _host_rows(s):
        colour = STATE_COLOUR.get(r[2], "yellow")
        t.add_row(r[0], ui.esc(r[1]), f"[{colour}]{r[2]}[/{colour}]", ui.esc(r[3]), r[4],
                  ui.esc(r[5]))
    return Group(t, *(ui.esc(x) for x in _status_lines(s)))


def _show_status(s: dict[str, Any], out: ui.Output) -> None:
    if out is ui.Output.json:
        ui.print_json(s)
    elif out is ui.Output.table:
        ui.console.print(_status_view(s))
    else:
        ui.print_rows(["wave", "hosts", "state", "gates", "applies", "reason"], _host_rows(s),
                      out, title=_title(s))
        for x in _status_lines(s):
            print(x)
        sys.stdout.flush()


def _status_line(s: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {k}" for k, n in sorted(s["counts"].items()))
    return " ".join(f"{iso(time.time())} {_title(s)}; hosts: {counts}".split())


@app.command()
@ui.documented([
    "fleetgate rollout status kernel-57-20261201-0930-ab12",
    "fleetgate rollout status kernel-57-20261201-0930-ab12 --watch | tee rollout.log",
    "fleetgate rollout status kernel-57-20261201-0930-ab12 -o json | jq .next_steps",
], EXITS_STATUS)
def status(
    rollout_id: IdArg,
    watch: Annotated[bool, typer.Option("--watch", help="Follow until the rollout ends: a live "
                                        "view on a terminal, a line per change otherwise.")
                     ] = False,
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
    log_format: LogFormatOpt = LogFormat.text,
) -> None:
    """Waves, host states (grouped by state and reason), gate verdicts and budget used, from
    the journal; after a halt or abort, where each host is and the commands to run next."""
    from fleetgate.rollout import progress
    out = ui.fmt(as_json, output)
    j = _journal()
    rid = check_id(rollout_id)
    # The follower starts after the last event read *before* the first frame: a change made
    # while that frame prints gets its line (at worst twice), never none.
    events = j.events(rid) if watch else []
    s = _summary(j, rid)
    if watch and out is ui.Output.table:
        with Live(_status_view(s), console=ui.console, refresh_per_second=2) as live:
            while s["state"] not in TERMINAL_ROLLOUT:
                time.sleep(1)
                s = _summary(j, rollout_id)
                live.update(_status_view(s))
    elif watch:
        # Not a terminal: a line whenever something changes, the same lines `start` prints.
        write = _writer(out is ui.Output.json)
        if log_format is LogFormat.json:
            write(json.dumps({"ts": iso(time.time()), "rollout": rollout_id, "event": "status",
                              "state": s["state"], "wave": s["wave"], "phase": s["phase"],
                              "counts": s["counts"]}, sort_keys=True))
        else:
            write(_status_line(s))
        f = progress.Follower(j.path, rollout_id,
                              progress.line_printer(log_format.value, len(s["waves"]), write),
                              after=events[-1]["seq"] if events else 0)
        while s["state"] not in TERMINAL_ROLLOUT:
            f.poll(j)
            time.sleep(1)
            s = _summary(j, rollout_id)
        f.poll(j)
    _show_status(s, out)
    raise typer.Exit(EXIT_BY_STATE.get(s["state"], 0))


@app.command()
@ui.documented([
    "fleetgate rollout sign kernel-57.json --key ~/.ssh/id_ed25519",
    "fleetgate rollout plan kernel-57.plan.yml --out kernel-57.json && fleetgate rollout sign "
    "kernel-57.json --key ci_ed25519",
], "0 signed, 2 bad input (the artifact fails its checks, the key cannot sign, or it is not "
   "in allowed_signers; nothing written), 5 ssh-keygen missing or failed")
def sign(
    artifact: Annotated[Path, typer.Argument(help="Plan artifact written by `rollout plan`.")],
    key: Annotated[Path, typer.Option("--key", help="SSH private key (or a public key whose "
                                      "private half is in ssh-agent).")],
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
) -> None:
    """Sign a plan artifact with an SSH key (ssh-keygen -Y sign, namespace fleetgate-plan),
    writing ARTIFACT.sig beside it: how CI promotes a plan that any controller of the site
    will start.

    Signs only an artifact planned with this state dir's key, unedited, that passes every
    check `rollout start` runs. Where the site names security.allowed_signers, the signature
    is verified against it before it is written."""
    from fleetgate.rollout import artifact as artifacts
    out = ui.fmt(as_json, output)
    raw, _doc = artifacts.load_to_sign(artifact)
    sig = signing.sign(raw, key, signing.ARTIFACT_NAMESPACE)
    signers = current_site().allowed_signers
    signer = (signing.verify(raw, sig, signers, signing.ARTIFACT_NAMESPACE, source=str(key))
              if signers is not None else None)
    path = signing.signature_path(artifact)
    try:
        path.write_text(sig)
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", source=path) from None
    _ack(out, {"artifact": str(artifact), "signature": str(path),
               "signer": signer.principal if signer else None,
               "fingerprint": signer.fingerprint if signer else None},
         f"signed {artifact}: {path}" + (f" by {signer}" if signer else ""))


def _ack(out: ui.Output, doc: dict[str, Any], text: str) -> None:
    if out is ui.Output.json:
        ui.print_json(doc)
    else:
        print(text)


@app.command()
@ui.documented([
    "fleetgate rollout approve kernel-57-20261201-0930-ab12 --wave 2 --reason "
    "\"canary wave clean, CHG-1234\"",
    "fleetgate rollout approve kernel-57-20261201-0930-ab12 --wave 2 --reason CHG-1234 "
    "--sign-key ~/.ssh/id_ed25519",
], "0 approved, 1 error, 2 bad input (no such rollout or wave, no reason, a signature that "
   "does not verify; nothing recorded), 5 ssh-keygen missing or failed")
def approve(
    rollout_id: IdArg,
    wave: Annotated[int, typer.Option("--wave", min=1, help="The wave to let start.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the journal).")],
    sign_key: Annotated[Path | None, typer.Option(
        "--sign-key", help="Sign the approval with this SSH key; verified against the site's "
        "security.allowed_signers.")] = None,
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
) -> None:
    """Approve a manual gate before a wave.

    The journal records who approved: with --sign-key, the allowed_signers principal and key
    fingerprint of a verified signature over the rollout, wave, reason and time (namespace
    fleetgate-approve); without, the local account, marked unverified. A site with
    security.require_signed_approvals refuses an approval without --sign-key."""
    out = ui.fmt(as_json, output)
    j = _journal()
    row = j.rollout(check_id(rollout_id))
    if row is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    if wave > len(row.artifact["waves"]):
        raise BadInput(f"the rollout has {len(row.artifact['waves'])} waves", source="--wave",
                       field=str(wave))
    if not reason.strip():
        raise BadInput("an approval needs a reason", source="--reason")
    by, proof = _approval_proof(rollout_id, wave, reason.strip(), sign_key)
    by = j.request(rollout_id, "approve", reason.strip(), wave=wave, by=by, proof=proof)
    _ack(out, {"rollout": rollout_id, "approved_wave": wave, "reason": reason.strip(),
               "by": by, "signed": proof is not None},
         f"wave {wave} of {rollout_id} approved by {by}")


def _approval_proof(rid: str, wave: int, reason: str, key: Path | None
                    ) -> tuple[str | None, dict[str, Any] | None]:
    """A signed approval's signer and what re-verifies it later; (None, None) unsigned."""
    site = current_site()
    if key is None:
        if site.config.security.require_signed_approvals:
            raise BadInput("this site takes only signed approvals (security."
                           "require_signed_approvals); pass --sign-key KEY", source="--sign-key")
        return None, None
    signers = site.allowed_signers
    if signers is None:
        raise BadInput("a signature needs security.allowed_signers in the site's fleetgate.yml "
                       "to be checked against", source="--sign-key")
    signed_at = datetime.now(UTC).isoformat(timespec="seconds")
    message = signing.approval_message(rid, wave, reason, signed_at)
    sig = signing.sign(message, key, signing.APPROVAL_NAMESPACE, source="--sign-key")
    signer = signing.verify(message, sig, signers, signing.APPROVAL_NAMESPACE,
                            source="--sign-key")
    return str(signer), {"principal": signer.principal, "fingerprint": signer.fingerprint,
                         "signed_at": signed_at, "signature": sig}


@app.command()
@ui.documented([
    "fleetgate rollout abort kernel-57-20261201-0930-ab12 --reason \"wrong kernel pinned\"",
])
def abort(
    rollout_id: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the journal).")
                      ] = "operator abort",
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
) -> None:
    """Stop a rollout: no new hosts start, in-flight hosts finish, pending hosts are skipped."""
    out = ui.fmt(as_json, output)
    j = _journal()
    row = j.rollout(check_id(rollout_id))
    if row is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    if row.state in TERMINAL_ROLLOUT and not row.resumable:
        raise FleetgateError(f"rollout is already {row.state}", source=rollout_id)
    by = j.request(rollout_id, "abort", reason)
    h = holder(j, f"rollout:{rollout_id}")
    if h and h["alive"]:
        _ack(out, {"rollout": rollout_id, "abort": "requested", "controller_pid": h["pid"]},
             f"abort requested; controller pid {h['pid']} stops at its next safe point")
        return
    inflight = [x for x, r in j.hosts(rollout_id).items()
                if r.state in ("draining", "applying", "verifying", "rolling_back")]
    if inflight:
        _ack(out, {"rollout": rollout_id, "abort": "requested", "in_flight": inflight,
                   "next_steps": [f"fleetgate rollout resume {rollout_id}"]},
             "no live controller, but hosts were in flight ("
             f"{', '.join(inflight)}): run `fleetgate rollout resume "
             f"{rollout_id}` to reconcile them; it will then stop as aborted")
        raise typer.Exit(1)
    # One transaction for all of them, not one per host.
    j.set_hosts(rollout_id, [x for x, r in j.hosts(rollout_id).items() if r.state == "pending"],
                "skipped", f"rollout aborted: {reason}")
    j.set_rollout(rollout_id, "aborted", reason=f"aborted by {by}: {reason}")
    s = _summary(j, rollout_id)
    if out is ui.Output.json:
        ui.print_json(s)
    else:
        print(f"rollout {rollout_id} aborted")
        for x in _status_lines(s)[1:]:
            print(x)


@app.command()
@ui.documented([
    "fleetgate rollout history kernel-57-20261201-0930-ab12",
    "fleetgate rollout history kernel-57-20261201-0930-ab12 --kind host --kind canary",
    "fleetgate rollout history kernel-57-20261201-0930-ab12 --verbose -o json",
])
def history(
    rollout_id: IdArg,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", help="Only these event kinds: " + ", ".join(HISTORY_KINDS) + ".")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Every event, Ansible's per-task events included.")] = False,
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
) -> None:
    """Replay the journal with ISO-8601 UTC times: by default rollout, host and canary events
    (approvals, soaks, reconcile); batches, smoke results and Ansible events with --verbose or
    --kind."""
    out = ui.fmt(as_json, output)
    unknown = sorted(set(kind or ()) - set(HISTORY_KINDS))
    if unknown:
        raise BadInput(f"unknown event kind (known: {', '.join(HISTORY_KINDS)})",
                       source="--kind", field=", ".join(unknown))
    j = _journal()
    if j.rollout(check_id(rollout_id)) is None:
        raise BadInput("no such rollout", source=str(j.path), field=rollout_id)
    kinds = tuple(kind) if kind else None if verbose else DEFAULT_HISTORY_KINDS
    events = j.events(rollout_id, kinds=kinds)
    if out is ui.Output.json:
        ui.print_json([{**e, "time": iso(e["ts"])} for e in events])
        return
    for e in events:
        print(history_line(e))


@app.command("list")
@ui.documented(["fleetgate rollout list", "fleetgate rollout list -o json | jq -r '.[].id'"])
def list_(as_json: JsonOpt = False, output: ui.OutputOpt = None) -> None:
    """Every rollout in the journal, with its full id (the one every other command takes)."""
    out = ui.fmt(as_json, output)
    rows = _journal().rollouts()
    if out is ui.Output.json:
        ui.print_json([{"id": r.id, "name": r.name, "state": r.state, "wave": r.wave,
                        "reason": r.reason, "created_at": r.created_at,
                        "created": iso(r.created_at)} for r in rows])
        return
    ui.print_rows(["id", "name", "state", "wave", "created", "reason"],
                  [[r.id, r.name, r.state, str(r.wave), iso(r.created_at), r.reason or "-"]
                   for r in rows], out)


# ------------------------------------------------------------------- reports and telemetry

def _write_out(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", source=path) from None


@app.command()
@ui.documented([
    "fleetgate rollout report kernel-57-20261201-0930-ab12 --html report.html",
    "fleetgate rollout report kernel-57-20261201-0930-ab12 --html r.html --md r.md -o json",
])
def report(
    rollout_id: IdArg,
    html_out: Annotated[Path | None, typer.Option(
        "--html", help="Write the self-contained HTML report here.")] = None,
    md_out: Annotated[Path | None, typer.Option(
        "--md", help="Write a short Markdown summary here (for a change ticket).")] = None,
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
) -> None:
    """Write a rollout's report: one HTML page that opens offline, and/or Markdown.

    The page holds the plan, a wave timeline, canary distributions with their verdicts,
    every host's final state and reason, and versions before and after."""
    # Imported here: matplotlib costs every other `fleetgate` command half a second.
    from fleetgate.rollout import report_html, report_md

    out = ui.fmt(as_json, output)
    if html_out is None and md_out is None:
        raise BadInput("give --html OUT, --md OUT or both", source="rollout report")
    for p in (html_out, md_out):
        if p is not None and not p.parent.is_dir():
            raise BadInput("no such directory", source=p, field=str(p.parent))
    j = _journal()
    rid = check_id(rollout_id)
    # Render both before writing either: a bad id leaves no half-written pair behind.
    texts = [(p, r.render(j, rid, html_path=html_out, held_step=held_step) if r is report_md
              else r.render(j, rid, held_step=held_step))
             for p, r in ((html_out, report_html), (md_out, report_md)) if p is not None]
    for p, text in texts:
        _write_out(p, text)
        if out is not ui.Output.json:
            print(f"wrote {p}")
    if out is ui.Output.json:
        ui.print_json({"rollout": rid, "html": str(html_out) if html_out else None,
                       "md": str(md_out) if md_out else None})


@app.command()
@ui.documented(["fleetgate rollout explain kernel-57-20261201-0930-ab12 --wave 2",
                "fleetgate rollout explain kernel-57-20261201-0930-ab12 --wave 2 -o json"])
def explain(
    rollout_id: IdArg,
    wave: Annotated[int, typer.Option("--wave", help="The wave whose canary verdicts to "
                                                     "explain.")],
    as_json: JsonOpt = False,
    output: ui.OutputOpt = None,
) -> None:
    """Why each canary verdict of a wave came out as it did.

    Per metric: the medians, the shift against its tolerance and the Mann-Whitney test;
    then the gate's decision."""
    from fleetgate.rollout import report_data
    j = _journal()
    rid = check_id(rollout_id)
    text = report_data.explain_wave(j, rid, wave)  # validates the id and the wave
    if ui.fmt(as_json, output) is ui.Output.json:
        _, events = report_data.load(j, rid)
        ui.print_json([{"wave": x.wave, "hosts": x.hosts, "baseline_hosts": x.baseline_hosts,
                        "ts": x.ts, "outcome": x.outcome, "explanation": x.explanation,
                        "verdict": x.verdict} for x in report_data.judgements(events, wave)])
        return
    print(text)


@app.command("serve-metrics")
@ui.documented(["fleetgate rollout serve-metrics",
                "fleetgate rollout serve-metrics --bind 0.0.0.0 --port 9464",
                "fleetgate rollout serve-metrics kernel-57-20261201-0930-ab12 --port 0"],
               "0 stopped with Ctrl-C, 1 cannot listen, 2 bad input (nothing served)")
def serve_metrics(
    rollout_ids: Annotated[list[str] | None, typer.Argument(
        help="Rollouts to export (default: one per plan, the active one, else the last "
        "finished: the rollout label is the plan's name, so two rollouts of one plan would "
        "be one series).")] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="TCP port (0: any free port).")] = 9464,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Serve Prometheus /metrics for rollouts, read from the journal on each scrape.

    Listens on 127.0.0.1 unless --bind says otherwise."""
    from fleetgate.rollout import metrics as rollout_metrics
    ids = [check_id(r) for r in rollout_ids or []]
    rollout_metrics.serve(_journal(), ids, bind, port, lambda m: ui.console.print(ui.esc(m)))
