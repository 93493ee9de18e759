"""The state dir is private: 0700 itself, 0700 directories and 0600 files under it.

It holds the journal (plans with their extra vars, every host's failure messages), batch
specs, ansible-runner's private data dirs (the environment Ansible ran with, every task's
output) and smoke logs. Nothing in it is for another local user.

The processes that only write state (the rollout controller, its batch workers, a smoke run,
an ansible-runner run) work under umask 077, so everything they and their children create
is private without a chmod per file. Image builds and the lab stay out of it: their images
and shared files are chmodded for podman, qemu and packer on purpose (image/store.py).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleetgate.errors import FleetgateError
from fleetgate.site import current_site

PRIVATE_UMASK = 0o077
_OPEN_BITS = stat.S_IRWXG | stat.S_IRWXO


class _Umask:
    """umask is per process: nested and concurrent users (threads) share one setting, and
    the last one out restores what the process had."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = 0


_UMASK = _Umask()


@contextmanager
def private_umask() -> Iterator[None]:
    """umask 077 while inside; also a decorator (`@private_umask()`)."""
    with _UMASK.lock:
        if _UMASK.depth == 0:
            _UMASK.saved = os.umask(PRIVATE_UMASK)
        _UMASK.depth += 1
    try:
        yield
    finally:
        with _UMASK.lock:
            _UMASK.depth -= 1
            if _UMASK.depth == 0:
                os.umask(_UMASK.saved)


def make_private(path: Path) -> None:
    """chmod go-rwx on a file or directory of ours that is more open (state written before
    this policy, or by a tool under another umask)."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & _OPEN_BITS:
        return
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~_OPEN_BITS)
    except PermissionError:
        raise FleetgateError(f"is readable by other users (mode {stat.S_IMODE(st.st_mode):o}) "
                             "and not ours to make private; chmod go-rwx it, or point "
                             "FLEETGATE_STATE_DIR elsewhere", source=path) from None


_checked: set[Path] = set()


def private_state_dir() -> Path:
    """The site's state dir, created 0700 (or made so, once per process)."""
    root = current_site().state_dir
    if root not in _checked:
        with private_umask():
            root.mkdir(parents=True, exist_ok=True)
        make_private(root)
        _checked.add(root)
    return root


def private_dirs(path: Path) -> Path:
    """mkdir -p with every directory it creates 0700."""
    with private_umask():
        path.mkdir(parents=True, exist_ok=True)
    return path


def write_private(path: Path, text: str) -> None:
    """A 0600 file, its missing parents 0700; an existing file is made 0600 first."""
    private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def replace_private(path: Path, text: str) -> None:
    """write_private beside `path`, then renamed over it: a reader in another process sees
    the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_private(tmp, text)
    os.replace(tmp, path)


def private_tree(root: Path) -> None:
    """make_private on everything under `root`: for files a tool chmods open on purpose, past
    any umask (Ansible's jsonfile fact cache writes 0644, ansible-runner's artifacts/*/
    fact_cache among them)."""
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            make_private(Path(top) / name)
