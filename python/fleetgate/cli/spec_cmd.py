"""`fleetgate spec`: validate node classes, show them, derive Ansible/Packer variables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from fleetgate.cli.output import console, esc, print_json
from fleetgate.spec.derive import Target, derive
from fleetgate.spec.loader import classes_dir, load_all, resolve_class

app = typer.Typer(help="Node classes: the version lock and its compatibility matrix.",
                  no_args_is_help=True)


@app.command()
def validate(
    paths: Annotated[list[Path] | None, typer.Argument(help="Class files or directories.")] = None,
) -> None:
    """Check schema and compatibility matrix for every class; exit 2 on the first bad one."""
    loaded = load_all(paths or [classes_dir()])
    table = Table("class", "file", "kernel", "driver", "backend", "lab")
    for name, (path, nc) in sorted(loaded.items()):
        drv = f"{nc.driver.vendor} {nc.driver.version}" if nc.driver.version else "none"
        table.add_row(name, esc(path.name), nc.kernel.abi, esc(drv), nc.accelerator.backend,
                      nc.lab.kind)
    console.print(table)
    console.print(f"[green]{len(loaded)} class(es) valid[/green]")


@app.command()
def show(
    node_class: Annotated[str, typer.Argument(metavar="CLASS")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Print one validated class, with defaults filled in."""
    _, nc = resolve_class(node_class)
    data = nc.model_dump(mode="json")
    if as_json:
        print_json(data)
    else:
        print(yaml.safe_dump(data, sort_keys=False), end="")


@app.command("vars")
def vars_(
    node_class: Annotated[str, typer.Argument(metavar="CLASS")],
    target: Annotated[Target, typer.Option("--for", help="ansible or packer.")] = "ansible",
) -> None:
    """Print the variables derived from a class (JSON): the only place versions come from."""
    _, nc = resolve_class(node_class)
    print_json(derive(nc, target))
