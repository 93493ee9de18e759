"""`fleetgate init` scaffolds a site repository; `fleetgate site` shows where everything lives."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Annotated

import typer

from fleetgate.cli import output as ui
from fleetgate.errors import BadInput
from fleetgate.site import PATH_ENV, SITE_FILE, content_root, current_site, load_site
from fleetgate.spec.loader import load_class
from fleetgate.spec.schema import CLASS_NAME_RE

SITE_YAML = """\
# fleetgate site settings (`fleetgate site` prints what they resolve to). Paths are relative
# to this file's directory; classes, plans, playbooks and inventory must stay inside it.
fleetgate: 1
classes: classes          # node classes: one YAML file per class
plans: plans              # rollout plans
playbooks: [playbooks]    # site playbooks a plan may name, besides fleetgate's own
inventory: [inventory/hosts.ini]  # used when a command is given no -i
# State (journal, leases, runs) and images: keep them on a persistent path in CI, e.g.
#   state: /var/lib/fleetgate       (or FLEETGATE_STATE_DIR)
state: .fleetgate
images: .fleetgate/images
"""

HOSTS_INI = """\
# Any inventory Ansible reads works (INI, YAML, directories with group_vars/, scripts,
# plugins). fleetgate reads, per host:
#   fleetgate_class  the node class (or put the host in group class_<name>, dashes as _)
#   zone, rack       failure domains: waves spread over them, budgets can count per domain
#   pool_<name>      groups a plan's `waves.pools` takes hosts from, in order
#
# [class_h100_sxm]
# gpu-a01 ansible_host=10.0.0.11 zone=eu1-a rack=r01
# gpu-a02 ansible_host=10.0.0.12 zone=eu1-b rack=r02
#
# [pool_canary]
# gpu-a01
"""

README = """\
# fleetgate site

Node classes, rollout plans and inventories for this fleet, reviewed like any other
infrastructure code. fleetgate finds this site from any directory below it (`fleetgate.yml`),
or from `--site DIR` / `FLEETGATE_SITE`.

- `classes/`: one node class per file; `fleetgate spec validate` checks them against the
  compatibility matrix.
- `plans/`: rollout plans; `fleetgate rollout plan plans/X.yml` resolves one against the
  inventory and touches nothing.
- `inventory/`: the hosts. `fleetgate_class` (or group `class_<name>`) names a host's class.
- `.fleetgate/` (ignored by git): the rollout journal, leases and run logs. A CI job that
  runs rollouts must keep it on a persistent path: set `state:` in `fleetgate.yml` or
  `FLEETGATE_STATE_DIR`, or `resume` and the lease are lost with the runner.
"""

GITIGNORE = ".fleetgate/\n"


@ui.documented([
    "fleetgate init fleet-site",
    "fleetgate init fleet-site --class lab-cpu    # start from one of fleetgate's own classes",
    "cd fleet-site && fleetgate spec validate",
], "0 site written, 2 bad input (the directory already holds a site, or an unknown class; "
   "nothing written)")
def init_command(
    directory: Annotated[Path, typer.Argument(help="Where the site goes (made if missing).")],
    class_: Annotated[list[str] | None, typer.Option(
        "--class", help="Copy this class from fleetgate's own classes; repeatable.")] = None,
) -> None:
    """Scaffold a site repository: fleetgate.yml, classes/, plans/, playbooks/, inventory/, a
    README and a .gitignore for state."""
    if (directory / SITE_FILE).exists():
        raise BadInput(f"already a site ({SITE_FILE} exists); nothing written",
                       source=directory / SITE_FILE)
    if directory.exists() and not directory.is_dir():
        raise BadInput("not a directory", source=directory)
    sources: list[Path] = []
    bundled = content_root() / "inventory" / "classes"
    for name in class_ or []:
        if not re.fullmatch(CLASS_NAME_RE, name):
            raise BadInput(f"{name!r} is not a class name", source="--class")
        path = bundled / f"{name}.yml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in bundled.glob("*.yml")))
            raise BadInput(f"fleetgate has no class {name!r} (it has: {known})",
                           source="--class")
        load_class(path)
        sources.append(path)
    directory.mkdir(parents=True, exist_ok=True)
    for sub in ("classes", "plans", "playbooks", "inventory"):
        (directory / sub).mkdir(exist_ok=True)
    for rel, text in (("README.md", README), (".gitignore", GITIGNORE),
                      ("inventory/hosts.ini", HOSTS_INI)):
        if not (directory / rel).exists():
            (directory / rel).write_text(text)
    for path in sources:
        shutil.copyfile(path, directory / "classes" / path.name)
    # fleetgate.yml last: a directory that holds it is a complete site.
    (directory / SITE_FILE).write_text(SITE_YAML)
    load_site(directory)
    ui.console.print(f"init: site in {ui.esc(str(directory.resolve()))}"
                     + (f" with class(es) {', '.join(p.stem for p in sources)}" if sources else ""))


@ui.documented([
    "fleetgate site",
    "fleetgate --site /srv/fleet-site site -o json",
], "0 ok, 2 bad input (no site found, or a malformed fleetgate.yml)")
def site_command(as_json: ui.JsonFlag = False, output: ui.OutputOpt = None) -> None:
    """Show the site this command works in and where each of its paths resolves, with the
    environment variable that overrides each."""
    site = current_site()
    rows = {
        "site": (str(site.root), PATH_ENV["site"] + " / --site"),
        "content": (str(content_root()), PATH_ENV["content"]),
        "classes": (str(site.classes_dir), PATH_ENV["classes"]),
        "plans": (str(site.plans_dir), ""),
        "playbooks": (", ".join(map(str, site.playbook_dirs)), ""),
        "inventory": (", ".join(map(str, site.inventory)) or "(none)", ""),
        "state": (str(site.state_dir), PATH_ENV["state"]),
        "images": (str(site.images_dir), PATH_ENV["images"]),
        "lab": (str(site.lab_dir), PATH_ENV["lab"]),
    }
    if ui.fmt(as_json, output) is ui.Output.json:
        ui.print_json({k: {"path": v, "env": e, "overridden": bool(e and os.environ.get(
            e.split(" ")[0]))} for k, (v, e) in rows.items()})
        return
    width = max(map(len, rows))
    for key, (value, env) in rows.items():
        ui.console.print(f"{key:<{width}}  {ui.esc(value)}"
                         + (f"  [dim]({env})[/dim]" if env else ""), soft_wrap=True)
