"""What a host has installed: dpkg's package versions and DKMS's module states.

The readers fleetgate's Ansible modules share (node manifest, DKMS builds, the rollout host
probe); every command runs through fleetgate_hostcmd, with a deadline. Standard library only.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ansible.module_utils.fleetgate_hostcmd import CmdResult, run, search_path
from ansible.module_utils.fleetgate_parsers import parse_dkms_status

DPKG_TIMEOUT_S = 60.0


def dpkg_installed(names_or_patterns: list[str], timeout: float = DPKG_TIMEOUT_S
                   ) -> dict[str, str]:
    """Package -> version of every fully installed package dpkg-query lists for these names
    or glob patterns (`linux-image-*`); a held package (apt-mark hold) counts as installed.
    Empty where dpkg-query did not answer."""
    if not names_or_patterns:
        return {}
    # rc 1: some name or pattern matched nothing; the others are still printed.
    got = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n",
               *names_or_patterns], timeout, ok_rc=(0, 1), path=search_path())
    out: dict[str, str] = {}
    for line in got.stdout.splitlines() if got.ok else []:
        parts = line.split("\t")
        if len(parts) == 3 and parts[2] == "installed":
            out[parts[0]] = parts[1]
    return out


def dpkg_versions(packages: list[str], timeout: float = DPKG_TIMEOUT_S
                  ) -> dict[str, str | None]:
    """Installed version of each package; None where it is not (fully) installed, unknown, or
    dpkg-query did not answer."""
    installed = dpkg_installed(packages, timeout)
    return {p: installed.get(p) for p in packages}


def package_list_sha256(timeout: float = DPKG_TIMEOUT_S) -> str | None:
    """SHA-256 of `dpkg-query -W -f '${Package}=${Version}\\n' | LC_ALL=C sort`."""
    got = run(["dpkg-query", "-W", "-f", "${Package}=${Version}\n"], timeout,
              path=search_path())
    if not got.ok:
        return None
    lines = sorted(line for line in got.stdout.splitlines() if line)
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def dkms_status(timeout: float, *, name: str | None = None, version: str | None = None,
                kernel: str | None = None) -> tuple[CmdResult, list[dict[str, Any]]]:
    """`dkms status [-m NAME -v VERSION -k KERNEL]` and its entries (name, version, kernel,
    arch, state, warnings); no entries unless the command succeeded."""
    argv = ["dkms", "status"]
    for flag, value in (("-m", name), ("-v", version), ("-k", kernel)):
        if value is not None:
            argv += [flag, value]
    got = run(argv, timeout, path=search_path())
    return got, parse_dkms_status(got.stdout, strict=False) if got.ok else []


def dkms_states(entries: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, str]]:
    """(name, version) -> {kernel: state}; a module added but built for no kernel maps to {}."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for e in entries:
        per_kernel = out.setdefault((e["name"], e["version"]), {})
        if e["kernel"]:
            per_kernel[e["kernel"]] = e["state"]
    return out
