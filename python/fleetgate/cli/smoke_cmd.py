"""`fleetgate smoke`: the smoke suite across hosts, and its parsers for offline triage."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fleetgate.cli import output as ui
from fleetgate.cli.options import InventoryOpt, LimitOpt, inventory_sources
from fleetgate.errors import BadInput
from fleetgate.inputs import read_input
from fleetgate.smoke import parsers
from fleetgate.smoke.model import parse_probe_output
from fleetgate.smoke.runner import DEFAULT_FORKS, load_results, run_smoke

app = typer.Typer(help="Smoke probes and the testinfra suite that gates promotions.",
                  no_args_is_help=True)

# Exit codes of `smoke run`: 0 every check passed, 1 a check failed, 4 nothing failed but
# something could not be measured (inconclusive) -- never a silent pass.
EXIT_FAIL = 1
EXIT_INCONCLUSIVE = 4
STATUS_COLOUR = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


@app.command(context_settings={"allow_extra_args": True})
@ui.documented([
    "fleetgate smoke run -i inventory.yml",
    "fleetgate smoke run -i inventory.yml --only discovery,gemm --out results.json",
    "fleetgate smoke run -i inventory.yml --baseline before.json -o json",
    "fleetgate smoke run -i inventory.yml --execution-node exec-a --execution-node exec-b",
], "0 every check passed, 1 a check failed, 4 nothing failed but something could not be "
   "measured, 2 bad input")
def run(
    ctx: typer.Context,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    node_class: Annotated[str | None, typer.Option("--class",
                                                   help="Only hosts of this class.")] = None,
    only: Annotated[str | None, typer.Option(
        "--only", help="Comma-separated checks: discovery,stack,gemm,comms,inference.")] = None,
    json_out: Annotated[Path | None, typer.Option("--out", help="Write the results (JSON) "
                                                  "here.")] = None,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="Results of a baseline run to compare against (else: peers).")
                        ] = None,
    forks: Annotated[int, typer.Option(min=1, max=500, help=(
        "pytest processes at most; each measures its share of the hosts in turn."))
                     ] = DEFAULT_FORKS,
    execution_node: Annotated[list[str] | None, typer.Option(
        "--execution-node", help=(
            "Measure from this execution node (inventory group fleetgate_execution_nodes) "
            "instead of here, as ansible-runner worker jobs (repeatable: the hosts are "
            "dealt to the nodes in order; each node runs up to --forks processes)."))
                      ] = None,
) -> None:
    """Run the suite on every matching host, up to --forks processes in parallel; exit 1 on
    any fail, 4 if some check could not be measured and none failed."""
    if ctx.args:
        # `--json PATH` once wrote the results; --json now prints them, like everywhere else.
        raise BadInput("--json prints the results as JSON; write them to a file with --out "
                       "PATH", source="smoke run", field=" ".join(ctx.args))
    out = ui.fmt(as_json, output)
    base = load_results(baseline) if baseline is not None else None
    result = run_smoke(inventory_sources(inventory), limit=limit, node_class=node_class, only=only,
                       baseline=base, forks=forks, on_nodes=execution_node or ())
    if json_out is not None:
        try:
            json_out.write_text(result.to_json() + "\n")
        except OSError as exc:
            raise BadInput(f"cannot write: {exc.strerror}", source=json_out) from None
    if out is ui.Output.json:
        print(result.to_json())
    else:
        ui.print_rows(["host", "check", "status", "reason"], [
            [r.host, r.check, r.status if r.probe_status == "ok"
             else f"{r.status} ({r.probe_status})", r.reason] for r in result.results], out)
    s = result.summary()
    say = ui.console.print if out is not ui.Output.json else _stderr
    say(f"{s['pass']} passed, {s['fail']} failed, {s['inconclusive']} inconclusive "
                  f"on {len(result.hosts)} host(s) in {result.wall_s:.1f}s; "
                  f"artifacts: {result.run_dir}")
    if s["fail"]:
        raise typer.Exit(EXIT_FAIL)
    if s["inconclusive"]:
        raise typer.Exit(EXIT_INCONCLUSIVE)


@app.command()
@ui.documented([
    "fleetgate smoke parse probe probe-output.json",
    "fleetgate smoke parse nvidia-smi saved-nvidia-smi.txt",
])
def parse(
    kind: Annotated[str, typer.Argument(help="probe, or: " + ", ".join(sorted(parsers.KINDS)))],
    file: Annotated[Path, typer.Argument(help="A recorded tool or probe output.")],
) -> None:
    """Parse a recorded output (offline triage) and print the normalized JSON."""
    if kind != "probe" and kind not in parsers.KINDS:
        raise BadInput(f"unknown kind (known: probe, {', '.join(sorted(parsers.KINDS))})",
                       source="KIND", field=kind)
    text = read_input(file)  # a FIFO or device is refused, never read
    if kind == "probe":
        ui.print_json(parse_probe_output(text, source=str(file)).model_dump(mode="json"))
        return
    try:
        ui.print_json(parsers.parse(kind, text))
    except parsers.ParseError as exc:
        raise BadInput(str(exc), source=file, field=kind) from None
