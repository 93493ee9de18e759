"""What an image was built from: the git revision (and whether the tree was dirty), the
template's hash, and file checksums."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class GitState:
    revision: str | None
    dirty: bool


def git_state(repo: Path) -> GitState:
    """HEAD and whether tracked or untracked (not ignored) files differ from it."""
    git = shutil.which("git")
    if git is None:
        return GitState(None, False)
    try:
        rev = subprocess.run([git, "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30, check=False)
        if rev.returncode != 0:
            return GitState(None, False)
        status = subprocess.run([git, "-C", str(repo), "status", "--porcelain"],
                                capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return GitState(None, False)
    return GitState(rev.stdout.strip(), bool(status.stdout.strip()) or status.returncode != 0)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def template_files(packer_dir: Path) -> list[Path]:
    """The files Packer reads for a build: the top-level *.pkr.hcl of the template directory."""
    return sorted(p for p in packer_dir.glob("*.pkr.hcl") if p.is_file())


def template_sha256(packer_dir: Path) -> str:
    """SHA-256 of `<sha256>  <name>` lines of the template files, sorted by name (the same
    shape as `sha256sum *.pkr.hcl | sha256sum`)."""
    listing = "".join(f"{sha256_file(p)}  {p.name}\n" for p in template_files(packer_dir))
    return hashlib.sha256(listing.encode()).hexdigest()


def sha256sums(directory: Path, names: list[str]) -> str:
    """`sha256sum -c` compatible lines for the named files of a directory."""
    return "".join(f"{sha256_file(directory / n)}  {n}\n" for n in sorted(names))


def parse_sha256sums(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        digest, sep, name = line.partition("  ")
        if sep and len(digest) == 64:
            out[name.strip()] = digest
    return out
