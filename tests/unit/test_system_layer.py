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


# The rollout controller reads the image store (an image change pins a built image) but never
# builds: the store's own modules are its only way into image/.
IMAGE_STORE_READ = ("fleetgate.image.store", "fleetgate.image.naming", "fleetgate.image.manifest")


@pytest.mark.parametrize(("package", "forbidden", "allowed"), [
    ("image", ("fleetgate.lab",), ()),
    ("rollout", ("fleetgate.lab", "fleetgate.image"), IMAGE_STORE_READ),
    ("lab", ("fleetgate.image",), ()),
    ("system", ("fleetgate.lab", "fleetgate.image", "fleetgate.rollout"), ()),
])
def test_layer_imports(package: str, forbidden: tuple[str, ...],
                       allowed: tuple[str, ...]) -> None:
    def hit(name: str, prefixes: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    bad = sorted(f"{f.relative_to(PKG)}: {name}" for f in (PKG / package).rglob("*.py")
                 for name in _imports(f) if hit(name, forbidden) and not hit(name, allowed)
                 and name != "fleetgate.image")  # `from fleetgate.image import store`
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


def test_tool_log_keeps_each_command_and_its_whole_output_privately(tmp_path: Path) -> None:
    from fleetgate.system import procs

    log = tmp_path / "state" / "up.log"
    procs.run(["true"])  # outside the context: not logged anywhere
    with procs.log_to(log):
        procs.run(["sh", "-c", "echo apt says hello; echo and warns >&2"])
        procs.run(["sh", "-c", "exit 3"], check=False)
    procs.run(["echo", "after"])
    text = log.read_text()
    assert text.splitlines()[0].startswith(
        "$ sh -c 'echo apt says hello; echo and warns >&2'  # exit 0, ")
    assert "apt says hello\nand warns\n" in text
    assert "$ sh -c 'exit 3'  # exit 3, " in text
    assert "after" not in text and "$ true" not in text
    assert oct(log.stat().st_mode & 0o777) == "0o600"
