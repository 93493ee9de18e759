"""Secret variables: a plan names where a value comes from, never the value.

    change:
      secret_vars:
        registry_token: {env: REGISTRY_TOKEN}        # the controller's environment
        db_password: {file: /etc/fleetgate/db.pass}  # a file only its owner can read
        api_key: !vault |                            # ansible-vault, the controller's password
          $ANSIBLE_VAULT;1.1;AES256
          ...

The plan, its artifact, the journal and every batch spec hold these references. The value is
read at run time by the process that runs Ansible (the batch worker inherits the
controller's environment), written to a 0600 extra-vars file inside the run's private data
dir for that run only, tagged `!unsafe` so Ansible never templates it, and registered with the
redactor (runner/redact.py) so it is masked in everything the run leaves behind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, StringConstraints, model_validator

from fleetgate.errors import BadInput
from fleetgate.inputs import file_kind
from fleetgate.runner import redact, vault

ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
ABS_PATH_RE = r"^(/[A-Za-z0-9._+-]+)+$"
# The vault envelope: a header line, then hex.
VAULT_RE = r"^\$ANSIBLE_VAULT;1\.[12];AES256(;[A-Za-z0-9_.-]+)?\n[0-9a-f\n]+$"


class SecretRef(BaseModel):
    """Exactly one of `env` (a variable of the controller's environment), `file` (an
    absolute path to a file of the operator's, mode 0600 or 0400) or `vault` (an
    ansible-vault ciphertext, written in a plan as `NAME: !vault |`, decrypted at run time
    with the controller's vault password: runner/vault.py)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    env: Annotated[str, StringConstraints(pattern=ENV_NAME_RE)] | None = None
    file: Annotated[str, StringConstraints(pattern=ABS_PATH_RE)] | None = None
    vault: Annotated[str, StringConstraints(pattern=VAULT_RE, max_length=65536)] | None = None

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if sum(x is not None for x in (self.env, self.file, self.vault)) != 1:
            raise ValueError("give exactly one of env, file or vault")
        return self

    def describe(self) -> str:
        return (f"env {self.env}" if self.env is not None
                else f"file {self.file}" if self.file is not None else "its ansible-vault value")


def _from_file(path: Path, *, source: str, field: str) -> str:
    try:
        # O_NOFOLLOW: the file checked is the file read, not a link planted beside it.
        # O_NONBLOCK: a FIFO named as the file must be refused below, not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadInput(f"cannot read secret file {path}: {exc.strerror}", source=source,
                       field=field) from None
    # Checked on the open descriptor before it becomes a file object: fdopen of a directory
    # raises, and a read of a FIFO blocks.
    st = os.fstat(fd)
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or mode & 0o077:
        os.close(fd)
        kind = "" if stat.S_ISREG(st.st_mode) else f"{file_kind(st.st_mode)}, "
        raise BadInput(f"secret file {path} must be a regular file of yours that no one "
                       f"else can read (mode 0600; it is {kind}{mode:04o})", source=source,
                       field=field)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(65536)
    try:
        return raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise BadInput(f"secret file {path} is not UTF-8 text", source=source,
                       field=field) from None


def resolve(refs: Mapping[str, SecretRef], *, source: str, section: str
            ) -> dict[str, str]:
    """The values, read now; each registered with this process's redactor. A missing or
    unsafe source is one line of bad input naming the variable."""
    out: dict[str, str] = {}
    for key, ref in refs.items():
        field = f"{section}.secret_vars.{key}"
        if ref.env is not None:
            value = os.environ.get(ref.env, "")
            if not value:
                raise BadInput(f"environment variable {ref.env} is not set (or empty) in "
                               "the controller's environment", source=source, field=field)
        elif ref.file is not None:
            value = _from_file(Path(ref.file), source=source, field=field)
        else:
            assert ref.vault is not None
            value = vault.decrypt(ref.vault, source=source, field=field)
        if len(value) < redact.MIN_SECRET_LEN:
            raise BadInput(f"the secret from {ref.describe()} is shorter than "
                           f"{redact.MIN_SECRET_LEN} characters: too short to mask in output",
                           source=source, field=field)
        out[key] = value
    redact.add_secrets(out.values())
    return out


class _Unsafe(str):
    """Dumped as `!unsafe "..."`: Ansible passes it through without templating."""


class _Dumper(yaml.SafeDumper):
    pass


def _unsafe(dumper: yaml.SafeDumper, value: _Unsafe) -> Any:
    return dumper.represent_scalar("!unsafe", str(value), style='"')


_Dumper.add_representer(_Unsafe, _unsafe)


def write_vars_file(path: Path, values: Mapping[str, str]) -> None:
    """An extra-vars file (`-e @path`) only this user can read; created, never reused."""
    text = yaml.dump({k: _Unsafe(v) for k, v in values.items()}, Dumper=_Dumper,
                     allow_unicode=False, width=1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
