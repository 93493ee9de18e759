"""`fleetgate fleet`: operations on real hosts through ansible-runner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fleetgate.cli.output import console, print_json
from fleetgate.runner import ansible
from fleetgate.spec.loader import repo_root

app = typer.Typer(help="Operations on hosts, through ansible-runner.", no_args_is_help=True)

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Ansible host pattern.")]


@app.command()
def ping(
    inventory: InventoryOpt,
    limit: LimitOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Ping hosts with Ansible's ping module; exit 1 if any host is unreachable or fails."""
    result = ansible.run(inventory=inventory, module="ping", limit=limit)
    rows = {h: {"outcome": r.outcome, "message": r.message}
            for h, r in sorted(result.hosts.items())}
    if as_json:
        print_json({"run_dir": str(result.run_dir), "hosts": rows})
    else:
        table = Table("host", "outcome", "message")
        for h, r in rows.items():
            colour = "green" if r["outcome"] in ("ok", "changed") else "red"
            table.add_row(h, f"[{colour}]{r['outcome']}[/{colour}]", r["message"])
        console.print(table)
        console.print(f"run artifacts: {result.run_dir}")
    if not result.hosts:
        console.print("[red]no hosts matched[/red]")
        raise typer.Exit(1)
    if not result.ok:
        raise typer.Exit(1)


@app.command()
def facts(
    inventory: InventoryOpt,
    limit: LimitOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Kernel, OS and class of each host (playbooks/facts.yml); exit 1 if any host fails."""
    result = ansible.run(inventory=inventory, playbook=repo_root() / "playbooks" / "facts.yml",
                         limit=limit)
    rows: dict[str, dict[str, str]] = {}
    for name, hr in sorted(result.hosts.items()):
        info: dict[str, str] = next((r["msg"] for r in reversed(hr.results)
                     if isinstance(r.get("msg"), dict) and "kernel" in r["msg"]), {})
        rows[name] = {"outcome": hr.outcome, "kernel": info.get("kernel", ""),
                      "os": info.get("os", ""), "class": info.get("node_class", ""),
                      "message": hr.message}
    if as_json:
        print_json({"run_dir": str(result.run_dir), "hosts": rows})
    else:
        table = Table("host", "class", "kernel", "os", "reachable")
        for name, r in rows.items():
            ok = r["outcome"] in ("ok", "changed")
            table.add_row(name, r["class"], r["kernel"], r["os"],
                          "[green]yes[/green]" if ok else f"[red]{r['outcome']}[/red]")
        console.print(table)
    if not result.ok or not rows:
        raise typer.Exit(1)
