#!/usr/bin/python3
"""Read-only report of a host's kernels: the running one, the boot links, GRUB's presence,
one ABI's boot files and every installed kernel image and headers package.

kernel_pin, kernel-update and rollback need all of these before they change anything. Read
as separate stat, command and package_facts tasks they cost one Python start on the host
each, which is seconds apiece on an emulated lab VM and a round trip per host everywhere;
this module answers them in one.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: fleetgate_kernel_state
short_description: Report the running kernel, boot links, GRUB and installed kernel packages
description:
  - Read-only; supports check mode.
  - The boot links are /vmlinuz, /vmlinuz.old, /initrd.img and /initrd.img.old, each as the
    file name it points to (e.g. vmlinuz-6.1.0-55-cloud-amd64), or null when it is not a link.
  - Packages are every installed linux-image-* and linux-headers-* package (metapackages
    included) with its version, read with dpkg-query.
options:
  abi:
    description:
      - A kernel ABI (e.g. 6.1.0-55-cloud-amd64) whose /boot/vmlinuz-ABI and
        /boot/initrd.img-ABI to look for, reported under boot_files.
    type: str
  boot_dir:
    description: Where the kernels and initrds are.
    type: path
    default: /boot
author: fleetgate
"""

EXAMPLES = r"""
- name: Read the host's kernels and boot links
  fleetgate_kernel_state:
    abi: 6.1.0-57-cloud-amd64
  register: kernel
"""

RETURN = r"""
kernel_state:
  description: What the host runs and can boot.
  returned: success
  type: dict
  contains:
    running: {description: uname -r, type: str}
    grub: {description: Whether /boot/grub/grub.cfg exists, type: bool}
    links: {description: Each boot link's target file name, or null, type: dict}
    boot_files: {description: vmlinuz and initrd.img of abi -> exists (empty: no abi), type: dict}
    packages: {description: Installed linux-image-*/linux-headers-* package -> version, type: dict}
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleetgate_hostpkg import dpkg_installed

ABI_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9]+)?([._-][A-Za-z0-9_]+)*$")
LINKS = ("/vmlinuz", "/vmlinuz.old", "/initrd.img", "/initrd.img.old")
PATTERNS = ("linux-image-*", "linux-headers-*")


def link_target(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "abi": {"type": "str"},
            "boot_dir": {"type": "path", "default": "/boot"},
        },
        supports_check_mode=True,
    )
    abi, boot = module.params["abi"], module.params["boot_dir"]
    if abi is not None and not ABI_RE.match(abi):
        module.fail_json(msg=f"refusing abi={abi[:80]!r}: not a kernel ABI")
    files = {} if abi is None else {
        name: os.path.isfile(os.path.join(boot, f"{name}-{abi}"))
        for name in ("vmlinuz", "initrd.img")}
    module.exit_json(changed=False, kernel_state={
        "running": os.uname().release,
        "grub": os.path.isfile(os.path.join(boot, "grub", "grub.cfg")),
        "links": {p: link_target(p) for p in LINKS},
        "boot_files": files,
        "packages": dpkg_installed(list(PATTERNS)),
    })


if __name__ == "__main__":
    main()
