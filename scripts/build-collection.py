#!/usr/bin/env python3
"""Build fleetgate's Ansible content as the collection `fleetgate.fleet`.

The checkout keeps its content where fleetgate, Molecule and Packer use it (roles/, playbooks/,
plugins/); this lays those same files out as a collection tree and runs
`ansible-galaxy collection build` on it:

  roles/              every role, symlinks resolved (role-local library/ and module_utils/
                      stay, so the roles work as they do in the checkout)
  plugins/modules/    every fleetgate module, so `fleetgate.fleet.fleetgate_dkms` works by
                      FQCN from any playbook; their `ansible.module_utils.fleetgate_*` imports
                      become the collection's own module_utils
  plugins/module_utils/, plugins/vars/  as in the checkout (imports likewise)
  playbooks/          every playbook (kernel_update.yml, rollback.yml, drain.yml, ...: a
                      collection playbook's name is an identifier, so - becomes _), with
                      their tasks/; roles, modules and imported playbooks by FQCN, so
                      `ansible-playbook fleetgate.fleet.kernel_update` runs from anywhere

The vars plugin imports the fleetgate package, so the controller needs fleetgate installed
(`pip install fleetgate`) and
`vars_plugins_enabled = host_group_vars,fleetgate.fleet.fleetgate_class`.

Usage: scripts/build-collection.py [--out DIR]   (prints the tarball's path)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMESPACE, NAME = "fleetgate", "fleet"
FQ = f"{NAMESPACE}.{NAME}"
MODULE_UTILS_IMPORT = re.compile(r"\bansible\.module_utils\.(fleetgate_\w+)")
ROLE_LINE = re.compile(r"^(\s*- role: )(\w+)\s*$", re.M)
# `include_role:` then its `name:` on the next line.
INCLUDE_ROLE = re.compile(r"^(\s*ansible\.builtin\.include_role:\n\s+name: )(\w+)\s*$", re.M)
# node.yml's hooks, e.g. golden.yml's `fleetgate_roles_post: [sysprep]`.
ROLE_HOOK = re.compile(r"^(\s*fleetgate_roles_(?:pre|post): \[)([\w, ]*)\]\s*$", re.M)
IMPORT_PLAYBOOK = re.compile(r"^(\s*ansible\.builtin\.import_playbook: )([\w-]+)\.yml\s*$", re.M)


def galaxy_yml(version: str) -> str:
    roles = ", ".join(sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir()))
    return f"""\
namespace: {NAMESPACE}
name: {NAME}
version: {version}
readme: README.md
authors: [fleetgate]
description: >-
  Node classes for GPU fleets: kernel pinning, DKMS, GPU drivers, container runtimes, smoke
  probes and node manifests ({roles}).
license: [Apache-2.0]
tags: [gpu, kernel, dkms, nvidia, rocm, infrastructure]
repository: https://example.invalid/fleetgate
build_ignore: []
"""


def _collection_imports(path: Path) -> str:
    """The file with its fleetgate module_utils imported from the collection, as AnsiballZ
    looks them up for a collection's modules (module_utils import each other too)."""
    return MODULE_UTILS_IMPORT.sub(
        rf"ansible_collections.{NAMESPACE}.{NAME}.plugins.module_utils.\1", path.read_text())


def assemble(tree: Path, version: str) -> None:
    for d in ("roles", "plugins/modules", "plugins/module_utils", "plugins/vars", "playbooks",
              "meta"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    for role in sorted((REPO / "roles").iterdir()):
        if role.is_dir():
            shutil.copytree(role, tree / "roles" / role.name, symlinks=False)
    for util in sorted((REPO / "plugins" / "module_utils").glob("*.py")):
        # The parsers go to hosts byte for byte (the probes' version is their hash) and import
        # nothing of fleetgate's, so they are copied as they are.
        text = (util.read_text() if util.name == "fleetgate_parsers.py"
                else _collection_imports(util))
        (tree / "plugins" / "module_utils" / util.name).write_text(text)
    # A collection's vars plugin is enabled by name only; REQUIRES_ENABLED draws a warning.
    vars_plugin = (REPO / "plugins" / "vars" / "fleetgate_class.py").read_text()
    (tree / "plugins" / "vars" / "fleetgate_class.py").write_text(
        vars_plugin.replace("    REQUIRES_ENABLED = True\n", ""))
    modules = [*(REPO / "roles").glob("*/library/*.py"), *(REPO / "playbooks" / "library").glob(
        "*.py")]
    for mod in sorted(modules):
        (tree / "plugins" / "modules" / mod.name).write_text(_collection_imports(mod))
    # A task's module name is its key: `fleetgate_dkms:` at the start of a line.
    module_key = re.compile(rf"^(\s*)({'|'.join(sorted(m.stem for m in modules))}):", re.M)

    def fqcn(text: str) -> str:
        text = ROLE_LINE.sub(rf"\g<1>{FQ}.\g<2>", text)
        text = INCLUDE_ROLE.sub(rf"\g<1>{FQ}.\g<2>", text)
        text = ROLE_HOOK.sub(lambda m: m[1] + ", ".join(
            f"{FQ}.{r.strip()}" for r in m[2].split(",") if r.strip()) + "]", text)
        text = IMPORT_PLAYBOOK.sub(lambda m: f"{m[1]}{FQ}.{m[2].replace('-', '_')}", text)
        return module_key.sub(rf"\g<1>{FQ}.\g<2>:", text)

    (tree / "playbooks" / "tasks").mkdir()
    for src in sorted((REPO / "playbooks").glob("*.yml")):
        (tree / "playbooks" / src.name.replace("-", "_")).write_text(fqcn(src.read_text()))
    for src in sorted((REPO / "playbooks" / "tasks").glob("*.yml")):
        (tree / "playbooks" / "tasks" / src.name).write_text(fqcn(src.read_text()))
    (tree / "meta" / "runtime.yml").write_text('---\nrequires_ansible: ">=2.19"\n')
    (tree / "galaxy.yml").write_text(galaxy_yml(version))
    (tree / "README.md").write_text(
        f"# {FQ}\n\nfleetgate's Ansible content as a collection; see fleetgate's README "
        "(\"Your fleet\"). Enable the vars plugin with\n`vars_plugins_enabled = "
        f"host_group_vars,{FQ}.fleetgate_class` and install the fleetgate Python package on "
        "the controller.\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "dist")
    args = ap.parse_args()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "collection"
        assemble(tree, version)
        args.out.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([str(galaxy if galaxy.exists() else "ansible-galaxy"),
                               "collection", "build", str(tree), "--output-path",
                               str(args.out), "--force"],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"build-collection: ansible-galaxy failed: {proc.stderr.strip()}",
                  file=sys.stderr)
            return 1
    tarball = args.out / f"{NAMESPACE}-{NAME}-{version}.tar.gz"
    print(tarball)
    return 0


if __name__ == "__main__":
    sys.exit(main())
