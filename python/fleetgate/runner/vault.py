"""ansible-vault values: decrypted on the controller for one reason, so that the redactor
knows the plaintext it must mask.

An inventory's vaulted variable (`db_password: !vault |` in group_vars) is decrypted by
Ansible inside the run; a task that prints it, or a failed command that quotes it, would put
the plaintext in events.jsonl, job_events/ and stdout. The inventory layer sees only the
ciphertext (`ansible-inventory --list` gives `{"__ansible_vault": "$ANSIBLE_VAULT;..."}`), so
each run decrypts those values with the same vault secrets Ansible will use (the
ANSIBLE_VAULT_PASSWORD_FILE / ANSIBLE_VAULT_IDENTITY_LIST of the controller's environment or
ansible.cfg) and registers them, like a plan's secret_vars, before anything is written.

A plan's vaulted secret (`secret_vars: {db_password: !vault | ...}`) is the third kind of
SecretRef (runner/secret_vars.py): the artifact and the journal keep only the ciphertext.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.runner.redact import MIN_SECRET_LEN

HEADER = "$ANSIBLE_VAULT;"


def ciphertexts(tree: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, ciphertext) for every vaulted value in a variables tree as the inventory layer
    hands it on: ansible-inventory's {"__ansible_vault": ...} unwrapped to the envelope string
    (runner/inventory.py plain_ansible_json). `where` is the dotted path of keys
    (host.variable...)."""
    if isinstance(tree, str):
        if tree.startswith(HEADER):
            yield path, tree
        return
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from ciphertexts(v, f"{path}.{k}" if path else str(k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from ciphertexts(v, f"{path}[{i}]")


def _secrets() -> list[Any]:
    # Ansible's own resolution of vault ids, password files and scripts, without prompting:
    # the same secrets the ansible-playbook of the run will hold. Imported here because it
    # is a second of start-up that a fleet without vaulted values never needs.
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.parsing.dataloader import DataLoader

    # Looked up now, not at import of ansible.constants: the environment of this call.
    password_file = C.config.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
    identities = C.config.get_config_value("DEFAULT_VAULT_IDENTITY_LIST") or []
    secrets: list[Any] = CLI.setup_vault_secrets(
        DataLoader(), vault_ids=list(identities),
        vault_password_files=[password_file] if password_file else [],
        ask_vault_pass=False, auto_prompt=False,
        initialize_context=False)
    return secrets


def _vault_lib() -> Any | None:
    """Ansible's VaultLib over this process's vault secrets; None when none is configured.
    Raises AnsibleError or OSError when a configured password cannot be loaded."""
    from ansible.parsing.vault import VaultLib

    secrets = _secrets()
    return VaultLib(secrets) if secrets else None


def decrypt(vaulttext: str, *, source: str, field: str) -> str:
    """A plan's vaulted secret, decrypted now; one line of bad input when it cannot be."""
    from ansible.errors import AnsibleError

    if not vaulttext.startswith(HEADER):
        raise BadInput(f"not an ansible-vault value (it must start with {HEADER})",
                       source=source, field=field)
    try:
        lib = _vault_lib()
    except (AnsibleError, OSError) as exc:
        raise BadInput(f"cannot load the vault password: {' '.join(str(exc).split())}",
                       source=source, field=field) from None
    if lib is None:
        raise BadInput("an ansible-vault value, and no vault password is configured (set "
                       "ANSIBLE_VAULT_PASSWORD_FILE or ANSIBLE_VAULT_IDENTITY_LIST)",
                       source=source, field=field)
    try:
        plain = lib.decrypt(vaulttext.encode())
    except AnsibleError as exc:
        raise BadInput(f"cannot decrypt the ansible-vault value: {' '.join(str(exc).split())}",
                       source=source, field=field) from None
    try:
        return str(plain.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput("the ansible-vault value is not UTF-8 text", source=source,
                       field=field) from None


def inventory_plaintexts(vaulted: list[tuple[str, str]], *, source: str) -> list[str]:
    """The plaintexts of an inventory's vaulted values, (where, ciphertext) as
    Inventory.vaulted found them, that this controller can decrypt. One it cannot decrypt,
    Ansible cannot either (same secrets), so it never reaches output in the clear; that run
    fails on Ansible's own error if a task uses it. One too short to mask is bad input naming
    the host and variable, as for a plan's secret_vars."""
    found: dict[str, str] = {}
    for where, c in vaulted:
        found.setdefault(c, where)
    if not found:
        return []
    from ansible.errors import AnsibleError

    try:
        lib = _vault_lib()
    except (AnsibleError, OSError):
        return []
    if lib is None:
        return []
    out: list[str] = []
    for c, where in found.items():
        try:
            plain = lib.decrypt(c.encode()).decode("utf-8", errors="replace")
        except AnsibleError:
            continue
        if len(plain) < MIN_SECRET_LEN:
            raise BadInput(f"an ansible-vault value shorter than {MIN_SECRET_LEN} characters: "
                           "too short to mask in output", source=source, field=where)
        out.append(plain)
    return out
