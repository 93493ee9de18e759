"""`fleetgate diagnose`: the article's fast-diagnosis order on live hosts (or a saved
collection), stopping at the first stage that explains the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetgate.cli import output as ui
from fleetgate.cli.options import InventoryOpt, inventory_sources
from fleetgate.errors import BadInput
from fleetgate.triage.diagnose import DiagnoseRun, diagnose, replay
from fleetgate.triage.model import Walk

VERDICT_COLOUR = {"clean": "green", "problem": "red", "inconclusive": "yellow"}


def _print_walk(w: Walk, out: ui.Output) -> None:
    ui.print_rows(("stage", "status", "what it saw"),
                  [(f"{s.number}. {s.title}", s.status, s.summary or "-") for s in w.stages], out,
                  title=f"{w.host} ({w.backend})")
    for s in w.stages:
        for f in s.findings[1:]:
            ui.console.print(f"  also ({s.name}): {ui.esc(f.message)}")
        for note in s.notes:
            ui.console.print(f"  note ({s.name}): {ui.esc(note)}")
    colour = VERDICT_COLOUR[w.verdict]
    ui.console.print(f"[{colour}]{w.host}: {w.verdict}[/{colour}] -- {ui.esc(w.reason)}")
    decision = next((s.decision for s in w.stages if s.decision), None)
    if decision:
        ui.console.print(f"[bold]decision:[/bold] {ui.esc(decision)}")


@ui.documented([
    "fleetgate diagnose -i inventory.yml --limit gpu-a03",
    "fleetgate diagnose --from runs/triage-gpu-a03.json --backend nvidia --gpus 8",
], "0 clean, 1 a stage found a problem, 4 could not collect or measure, 2 bad input")
def diagnose_command(
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l",
                                              help="The host (or host pattern) to diagnose.")
                     ] = None,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
    command_timeout: Annotated[int, typer.Option(
        "--command-timeout", help="Seconds each command may run on the host.")] = 10,
    from_file: Annotated[Path | None, typer.Option(
        "--from", help="Walk a saved collection (run dir's triage-HOST.json, or the "
                       "collector's own output) instead of a live host.")] = None,
    backend: Annotated[str | None, typer.Option(
        help="With --from: nvidia, amd, cpu, none or auto.")] = None,
    gpus: Annotated[int | None, typer.Option(help="With --from: GPUs the host should have.")
                    ] = None,
) -> None:
    """Walk a host through device health, under-utilisation, feeding and comms; stop at the
    first stage that explains the problem. Exit 0 clean, 1 a stage found a problem, 4 could
    not collect or measure, 2 bad input."""
    out = ui.fmt(as_json, output)
    if from_file is not None:
        if inventory is not None or limit is not None:
            raise BadInput("give either --from or -i/--limit, not both", source="--from")
        run: DiagnoseRun = replay(from_file, backend=backend, gpus=gpus)
    else:
        if limit is None:
            raise BadInput("--limit HOST is required (or --from FILE)", source="diagnose")
        if backend is not None or gpus is not None:
            raise BadInput("--backend and --gpus only apply to --from; a live host's class "
                           "sets them", source="diagnose")
        run = diagnose(inventory_sources(inventory), limit, command_timeout=command_timeout)
    if out is ui.Output.json:
        ui.print_json({"run_dir": str(run.run_dir) if run.run_dir else None,
                       "exit_code": run.exit_code,
                       "hosts": {w.host: w.to_dict() for w in run.walks}})
    else:
        for w in run.walks:
            _print_walk(w, out)
        if run.run_dir is not None:
            ui.console.print(f"collected evidence: {run.run_dir}")
    if run.exit_code:
        raise typer.Exit(run.exit_code)
