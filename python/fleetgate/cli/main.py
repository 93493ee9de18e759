"""Entry point: `fleetgate`. Expected failures become one line on stderr and a distinct exit code.

Exit codes: 0 ok, 1 operation failed (e.g. a host unreachable), 2 bad input (nothing ran),
3 lab error, 4 inconclusive (smoke run, judge, diagnose), 5 a local tool (podman, mmdebstrap,
qemu...) missing or failed, 12 lease held by another controller, 70 internal error,
130 interrupted.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import click
import typer

from fleetgate.errors import FleetgateError
from fleetgate.revision import version_text

# Command name -> (module under fleetgate.cli, attribute, a command group or one command).
# Only the command being run is imported: importing every command module (pydantic models,
# numpy, the rollout engine) took about 1 s of each call's start-up, and tests, scripts and CI
# steps call fleetgate thousands of times. `fleetgate --help` still imports them all.
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "spec": ("spec_cmd", "app", True),
    "lab": ("lab_cmd", "app", True),
    "fleet": ("fleet_cmd", "app", True),
    "smoke": ("smoke_cmd", "app", True),
    "image": ("image_cmd", "app", True),
    "diagnose": ("diagnose_cmd", "diagnose_command", False),
    "preflight": ("preflight_cmd", "app", True),
    "rollout": ("rollout_cmd", "app", True),
    "judge": ("judge_cmd", "judge_command", False),
    "init": ("site_cmd", "init_command", False),
    "site": ("site_cmd", "site_command", False),
}


def _version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


EPILOG = (
    "Where things live: the site (node classes, plans, inventories; the nearest fleetgate.yml "
    "from the working directory up, or --site / FLEETGATE_SITE), its state (journal, leases, "
    "runs: FLEETGATE_STATE_DIR), images (FLEETGATE_IMAGES_DIR), classes "
    "(FLEETGATE_CLASSES_DIR), the lab (FLEETGATE_LAB_DIR) and fleetgate's own Ansible content "
    "(FLEETGATE_HOME). `fleetgate site` prints what each resolves to.")


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
        from fleetgate.site import SITE_ENV  # here: the site's models cost start-up

        # Through the environment, so the Ansible runs, workers and plugins it starts agree.
        os.environ[SITE_ENV] = str(site.resolve())


def build(names: Sequence[str] = tuple(COMMANDS)) -> typer.Typer:
    """The `fleetgate` app with the named commands (default: all) registered."""
    app = typer.Typer(
        name="fleetgate",
        help="Golden images, pinned GPU stacks and gated canary rollouts for GPU fleets.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    app.callback(epilog=EPILOG)(_root)
    for name in names:
        module, attr, group = COMMANDS[name]
        obj = getattr(importlib.import_module(f"fleetgate.cli.{module}"), attr)
        if group:
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)
    return app


def commands_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The commands an argument list needs registered: the first word after the root options
    if it is one of COMMANDS, none for `--version`, and every one otherwise (`--help`, no
    command, an unknown one: the listing and the error name them all)."""
    it = iter(argv)
    for arg in it:
        if arg == "--site":
            next(it, None)
        elif arg.startswith("--site="):
            continue
        elif arg == "--version":
            return ()
        elif arg.startswith("-"):
            break
        else:
            return (arg,) if arg in COMMANDS else tuple(COMMANDS)
    return tuple(COMMANDS)


def main() -> None:
    try:
        rc = build(commands_for(sys.argv[1:]))(standalone_mode=False)
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
