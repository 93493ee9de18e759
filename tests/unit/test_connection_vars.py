"""Connection variables, host names, host patterns and node classes that could run code on
the controller, leave a run directory or select the wrong hosts are refused before anything
runs, by every command that contacts hosts; legitimate values (the lab's, IPv6, regex limits)
still work. The CLI runs for real (`fleetgate` as a subprocess, real `ansible-inventory` and
the checkout's vars plugin) against INI inventories whose hosts point at 127.0.0.1:1, where
nothing listens: an injection that got through would leave its marker file behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.inventory.manager import split_host_pattern

from fleetgate.runner.connection_vars import value_problem
from fleetgate.runner.inventory import limit_problem, split_limit
from fleetgate.runner.ssh_args import args_problem
from fleetgate.smoke.session import connection_refusal
from tests.conftest import REPO, fleetgate

PLAN = """\
name: noop-test
targets:
  inventory: {inventory}
change:
  playbook: examples/rollout/noop.yml
waves:
  steps: [1, "100%"]
gates:
  checks: []
"""


def cli(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return fleetgate(*args, timeout=timeout, env={"FLEETGATE_SITE": str(REPO),
                                                  "FLEETGATE_STATE_DIR": str(tmp_path / "st")})


def markers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.rglob("MARKER*"))


def assert_refused(p: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2 and one line on stderr naming `words` (the host, the variable), no traceback."""
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


# -- the grammars themselves (pure functions) ---------------------------------------------

SSH_ARGS_OK = [
    "",
    "-o ConnectTimeout=5 -o StrictHostKeyChecking=accept-new",
    # What the lab writes (lab/inventory.py, lab/keys.py).
    "-o BatchMode=yes -o IdentitiesOnly=yes -o UserKnownHostsFile=/x/lab/ssh/known_hosts "
    "-o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o ServerAliveInterval=5 "
    "-o ServerAliveCountMax=3 -o ControlPath=/tmp/fgcp-a1b2/%C",
    "-C -oControlMaster=auto -oControlPersist=60s",
    "-o ProxyJump=ops@bastion.dc1.example.com:2222,10.0.0.9",
    "-J ops@bastion -o PubkeyAcceptedAlgorithms=+ssh-rsa -o LogLevel=ERROR",
    "-o HostKeyAlgorithms=ssh-ed25519-cert-v01@openssh.com,ssh-ed25519",
    "-o UserKnownHostsFile=~/.ssh/known_hosts -i ~/.ssh/id_ed25519 -p 2222",
]

SSH_ARGS_BAD = [
    ("-o ProxyCommand=nc %h %p", "ProxyCommand is refused: it runs a command"),
    ("-oProxyCommand=/tmp/x", "ProxyCommand is refused"),
    ("-o proxycommand=/tmp/x", "proxycommand is refused"),
    ("-o ConnectTimeout=1 -o 'ProxyCommand=sh -c x'", "ProxyCommand is refused"),
    ("-o PermitLocalCommand=yes -o LocalCommand=/tmp/x", "PermitLocalCommand is refused"),
    ("-o Match=exec", "Match is refused"),
    ("-o KnownHostsCommand=/tmp/x", "KnownHostsCommand is refused"),
    ("-o PKCS11Provider=/tmp/x.so", "loads a library"),
    ("-o Include=/tmp/cfg", "reads a config file"),
    ("-F /tmp/cfg", "flag -F is refused"),
    ("-o SendEnv=AWS_SECRET_ACCESS_KEY", "SendEnv is refused"),
    ("-o ForwardAgent=yes", "ForwardAgent is refused"),
    ("-L 8080:127.0.0.1:80", "flag -L is refused"),
    ("-A", "flag -A is refused"),
    ("-o ProxyJump=-oProxyCommand=x", "not a list of [user@]host[:port] jump hosts"),
    ("-o ConnectTimeout=1; touch /tmp/M #", "has ';' in it"),
    ("-o ConnectTimeout=$(touch /tmp/M)", "has '$' in it"),
    ("-o ConnectTimeout=`touch /tmp/M`", "has '`' in it"),
    ("-o ConnectTimeout=1 | touch /tmp/M", "has '|' in it"),
    ('-o "ConnectTimeout=1"', "has '\"' in it"),
    ("-o ConnectTimeout=5\n-o X=1", "has '\\n' in it"),
    ("-o ConnectTimeout=five", "ConnectTimeout value 'five' is not a whole number"),
    ("-o StrictHostKeyChecking=maybe", "is not one of yes|no|ask|accept-new"),
    ("-o NoSuchOption=1", "'NoSuchOption' is not an ssh option fleetgate allows"),
    ("-o ConnectTimeout", "needs Key=Value"),
    ("-o", "-o needs a value"),
    ("ConnectTimeout=5", "is not a ssh flag fleetgate allows"),
    ("-p 99999", "-p value '99999' is not a port number"),
    ("-o UserKnownHostsFile=-x", "is not a path"),
]


@pytest.mark.parametrize("text", SSH_ARGS_OK)
def test_legitimate_ssh_args_are_accepted(text: str) -> None:
    assert args_problem(text) is None


@pytest.mark.parametrize(("text", "why"), SSH_ARGS_BAD, ids=[b[0] for b in SSH_ARGS_BAD])
def test_ssh_args_outside_the_grammar_are_refused_with_the_reason(text: str, why: str) -> None:
    got = args_problem(text)
    assert got is not None and why in got, got


def test_scp_and_sftp_args_have_their_own_flags() -> None:
    assert args_problem("-O -l 8192", "scp") is None
    assert args_problem("-B 32768 -R 64 -o ConnectTimeout=3", "sftp") is None
    assert "names a program the controller runs" in str(args_problem("-S /tmp/x", "scp"))
    assert "names a program" in str(args_problem("-S /tmp/x", "sftp"))
    assert "'-O' is not a sftp flag" in str(args_problem("-O", "sftp"))


VALUES_OK = [
    ("h1", "ansible_host", "fe80::1"),
    ("h1", "ansible_host", "gpu0.dc1.example.com"),
    ("h1", "ansible_port", "22"),
    ("h1", "ansible_python_interpreter", "/usr/bin/python3"),
    ("h1", "ansible_python_interpreter", "/usr/bin/env python3"),
    ("h1", "ansible_python_interpreter", "auto_silent"),
    ("localhost", "ansible_python_interpreter", "{{ ansible_playbook_python }}"),
    ("h1", "ansible_connection", "ssh"),
    ("localhost", "ansible_connection", "local"),
    ("h1", "ansible_ssh_executable", "/usr/bin/ssh"),
    ("h1", "ansible_ssh_private_key_file", "/var/lib/fleetgate lab/id_ed25519"),
    ("h1", "ansible_become_exe", "sudo"),
    ("h1", "ansible_become_flags", "-H -S -n"),
    ("h1", "ansible_control_path", "%(directory)s/%%C"),
    ("h1", "rack", "$(anything: fleetgate does not read it as a connection variable)"),
]

VALUES_BAD = [
    ("h1", "ansible_host", "-oProxyCommand=x", "not starting with '-'"),
    ("h1", "ansible_host", "{{ lookup('pipe', 'id') }}", "is a Jinja template"),
    ("h1", "ansible_port", "-p 22", "is not a port number"),
    ("h1", "ansible_python_interpreter", "/tmp/x; touch M", "is not an absolute path"),
    ("h1", "ansible_perl_interpreter", "perl", "is not an absolute path"),
    ("h1", "ansible_python_interpreter", "{{ lookup('pipe', 'id') }}", "is a Jinja template"),
    ("h1", "ansible_connection", "local", "local is allowed only for a host named localhost"),
    ("h1", "ansible_connection", "docker", "is not ssh"),
    ("h1", "ansible_connection", "paramiko", "is not ssh"),
    ("h1", "ansible_ssh_executable", "/tmp/ssh", "only the system's ssh"),
    ("h1", "ansible_sftp_executable", "/usr/bin/python3", "only the system's sftp"),
    ("h1", "ansible_ssh_pkcs11_provider", "/usr/lib/x.so", "loads a library"),
    ("h1", "ansible_paramiko_proxy_command", "nc %h %p", "runs a command on the controller"),
    ("h1", "ansible_scp_extra_args", "-S /tmp/x", "names a program"),
    ("h1", "ansible_ssh_args", "-o ProxyCommand=x", "ProxyCommand is refused"),
    ("h1", "ansible_become_exe", "sudo; id", "is not an absolute path or a program name"),
    ("h1", "ansible_become_user", "-u root", "is not a user name"),
    ("h1", "ansible_ssh_private_key_file", '/k" -oProxyCommand=x', "is not a path"),
    ("h1", "ansible_shell_executable", "sh -c id", "is not an absolute path"),
]


@pytest.mark.parametrize(("host", "var", "value"), VALUES_OK)
def test_legitimate_connection_values_are_accepted(host: str, var: str, value: str) -> None:
    assert value_problem(host, var, value) is None


@pytest.mark.parametrize(("host", "var", "value", "why"), VALUES_BAD,
                         ids=[f"{b[1]}={b[2]}" for b in VALUES_BAD])
def test_connection_values_outside_their_grammar_are_refused(host: str, var: str, value: str,
                                                             why: str) -> None:
    got = value_problem(host, var, value)
    assert got is not None and got.startswith(f"{var} ") and why in got, got


LIMITS_OK = ["h1", "all", "h[1:3]", "pool_main:&class_lab_cpu", "a,b", "fe80::1", "~h[12]",
             "~lab-c0[12]", "~(h1|h3)", "~h[12]:!h1", "all:&~h[23]", r"~^h\d+$", "!~h1",
             "~h1,h3", "~gpu-(a|b)0?[0-9]+$"]
LIMITS_BAD = [
    ("-x", "starts with '-'"), ("@/etc/passwd", "characters outside"),
    ("h1 h2", "characters outside"), ("h1;id", "characters outside"), ("", "characters"),
    ("h1\n", "characters outside"), ("$(reboot)", "regex syntax outside a '~regex'"),
    ("~h[", "Ansible would drop '[' from it"), ("~x(", "is not a regular expression"),
    ("~h{1,2}", "'2}' has regex syntax but no leading '~'"),
]


@pytest.mark.parametrize("limit", LIMITS_OK)
def test_ansibles_host_pattern_grammar_is_accepted(limit: str) -> None:
    assert limit_problem(limit) is None
    if "~" in limit:  # the split fleetgate checks is the one Ansible makes
        assert split_limit(limit) == split_host_pattern(limit)


@pytest.mark.parametrize(("limit", "why"), LIMITS_BAD, ids=[b[0] for b in LIMITS_BAD])
def test_limits_that_are_options_or_that_ansible_would_misread_are_refused(limit: str,
                                                                           why: str) -> None:
    got = limit_problem(limit)
    assert got is not None and why in got, got


def test_the_smoke_suite_refuses_what_testinfra_would_paste_into_a_shell() -> None:
    bad = {"ansible_host": "127.0.0.1", "ansible_ssh_common_args": "-o A=1; touch M #"}
    got = connection_refusal("h1", bad)
    assert got is not None and got.startswith(
        "refused before connecting: hosts.h1.ansible_ssh_common_args: "), got
    assert "host name" in str(connection_refusal("../x", {}))
    assert "fleetgate_class" in str(connection_refusal("h1", {"fleetgate_class": "../x"}))
    assert connection_refusal("h1", {"ansible_host": "::1", "fleetgate_class": "lab-cpu",
                                     "ansible_ssh_common_args": SSH_ARGS_OK[2]}) is None


# -- through the real CLI -----------------------------------------------------------------

def _inventory(tmp_path: Path, h1: str, extra: str = "") -> Path:
    """h1 (with the injection) and a clean h2 in a class group; `extra` appended as is."""
    text = (f"[class_lab_cpu]\n{h1}\nh2 ansible_host=127.0.0.1 ansible_port=1\n{extra}")
    path = tmp_path / "hosts.ini"
    path.write_text(text)
    return path


def _injections(tmp_path: Path) -> list[tuple[str, str, str, str]]:
    """(id, h1's inventory line, the host named in the error, the variable named)."""
    def touch(eid: str) -> str:
        return f"touch {tmp_path}/MARKER-{eid}"

    base = "ansible_host=127.0.0.1 ansible_port=1"
    outside = tmp_path / "elsewhere"
    return [
        ("common-args-semicolon",
         f'h1 {base} ansible_ssh_common_args="-o ConnectTimeout=1; {touch("a")} #"',
         "h1", "ansible_ssh_common_args"),
        ("common-args-proxycommand",
         f'h1 {base} ansible_ssh_common_args="-o ProxyCommand={touch("b")}"',
         "h1", "ansible_ssh_common_args"),
        ("extra-args-proxycommand",
         f'h1 {base} ansible_ssh_extra_args="-oProxyCommand={touch("c")}"',
         "h1", "ansible_ssh_extra_args"),
        ("common-args-subshell",
         f'h1 {base} ansible_ssh_common_args="-o ConnectTimeout=$({touch("d")})"',
         "h1", "ansible_ssh_common_args"),
        ("extra-args-backticks",
         f'h1 {base} ansible_ssh_extra_args="-o ConnectTimeout=`{touch("e")}`"',
         "h1", "ansible_ssh_extra_args"),
        ("sftp-args-proxycommand",
         f'h1 {base} ansible_sftp_extra_args="-o ProxyCommand={touch("f")}"',
         "h1", "ansible_sftp_extra_args"),
        ("host-is-an-option",
         f'h1 ansible_host="-oProxyCommand={touch("g")}" ansible_port=1',
         "h1", "ansible_host"),
        ("host-is-a-template",
         f"h1 ansible_host=\"{{{{ lookup('pipe', '{touch('h')}') }}}}\" ansible_port=1",
         "h1", "ansible_host"),
        ("port-is-an-option", 'h1 ansible_host=127.0.0.1 ansible_port="-p 2222"',
         "h1", "ansible_port"),
        ("interpreter-semicolon",
         f'h1 {base} ansible_python_interpreter="/tmp/x; {touch("i")}"',
         "h1", "ansible_python_interpreter"),
        ("connection-local", f"h1 {base} ansible_connection=local", "h1", "ansible_connection"),
        ("ssh-executable", f"h1 {base} ansible_ssh_executable={tmp_path}/ssh",
         "h1", "ansible_ssh_executable"),
        ("host-name-dotdot", f"../x {base}", "'../x'", "host name"),
        ("host-name-slash", f"a/b {base}", "'a/b'", "host name"),
        ("class-dotdot", f"h1 {base} fleetgate_class=../x", "host h1", "fleetgate_class"),
        # A class file that exists, outside the classes directory: still only a name may.
        ("class-path-to-a-real-file",
         f"h1 {base} fleetgate_class=../../../../../../../..{outside}/lab-cpu",
         "host h1", "fleetgate_class"),
    ]


@pytest.fixture
def class_outside(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(REPO / "inventory" / "classes" / "lab-cpu.yml",
                tmp_path / "elsewhere" / "lab-cpu.yml")


@pytest.mark.usefixtures("class_outside")
@pytest.mark.parametrize("case", range(16))
def test_fleet_facts_refuses_each_injection_naming_host_and_variable(tmp_path: Path,
                                                                     case: int) -> None:
    eid, line, host, var = _injections(tmp_path)[case]
    inv = _inventory(tmp_path, line)
    # The ungrouped h1 of the class cases takes its class from the host var alone.
    if eid.startswith("class-"):
        inv.write_text(f"{line}\n[class_lab_cpu]\nh2 ansible_host=127.0.0.1 ansible_port=1\n")
    p = cli(tmp_path, "fleet", "facts", "-i", str(inv))
    assert_refused(p, str(inv), host, var)
    assert markers(tmp_path) == []


def test_a_class_given_by_a_group_var_is_refused_by_the_layer(tmp_path: Path) -> None:
    # group_vars/ reach hostvars through Ansible's own vars plugin, past fleetgate_class's.
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.ini").write_text("h1 ansible_host=127.0.0.1 ansible_port=1\n")
    (inv / "group_vars" / "all.yml").write_text("fleetgate_class: ../../etc/passwd\n")
    p = cli(tmp_path, "smoke", "run", "-i", str(inv))
    assert_refused(p, "hosts.h1.fleetgate_class", "'../../etc/passwd' is not a node class")
    # [all:vars] is the group's own: the vars plugin refuses it, naming the group.
    ini = tmp_path / "hosts.ini"
    ini.write_text("h1 ansible_host=127.0.0.1 ansible_port=1\n[all:vars]\n"
                   "fleetgate_class=../../etc/passwd\n")
    p = cli(tmp_path, "smoke", "run", "-i", str(ini))
    assert_refused(p, str(ini), "group all: fleetgate_class '../../etc/passwd' is not a node")


@pytest.mark.parametrize("command", [("fleet", "hosts"), ("fleet", "drift")])
def test_a_group_class_a_class_group_overrides_is_still_refused(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    # Every host here takes lab-cpu from its class group, over [all:vars]; the climbing name
    # would reach the first host added outside that group, so the inventory is refused now.
    inv = _inventory(tmp_path, "h1 ansible_host=127.0.0.1 ansible_port=1",
                     "[all:vars]\nfleetgate_class=../../x\n")
    p = cli(tmp_path, *command, "-i", str(inv))
    assert_refused(p, str(inv), "group all", "fleetgate_class '../../x' is not a node class")


@pytest.mark.usefixtures("class_outside")
@pytest.mark.parametrize("command", [
    ("smoke", "run"), ("diagnose", "--limit", "all"), ("fleet", "ping"), ("fleet", "drift"),
    ("fleet", "hosts"), ("rollout", "plan", "PLAN"), ("rollout", "start", "PLAN"),
], ids=lambda c: " ".join(c[:2]))
def test_every_command_that_reaches_hosts_refuses_them_all(tmp_path: Path,
                                                           command: tuple[str, ...]) -> None:
    """Every injection at once, one host each: the first is named, the rest counted."""
    # Not the class cases: the vars plugin refuses those inside ansible-inventory, first.
    cases = [c for c in _injections(tmp_path) if not c[0].startswith("class-")]
    lines = [line.replace("h1 ", f"i{n:02d} ", 1) for n, (_, line, _, _) in enumerate(cases)]
    inv = _inventory(tmp_path, lines[0], "\n".join(lines[1:]) + "\n")
    plan = tmp_path / "plan.yml"
    plan.write_text(PLAN.format(inventory=inv))
    argv = [str(plan) if a == "PLAN" else a for a in command]
    p = cli(tmp_path, *argv, "-i", str(inv))
    # '../x' sorts first; every other host has one problem more.
    assert_refused(p, str(inv), "hosts.'../x': host name has characters outside",
                   f"(and {len(cases) - 1} more)")
    assert markers(tmp_path) == []


def test_fleet_play_extra_vars_meet_the_same_checks(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, "h1 ansible_host=127.0.0.1 ansible_port=1")
    for pair, var in ((f"ansible_ssh_common_args=-oProxyCommand={tmp_path}/x",
                       "ansible_ssh_common_args"),
                      ("ansible_connection=local", "ansible_connection"),
                      ("fleetgate_class=../x", "fleetgate_class")):
        p = cli(tmp_path, "fleet", "play", "facts", "-i", str(inv), "-e", pair)
        assert_refused(p, "--extra-vars", var)


def test_legitimate_connection_values_pass_and_smoke_reaches_for_the_host(
        tmp_path: Path) -> None:
    common = "-o ConnectTimeout=5 -o StrictHostKeyChecking=accept-new"
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[class_lab_cpu]\n"
        f'h1 ansible_host=127.0.0.1 ansible_port=1 ansible_ssh_common_args="{common}" '
        "ansible_python_interpreter=/usr/bin/python3\n"
        "v6 ansible_host=::1 ansible_port=1 ansible_python_interpreter=/usr/bin/python3\n"
        "[controller]\nlocalhost ansible_connection=local "
        'ansible_python_interpreter="{{ ansible_playbook_python }}"\n')
    p = cli(tmp_path, "fleet", "hosts", "-i", str(inv), "-o", "json")
    assert p.returncode == 0, p.stderr
    hosts = json.loads(p.stdout)["hosts"]
    assert sorted(hosts) == ["h1", "localhost", "v6"]
    assert hosts["v6"]["address"] == "::1" and hosts["h1"]["class"] == "lab-cpu"
    # The suite ran and tried ssh (nothing listens on port 1): inconclusive, not bad input.
    p = cli(tmp_path, "smoke", "run", "-i", str(inv), "--limit", "h1", "--only", "discovery",
            "-o", "json")
    assert p.returncode == 4, (p.stdout[-2000:], p.stderr[-2000:])
    result = json.loads(p.stdout)["results"][0]
    assert result["host"] == "h1" and result["probe_status"] == "unreachable", result


@pytest.mark.parametrize(("limit", "expected"), [
    ("~h[12]", ["h1", "h2"]), ("~h[12]:!h1", ["h2"]), ("~(h1|h3)", ["h1", "h3"]),
    ("class_lab_cpu:&~h[23]", ["h2", "h3"]), ("~lab-c0[12]", ["lab-c01", "lab-c02"]),
])
def test_a_regex_limit_selects_the_hosts_it_names(tmp_path: Path, limit: str,
                                                  expected: list[str]) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("[class_lab_cpu]\n" + "".join(
        f"{h} ansible_host=127.0.0.1 ansible_port=1\n"
        for h in ("h1", "h2", "h3", "lab-c01", "lab-c02", "lab-c03")))
    p = cli(tmp_path, "fleet", "hosts", "-i", str(inv), "--limit", limit, "--json")
    assert p.returncode == 0, p.stderr
    assert sorted(json.loads(p.stdout)["hosts"]) == expected


@pytest.mark.parametrize(("limit", "why"), [
    ("-oProxyCommand=x", "starts with '-'"), ("~h[", "Ansible would drop '['"),
    ("h1;id", "characters outside"),
])
def test_a_limit_ansible_would_misread_is_bad_input(tmp_path: Path, limit: str,
                                                    why: str) -> None:
    inv = _inventory(tmp_path, "h1 ansible_host=127.0.0.1 ansible_port=1")
    for command in (("fleet", "hosts"), ("smoke", "run"), ("diagnose",)):
        p = cli(tmp_path, *command, "-i", str(inv), "--limit", limit)
        assert_refused(p, "--limit", why)


def test_a_dynamic_source_that_answers_differently_to_testinfra_is_refused_there(
        tmp_path: Path) -> None:
    """The controller's resolution is clean; a second answer would carry a shell command.
    testinfra never asks the source again: it reads the host as the controller resolved and
    checked it (runner/inventory.py hosts_source), so the shell command never reaches it."""
    marker = tmp_path / "MARKER-flip"
    script = tmp_path / "flip.py"
    script.write_text(
        f"#!{shutil.which('python3')}\nimport json, os\n"
        f"count = {str(tmp_path / 'count')!r}\n"
        "n = int(open(count).read()) if os.path.exists(count) else 0\n"
        "open(count, 'w').write(str(n + 1))\n"
        "hv = {'ansible_host': '127.0.0.1', 'ansible_port': 1, 'fleetgate_class': 'lab-cpu'}\n"
        f"if n:\n    hv['ansible_ssh_common_args'] = '-o ConnectTimeout=1; touch {marker} #'\n"
        "print(json.dumps({'all': {'hosts': ['h1']}, '_meta': {'hostvars': {'h1': hv}}}))\n")
    script.chmod(0o755)
    p = cli(tmp_path, "smoke", "run", "-i", str(script), "--only", "discovery", "-o", "json")
    assert p.returncode == 4, (p.stdout[-2000:], p.stderr[-2000:])
    assert int((tmp_path / "count").read_text()) == 1  # the controller's one resolution
    result = json.loads(p.stdout)["results"][0]
    # Port 1 refuses: the host is unreachable with the clean answer, not run with the other.
    assert (result["probe_status"], result["status"]) == ("unreachable", "inconclusive")
    assert result["reason"].startswith("unreachable: ssh: connect to host 127.0.0.1 port 1"), \
        result
    assert not marker.exists()
