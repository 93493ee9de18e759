"""Bad inventories, in every form Ansible reads (INI, YAML, a directory with group_vars and
host_vars, an executable script, a plugin config). Every host is 127.0.0.1 port 1. The
entries that smuggle something into the ssh command line go through `fleet ping`, which
really connects: had the value been accepted, ssh would have run the payload (a ProxyCommand
runs through a shell) and left the entry's marker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.corpus.base import Base
from tests.corpus.entry import (
    FIFO_REASON,
    Entry,
    deep_yaml,
    directory,
    fifo,
    symlink,
    write,
    write_yaml,
)

H1 = "h1 ansible_host=127.0.0.1 ansible_port=1 zone=z1 rack=r1"

Command = Callable[[Base, Path], tuple[str, ...]]


def ping(base: Base, inv: Path) -> tuple[str, ...]:
    return ("fleet", "ping", "-i", str(inv))


def plan(base: Base, inv: Path) -> tuple[str, ...]:
    return ("rollout", "plan", str(base.plan_file), "-i", str(inv))


def drift(base: Base, inv: Path) -> tuple[str, ...]:
    return ("fleet", "drift", "-i", str(inv))


def facts(base: Base, inv: Path) -> tuple[str, ...]:
    return ("fleet", "facts", "-i", str(inv))


def smoke(base: Base, inv: Path) -> tuple[str, ...]:
    return ("smoke", "run", "-i", str(inv), "--only", "discovery")


def diagnose(base: Base, inv: Path) -> tuple[str, ...]:
    return ("diagnose", "-i", str(inv), "--limit", "h1")


def cache_key(base: Base, inv: Path) -> tuple[str, ...]:
    return ("fleet", "cache-key", "h1", "-i", str(inv), "--engine", "torch=2.4.1")


def warmup(base: Base, inv: Path) -> tuple[str, ...]:
    return ("preflight", "warmup", "-i", str(inv))


def _h1(base: Base, extra: str) -> str:
    """The base INI with host h1's line given `extra` variables."""
    return base.inventory.read_text().replace(H1, f"{H1} {extra}")


def _yaml_inv(hosts: dict[str, Any]) -> dict[str, Any]:
    return {"all": {"children": {"class_lab_cpu": {"hosts": hosts},
                                 "pool_canary": {"hosts": {next(iter(hosts)): None}}}}}


def _host(**extra: Any) -> dict[str, Any]:
    return {"ansible_host": "127.0.0.1", "ansible_port": 1, "zone": "z1", "rack": "r1", **extra}


def entries(base: Base) -> list[Entry]:
    out: list[Entry] = []

    def add(eid: str, inv: Path, command: Command, field: str, why: str,
            shown: str | None = None) -> None:
        full = f"inventory-{eid}"
        name = shown or f"{eid}/{inv.name}"
        inputs = (inv,) if inv.is_file() and not inv.is_symlink() else ()
        out.append(Entry(full, "inventory", command(base, inv),
                         tuple(x for x in (name, field) if x), why, inputs=inputs))

    def ini(eid: str, text: str | bytes, command: Command, field: str, why: str) -> None:
        add(eid, write(base.dir("inventory", eid) / "hosts.ini", text), command, field, why)

    def yml(eid: str, doc: Any, command: Command, field: str, why: str) -> None:
        add(eid, write_yaml(base.dir("inventory", eid) / "hosts.yml", doc), command, field,
            why)

    def evil(eid: str) -> str:
        return str(base.evil_script(f"inventory-{eid}"))

    def touch(eid: str) -> str:
        return base.touch(f"inventory-{eid}")

    # -- connection variables that reach the ssh command line (INI)
    ini("ssh-common-args-semicolon", _h1(base, 'ansible_ssh_common_args="-o ConnectTimeout=1; '
        f'{touch("ssh-common-args-semicolon")} #"'), ping, "ansible_ssh_common_args",
        "a shell separator and command in ssh's common args")
    ini("ssh-common-args-proxycommand", _h1(base, 'ansible_ssh_common_args="-o ProxyCommand='
        f'{evil("ssh-common-args-proxycommand")}"'), ping, "ansible_ssh_common_args",
        "a ProxyCommand (run by a shell) in ssh's common args")
    ini("ssh-extra-args-proxycommand", _h1(base, 'ansible_ssh_extra_args="-oProxyCommand='
        f'{evil("ssh-extra-args-proxycommand")}"'), ping, "ansible_ssh_extra_args",
        "a ProxyCommand in ssh's extra args")
    ini("host-dash-proxycommand", _h1(base, 'ansible_host="-oProxyCommand='
        f'{touch("host-dash-proxycommand")}"').replace("ansible_host=127.0.0.1 ", "", 1),
        ping, "ansible_host", "an ansible_host that ssh would read as an option")
    ini("host-semicolon", _h1(base, f'ansible_host="127.0.0.1;{touch("host-semicolon")}"')
        .replace("ansible_host=127.0.0.1 ", "", 1), ping, "ansible_host",
        "a shell separator and command in ansible_host")
    ini("host-command-substitution", _h1(base, 'ansible_host="$('
        f'{touch("host-command-substitution")})"')
        .replace("ansible_host=127.0.0.1 ", "", 1), ping, "ansible_host",
        "a command substitution as ansible_host")
    ini("ssh-host-dash", _h1(base, f"ansible_ssh_host=-oProxyCommand={evil('ssh-host-dash')}"),
        ping, "ansible_ssh_host", "the old ansible_ssh_host spelling, as an option")
    ini("user-dash", _h1(base, f"ansible_user=-oProxyCommand={evil('user-dash')}"), ping,
        "ansible_user", "a user name that ssh would read as an option")
    ini("port-zero", _h1(base, "ansible_port=0").replace("ansible_port=1 ", "", 1), drift,
        "ansible_port", "port 0")
    ini("python-interpreter-semicolon", _h1(base, 'ansible_python_interpreter="/usr/bin/'
        'python3; reboot"'), ping, "ansible_python_interpreter",
        "a shell separator in the interpreter path")
    # -- node class names that would become file paths
    ini("class-dotdot", _h1(base, "fleetgate_class=../../x"), plan, "fleetgate_class",
        "a node class name climbing out of the classes directory")
    ini("class-dotdot-all-vars", base.inventory.read_text() + "\n[all:vars]\n"
        "fleetgate_class=../../x\n", drift, "fleetgate_class",
        "a climbing class name for every host, in [all:vars]")
    ini("class-unknown", _h1(base, "fleetgate_class=no-such-class"), plan, "no-such-class",
        "a class that does not exist")
    # -- files Ansible cannot parse
    ini("ini-unclosed-group", "[class_lab_cpu\n" + H1 + "\n", ping, "",
        "an unclosed group header")
    ini("ini-children-loop", "[a:children]\nb\n[b:children]\na\n" + "[b]\n" + H1 + "\n",
        drift, "", "two groups that are each other's child")
    ini("empty-file", "", plan, "", "an inventory without any host")
    ini("invalid-utf8", base.inventory.read_text().replace("zone=z1 rack=r1", "zone=z\udcff1 "
        "rack=r1", 1).encode("utf-8", "surrogateescape"), plan, "",
        "a failure domain with a byte that is not UTF-8")
    ini("nul-byte", base.inventory.read_text().replace("rack=r1", "rack=r\x001", 1), plan, "",
        "a NUL byte in a failure domain")
    # -- not a regular file
    add("empty-dir", directory(base.dir("inventory", "empty-dir") / "inv"), ping, "",
        "an empty directory")
    add("fifo", fifo(base.dir("inventory", "fifo") / "hosts.ini"), ping, FIFO_REASON,
        "a named pipe as the inventory")
    d = base.dir("inventory", "fifo-in-dir") / "inv"
    fifo(d / "hosts")
    add("fifo-in-dir", d, drift, "", "a directory inventory holding a named pipe")
    loop = base.dir("inventory", "symlink-loop") / "hosts.ini"
    symlink(loop, loop)
    add("symlink-loop", loop, facts, "", "a symlink to itself")
    # -- YAML inventories
    yml("host-name-dotdot", _yaml_inv({"../h1": _host()}), ping, "../h1",
        "a host name with ../ (host names become file names)")
    yml("host-name-slash", _yaml_inv({"racks/h1": _host()}), plan, "racks/h1",
        "a host name with a slash")
    yml("host-name-dash", _yaml_inv({"-h1": _host()}), smoke, "-h1",
        "a host name that reads as an option")
    yml("port-bool", _yaml_inv({"h1": _host(ansible_port=True)}), cache_key, "ansible_port",
        "a boolean port")
    yml("ssh-args-newline", _yaml_inv({"h1": _host(
        ansible_ssh_common_args=f"-o A=1\n-o ProxyCommand={evil('ssh-args-newline')}")}),
        ping, "ansible_ssh_common_args", "a newline and a ProxyCommand in ssh's args")
    yml("key-file-escape", _yaml_inv({"h1": _host(
        ansible_ssh_private_key_file="key\x1b[2J")}), warmup, "ansible_ssh_private_key_file",
        "a terminal escape in the key path")
    add("yaml-syntax", write(base.dir("inventory", "yaml-syntax") / "hosts.yml",
                             "all:\n  hosts:\n    h1: {ansible_host: [127.0.0.1\n"), ping, "",
        "a YAML inventory with an unclosed flow")
    add("yaml-duplicate-host", write(
        base.dir("inventory", "yaml-duplicate-host") / "hosts.yml",
        "all:\n  hosts:\n    h1: {ansible_host: 127.0.0.1, ansible_port: 1}\n"
        "    h1: {ansible_host: 127.0.0.2, ansible_port: 1}\n"), ping, "h1",
        "the same host twice, the second silently winning")
    add("yaml-too-deep", write(base.dir("inventory", "yaml-too-deep") / "hosts.yml",
                               "all:\n  vars:\n    deep: " + deep_yaml()), drift, "",
        "a variable nested past the recursion limit")
    # -- a directory with group_vars / host_vars
    d = base.dir("inventory", "group-vars-proxycommand") / "inv"
    write(d / "hosts.ini", base.inventory.read_text())
    write_yaml(d / "group_vars" / "all.yml", {
        "ansible_ssh_common_args": f"-o ProxyCommand={evil('group-vars-proxycommand')}"})
    add("group-vars-proxycommand", d, ping, "ansible_ssh_common_args",
        "a ProxyCommand for every host in group_vars/all.yml",
        shown="group-vars-proxycommand/inv")
    d = base.dir("inventory", "host-vars-host-dash") / "inv"
    write(d / "hosts.ini", base.inventory.read_text())
    write_yaml(d / "host_vars" / "h1.yml", {
        "ansible_host": f"-oProxyCommand={evil('host-vars-host-dash')}"})
    add("host-vars-host-dash", d, ping, "ansible_host", "an option as ansible_host in "
        "host_vars/h1.yml", shown="host-vars-host-dash/inv")
    # -- executable inventory scripts and plugin configs
    def script(eid: str, body: str, command: Command, field: str, why: str) -> None:
        path = write(base.dir("inventory", eid) / "inventory.sh", "#!/bin/sh\n" + body)
        path.chmod(0o755)
        add(eid, path, command, field, why)

    script("script-fails", "echo 'cmdb is down' >&2\nexit 3\n", ping, "",
           "an inventory script that fails")
    script("script-not-json", "echo 'h1 h2 h3'\n", facts, "",
           "an inventory script that prints no JSON")
    answer = json.dumps({"all": {"hosts": ["h1"]}, "_meta": {"hostvars": {"h1": {
        "ansible_host": "127.0.0.1", "ansible_port": 1,
        "ansible_ssh_common_args": f"-o ProxyCommand={evil('script-proxycommand')}"}}}})
    script("script-proxycommand", f"cat <<'EOF'\n{answer}\nEOF\n", ping,
           "ansible_ssh_common_args", "a dynamic inventory answering with a ProxyCommand")
    yml("plugin-unknown", {"plugin": "no.such.plugin"}, ping, "",
        "a plugin config naming a plugin that does not exist")
    d = base.dir("inventory", "constructed-broken") / "inv"
    write(d / "00-hosts.ini", base.inventory.read_text())
    write_yaml(d / "10-constructed.yml", {"plugin": "ansible.builtin.constructed",
                                          "strict": True,
                                          "compose": {"zone": "undefined_var_x | upper"}})
    add("constructed-broken", d, plan, "", "a constructed config whose expression cannot be "
        "evaluated", shown="constructed-broken/inv")
    return out
