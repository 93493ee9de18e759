"""options.shared: a set of options declared once and taken by several commands (fleet hosts,
ping, facts, drift; rollout start, resume), after each command's own, built and checked before
the command's body runs."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from fleetgate.cli.options import shared


def _build(seen: list[str]) -> Callable[..., tuple[int, str]]:
    def build(level: Annotated[int, typer.Option(help="A level.")] = 1,
              tag: Annotated[str, typer.Option("--tag", "-t")] = "x") -> tuple[int, str]:
        seen.append("build")
        if level < 0:
            raise typer.BadParameter("negative", param_hint="--level")
        return level, tag
    return build


def test_the_command_takes_its_own_parameters_then_the_shared_ones() -> None:
    seen: list[str] = []

    @shared("opts", _build(seen))
    def cmd(name: Annotated[str, typer.Argument()], flag: bool = False, *,
            opts: tuple[int, str]) -> tuple[str, bool, tuple[int, str]]:
        seen.append("cmd")
        return name, flag, opts

    assert list(inspect.signature(cmd).parameters) == ["name", "flag", "level", "tag"]
    assert cmd.__name__ == "cmd"
    # Called directly, as tests call commands: positionals, keywords and defaults.
    assert cmd("n", True, tag="y") == ("n", True, (1, "y"))
    assert seen == ["build", "cmd"]
    with pytest.raises(TypeError):
        cmd("n", opts=(1, "x"))  # not a parameter of the command as typer sees it


def test_typer_reads_the_merged_signature_and_builds_before_the_body() -> None:
    seen: list[str] = []
    app = typer.Typer()

    @app.command()
    @shared("opts", _build(seen))
    def cmd(name: str, *, opts: tuple[int, str]) -> None:
        """Say what was given."""
        seen.append("cmd")
        print(name, *opts)

    runner = CliRunner()
    got = runner.invoke(app, ["n", "--level", "3", "-t", "z"])
    assert got.exit_code == 0 and got.output == "n 3 z\n", got.output
    assert seen == ["build", "cmd"]
    seen.clear()
    bad = runner.invoke(app, ["n", "--level", "-1"])
    assert bad.exit_code == 2 and "negative" in bad.output and seen == ["build"]
    helped = runner.invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert "Say what was given." in helped.output
    assert helped.output.index("--level") < helped.output.index("--tag")
