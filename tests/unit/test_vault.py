"""ansible-vault values are secrets too: a plan's vaulted secret_var is decrypted only for the
run, a vaulted extra var is refused, and an inventory's vaulted variable that a real
ansible-runner run prints (localhost) is masked in every file the run keeps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.rollout.plan import load_plan
from fleetgate.runner import ansible, redact
from fleetgate.runner.secret_vars import SecretRef, resolve
from fleetgate.spec.loader import read_yaml
from tests.privacy import find_secret

PLAIN = "vault-db-pass-5e81c0"  # one value only this file uses
# The inventory's own: the redactor is per process, so a value an earlier test registered
# would be masked whether or not the run registers it.
INVENTORY_PLAIN = "inventory-vault-pass-7d02"
PASSWORD = "vault-password-for-tests"
VAULT_BIN = Path(sys.executable).with_name("ansible-vault")


def encrypt(password_file: Path, value: str, name: str) -> str:
    """`NAME: !vault |` YAML, as an operator's `ansible-vault encrypt_string` prints it."""
    # The password file from the environment (ANSIBLE_VAULT_PASSWORD_FILE), as the run uses.
    env = {**os.environ, "ANSIBLE_VAULT_PASSWORD_FILE": str(password_file)}
    proc = subprocess.run([str(VAULT_BIN), "encrypt_string", value, "--name", name],
                          capture_output=True, text=True, check=True, env=env,
                          stdin=subprocess.DEVNULL)
    return proc.stdout


@pytest.fixture
def password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    f = tmp_path / "vault-pass"
    f.write_text(PASSWORD + "\n")
    os.chmod(f, 0o600)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(f))
    return f


def test_a_vaulted_secret_var_is_decrypted_for_the_run_only(password: Path,
                                                           tmp_path: Path) -> None:
    doc = tmp_path / "secrets.yml"
    doc.write_text(encrypt(password, PLAIN, "db_password"))
    ref = SecretRef.model_validate(read_yaml(doc)["db_password"])
    assert ref.vault is not None and ref.vault.startswith("$ANSIBLE_VAULT;1.1;AES256\n")
    assert PLAIN not in ref.model_dump_json()  # what an artifact and the journal keep
    assert resolve({"db_password": ref}, source="plan.yml", section="change") == {
        "db_password": PLAIN}
    assert redact.text(f"connecting with {PLAIN}") == f"connecting with {redact.MASK}"

    # Ansible reads its vault settings once per process (ansible.constants), as a controller
    # gets them from its environment at start: the failures are each a fresh process.
    for env, reason in (({}, "no vault password is configured"),
                        ({"ANSIBLE_VAULT_PASSWORD_FILE": str(wrong_password(tmp_path))},
                         "cannot decrypt the ansible-vault value")):
        said = resolve_elsewhere(ref, env)
        assert said.startswith("plan.yml: change.secret_vars.db_password: "), said
        assert reason in said and PLAIN not in said


def wrong_password(tmp_path: Path) -> Path:
    f = tmp_path / "wrong-pass"
    f.write_text("another-password\n")
    os.chmod(f, 0o600)
    return f


def resolve_elsewhere(ref: SecretRef, env: dict[str, str]) -> str:
    """What resolve() says in a new process with this vault environment (and no other)."""
    code = ("import sys; from fleetgate.errors import BadInput; "
            "from fleetgate.runner.secret_vars import SecretRef, resolve\n"
            "try: resolve({'db_password': SecretRef.model_validate_json(sys.argv[1])}, "
            "source='plan.yml', section='change')\n"
            "except BadInput as e: print(e)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    proc = subprocess.run([sys.executable, "-c", code, ref.model_dump_json()],
                          capture_output=True, text=True, env={**clean, **env}, check=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    return proc.stdout.strip()


def test_a_vaulted_extra_var_is_refused_pointing_at_secret_vars(
        password: Path, tmp_path: Path) -> None:
    vaulted = encrypt(password, PLAIN, "db_password")
    text = ("name: vaulted\ntargets: {inventory: inv.yml}\n"
            "change:\n  playbook: examples/rollout/noop.yml\n  extra_vars:\n"
            + "".join(f"    {line}\n" for line in vaulted.splitlines())
            + "waves: {steps: [1]}\n")
    (tmp_path / "plan.yml").write_text(text)
    (tmp_path / "inv.yml").write_text("all: {hosts: {h1: {}}}\n")
    with pytest.raises(BadInput) as exc:
        load_plan(tmp_path / "plan.yml")
    assert "extra_vars.db_password: an ansible-vault value is a secret" in str(exc.value)
    assert "secret_vars" in exc.value.reason and PLAIN not in str(exc.value)


def test_an_inventory_vault_value_a_run_prints_is_masked_in_everything_it_keeps(
        password: Path, tmp_path: Path) -> None:
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"db": {"hosts": {
        "localhost": {"ansible_connection": "local",
                      "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}))
    (inv / "group_vars" / "db.yml").write_text(encrypt(password, INVENTORY_PLAIN,
                                                        "db_password"))
    assert redact.text(INVENTORY_PLAIN) == INVENTORY_PLAIN  # nothing registered it yet
    out = tmp_path / "out.txt"
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Print it", "ansible.builtin.debug": {"msg": "password is {{ db_password }}"}},
        {"name": "Echo it", "ansible.builtin.command": "echo {{ db_password }}",
         "changed_when": False},
        {"name": "Hand it over", "ansible.builtin.copy": {"content": "{{ db_password }}",
                                                          "dest": str(out)}},
    ]}], sort_keys=False))
    result = ansible.run(inventory=[inv], playbook=play, runs_base=tmp_path / "runs",
                         forks=1, timeout=120)
    assert result.ok, result.error
    # Ansible did decrypt and use it: the masking below is of a value that was there.
    assert out.read_text() == INVENTORY_PLAIN
    kept = list(result.run_dir.rglob("*"))
    assert any(p.name == "events.jsonl" for p in kept) and any(
        p.name == "stdout" for p in kept)
    assert any(redact.MASK in p.read_text(errors="replace") for p in kept
               if p.is_file() and p.name in ("events.jsonl", "stdout"))
    assert not find_secret(result.run_dir, INVENTORY_PLAIN)
