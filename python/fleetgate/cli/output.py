"""Shared console helpers: rich tables for people, JSON for machines."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console()


def print_json(data: Any) -> None:
    # Plain print, not rich: machine output must not be wrapped or colourised.
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def esc(text: object) -> str:
    """Escape data for rich markup: Ansible messages and make.log lines contain [brackets]."""
    return escape(str(text))
