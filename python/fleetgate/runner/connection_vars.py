"""Strict grammars for the inventory variables that say how a host is reached.

Each variable here reaches the ssh/scp/sftp command line Ansible runs, the `/bin/sh -c`
string testinfra's ansible backend runs for `smoke run`, the program the controller starts,
or the command run on the host; so each value must fit an allow-list grammar, checked on
Ansible's own view of the inventory before any command (runner/inventory.py). Decisions:

- The values must be literal. `ansible-inventory --list` shows a Jinja template unrendered,
  so fleetgate could only check it by rendering it, and rendering runs lookups on the
  controller. The one template allowed is `{{ ansible_playbook_python }}` as an interpreter
  (the controller's own Python, the usual setting for localhost).
- `ansible_connection` is ssh (or its aliases smart, ansible.builtin.ssh), or local on a host
  named localhost: fleetgate reaches hosts over OpenSSH, whose arguments are what is checked
  here. `local` on any other name would run the host's work on the controller; paramiko
  takes its own proxy command; docker and the rest have their own argument sets.
- Which programs the controller runs is not the inventory's to choose: the ssh, scp and sftp
  executables may only be the system's, and a PKCS#11 provider or paramiko proxy command is
  refused outright.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from fleetgate.runner.ssh_args import args_problem

ADDRESS_RE = re.compile(r"^(?!-)[A-Za-z0-9.:_-]{1,253}$")
USER_RE = re.compile(r"^(?!-)[A-Za-z0-9._-]{1,64}$")
PORT_TEXT_RE = re.compile(r"^[0-9]{1,5}$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
TEMPLATE_RE = re.compile(r"\{\{|\{%|\{#")
# A key file reaches ssh as one argv word (`-o IdentityFile="..."`, testinfra's quoted `-i`),
# so a space is fine; a quote would end Ansible's own quoting.
KEY_PATH_RE = re.compile(r"^(?!-)[A-Za-z0-9_./%@+~:, -]{1,4096}$")
# Ansible's default control_path is a Python format string: "%(directory)s/%%C".
CONTROL_PATH_RE = re.compile(r"^(?!-)[A-Za-z0-9_./%@+~:(),-]{1,1024}$")
ABS_PATH_RE = re.compile(r"^/[A-Za-z0-9_./+-]{0,254}$")
# An interpreter is the first line the host runs a module with: a path, and for
# `/usr/bin/env python3` a few plain words after it.
INTERPRETER_RE = re.compile(r"^/[A-Za-z0-9_./+-]{0,254}( [A-Za-z0-9_.+=-]{1,64}){0,3}$")
INTERPRETER_WORDS = frozenset({"auto", "auto_silent", "auto_legacy", "auto_legacy_silent"})
CONTROLLER_PYTHON = "{{ ansible_playbook_python }}"
INTERPRETER_VAR_RE = re.compile(r"^ansible_[a-z0-9_]+_interpreter$")
PLUGIN_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}(\.[a-z][a-z0-9_]{0,63}){0,2}$")
BECOME_EXE_RE = re.compile(r"^(?:/[A-Za-z0-9_./+-]{0,254}|[A-Za-z0-9_.+-]{1,64})$")
BECOME_FLAGS_RE = re.compile(r"^[A-Za-z0-9_=.,:/+-]{1,64}( [A-Za-z0-9_=.,:/+-]{1,64}){0,15}$")
SSH_CONNECTIONS = frozenset({"ssh", "smart", "ansible.builtin.ssh"})
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})
SYSTEM_BIN_DIRS = ("", "/usr/bin/", "/bin/", "/usr/local/bin/")

Problem = Callable[[object], str | None]


def _address(value: object) -> str | None:
    if isinstance(value, str) and ADDRESS_RE.fullmatch(value):
        return None
    return "is not a host name or IP address ([A-Za-z0-9.:_-], not starting with '-')"


def _port(value: object) -> str | None:
    # A dynamic inventory's JSON often carries the port as a string; Ansible takes "22" as 22.
    if isinstance(value, int) and not isinstance(value, bool):
        port = value
    elif isinstance(value, str) and PORT_TEXT_RE.fullmatch(value):
        port = int(value)
    else:
        return "is not a port number"
    return None if 1 <= port <= 65535 else "is not a port number in 1..65535"


def _user(value: object) -> str | None:
    if isinstance(value, str) and USER_RE.fullmatch(value):
        return None
    return "is not a user name ([A-Za-z0-9._-], not starting with '-')"


def _matching(rx: re.Pattern[str], what: str) -> Problem:
    def problem(value: object) -> str | None:
        return None if isinstance(value, str) and rx.fullmatch(value) else f"is not {what}"
    return problem


def _args_of(tool: str) -> Problem:
    def problem(value: object) -> str | None:
        return args_problem(value, tool) if isinstance(value, str) else "is not a string"
    return problem


def _interpreter(value: object) -> str | None:
    if isinstance(value, str) and (value in INTERPRETER_WORDS or value == CONTROLLER_PYTHON
                                   or INTERPRETER_RE.fullmatch(value)):
        return None
    return ("is not an absolute path of [A-Za-z0-9_./+-] (plus plain words, as in "
            "'/usr/bin/env python3') nor auto, auto_silent, auto_legacy, auto_legacy_silent")


def _system_program(name: str) -> Problem:
    allowed = frozenset(d + name for d in SYSTEM_BIN_DIRS)

    def problem(value: object) -> str | None:
        if value in allowed:
            return None
        return (f"names a program the controller runs; only the system's {name} is allowed "
                f"({', '.join(sorted(allowed))})")
    return problem


def _refused(why: str) -> Problem:
    return lambda _value: why


_KEY_PATH = _matching(KEY_PATH_RE, "a path of [A-Za-z0-9_./%@+~:, -], not starting with '-'")

# The ssh connection plugin still honours the old ansible_ssh_* spellings.
CHECKS: dict[str, Problem] = {
    "ansible_host": _address,
    "ansible_ssh_host": _address,
    "ansible_port": _port,
    "ansible_ssh_port": _port,
    "ansible_user": _user,
    "ansible_ssh_user": _user,
    "ansible_ssh_private_key_file": _KEY_PATH,
    "ansible_private_key_file": _KEY_PATH,
    "ansible_ssh_common_args": _args_of("ssh"),
    "ansible_ssh_extra_args": _args_of("ssh"),
    "ansible_ssh_args": _args_of("ssh"),
    "ansible_scp_extra_args": _args_of("scp"),
    "ansible_sftp_extra_args": _args_of("sftp"),
    "ansible_control_path": _matching(CONTROL_PATH_RE, "a path of [A-Za-z0-9_./%@+~:(),-]"),
    "ansible_control_path_dir": _matching(CONTROL_PATH_RE,
                                          "a path of [A-Za-z0-9_./%@+~:(),-]"),
    "ansible_ssh_executable": _system_program("ssh"),
    "ansible_scp_executable": _system_program("scp"),
    "ansible_sftp_executable": _system_program("sftp"),
    "ansible_ssh_pkcs11_provider": _refused("loads a library into ssh on the controller"),
    "ansible_paramiko_proxy_command": _refused("runs a command on the controller"),
    "ansible_become_user": _user,
    "ansible_become_method": _matching(PLUGIN_NAME_RE, "a become plugin name"),
    "ansible_become_exe": _matching(BECOME_EXE_RE, "an absolute path or a program name"),
    "ansible_become_flags": _matching(BECOME_FLAGS_RE, "plain flags ([A-Za-z0-9_=.,:/+-] "
                                                       "words)"),
    "ansible_shell_executable": _matching(ABS_PATH_RE, "an absolute path of [A-Za-z0-9_./+-]"),
    "ansible_shell_type": _matching(PLUGIN_NAME_RE, "a shell plugin name"),
}


def _connection(host: str, value: object) -> str | None:
    if value in SSH_CONNECTIONS:
        return None
    if value in LOCAL_CONNECTIONS:
        return None if host == "localhost" else (
            "runs this host's work on the controller; local is allowed only for a host "
            "named localhost")
    return "is not ssh (fleetgate reaches hosts over OpenSSH), nor local on localhost"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_for(var: str) -> Problem | None:
    """The check for inventory variable `var`, or None when fleetgate does not check it."""
    if var in CHECKS:
        return CHECKS[var]
    return _interpreter if INTERPRETER_VAR_RE.fullmatch(var) else None


def value_problem(host: str, var: str, value: object) -> str | None:
    """Why `var` = `value` on `host` cannot reach a command, as a line naming the variable
    and its value; None when it can (or when fleetgate does not check `var`)."""
    check = ((lambda v: _connection(host, v)) if var == "ansible_connection"
             else check_for(var))
    if check is None:
        return None
    why: str | None
    if isinstance(value, str) and CONTROL_RE.search(value):
        why = "has a control character in it"
    elif isinstance(value, str) and TEMPLATE_RE.search(value) and not (
            check is _interpreter and value == CONTROLLER_PYTHON):
        why = ("is a Jinja template: connection variables must be literal, since Ansible "
               "would render it on the controller after fleetgate checked it")
    else:
        why = check(value)
    return f"{var} {_shown(value)} {why}" if why else None


def host_problems(host: str, hostvars: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(variable, reason) for each checked variable of `host` that is refused."""
    out = []
    for var in sorted(hostvars):
        if why := value_problem(host, var, hostvars[var]):
            out.append((var, why))
    return out
