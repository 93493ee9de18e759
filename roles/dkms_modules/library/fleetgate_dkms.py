#!/usr/bin/python3
"""Ansible module: make sure DKMS modules are built *and installed* for given kernels."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleetgate_dkms
short_description: Ensure DKMS modules are installed for every given kernel
description:
  - Parses C(dkms status), runs C(dkms install) for each module/kernel pair that is not
    C(installed), and fails with the module, the kernel and the tail of DKMS's make.log when
    a build fails.
  - With O(all_registered), every module registered with DKMS on the host is required too,
    not only the listed ones, so a third-party module that cannot build blocks the change.
options:
  kernels:
    description: Kernel ABIs (C(uname -r) form) the modules must be installed for.
    type: list
    elements: str
    required: true
  modules:
    description: Modules that must be installed, each with name and version.
    type: list
    elements: dict
    default: []
  all_registered:
    description: Also require every module registered with DKMS on the host.
    type: bool
    default: true
  build:
    description:
      - Build what is missing. With V(false) nothing is built, and a module that is not
        C(installed) for a kernel is reported with the make.log its last build left, which is
        how a failed kernel package install names the module without compiling it again
        (minutes for the NVIDIA module).
    type: bool
    default: true
  log_lines:
    description: How many lines of make.log to report on failure.
    type: int
    default: 15
author: fleetgate
"""

EXAMPLES = r"""
- name: Build class modules for the new kernel before rebooting into it
  fleetgate_dkms:
    kernels: [6.1.0-57-cloud-amd64]
    modules: [{name: vpoll, version: "0.1"}]

- name: Name the module whose build failed the kernel package, without building again
  fleetgate_dkms:
    kernels: [6.1.0-57-cloud-amd64]
    build: false
"""

RETURN = r"""
status:
  description: Per module/version, the DKMS state for each requested kernel after the run.
  type: dict
  returned: always
built:
  description: The module/version/kernel triples this run installed.
  type: list
  returned: always
failures:
  description: Failed builds with module, version, kernel and the make.log tail.
  type: list
  returned: on failure
"""

import os
import re
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleetgate_hostcmd import run, search_path
from ansible.module_utils.fleetgate_hostpkg import dkms_states, dkms_status

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
KERNEL_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9._+-]*$")
STATUS_TIMEOUT_S = 120.0
# A DKMS build of the NVIDIA module takes minutes on a busy host (17 seen on 2 cores); an hour
# means the build is wedged, and the change must fail rather than hold its host forever.
INSTALL_TIMEOUT_S = 3600.0


def make_log_tail(name: str, version: str, lines: int) -> str:
    for candidate in (
        Path("/var/lib/dkms") / name / version / "build" / "make.log",
        *sorted((Path("/var/lib/dkms") / name / version).glob("*/*/log/make.log")),
    ):
        if candidate.is_file():
            return "\n".join(candidate.read_text(errors="replace").splitlines()[-lines:])
    return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kernels": {"type": "list", "elements": "str", "required": True},
            "modules": {"type": "list", "elements": "dict", "default": []},
            "all_registered": {"type": "bool", "default": True},
            "build": {"type": "bool", "default": True},
            "log_lines": {"type": "int", "default": 15},
        },
        supports_check_mode=True,
    )
    p: dict[str, Any] = module.params
    kernels: list[str] = p["kernels"]
    for k in kernels:
        if not KERNEL_RE.fullmatch(k):
            module.fail_json(msg=f"refusing kernel {k!r}: not a kernel ABI")
    wanted: list[tuple[str, str]] = []
    for m in p["modules"]:
        name, version = str(m.get("name", "")), str(m.get("version", ""))
        if not (NAME_RE.fullmatch(name) and NAME_RE.fullmatch(version)):
            module.fail_json(msg=f"refusing DKMS module {name!r} version {version!r}")
        wanted.append((name, version))

    got, entries = dkms_status(STATUS_TIMEOUT_S)
    if got.status == "missing":
        if wanted:
            module.fail_json(msg="dkms is not installed")
        module.exit_json(changed=False, built=[], status={})
    if not got.ok:
        module.fail_json(msg=f"dkms status {got.status}: {got.stderr.strip()}")
    status = dkms_states(entries)
    for key in wanted:
        if key not in status:
            module.fail_json(msg=f"DKMS module {key[0]}/{key[1]} is not registered with DKMS "
                                 f"(is its package installed?)")
    targets = list(dict.fromkeys(wanted + (sorted(status) if p["all_registered"] else [])))
    if targets:
        for k in kernels:
            if not os.path.isdir(f"/lib/modules/{k}/build"):
                module.fail_json(msg=f"kernel headers for {k} are not installed "
                                     f"(/lib/modules/{k}/build is missing); DKMS cannot build")

    built: list[dict[str, str]] = []
    failures: list[dict[str, Any]] = []
    for name, version in targets:
        for k in kernels:
            if status.get((name, version), {}).get(k) == "installed":
                continue
            if module.check_mode and p["build"]:
                built.append({"module": name, "version": version, "kernel": k})
                continue
            if not p["build"]:
                state = status.get((name, version), {}).get(k, "absent")
                failures.append({
                    "module": name, "version": version, "kernel": k, "rc": None,
                    "state": state,
                    "make_log_tail": make_log_tail(name, version, p["log_lines"]),
                    "dkms_output_tail": f"not installed for {k} (state {state}); not rebuilt",
                })
                continue
            inst = run(["dkms", "install", "-m", name, "-v", version, "-k", k],
                       INSTALL_TIMEOUT_S, path=search_path())
            rc, bout, berr = inst.rc, inst.stdout, inst.stderr
            if inst.status == "timeout":
                berr = f"dkms install did not finish within {INSTALL_TIMEOUT_S:.0f}s"
            _, after = dkms_status(STATUS_TIMEOUT_S, name=name, version=version, kernel=k)
            state = dkms_states(after).get((name, version), {}).get(k, "absent")
            if rc == 0 and state == "installed":
                built.append({"module": name, "version": version, "kernel": k})
            else:
                failures.append({
                    "module": name, "version": version, "kernel": k, "rc": rc, "state": state,
                    "make_log_tail": make_log_tail(name, version, p["log_lines"]),
                    "dkms_output_tail": "\n".join((bout + berr).splitlines()[-p["log_lines"]:]),
                })
    _, final = dkms_status(STATUS_TIMEOUT_S)
    result_status = {f"{n}/{v}": {k: s for k, s in ks.items() if k in kernels}
                     for (n, v), ks in dkms_states(final).items()}
    if failures:
        # Report mode: a module whose build left its log in build/ is the one that failed; a
        # module the failed hook never reached comes after it.
        failures.sort(key=lambda f: f["rc"] is None and not (
            Path("/var/lib/dkms") / f["module"] / f["version"] / "build" / "make.log").is_file())
        f = failures[0]
        last = [ln for ln in (f["make_log_tail"] or f["dkms_output_tail"]).splitlines()
                if ln.strip()][-3:]
        module.fail_json(
            msg=(f"DKMS module {f['module']}/{f['version']} failed to build for kernel "
                 f"{f['kernel']}: {' | '.join(last)}"),
            failures=failures, built=built, status=result_status, changed=bool(built),
        )
    module.exit_json(changed=bool(built), built=built, status=result_status)


if __name__ == "__main__":
    main()
