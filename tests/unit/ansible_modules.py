"""Import fleetgate's Ansible modules in a unit test, as AnsiballZ would run them: the shared
host code of plugins/module_utils under ansible.module_utils.NAME, then the module file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
# Dependency order: hostpkg imports the two others.
SHARED = ("fleetgate_hostcmd", "fleetgate_parsers", "fleetgate_hostpkg")


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def module_utils(name: str) -> ModuleType:
    for shared in SHARED:
        full = f"ansible.module_utils.{shared}"
        if full not in sys.modules:
            _load(full, MODULE_UTILS / f"{shared}.py")
    return sys.modules[f"ansible.module_utils.{name}"]


def ansible_module(relpath: str) -> ModuleType:
    """A module file (e.g. roles/node_manifest/library/fleetgate_manifest.py), imported."""
    module_utils("fleetgate_hostcmd")
    path = REPO / relpath
    return _load(f"fleetgate_test_{path.stem}", path)
