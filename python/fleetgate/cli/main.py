"""Entry point: `fleetgate`. Expected failures become one line on stderr and a distinct exit code.

Exit codes: 0 ok, 1 operation failed (e.g. a host unreachable), 2 bad input (nothing ran),
3 lab error, 4 inconclusive (smoke run, judge, diagnose), 5 a local tool (podman, mmdebstrap,
qemu...) missing or failed, 12 lease held by another controller, 70 internal error,
130 interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import click
import typer

from fleetgate.cli import (
    diagnose_cmd,
    fleet_cmd,
    image_cmd,
    judge_cmd,
    lab_cmd,
    preflight_cmd,
    rollout_cmd,
    smoke_cmd,
    spec_cmd,
)
from fleetgate.errors import FleetgateError
from fleetgate.revision import version_text

app = typer.Typer(
    name="fleetgate",
    help="Golden images, pinned GPU stacks and gated canary rollouts for GPU fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and the git revision, and exit.")] = False,
) -> None:
    """Golden images, pinned GPU stacks and gated canary rollouts for GPU fleets."""


app.add_typer(spec_cmd.app, name="spec")
app.add_typer(lab_cmd.app, name="lab")
app.add_typer(fleet_cmd.app, name="fleet")
app.add_typer(smoke_cmd.app, name="smoke")
app.add_typer(image_cmd.app, name="image")
app.command("diagnose")(diagnose_cmd.diagnose_command)
app.add_typer(preflight_cmd.app, name="preflight")
app.add_typer(rollout_cmd.app, name="rollout")
app.command("judge")(judge_cmd.judge_command)


def main() -> None:
    try:
        rc = app(standalone_mode=False)
    except FleetgateError as exc:
        print(f"fleetgate: {exc.one_line()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "fleetgate"
        print(f"{where}: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as exc:
        print(f"fleetgate: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        print("fleetgate: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("FLEETGATE_DEBUG"):
            raise
        print(f"fleetgate: internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"
              " (set FLEETGATE_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(70)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
