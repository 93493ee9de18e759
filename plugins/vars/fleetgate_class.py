"""Ansible vars plugin: a host's node class becomes its pinned versions.

A group named `class_<name>` (dashes as underscores) or a host var `fleetgate_class` selects
the class; the plugin loads inventory/classes/<name>.yml through fleetgate's own validator
(schema + compatibility matrix) and returns `fleetgate spec vars CLASS --for ansible`. Roles
read only these variables, so no version is ever written twice.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: fleetgate_class
    short_description: Pinned versions from fleetgate node classes
    description:
      - Loads the node class of each host or class group and returns its derived variables.
    options:
      stage:
        ini:
          - key: stage
            section: vars_fleetgate_class
        env:
          - name: ANSIBLE_VARS_PLUGIN_STAGE
"""

import os
import re
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.inventory.group import Group
from ansible.inventory.host import Host
from ansible.plugins.vars import BaseVarsPlugin

try:
    from fleetgate.errors import FleetgateError
    from fleetgate.site import current_site
    from fleetgate.spec.derive import ansible_vars
    from fleetgate.spec.loader import load_class
    from fleetgate.spec.schema import CLASS_NAME_RE
except ImportError as exc:  # pragma: no cover - depends on the controller's environment
    raise AnsibleError(f"fleetgate_class vars plugin needs the fleetgate package: {exc}") from exc

_CACHE: dict[tuple[str, float], dict[str, Any]] = {}


def _classes_dir() -> Path:
    # A rollout of a new class version points one run at that version's directory.
    override = os.environ.get("FLEETGATE_CLASSES_DIR")
    if override:
        return Path(override)
    try:  # plain ansible-playbook: the site around the working directory (or FLEETGATE_SITE)
        return current_site().classes_dir
    except FleetgateError as exc:
        raise AnsibleError(f"fleetgate_class vars plugin: {exc.one_line()}") from None


def _check_name(name: str, who: str) -> None:
    # The name becomes a path: only a class name may (no '/', no '..'), so no class file
    # outside the classes directory is ever read.
    if not re.fullmatch(CLASS_NAME_RE, name):
        raise AnsibleError(f"{who}: fleetgate_class {name!r} is not a node class name "
                           f"({CLASS_NAME_RE})")


class VarsModule(BaseVarsPlugin):
    REQUIRES_ENABLED = True

    def get_vars(self, loader: Any, path: str, entities: Any, cache: bool = True) -> dict[str, Any]:
        super().get_vars(loader, path, entities)
        if not isinstance(entities, list):
            entities = [entities]
        out: dict[str, Any] = {}
        for entity in entities:
            name, who = None, ""
            if isinstance(entity, Group) and "fleetgate_class" in entity.vars:
                # A group's own fleetgate_class ([all:vars], group_vars) names no file here,
                # but reaches any host no class group overrides it for: a name, or refused.
                _check_name(str(entity.vars["fleetgate_class"]), f"group {entity.name}")
            if isinstance(entity, Group) and entity.name.startswith("class_"):
                name, who = entity.name.removeprefix("class_").replace("_", "-"), "group"
            elif isinstance(entity, Host):
                name, who = entity.vars.get("fleetgate_class"), "host"
            if name:
                out.update(self._load(str(name), f"{who} {entity.name}"))
        return out

    def _load(self, name: str, who: str) -> dict[str, Any]:
        _check_name(name, who)
        path = _classes_dir() / f"{name}.yml"
        if not path.exists():
            raise AnsibleError(f"{who}: {path}: no node class named {name!r}")
        key = (str(path), path.stat().st_mtime)
        if key not in _CACHE:
            try:
                _CACHE[key] = ansible_vars(load_class(path))
            except FleetgateError as exc:
                raise AnsibleError(exc.one_line()) from None
        return dict(_CACHE[key])
