"""Hosts as Ansible resolves them: the one place fleetgate reads an inventory.

Every command reads hosts through `resolve_inventory()`, which asks Ansible itself
(`ansible-inventory --list`), so whatever Ansible accepts works here too: INI, YAML, a
directory with group_vars/host_vars, an executable script, an inventory plugin's config,
several sources at once. An answer is kept for the rest of the process, keyed by the
sources' files and the limit, so one command asks once however many runs it makes; an edited
file is asked about again. A source Ansible cannot parse is bad input (one line, exit 2),
not a warning followed by a run against fewer hosts than the operator meant.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.spec.loader import repo_root

# Host names reach command lines (--limit, --hosts=ansible://HOST) and file names.
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
LIMIT_RE = re.compile(r"^[A-Za-z0-9_.:*,!&\[\]-]{1,500}$")
RESOLVE_TIMEOUT_S = 120

Sources = Path | Sequence[Path]


def plain_ansible_json(obj: Any) -> Any:
    """ansible-inventory --list (ansible-core 2.19) wraps untrusted strings, such as a vars
    plugin's values, as {"__ansible_unsafe": "..."}; callers want plain data."""
    if isinstance(obj, dict):
        if len(obj) == 1 and ("__ansible_unsafe" in obj or "__ansible_vault" in obj):
            return next(iter(obj.values()))
        return {k: plain_ansible_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain_ansible_json(v) for v in obj]
    return obj


@dataclass(frozen=True)
class Inventory:
    """One resolution: the sources as given (absolute), the limit, Ansible's answer."""

    sources: tuple[Path, ...]
    limit: str | None
    doc: Mapping[str, Any]

    @property
    def label(self) -> str:
        """The sources as one string, for messages and records."""
        return ",".join(str(p) for p in self.sources)

    @property
    def hostvars(self) -> dict[str, dict[str, Any]]:
        """Every host -> its variables (vars plugins included), sorted by host. `_meta`
        leaves out a host that has no variables at all; group membership still names it."""
        hv = self.doc.get("_meta", {}).get("hostvars", {})
        names = set(hv) | set(self.groups_of())
        return {h: dict(hv.get(h) or {}) for h in sorted(names)}

    @property
    def hosts(self) -> list[str]:
        return list(self.hostvars)

    def groups_of(self) -> dict[str, list[str]]:
        """Host -> every group it is in, directly or through children (sorted)."""
        out: dict[str, set[str]] = {}
        for group in self.doc:
            if group != "_meta":
                for h in self._members(group, set()):
                    out.setdefault(h, set()).add(group)
        return {h: sorted(g) for h, g in out.items()}

    def _members(self, group: str, seen: set[str]) -> set[str]:
        if group in seen:
            return set()
        seen.add(group)
        entry = self.doc.get(group) or {}
        found = set(entry.get("hosts") or [])
        for child in entry.get("children") or []:
            found |= self._members(child, seen)
        return found

    def runner_sources(self) -> list[str]:
        """What ansible-runner's `inventory` takes: each source, as `-i` would."""
        return [str(p) for p in self.sources]

    def single_source(self, workdir: Path) -> Path:
        """One source for tools that take only one (testinfra's --ansible-inventory): the
        source itself, or for several an inventory script in `workdir` that answers with
        this resolution."""
        if len(self.sources) == 1:
            return self.sources[0]
        data = workdir / "inventory.json"
        data.write_text(json.dumps(self.doc))
        script = workdir / "inventory.py"
        script.write_text(f"#!{sys.executable}\nimport sys\n"
                          f"sys.stdout.write(open({str(data)!r}).read())\n")
        script.chmod(0o755)
        return script


def ansible_env() -> dict[str, str]:
    """The environment for Ansible's own command-line tools run from this checkout."""
    bindir = str(Path(sys.executable).parent)
    root = repo_root()
    return {**os.environ,
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "FLEETGATE_HOME": str(root),
            "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_NOCOLOR": "1",
            "PYTHONDONTWRITEBYTECODE": "1"}


def validate_limit(limit: str | None) -> str | None:
    if limit is None:
        return None
    if not LIMIT_RE.fullmatch(limit):
        raise BadInput("host pattern has characters outside [A-Za-z0-9_.:*,!&[]-]",
                       source="--limit", field=repr(limit))
    return limit


def source_paths(inventory: Sources) -> tuple[Path, ...]:
    paths = (inventory,) if isinstance(inventory, Path) else tuple(inventory)
    if not paths:
        raise BadInput("no inventory given", source="--inventory")
    for p in paths:
        if not p.exists():
            raise BadInput("no such file or directory", source=str(p))
        if not (p.is_file() or p.is_dir()):
            raise BadInput("not a regular file or directory", source=str(p))
        if not os.access(p, os.R_OK):
            raise BadInput("not readable", source=str(p))
    return tuple(p.resolve() for p in paths)


_CACHE: dict[tuple[object, ...], Inventory] = {}


def _signature(paths: tuple[Path, ...]) -> tuple[object, ...]:
    out: list[object] = []
    for p in paths:
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
        for f in files:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(out)


def _ansible_error(text: str) -> str:
    """The line that says why: Ansible's [ERROR] line, else the last thing it printed."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR!"))]
    return (errors[0] if errors else " ".join(lines))[-300:] or "(no output)"


def resolve_inventory(inventory: Sources | Inventory, limit: str | None = None) -> Inventory:
    """Ansible's view of the inventory (within `limit`, a host pattern). Bad input: a source
    that is missing or does not parse, a host name that cannot safely reach a command."""
    if isinstance(inventory, Inventory):
        if inventory.limit == limit:
            return inventory
        inventory = inventory.sources
    paths = source_paths(inventory)
    limit = validate_limit(limit)
    label = ",".join(str(p) for p in paths)
    key = (paths, limit, _signature(paths))
    if key in _CACHE:
        return _CACHE[key]
    argv = [str(Path(sys.executable).parent / "ansible-inventory"), "--list"]
    for p in paths:
        argv += ["-i", str(p)]
    if limit:
        argv += ["--limit", limit]
    # Ansible only warns about a source it cannot parse and carries on without its hosts.
    env = {**ansible_env(), "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S,
                              env=env, check=False)
    except subprocess.TimeoutExpired:
        raise BadInput(f"ansible-inventory did not answer in {RESOLVE_TIMEOUT_S}s",
                       source=label) from None
    if proc.returncode != 0:
        raise BadInput(f"ansible-inventory failed: {_ansible_error(proc.stderr or proc.stdout)}",
                       source=label)
    try:
        doc = plain_ansible_json(json.loads(proc.stdout))
    except json.JSONDecodeError as exc:
        raise BadInput(f"ansible-inventory printed no JSON: {exc}", source=label) from None
    if not isinstance(doc, dict):
        raise BadInput("ansible-inventory printed no inventory", source=label)
    inv = Inventory(paths, limit, doc)
    for name in inv.hostvars:
        if not HOST_RE.fullmatch(name):
            raise BadInput("host name has characters outside [A-Za-z0-9_.-]", source=label,
                           field=f"hosts.{name!r}")
    _CACHE[key] = inv
    return inv
