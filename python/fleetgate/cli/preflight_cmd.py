"""`fleetgate preflight`: checks on artifacts before they reach a pool.

`deps` catches vendor GPU binaries hidden in dependency graphs: a wheel that pulled CUDA
libraries into a pool without NVIDIA GPUs fails here, not at import time on the pool.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Column, Table

from fleetgate.cli import output as ui
from fleetgate.cli.options import InventoryOpt, inventory_sources
from fleetgate.preflight import load_table, scan_target
from fleetgate.preflight.model import Artifact, ScanResult
from fleetgate.preflight.warmup import parse_stack
from fleetgate.preflight.warmup import warmup as run_warmup

app = typer.Typer(help="Preflight checks on wheels, venvs and images before they reach a pool.",
                  no_args_is_help=True)

# Exit code of `deps` when an artifact needs a backend the pool does not have.
EXIT_VIOLATION = 1
# The target kinds where a clean artifact is still worth a row: the user named the wheels.
_LIST_CLEAN = ("wheel", "wheel-dir")


def _artifact_cell(a: Artifact) -> str:
    title = ui.esc(a.name if a.version is None else f"{a.name} {a.version}")
    # A wheel's file name carries its tags; a distribution's come from its WHEEL file.
    under = a.location if a.kind == "wheel" else ", ".join(a.platform_tags)
    return f"{title}\n[dim]{ui.esc(under)}[/dim]" if under else title


def _rows(a: Artifact, allowed: frozenset[str], strict: bool) -> list[tuple[str, str, str, str]]:
    grouped: dict[tuple[str, str, str, bool], list[str]] = defaultdict(list)
    for e in sorted(a.evidence):
        grouped[e.backend, e.evidence_class, e.detail, e.strong].append(e.file)
    rows = []
    for (backend, cls, detail, strong), files in grouped.items():
        bad = backend not in allowed and (strong or strict)
        colour = "red" if bad else ("yellow" if backend not in allowed else "green")
        more = f" (+{len(files) - 1} more)" if len(files) > 1 else ""
        rows.append((f"[{colour}]{ui.esc(backend)}[/{colour}]", ui.esc(cls), ui.esc(detail),
                     ui.esc(files[0]) + more))
    rows += [("[yellow]?[/yellow]", "unreadable", ui.esc(u.reason), ui.esc(u.file))
             for u in sorted(a.unreadable)]
    return rows or [("[green]-[/green]", "clean", "", "")]


def _render(result: ScanResult, backend: str, allowed: frozenset[str], strict: bool) -> None:
    bad = result.violating(allowed, strict=strict)
    shown = [a for a in result.artifacts if a.evidence or a.unreadable
             or result.target_kind in _LIST_CLEAN]
    shown.sort(key=lambda a: (a not in bad, a.name))
    if shown:
        # Paths and metadata lines are the evidence: wrap them whole rather than cut them.
        table = Table(Column("artifact", overflow="fold"), Column("backend", overflow="fold"),
                      Column("evidence", overflow="fold"), Column("detail", overflow="fold"),
                      Column("file", overflow="fold"))
        for a in shown:
            rows = _rows(a, allowed, strict)
            for i, row in enumerate(rows):
                table.add_row(_artifact_cell(a) if i == 0 else "", *row,
                              end_section=i == len(rows) - 1)
        ui.console.print(table)
    s = result.stats
    ui.console.print(f"{ui.esc(result.target)} ({result.target_kind}): {len(result.artifacts)} "
                     f"artifact(s), {s.files} files, {s.elf_files} ELF, "
                     f"{s.bytes / 1e6:.1f} MB in {result.wall_s:.1f}s")
    unreadable = sum(len(a.unreadable) for a in result.artifacts)
    if unreadable:
        ui.console.print(f"[yellow]{unreadable} file(s) could not be read; "
                         "their dependencies are unknown[/yellow]")
    if bad:
        names = "; ".join(f"{a.name} ({', '.join(sorted(a.violations(allowed, strict=strict)))})"
                          for a in bad)
        ui.console.print(f"[red]FAIL[/red]: {len(bad)} artifact(s) need a backend that --backend "
                         f"{ui.esc(backend)} does not have: {ui.esc(names)}")
    else:
        ui.console.print(f"[green]clean[/green] for --backend {ui.esc(backend)}")


@app.command()
@ui.documented([
    "fleetgate preflight deps dist/model.tar --backend nvidia",
    "fleetgate preflight deps ./wheelhouse --json",
], "0 every artifact runs on the pool, 1 one needs a backend the pool lacks, 2 bad input")
def deps(
    target: Annotated[Path, typer.Argument(
        help="A wheel, a directory of wheels, a venv or site-packages, a rootfs directory, "
             "or an image/rootfs tar (plain, gz, bz2, xz).")],
    backend: Annotated[str, typer.Option(
        "--backend", help="What the pool has: nvidia, amd, intel, cpu or none (cpu and none "
                          "allow no GPU vendor).")],
    tables: Annotated[list[Path] | None, typer.Option(
        "--table", help="Extra vendor table (YAML, same layout as the shipped one); "
                        "repeatable.")] = None,
    json_out: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Fail on weak evidence too (dlopen strings, optional extras).")
                      ] = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", min=1, max=64, help="Processes for a tree or a wheel directory "
                                            "(default: one per CPU, at most 8).")] = None,
) -> None:
    """Which GPU backends each artifact in TARGET needs, and the evidence. Exit 1 if any needs a
    backend that --backend does not have, 0 if clean, 2 for bad input."""
    out = ui.fmt(json_out, output)
    table = load_table(tables or [])
    allowed = table.allowed_vendors(backend)
    result = scan_target(target, table, jobs=jobs)
    if out is ui.Output.json:
        ui.print_json(result.to_json(backend, allowed, strict=strict))
    else:
        _render(result, backend, allowed, strict)
    if result.violating(allowed, strict=strict):
        raise typer.Exit(EXIT_VIOLATION)


WARMUP_COLOUR = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


@app.command()
@ui.documented([
    "fleetgate preflight warmup -i inventory.yml --limit lab-c01",
])
def warmup(
    inventory: InventoryOpt = None,
    node_class: Annotated[str | None, typer.Option(
        "--class", help="Only this node class (default: every class in the inventory).")
                          ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every host of the class, not one.")
                     ] = False,
    imports: Annotated[list[str] | None, typer.Option(
        "--import", help="Python module of the model stack, repeatable or comma-separated "
                         "(default: what the inference probe imports: numpy on cpu, torch on "
                         "GPUs).")] = None,
    json_out: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
) -> None:
    """Import the model stack and run a one-batch warm-up through the inference probe on one
    host per class; report cold start and success per class. Exit 0 all pass, 1 a class
    failed, 4 a class could not be measured, 2 bad input."""
    out = ui.fmt(json_out, output)
    result = run_warmup(inventory_sources(inventory), node_class=node_class, every=every,
                        stack=parse_stack(imports or []))
    if out is ui.Output.json:
        ui.print_json({"classes": [c.to_dict() for c in result.classes],
                       "run_dirs": result.run_dirs, "exit_code": result.exit_code})
    else:
        rows = []
        for c in result.classes:
            for h in c.hosts:
                failed = [i for i in h.imports if not i["ok"]]
                imported = (h.import_error if h.import_error else
                            f"{failed[0]['module']}: {failed[0]['error']}" if failed else
                            f"{len(h.imports)} module(s) in {h.import_s or 0:.2f}s")
                m = h.warmup.get("metrics", {})
                cold = f"{m['cold_start_s']:.2f}s" if "cold_start_s" in m else "-"
                p99 = f"{m['p99_ms']:.2f} ms" if "p99_ms" in m else "-"
                rows.append((c.name, h.host, cold, p99, h.outcome, imported))
        # The import column last: a failed import's error is free text, never padded or cut.
        ui.print_rows(("class", "host", "cold start", "warm-up p99", "outcome", "stack import"),
                      rows, out)
        for c in result.classes:
            colour = WARMUP_COLOUR[c.outcome]
            cold = f"{c.cold_start_s:.2f}s" if c.cold_start_s is not None else "unmeasured"
            ui.console.print(f"[{colour}]{ui.esc(c.name)}: {c.outcome}[/{colour}] "
                             f"(stack {ui.esc(','.join(c.stack) or 'none')}; cold start {cold})")
            for h in c.hosts:
                if h.outcome != "pass" and h.warmup.get("reason"):
                    ui.console.print(f"  {ui.esc(h.host)} warm-up: {ui.esc(h.warmup['reason'])}")
        ui.console.print(f"run artifacts: {ui.esc(' '.join(result.run_dirs))}")
    if result.exit_code:
        raise typer.Exit(result.exit_code)
