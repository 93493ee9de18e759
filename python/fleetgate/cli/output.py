"""Shared console helpers: rich tables for people, JSON for machines, full values when piped.

One output flag for every command that prints data: `-o/--output json|wide|table`, with
`--json` kept as its short form. A table on a terminal may fold long cells to fit; `wide`,
and any output that is not a terminal (a pipe, a CI log), prints every value in full on one
line per row, so an id, a version or a reason is never cut (`gh … | cat` behaves the same).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetgate.errors import BadInput

console = Console()


class Output(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"


JSON_HELP = "Print JSON (the same as -o json)."
OUTPUT_HELP = ("Output format: table (a terminal's width), wide (every value in full; the "
               "default when not on a terminal) or json.")
JsonFlag = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
OutputOpt = Annotated[Output | None, typer.Option("--output", "-o", help=OUTPUT_HELP,
                                                  case_sensitive=False, show_default=False)]

EXIT_CODES_COMMON = "0 ok, 1 the operation failed, 2 bad input (nothing ran), 130 interrupted"


def fmt(as_json: bool, output: Output | None) -> Output:
    """The one format a command prints in: --json and -o must not disagree."""
    if as_json and output not in (None, Output.json):
        raise BadInput("--json is -o json; give one of them", source="--output",
                       field=output.value if output else "")
    if as_json or output is Output.json:
        return Output.json
    if output is Output.wide or not console.is_terminal:
        return Output.wide
    return Output.table


def print_json(data: Any) -> None:
    # Plain print, not rich: machine output must not be wrapped or colourised.
    # allow_nan=False: NaN is not JSON; every reader downstream would choke on it.
    print(json.dumps(data, indent=2, sort_keys=True, default=str, allow_nan=False))


def esc(text: object) -> str:
    """Escape data for rich markup: Ansible messages and make.log lines contain [brackets]."""
    return escape(str(text))


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[object]], out: Output, *,
               title: str | None = None, styles: Sequence[str | None] | None = None) -> None:
    """A table: rich on a terminal; in `wide` plain aligned columns, nothing cut or wrapped.

    The last column is free text (a reason) and is never padded, so a long one stays on its
    line. `styles` are rich styles per column, used only on a terminal."""
    cells = [[one_line(c) for c in r] for r in rows]
    if out is Output.table:
        t = Table(*headers, title=title)
        for i, col in enumerate(t.columns):
            # Fold, never ellipsize: a terminal row may wrap but keeps every character.
            col.overflow = "fold"
            if styles and i < len(styles) and styles[i]:
                col.style = styles[i] or ""
        for r in cells:
            t.add_row(*(esc(c) for c in r))
        console.print(t)
        return
    if title:
        print(title)
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    for r in [list(headers), *cells]:
        padded = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + r[-1:]
        print("  ".join(padded).rstrip())
    sys.stdout.flush()


def _prose(text: str) -> str:
    """Paragraphs joined into single lines: the help renderer wraps them at the terminal,
    so a line break written in the source never splits a sentence on screen."""
    import inspect

    paras = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paras if p.strip())


F = TypeVar("F", bound=Callable[..., Any])


def documented(examples: Sequence[str], exit_codes: str = EXIT_CODES_COMMON
               ) -> Callable[[F], F]:
    """Give a command's help an Examples section and its exit codes (gh does the same)."""
    def wrap(fn: F) -> F:
        ex = "\n".join(f"  $ {e}" for e in examples)
        fn.__doc__ = (f"{_prose(fn.__doc__ or '')}\n\nExamples:\n{ex}\n\n"
                      f"Exit codes: {exit_codes}.")
        return fn
    return wrap
