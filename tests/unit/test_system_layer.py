"""The neutral system layer: its errors, its recipes, and the import boundaries it exists for."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from fleetgate.errors import LabError, ToolError
from fleetgate.image.base import base_recipe
from fleetgate.spec.loader import load_class
from fleetgate.system.procs import require_tool, run
from fleetgate.system.recipes import base_ref, container_recipe, vm_recipe
from tests.conftest import REPO

PKG = REPO / "python" / "fleetgate"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, `from fleetgate import lab` counted as fleetgate.lab."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize(("package", "forbidden"), [
    ("image", ("fleetgate.lab",)),
    ("rollout", ("fleetgate.lab", "fleetgate.image")),
    ("lab", ("fleetgate.image",)),
    ("system", ("fleetgate.lab", "fleetgate.image", "fleetgate.rollout")),
])
def test_layer_imports(package: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(f"{f.relative_to(PKG)}: {name}" for f in (PKG / package).rglob("*.py")
                 for name in _imports(f)
                 if any(name == p or name.startswith(p + ".") for p in forbidden))
    assert bad == []


def test_tool_failures_are_tool_errors_not_lab_errors() -> None:
    with pytest.raises(ToolError) as exc:
        run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(5)"])
    assert not isinstance(exc.value, LabError)
    assert exc.value.exit_code == 5 and "exit 5: boom" in str(exc.value)
    with pytest.raises(ToolError, match="timed out after 1s"):
        run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=1)
    with pytest.raises(ToolError, match="install the Debian package nope-pkg"):
        require_tool("fleetgate-no-such-tool", "nope-pkg")
    assert run([sys.executable, "-c", "print('ok')"]).stdout == "ok\n"


def test_image_base_is_the_lab_base_without_kernel() -> None:
    cpu = load_class(REPO / "inventory" / "classes" / "lab-cpu.yml")
    vm = load_class(REPO / "inventory" / "classes" / "lab-vm.yml")
    assert base_recipe(cpu) == container_recipe(cpu, with_kernel=False)
    assert base_recipe(vm) == vm_recipe(vm, with_kernel=False)
    kernel = f"linux-image-{vm.kernel.abi}={vm.kernel.package_version}"
    assert kernel in vm_recipe(vm).packages and kernel not in base_recipe(vm).packages
    assert base_ref(base_recipe(cpu)) != base_ref(container_recipe(cpu))
