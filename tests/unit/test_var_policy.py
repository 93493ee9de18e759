"""A plan passes data to its playbook, never how hosts are reached: every ansible_* variable
and every Ansible reserved or magic name is refused by the real plan loader, naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible import constants as ansible_constants
from ansible.vars.reserved import get_reserved_names

from fleetgate.errors import BadInput
from fleetgate.rollout.plan import load_plan
from fleetgate.rollout.var_policy import MAGIC_VARS, RESERVED_NAMES, refusal

PLAYBOOK = "examples/rollout/stamp-version.yml"
BASE: dict[str, Any] = {
    "name": "vars",
    "targets": {"inventory": "inv.yml"},
    "change": {"playbook": PLAYBOOK},
    "waves": {"pools": ["pool_canary", "pool_wave1"]},
}
REFUSED_BECAUSE = "connection, interpreter and become variables cannot be set by a plan"

# Every variable Ansible maps to a connection, become or shell setting (its own table), the
# interpreter and ssh argument variables, and a few an attacker would reach for first.
CONNECTION_KEYS = sorted(
    {name for names in ansible_constants.MAGIC_VARIABLE_MAPPING.values() for name in names}
    | set(ansible_constants.COMMON_CONNECTION_VARS)
    | {"ansible_python_interpreter", "ansible_ssh_common_args", "ansible_ssh_extra_args",
       "ansible_become_password", "ansible_become_exe", "ansible_become_flags",
       "ansible_ssh_executable", "ansible_shell_executable", "ansible_connection",
       "ansible_playbook_python", "_ansible_no_log"})
MAGIC_KEYS = ["hostvars", "inventory_hostname", "group_names", "groups", "omit", "playbook_dir",
              "vars", "environment", "become", "connection", "remote_user", "delegate_to",
              "lookup", "role_path", "with_items"]


def write_plan(tmp_path: Path, change: dict[str, Any], rollback: dict[str, Any] | None = None
               ) -> Path:
    doc = {**BASE, "change": {"playbook": PLAYBOOK, **change}}
    if rollback is not None:
        doc["rollback"] = {"playbook": PLAYBOOK, **rollback}
    p = tmp_path / "plan.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


def refused(path: Path) -> str:
    with pytest.raises(BadInput) as exc:
        load_plan(path)
    msg = exc.value.one_line()
    assert str(path) in msg and "\n" not in msg
    return msg


def test_the_connection_keys_cover_what_ansible_maps() -> None:
    # A guard on the parametrisation itself: Ansible's table is what the test walks.
    assert len(CONNECTION_KEYS) > 30
    assert {"ansible_connection", "ansible_become_user", "ansible_ssh_common_args",
            "ansible_python_interpreter"} <= set(CONNECTION_KEYS)


@pytest.mark.parametrize("key", CONNECTION_KEYS)
def test_every_connection_interpreter_and_become_key_is_refused(tmp_path: Path,
                                                                key: str) -> None:
    msg = refused(write_plan(tmp_path, {"extra_vars": {key: "local"}}))
    assert f"extra_vars.{key}: {REFUSED_BECAUSE}" in msg


@pytest.mark.parametrize(("section", "plan"), [
    ("rollback.extra_vars", lambda tmp: write_plan(
        tmp, {}, {"extra_vars": {"ansible_connection": "local"}})),
    ("secret_vars", lambda tmp: write_plan(
        tmp, {"secret_vars": {"ansible_become_password": {"env": "BECOME_PASS"}}})),
])
def test_rollback_and_secret_vars_follow_the_same_policy(tmp_path: Path, section: str,
                                                         plan: Any) -> None:
    msg = refused(plan(tmp_path))
    key = section.rsplit(".", 1)[-1]
    assert f"{key}.ansible_" in msg and REFUSED_BECAUSE in msg
    if section.startswith("rollback"):
        assert "rollback" in msg


def test_the_reported_attack_is_refused(tmp_path: Path) -> None:
    """The finding: connection local plus an interpreter runs a script on the controller."""
    msg = refused(write_plan(tmp_path, {"extra_vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "/tmp/x.sh"}}))
    assert "ansible_connection" in msg or "ansible_python_interpreter" in msg


@pytest.mark.parametrize("key", MAGIC_KEYS)
def test_magic_and_reserved_names_are_refused(tmp_path: Path, key: str) -> None:
    msg = refused(write_plan(tmp_path, {"extra_vars": {key: "x"}}))
    assert f"extra_vars.{key}: " in msg and "Ansible" in msg


def test_ordinary_vars_and_secret_references_are_accepted(tmp_path: Path) -> None:
    extra = {"stamp_version": "3", "stamp_delay_s": 0, "pin_package": "nvidia-driver-575",
             "fleetgate_class": "lab-cpu", "registry_host": "registry.example:5000",
             "items_to_keep": ["a", "b"], "my_ansible_note": "x"}
    secrets = {"registry_token": {"env": "REGISTRY_TOKEN"},
               "db_password": {"file": "/etc/fleetgate/db.pass"}}
    plan = load_plan(write_plan(tmp_path, {"extra_vars": extra, "secret_vars": secrets}))
    assert plan.change.extra_vars == extra
    assert {k: v.describe() for k, v in plan.change.secret_vars.items()} == {
        "registry_token": "env REGISTRY_TOKEN", "db_password": "file /etc/fleetgate/db.pass"}


@pytest.mark.parametrize(("secret_vars", "extra", "words"), [
    ({"t": {"env": "A", "file": "/x"}}, {}, "exactly one of env, file or vault"),
    ({"t": {}}, {}, "exactly one of env, file or vault"),
    ({"t": {"env": "A; rm -rf /"}}, {}, "secret_vars.t.env"),
    ({"t": {"file": "relative/path"}}, {}, "secret_vars.t.file"),
    ({"t": {"value": "hunter2hunter2"}}, {}, "unknown key"),
    ({"t": {"env": "T"}}, {"t": "1"}, "also set in extra_vars"),
])
def test_bad_secret_references_are_one_line(tmp_path: Path, secret_vars: dict[str, Any],
                                            extra: dict[str, Any], words: str) -> None:
    msg = refused(write_plan(tmp_path, {"extra_vars": extra, "secret_vars": secret_vars}))
    assert words in msg


def test_policy_lists_keep_up_with_ansible() -> None:
    """Written out to keep Ansible out of every CLI start; compared with Ansible's own here."""
    theirs = set(get_reserved_names()) | set(ansible_constants.INTERNAL_STATIC_VARS)
    missing = sorted(n for n in theirs if refusal(n) is None)
    assert not missing, f"Ansible reserves names the policy lets through: {missing}"
    assert not {n for n in MAGIC_VARS | RESERVED_NAMES if n.startswith("ansible_")}


@pytest.mark.parametrize("key", ["db_password", "registry_token", "aws_secret_access_key",
                                 "api_key", "passphrase"])
def test_an_extra_var_named_like_a_credential_is_sent_to_secret_vars(tmp_path: Path,
                                                                     key: str) -> None:
    msg = refused(write_plan(tmp_path, {"extra_vars": {key: "hunter2hunter2"}}))
    assert f"extra_vars.{key}: the name says it holds a credential" in msg
    assert "secret_vars" in msg
    assert "hunter2hunter2" not in msg


def test_names_that_only_contain_a_credential_word_stay_extra_vars(tmp_path: Path) -> None:
    plan = load_plan(write_plan(tmp_path, {"extra_vars": {
        "bypass_cache": True, "token_budget": 3, "password_policy_doc": "wiki"}}))
    assert plan.change.extra_vars["token_budget"] == 3
