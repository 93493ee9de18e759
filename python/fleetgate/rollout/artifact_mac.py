"""What makes a plan artifact tamper-evident: an HMAC-SHA256 of its canonical JSON, keyed by
a secret of the state dir that planned it (`<state>/keys/artifact.key`).

The artifact's short sha256 `hash` anyone can recompute after an edit; the MAC only a holder
of the key can. The key is made on first use, readable by its owner only, and never printed.
An artifact planned on another controller (another state dir) does not verify here: CI
promotion between controllers goes by SSH signature instead (rollout/signing.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.inputs import file_kind
from fleetgate.runner.ansible import state_dir

KEY_BYTES = 32
EDITED = ("the artifact was edited after planning or planned with another state dir's key; "
          "run `rollout plan` again")


def key_path() -> Path:
    return state_dir() / "keys" / "artifact.key"


def canonical(body: dict[str, Any]) -> bytes:
    """One byte string per document, whatever its key order or spacing on disk."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def _read(path: Path) -> bytes | None:
    try:
        # O_NONBLOCK: a FIFO planted as the key must not hang the controller on open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadInput(f"cannot read the artifact key: {exc.strerror}", source=path) from None
    mode = os.fstat(fd).st_mode
    # The file's kind before any read: a directory raises, a FIFO blocks.
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BadInput(f"the artifact key is {file_kind(mode)}, not a regular file",
                       source=path)
    with os.fdopen(fd, "rb") as f:
        # Like ssh with a private key: a key others can read proves nothing about who wrote.
        if mode & 0o077:
            raise BadInput("the artifact key is readable by others; chmod 600 it (and "
                           "re-plan)", source=path)
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise BadInput(f"not an artifact key ({KEY_BYTES} bytes)", source=path)
    return key


def _create(path: Path) -> None:
    """A new key, made whole under a temporary name and linked into place, so two planners
    starting at once agree on one key and nobody reads half of one."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)  # mkdir's mode is masked by umask
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)
        except FileExistsError:
            pass  # another planner made it first: use theirs
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot create the artifact key: {exc.strerror}", source=path) from None


def _key(*, create: bool) -> bytes | None:
    path = key_path()
    key = _read(path)
    if key is None and create:
        _create(path)
        key = _read(path)
    return key


def mac(body: dict[str, Any]) -> str:
    """The MAC of an artifact's body (everything but `mac`), making the key if needed."""
    key = _key(create=True)
    assert key is not None
    return hmac.new(key, canonical(body), hashlib.sha256).hexdigest()


def verify(body: dict[str, Any], given: object, *, source: Path) -> None:
    """Refuses an artifact whose MAC is missing or not this state dir's MAC of `body`."""
    key = _key(create=False)
    want = hmac.new(key, canonical(body), hashlib.sha256).hexdigest() if key else None
    if (want is None or not isinstance(given, str) or not given.isascii()
            or not hmac.compare_digest(want, given)):
        raise BadInput(EDITED, source=source, field="mac")
