"""Variables derived from a node class for Ansible and Packer.

The class file is the single source of truth: roles and templates read these names and never
carry a version of their own. Names are flat and prefixed so they cannot collide with role vars.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass

Target = Literal["ansible", "packer"]


def ansible_vars(nc: NodeClass) -> dict[str, Any]:
    d = nc.driver
    return {
        "fleetgate_class": nc.name,
        "fleetgate_class_version": nc.version,
        "fleetgate_os_family": nc.os.family,
        "fleetgate_os_release": nc.os.release,
        "fleetgate_kernel_abi": nc.kernel.abi,
        "fleetgate_kernel_package_version": nc.kernel.package_version,
        "fleetgate_kernel_headers": nc.kernel.headers,
        "fleetgate_driver_vendor": d.vendor,
        "fleetgate_driver_branch": d.branch,
        "fleetgate_driver_version": d.version,
        "fleetgate_driver_flavour": d.flavour,
        "fleetgate_driver_packages": list(d.packages),
        "fleetgate_driver_persistence": d.persistence,
        "fleetgate_driver_source": d.source.model_dump(),
        "fleetgate_dkms_modules": [m.model_dump() for m in nc.dkms],
        "fleetgate_runtime": nc.runtime.model_dump(),
        # Not a pin: the same for every class, handed over so that no role repeats the map.
        "fleetgate_engine_packages": dict(ENGINE_PACKAGES),
        "fleetgate_userland": nc.userland.model_dump(),
        "fleetgate_accelerator": nc.accelerator.model_dump(),
        "fleetgate_smoke": nc.smoke.model_dump(),
        "fleetgate_class_lab_kind": nc.lab.kind,
    }


def packer_vars(nc: NodeClass) -> dict[str, Any]:
    """Packer HCL2 variables (JSON var-file shape): scalars for the template, plus the full
    Ansible set as one JSON string that the ansible provisioner passes through --extra-vars."""
    return {
        "class_name": nc.name,
        "class_version": nc.version,
        "os_release": nc.os.release,
        "kernel_abi": nc.kernel.abi,
        "kernel_package_version": nc.kernel.package_version,
        "driver_vendor": nc.driver.vendor,
        "driver_version": nc.driver.version or "",
        "accelerator_backend": nc.accelerator.backend,
        "ansible_extra_vars_json": json.dumps(ansible_vars(nc), sort_keys=True),
    }


def derive(nc: NodeClass, target: Target) -> dict[str, Any]:
    return ansible_vars(nc) if target == "ansible" else packer_vars(nc)
