"""`fleetgate fleet`: operations on real hosts through ansible-runner."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fleetgate.cli.output import console, esc, print_json
from fleetgate.errors import BadInput
from fleetgate.runner import ansible
from fleetgate.spec.loader import repo_root

app = typer.Typer(help="Operations on hosts, through ansible-runner.", no_args_is_help=True)

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")]
PLAYBOOK_RE = re.compile(r"^[A-Za-z0-9_./-]{1,300}$")
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
            table.add_row(esc(h), f"[{colour}]{r['outcome']}[/{colour}]", esc(r["message"]))
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
            table.add_row(esc(name), esc(r["class"]), esc(r["kernel"]), esc(r["os"]),
                          "[green]yes[/green]" if ok else f"[red]{r['outcome']}[/red]")
        console.print(table)
    if not result.ok or not rows:
        raise typer.Exit(1)


EXTRA_KEY_RE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
EXTRA_VALUE_RE = re.compile(r"^[A-Za-z0-9._:+~/@%=,-]{0,200}$")


def parse_extra_vars(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs; both sides must be plain tokens, since values reach commands."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not EXTRA_KEY_RE.fullmatch(key):
            raise BadInput("expected KEY=VALUE with KEY in [a-z0-9_]", source="--extra-vars",
                           field=repr(pair))
        if not EXTRA_VALUE_RE.fullmatch(value):
            raise BadInput("value has characters outside [A-Za-z0-9._:+~/@%=,-]",
                           source="--extra-vars", field=key)
        out[key] = value
    return out


def resolve_playbook(name: str) -> Path:
    if not PLAYBOOK_RE.fullmatch(name):
        raise BadInput("not a playbook name or path", source="PLAYBOOK", field=repr(name))
    path = Path(name)
    if path.suffix not in (".yml", ".yaml"):
        path = repo_root() / "playbooks" / f"{name}.yml"
    if not path.is_file():
        raise BadInput("no such playbook", source="PLAYBOOK", field=str(path))
    return path


@app.command()
def play(
    playbook: Annotated[str, typer.Argument(help="Name in playbooks/ (e.g. kernel-update) "
                                                 "or a path.")],
    inventory: InventoryOpt,
    limit: LimitOpt = None,
    extra_vars: Annotated[list[str] | None, typer.Option(
        "--extra-vars", "-e", help="KEY=VALUE, repeatable.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run a playbook through ansible-runner; exit 1 if any host fails or is unreachable."""
    path = resolve_playbook(playbook)
    result = ansible.run(inventory=inventory, playbook=path, limit=limit,
                         extravars=parse_extra_vars(extra_vars or []))
    rows = {h: {"outcome": r.outcome, "task": r.task, "message": r.message}
            for h, r in sorted(result.hosts.items())}
    if as_json:
        print_json({"run_dir": str(result.run_dir), "status": result.status, "rc": result.rc,
                    "hosts": rows})
    else:
        table = Table("host", "outcome", "failed task", "message")
        for h, r in rows.items():
            colour = "green" if r["outcome"] in ("ok", "changed") else "red"
            table.add_row(esc(h), f"[{colour}]{r['outcome']}[/{colour}]", esc(r["task"]),
                          esc(r["message"]))
        console.print(table)
        if result.error:
            console.print(f"[red]run error:[/red] {esc(result.error)}")
        console.print(f"run artifacts: {result.run_dir}")
    if not result.ok or not rows:
        raise typer.Exit(1)
