"""`fleetgate smoke`: the smoke suite across hosts, and its parsers for offline triage."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fleetgate.cli.output import console, esc, print_json
from fleetgate.errors import BadInput
from fleetgate.smoke import parsers
from fleetgate.smoke.model import parse_probe_output
from fleetgate.smoke.runner import load_results, run_smoke

app = typer.Typer(help="Smoke probes and the testinfra suite that gates promotions.",
                  no_args_is_help=True)

# Exit codes of `smoke run`: 0 every check passed, 1 a check failed, 4 nothing failed but
# something could not be measured (inconclusive) -- never a silent pass.
EXIT_FAIL = 1
EXIT_INCONCLUSIVE = 4
STATUS_COLOUR = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


@app.command()
def run(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")],
    limit: Annotated[str | None, typer.Option("--limit", "-l",
                                              help="Ansible host pattern.")] = None,
    node_class: Annotated[str | None, typer.Option("--class",
                                                   help="Only hosts of this class.")] = None,
    only: Annotated[str | None, typer.Option(
        "--only", help="Comma-separated checks: discovery,stack,gemm,comms,inference.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results here.")
                        ] = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="Results of a baseline run to compare against (else: peers).")
                        ] = None,
    forks: Annotated[int, typer.Option(min=1, max=500, help="Hosts at a time.")] = 20,
) -> None:
    """Run the suite on every matching host in parallel; exit 1 on any fail, 4 if some check
    could not be measured and none failed."""
    base = load_results(baseline) if baseline is not None else None
    result = run_smoke(inventory, limit=limit, node_class=node_class, only=only,
                       baseline=base, forks=forks)
    if json_out is not None:
        try:
            json_out.write_text(result.to_json() + "\n")
        except OSError as exc:
            raise BadInput(f"cannot write: {exc.strerror}", source=json_out) from None
    table = Table("host", "check", "status", "reason")
    for r in result.results:
        colour = STATUS_COLOUR[r.status]
        status = r.status if r.probe_status == "ok" else f"{r.status} ({r.probe_status})"
        table.add_row(esc(r.host), r.check, f"[{colour}]{esc(status)}[/{colour}]",
                      esc(r.reason[:160]))
    console.print(table)
    s = result.summary()
    console.print(f"{s['pass']} passed, {s['fail']} failed, {s['inconclusive']} inconclusive "
                  f"on {len(result.hosts)} host(s) in {result.wall_s:.1f}s; "
                  f"artifacts: {result.run_dir}")
    if s["fail"]:
        raise typer.Exit(EXIT_FAIL)
    if s["inconclusive"]:
        raise typer.Exit(EXIT_INCONCLUSIVE)


@app.command()
def parse(
    kind: Annotated[str, typer.Argument(help="probe, or: " + ", ".join(sorted(parsers.KINDS)))],
    file: Annotated[Path, typer.Argument(help="A recorded tool or probe output.")],
) -> None:
    """Parse a recorded output (offline triage) and print the normalized JSON."""
    if kind != "probe" and kind not in parsers.KINDS:
        raise BadInput(f"unknown kind (known: probe, {', '.join(sorted(parsers.KINDS))})",
                       source="KIND", field=kind)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput("no such file", source=file) from None
    except IsADirectoryError:
        raise BadInput("is a directory", source=file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read: {exc}", source=file) from None
    if kind == "probe":
        print_json(parse_probe_output(text, source=str(file)).model_dump(mode="json"))
        return
    try:
        print_json(parsers.parse(kind, text))
    except parsers.ParseError as exc:
        raise BadInput(str(exc), source=file, field=kind) from None
