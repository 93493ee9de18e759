"""Checks that run before Packer starts: each failure is one line, exit 2, and nothing built."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from fleetgate.errors import BadInput, FleetgateError
from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import LABEL, Podman
from fleetgate.system.procs import SLOW_STEP_TIMEOUT_S

APT_UPDATE_FAILED = 90


def require_tool(name: str, hint: str, *, flag: str = "PATH") -> str:
    path = shutil.which(name)
    if path is None:
        raise BadInput(f"{name} not found on PATH ({hint})", source=name, field=flag)
    return path


def require_packer() -> str:
    return require_tool("packer", "install Debian's packer package")


def require_docker_cli() -> str:
    """Packer's docker builder drives the `docker` client, pointed at podman's API socket."""
    return require_tool("docker", "the docker source needs a Docker CLI; podman serves its API")


def kernel_packages(nc: NodeClass) -> list[str]:
    k = nc.kernel
    pkgs = [f"linux-image-{k.abi}={k.package_version}"]
    if k.headers or nc.dkms:
        pkgs.append(f"linux-headers-{k.abi}={k.package_version}")
    return pkgs


def simulate_script(packages: list[str]) -> str:
    quoted = " ".join(shlex.quote(p) for p in packages)
    return (f"apt-get update -qq >/dev/null 2>&1 || apt-get update -qq || exit {APT_UPDATE_FAILED}"
            f"; apt-get install --simulate --no-install-recommends {quoted}")


def apt_error(stderr: str) -> str:
    errors = [line.removeprefix("E: ").strip() for line in stderr.splitlines()
              if line.startswith("E: ")]
    return "; ".join(errors[:2]) or (stderr.strip().splitlines() or ["(no output)"])[-1]


def check_kernel_installable(podman: Podman, base_ref: str, nc: NodeClass,
                             class_file: Path) -> None:
    """`apt-get install --simulate` of the pinned kernel in the base image, against the same
    apt sources the build will use."""
    packages = kernel_packages(nc)
    proc = podman("run", "--rm", "--label", f"{LABEL}=image-preflight", "--entrypoint",
                  "/bin/sh", base_ref, "-c", simulate_script(packages),
                  timeout=SLOW_STEP_TIMEOUT_S, check=False)
    if proc.returncode == APT_UPDATE_FAILED:
        raise FleetgateError(f"apt-get update failed in the base image: {apt_error(proc.stderr)}",
                             source=base_ref)
    if proc.returncode != 0:
        raise BadInput(f"kernel {nc.kernel.abi} ({' '.join(packages)}) is not installable from "
                       f"the base image's apt sources: {apt_error(proc.stderr)}",
                       source=class_file, field="kernel.abi")
