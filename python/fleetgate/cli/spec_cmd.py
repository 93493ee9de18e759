"""`fleetgate spec`: validate node classes, show them, derive Ansible/Packer variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from fleetgate.cli import output as ui
from fleetgate.spec.derive import Target, derive
from fleetgate.spec.loader import classes_dir, load_all, resolve_class

app = typer.Typer(help="Node classes: the version lock and its compatibility matrix.",
                  no_args_is_help=True)


@app.command()
@ui.documented([
    "fleetgate spec validate",
    "fleetgate spec validate inventory/classes/lab-cpu.yml -o wide",
], "0 every class valid, 2 a class is invalid (file, field and reason on stderr)")
def validate(
    paths: Annotated[list[Path] | None, typer.Argument(help="Class files or directories.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=ui.JSON_HELP)] = False,
    output: ui.OutputOpt = None,
) -> None:
    """Check schema and compatibility matrix for every class; exit 2 on the first bad one."""
    out = ui.fmt(as_json, output)
    loaded = load_all(paths or [classes_dir()])
    rows = []
    for name, (path, nc) in sorted(loaded.items()):
        drv = f"{nc.driver.vendor} {nc.driver.version}" if nc.driver.version else "none"
        rows.append([name, path.name, nc.kernel.abi, drv, nc.accelerator.backend, nc.lab.kind])
    if out is ui.Output.json:
        ui.print_json([dict(zip(("class", "file", "kernel", "driver", "backend", "lab"), r,
                                strict=True)) for r in rows])
        return
    ui.print_rows(["class", "file", "kernel", "driver", "backend", "lab"], rows, out)
    print(f"{len(loaded)} class(es) valid")


@app.command()
@ui.documented([
    "fleetgate spec show lab-cpu",
    "fleetgate spec show lab-cpu --json",
])
def show(
    node_class: Annotated[str, typer.Argument(metavar="CLASS")],
    as_json: Annotated[bool, typer.Option("--json", help=ui.JSON_HELP)] = False,
    output: ui.OutputOpt = None,
) -> None:
    """Print one validated class, with defaults filled in (YAML; JSON with -o json)."""
    out = ui.fmt(as_json, output)
    _, nc = resolve_class(node_class)
    data = nc.model_dump(mode="json")
    if out is ui.Output.json:
        ui.print_json(data)
    else:
        print(yaml.safe_dump(data, sort_keys=False), end="")


@app.command("vars")
@ui.documented([
    "fleetgate spec vars lab-cpu",
    "fleetgate spec vars lab-vm --for packer",
])
def vars_(
    node_class: Annotated[str, typer.Argument(metavar="CLASS")],
    target: Annotated[Target, typer.Option("--for", help="ansible or packer.")] = "ansible",
) -> None:
    """Print the variables derived from a class (JSON): the only place versions come from."""
    _, nc = resolve_class(node_class)
    ui.print_json(derive(nc, target))
