"""Which fleetgate this is: the package version and the git revision of the checkout that
holds the code (and the playbooks it runs), for `--version` and for change tickets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import fleetgate


def git_revision(where: Path | None = None) -> str:
    """Short commit hash, `+dirty` when the tree has local changes; `unknown` outside git."""
    root = where or Path(fleetgate.__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def operator() -> str:
    return f"{os.environ.get('USER') or os.getuid()}@{os.uname().nodename}"


def version_text() -> str:
    return f"fleetgate {fleetgate.__version__} (git {git_revision()})"
