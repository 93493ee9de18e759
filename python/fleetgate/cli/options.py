"""Options several commands share, so each reads the same way everywhere."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from fleetgate.errors import BadInput
from fleetgate.site import current_site

InventoryOpt = Annotated[list[Path] | None, typer.Option(
    "--inventory", "-i", show_default=False,
    help="Ansible inventory source: INI, YAML, a directory with group_vars/, a script or a "
         "plugin config; repeatable. Default: the site's `inventory` (fleetgate.yml).")]
LIMIT_HELP = ("Ansible host pattern: hosts, groups, globs, ',' or ':' lists, '!x' (not), '&x' "
              "(and), '~regex' (e.g. '~lab-c0[12]'). Quote it for the shell.")
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help=LIMIT_HELP)]


def inventory_sources(given: list[Path] | None) -> tuple[Path, ...]:
    """The -i sources, else the site's default inventory."""
    if given:
        return tuple(given)
    site = current_site()
    if site.inventory:
        return tuple(site.inventory)
    raise BadInput("no inventory: give -i, or set `inventory:` in fleetgate.yml",
                   source=site.file, field="inventory")


def finite(value: float | None) -> float | None:
    """click's FloatRange compares, and every comparison with NaN is false: `--heartbeat nan`
    would pass `min=1, max=60`. Float options take this callback so NaN and ±inf are refused."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


Command = Callable[..., Any]


def shared(name: str, build: Command) -> Callable[[Command], Command]:
    """A set of options several commands take, declared once, in `build`'s parameters.

    The command declares its own parameters and a keyword-only `name`; it gets `build`'s
    parameters after its own (in --help too, as typer reads the signature made here) and is
    called with `name=build(**those)`, so whatever `build` checks is checked before the
    command's body runs. Called directly (tests), it takes the same arguments."""
    options = inspect.signature(build, eval_str=True).parameters

    def wrap(command: Command) -> Command:
        own = inspect.signature(command, eval_str=True)
        merged = own.replace(parameters=[
            *(p for p in own.parameters.values() if p.name != name), *options.values()])

        @functools.wraps(command)
        def call(*args: Any, **kwargs: Any) -> Any:
            given = merged.bind(*args, **kwargs)
            given.apply_defaults()
            built = build(**{k: given.arguments.pop(k) for k in options})
            return command(**given.arguments, **{name: built})

        call.__signature__ = merged  # type: ignore[attr-defined]
        return call
    return wrap
