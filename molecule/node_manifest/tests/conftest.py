"""node_manifest suites: fixtures that read the manifest on the host and call the module with
the class's pins, as the role does. Fixtures only: test files never import this file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from testinfra.host import Host

from fleetgate.spec.derive import ansible_vars
from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass

MANIFEST = "/etc/fleetgate/manifest.json"
MODULE_UTILS = Path(__file__).resolve().parents[3] / "plugins" / "module_utils"


@pytest.fixture
def manifest(host: Host) -> dict[str, Any]:
    return json.loads(host.file(MANIFEST).content_string)  # type: ignore[no-any-return]


@pytest.fixture
def pinned_packages(node_class: NodeClass) -> dict[str, str | None]:
    """Driver and runtime packages the class pins, with the version each must have."""
    nc = node_class
    pins: dict[str, str | None] = dict.fromkeys(nc.driver.packages, nc.driver.version)
    if nc.runtime.engine != "none":
        pins[ENGINE_PACKAGES[nc.runtime.engine]] = nc.runtime.version
    if nc.runtime.gpu_toolkit != "none":
        pins[nc.runtime.gpu_toolkit] = nc.runtime.gpu_toolkit_version
    return pins


def module_args(nc: NodeClass, **overrides: Any) -> dict[str, Any]:
    """fleetgate_manifest arguments exactly as the role passes them for this class."""
    v = ansible_vars(nc)
    args: dict[str, Any] = {
        "class_name": v["fleetgate_class"],
        "kernel": {"abi": v["fleetgate_kernel_abi"],
                   "package_version": v["fleetgate_kernel_package_version"]},
        "driver": {"vendor": v["fleetgate_driver_vendor"], "branch": v["fleetgate_driver_branch"],
                   "version": v["fleetgate_driver_version"],
                   "flavour": v["fleetgate_driver_flavour"],
                   "packages": v["fleetgate_driver_packages"]},
        "dkms": v["fleetgate_dkms_modules"],
        "runtime": v["fleetgate_runtime"],
        "accelerator": v["fleetgate_accelerator"],
        "engine_packages": v["fleetgate_engine_packages"],
    }
    args.update(overrides)
    return args


@pytest.fixture
def run_module(host: Host, node_class: NodeClass,
               monkeypatch: pytest.MonkeyPatch) -> Callable[..., dict[str, Any]]:
    """Call fleetgate_manifest on the host with the class's pins and the given overrides."""
    # An ad-hoc call has no role around it, so the role's module_utils (fleetgate's shared host
    # code) is not on the search path, and Molecule's generated ansible.cfg does not name
    # plugins/module_utils.
    monkeypatch.setenv("ANSIBLE_MODULE_UTILS", str(MODULE_UTILS))

    def run(**overrides: Any) -> dict[str, Any]:
        args = json.dumps(module_args(node_class, **overrides))
        return host.ansible("fleetgate_manifest", args, check=False)  # type: ignore[no-any-return]

    return run
