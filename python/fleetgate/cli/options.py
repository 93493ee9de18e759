"""Options several commands share, so each reads the same way everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetgate.errors import BadInput
from fleetgate.site import current_site

InventoryOpt = Annotated[list[Path] | None, typer.Option(
    "--inventory", "-i", show_default=False,
    help="Ansible inventory source: INI, YAML, a directory with group_vars/, a script or a "
         "plugin config; repeatable. Default: the site's `inventory` (fleetgate.yml).")]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Ansible host pattern.")]


def inventory_sources(given: list[Path] | None) -> tuple[Path, ...]:
    """The -i sources, else the site's default inventory."""
    if given:
        return tuple(given)
    site = current_site()
    if site.inventory:
        return tuple(site.inventory)
    raise BadInput("no inventory: give -i, or set `inventory:` in fleetgate.yml",
                   source=site.file, field="inventory")
