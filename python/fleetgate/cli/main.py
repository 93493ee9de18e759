"""Entry point: `fleetgate`. Expected failures become one line on stderr and a distinct exit code.

Exit codes: 0 ok, 1 operation failed (e.g. a host unreachable), 2 bad input (nothing ran),
3 lab error, 4 inconclusive (smoke run, judge, diagnose), 5 a local tool (podman, mmdebstrap,
qemu...) missing or failed, 12 lease held by another controller, 70 internal error,
130 interrupted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
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
    site_cmd,
    smoke_cmd,
    spec_cmd,
)
from fleetgate.errors import FleetgateError
from fleetgate.revision import version_text
from fleetgate.site import SITE_ENV

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


@app.callback(epilog=(
    "Where things live: the site (node classes, plans, inventories; the nearest fleetgate.yml "
    "from the working directory up, or --site / FLEETGATE_SITE), its state (journal, leases, "
    "runs: FLEETGATE_STATE_DIR), images (FLEETGATE_IMAGES_DIR), classes "
    "(FLEETGATE_CLASSES_DIR), the lab (FLEETGATE_LAB_DIR) and fleetgate's own Ansible content "
    "(FLEETGATE_HOME). `fleetgate site` prints what each resolves to."))
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print the version and the git revision, and exit.")] = False,
    site: Annotated[Path | None, typer.Option(
        "--site", help="The site directory (holding fleetgate.yml); default: the nearest one "
                       "from the working directory up. Also FLEETGATE_SITE.",
        show_default=False)] = None,
) -> None:
    """Golden images, pinned GPU stacks and gated canary rollouts for GPU fleets."""
    if site is not None:
        # Through the environment, so the Ansible runs, workers and plugins it starts agree.
        os.environ[SITE_ENV] = str(site.resolve())


app.add_typer(spec_cmd.app, name="spec")
app.add_typer(lab_cmd.app, name="lab")
app.add_typer(fleet_cmd.app, name="fleet")
app.add_typer(smoke_cmd.app, name="smoke")
app.add_typer(image_cmd.app, name="image")
app.command("diagnose")(diagnose_cmd.diagnose_command)
app.add_typer(preflight_cmd.app, name="preflight")
app.add_typer(rollout_cmd.app, name="rollout")
app.command("judge")(judge_cmd.judge_command)
app.command("init")(site_cmd.init_command)
app.command("site")(site_cmd.site_command)


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
