#!/usr/bin/python3
"""Read-only report of what a host is actually running, for the rollout controller.

The controller never trusts its own journal about a host that was in flight when it crashed:
it asks the host for its running kernel, its manifest, the versions of the packages a change
pins and the contents of small version files, then compares them with the plan's target.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: fleetgate_hoststate
short_description: Report running kernel, fleetgate manifest, package versions and version files
description:
  - Read-only; supports check mode. Used by the rollout controller to reconcile after a crash.
options:
  packages:
    description: Debian package names whose installed version to report.
    type: list
    elements: str
    default: []
  files:
    description: Absolute paths of small files whose stripped content to report.
    type: list
    elements: str
    default: []
  manifest_path:
    description: Where the node manifest lives.
    type: path
    default: /etc/fleetgate/manifest.json
author: fleetgate
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleetgate_hostcmd import read_text
from ansible.module_utils.fleetgate_hostpkg import dpkg_versions

PKG_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,99}$")
PATH_RE = re.compile(r"^(/[A-Za-z0-9._+-]+)+$")
MAX_FILE = 4096


def _file(path: str, limit: int = MAX_FILE) -> str | None:
    text = read_text(path, limit)
    return text.strip() if text is not None else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "str", "default": []},
            "manifest_path": {"type": "path", "default": "/etc/fleetgate/manifest.json"},
        },
        supports_check_mode=True,
    )
    bad = [p for p in module.params["packages"] if not PKG_RE.match(p)]
    bad += [p for p in module.params["files"] if not PATH_RE.match(p)]
    if bad:
        module.fail_json(msg=f"refusing unsafe names: {bad}")
    manifest = None
    text = _file(module.params["manifest_path"], 1 << 20)
    if text:
        try:
            manifest = json.loads(text)
        except ValueError:
            manifest = {"_error": "manifest is not JSON"}
    module.exit_json(
        changed=False,
        hoststate={
            "kernel_release": os.uname().release,
            "boot_id": _file("/proc/sys/kernel/random/boot_id"),
            "manifest": manifest,
            "packages": dpkg_versions(module.params["packages"]),
            "files": {p: _file(p) for p in module.params["files"]},
        },
    )


if __name__ == "__main__":
    main()
