"""Every role documents exactly the variables it has: meta/argument_specs.yml's defaults are
the real ones from defaults/main.yml, and its README lists every variable.

Read as data, with no Ansible run, so a default changed in one file and not the other fails
here first."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) or {}


def _options(role: Path) -> dict[str, dict[str, Any]]:
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
    return specs["main"]["options"]  # type: ignore[no-any-return]


def test_every_role_is_here() -> None:
    # The roles the playbooks import, plus apt_cache, which they include; an empty glob
    # would make every test below pass vacuously.
    assert {p.name for p in ROLES} >= {
        "apt_cache", "container_runtime", "dkms_modules", "gpu_driver", "kernel_pin",
        "node_manifest", "smoke_probes", "sysprep", "userland"}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_documented_with_its_real_value(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml")
    options = _options(role)
    undocumented = sorted(set(defaults) - set(options))
    assert not undocumented, f"{role.name}: not in argument_specs: {undocumented}"
    for name, value in defaults.items():
        spec = options[name]
        assert "default" in spec, f"{role.name}: {name} has a default the spec does not show"
        assert spec["default"] == value, (
            f"{role.name}: {name}: argument_specs says {spec['default']!r}, "
            f"defaults/main.yml has {value!r}")


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_no_documented_default_is_invented(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml")
    for name, spec in _options(role).items():
        if "default" in spec:
            assert name in defaults, f"{role.name}: {name}: documented default, none in defaults"
        else:
            # Without a default the caller must pass it; Ansible refuses both together.
            assert spec.get("required") is True, f"{role.name}: {name}: no default, not required"
        assert not (spec.get("required") and "default" in spec), f"{role.name}: {name}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_readme_lists_every_variable(role: Path) -> None:
    readme = role / "README.md"
    assert readme.is_file(), f"{role.name} has no README.md"
    text = readme.read_text()
    for heading in ("Requirements", "Role Variables", "Dependencies", "Example Playbook",
                    "Testing"):
        assert re.search(rf"^## {heading}\s*$", text, re.M), f"{role.name}: no '## {heading}'"
    section = text.split("## Role Variables", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in _options(role) if f"`{name}`" not in section]
    assert not missing, f"{role.name}: README's Role Variables misses {missing}"
