"""The machine-wide cache (root filesystems, wheels): shared by every lab and image build."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("FLEETGATE_CACHE_DIR")
    if env:
        return Path(env).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgate"
