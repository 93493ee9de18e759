"""Which variable names a rollout plan may hand to Ansible.

Extra vars have the highest precedence in Ansible, above the inventory's host vars, so a plan
that could set `ansible_connection: local` plus `ansible_python_interpreter: /some/script`
would run that script on the controller, and `ansible_ssh_common_args` or `ansible_become_*`
would change how and as whom every host is reached. How a host is reached belongs to the
inventory, reviewed with it; a plan only passes data to its playbook. So no `ansible_*` name
at all (simpler to review than a list of the dangerous ones, which grows with each Ansible
release), and none of Ansible's reserved names: its magic variables (`hostvars`, `groups`,
...), playbook keywords (`environment`, `vars`, `become`, ...) and template globals (`omit`,
`lookup`, ...), which a variable would shadow or Ansible would refuse with a warning.
"""

from __future__ import annotations

# Ansible's own lists, written out so that loading a plan does not import Ansible (0.4 s on
# every CLI call): ansible.constants.INTERNAL_STATIC_VARS (magic variables) and
# ansible.vars.reserved.get_reserved_names() (keywords and template globals), less the
# ansible_* names refused by prefix. tests/unit/test_var_policy.py keeps them in step.
MAGIC_VARS = frozenset({
    "group_names", "groups", "hostvars", "inventory_dir", "inventory_file",
    "inventory_hostname", "inventory_hostname_short", "play_hosts", "playbook_dir",
    "role_name", "role_names", "role_path", "role_uuid",
    # Not in Ansible's list but magic all the same: the implicit group and loop variables.
    "ungrouped", "item",
})
RESERVED_NAMES = frozenset({
    "action", "always", "any_errors_fatal", "args", "async", "async_val", "become",
    "become_exe", "become_flags", "become_method", "become_user", "block", "changed_when",
    "check_mode", "collections", "connection", "cycler", "debugger", "delay", "delegate_facts",
    "delegate_to", "dict", "diff", "environment", "fact_path", "failed_when", "force_handlers",
    "gather_facts", "gather_timeout", "handlers", "hosts", "ignore_errors",
    "ignore_unreachable", "joiner", "lipsum", "local_action", "lookup", "loop", "loop_control",
    "loop_with", "max_fail_percentage", "module_defaults", "name", "namespace", "no_log",
    "notify", "now", "omit", "order", "poll", "port", "post_tasks", "pre_tasks", "q", "query",
    "range", "register", "remote_user", "rescue", "retries", "roles", "run_once", "serial",
    "strategy", "tags", "tasks", "throttle", "timeout", "undef", "until", "vars", "vars_files",
    "vars_prompt", "when", "with_",
})


def refusal(key: str) -> str | None:
    """Why a plan may not set variable `key`, or None if it may."""
    if key.lstrip("_").startswith("ansible_"):
        return ("connection, interpreter and become variables cannot be set by a plan "
                "(no ansible_* variable can; they belong in the inventory)")
    if key in MAGIC_VARS:
        return f"{key} is one of Ansible's magic variables; a plan cannot set it"
    if key in RESERVED_NAMES or key.startswith("with_"):
        return f"{key} is a name Ansible reserves (a keyword or template global); rename it"
    return None


def check_key(key: str, where: str) -> None:
    """ValueError naming `where.key` if a plan may not set it (pydantic turns it into the
    one-line BadInput that names the plan file and section)."""
    why = refusal(key)
    if why is not None:
        raise ValueError(f"{where}.{key}: {why}")
