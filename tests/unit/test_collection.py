"""The collection `fleetgate.fleet` ships every playbook of the checkout, and nothing in them
still names a role, module or playbook the way only the checkout can resolve it.

`ansible-playbook --syntax-check` is no proof here: it does not resolve a module named inside
a block's rescue, which is where kernel_update calls fleetgate_dkms. So the shipped YAML is
walked, and every reference checked against what the collection holds. Plain Ansible running
the collection's apply_class on a lab host is tests/integration/test_your_fleet.py."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

FQ = "fleetgate.fleet."
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("collection")
    built = subprocess.run([sys.executable, str(REPO / "scripts" / "build-collection.py"),
                            "--out", str(out)], capture_output=True, text=True, check=True,
                           stdin=subprocess.DEVNULL, timeout=120)
    tree = out / "tree"
    with tarfile.open(built.stdout.strip()) as tar:
        tar.extractall(tree)  # noqa: S202 - the tarball this fixture just built
    return tree


def tasks(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        if not any(k in node for k in ("hosts", "import_playbook",
                                       "ansible.builtin.import_playbook")):
            yield node
        for key in TASK_LISTS:
            yield from tasks(node.get(key))


def test_every_playbook_is_shipped_with_its_task_files(collection: Path) -> None:
    shipped = {p.name for p in (collection / "playbooks").glob("*.yml")}
    expected = {p.name.replace("-", "_") for p in (REPO / "playbooks").glob("*.yml")}
    assert shipped == expected and "kernel_update.yml" in shipped and "rollback.yml" in shipped
    assert {p.name for p in (collection / "playbooks" / "tasks").glob("*.yml")} == {
        p.name for p in (REPO / "playbooks" / "tasks").glob("*.yml")}


def test_every_role_module_and_playbook_is_named_by_fqcn_and_exists(collection: Path) -> None:
    roles = {p.name for p in (collection / "roles").iterdir()}
    modules = {p.stem for p in (collection / "plugins" / "modules").glob("*.py")}
    playbooks = {p.stem for p in (collection / "playbooks").glob("*.yml")}
    seen: dict[str, int] = {"role": 0, "module": 0, "playbook": 0, "tasks": 0, "hook": 0}
    for path in [*(collection / "playbooks").glob("*.yml"),
                 *(collection / "playbooks" / "tasks").glob("*.yml")]:
        doc = yaml.safe_load(path.read_text())
        for play in doc:
            # node.yml's hooks: role names its include_role templates in.
            for hook in ("fleetgate_roles_pre", "fleetgate_roles_post"):
                for r in (play.get("vars") or {}).get(hook) or []:
                    assert r.startswith(FQ) and r.removeprefix(FQ) in roles, f"{path}: {r}"
                    seen["hook"] += 1
            target = play.get("ansible.builtin.import_playbook")
            if target:
                assert target.removeprefix(FQ) in playbooks and target.startswith(FQ), path
                seen["playbook"] += 1
            for r in play.get("roles") or []:
                assert r["role"].startswith(FQ) and r["role"].removeprefix(FQ) in roles, path
                seen["role"] += 1
        for t in tasks(doc if isinstance(doc, list) else [doc]):
            for key, value in t.items():
                name = key.removeprefix(FQ)
                if name in modules:
                    assert key.startswith(FQ), f"{path.name}: module {key} without its FQCN"
                    seen["module"] += 1
                if key == "ansible.builtin.include_role" and "{{" not in value["name"]:
                    assert value["name"].startswith(FQ), f"{path.name}: role {value['name']}"
                    assert value["name"].removeprefix(FQ) in roles
                    seen["role"] += 1
                if key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
                    # A templated name (reimage.yml's provider) must name shipped files.
                    pattern = re.sub(r"\{\{[^}]*\}\}", "*", value)
                    assert list((collection / "playbooks").glob(pattern)), f"{path.name}: {value}"
                    seen["tasks"] += 1
    # The walk found what the checkout's playbooks use, so the assertions above ran.
    assert all(n > 0 for n in seen.values()), seen
