"""Debian root filesystems made by mmdebstrap, cached by a hash of everything that goes in.

The same recipe always yields the same cache key, so a warm `lab up` skips the 15-30 s build
and two labs share one base. The mirrors are variables so an air-gapped site can point them
at its own archive.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from fleetgate.system.cache import cache_dir
from fleetgate.system.procs import require_tool, run

RECIPE_VERSION = 1  # bump when the meaning of hooks changes without their text changing


def mirrors(suite: str) -> tuple[str, ...]:
    main = os.environ.get("FLEETGATE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    sec = os.environ.get("FLEETGATE_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
    return (
        f"deb {main} {suite} main",
        f"deb {main} {suite}-updates main",
        f"deb {sec} {suite}-security main",
    )


@dataclass(frozen=True)
class RootfsRecipe:
    suite: str
    packages: tuple[str, ...]
    hooks: tuple[str, ...] = ()
    variant: str = "minbase"
    sources: tuple[str, ...] = field(default=())

    def resolved_sources(self) -> tuple[str, ...]:
        return self.sources or mirrors(self.suite)

    def key(self) -> str:
        blob = json.dumps(
            {
                "v": RECIPE_VERSION,
                "suite": self.suite,
                "variant": self.variant,
                "packages": sorted(self.packages),
                "hooks": list(self.hooks),
                "sources": list(self.resolved_sources()),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def rootfs_tar(recipe: RootfsRecipe, *, timeout: float = 900) -> Path:
    """Return the cached tarball for the recipe, building it first if needed."""
    out = cache_dir() / "rootfs" / f"{recipe.key()}.tar"
    if out.exists():
        return out
    mmdebstrap = require_tool("mmdebstrap", "mmdebstrap")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.partial")
    argv = [mmdebstrap, "--quiet", "--format=tar", f"--variant={recipe.variant}",
            f"--include={','.join(recipe.packages)}"]
    argv += [f"--customize-hook={hook}" for hook in recipe.hooks]
    argv += [recipe.suite, str(tmp), *recipe.resolved_sources()]
    try:
        run(argv, timeout=timeout)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def extract(tar: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    run([require_tool("tar", "tar"), "-C", str(dest), "--numeric-owner", "-xpf", str(tar)],
        timeout=300)
