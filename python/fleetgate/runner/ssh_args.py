"""The grammar an inventory's ssh, scp and sftp arguments must fit: an allow-list, not a deny-list.

Ansible splits `ansible_ssh_common_args` and its siblings with shlex and hands the words to
ssh as argv; testinfra's ansible backend (smoke run) pastes the same text unquoted into a
`/bin/sh -c` string. So the text must mean the same to both and carry nothing a shell or ssh
would run: plain words of safe characters (no quotes, no shell syntax), each a flag from a
short list or `-o Key=Value` with Key an OpenSSH option listed here and Value of that option's
kind. Options that run a program on the controller (ProxyCommand, LocalCommand,
KnownHostsCommand, Match exec), load code into ssh (PKCS11Provider), read a config fleetgate
cannot check (Include, -F) or hand the controller's agent, environment or ports to the host
(ForwardAgent, SendEnv, LocalForward, ...) are refused by name; any other unknown option is
refused as unknown. ProxyJump is allowed to [user@]host[:port] hops of checked characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# No quote, backslash, '$', '`', ';', '|', '&', '<', '>', '(', ')', '*', '?', '[', ']', '{',
# '}', '#', '!', tab or newline: the same words to shlex.split and to /bin/sh.
ARGS_CHARS_RE = re.compile(r"^[A-Za-z0-9_.,:/@%+=~^ -]*$")
_OPTION_KEY_RE = re.compile(r"(?:^|\s)-o\s*['\"]?([A-Za-z0-9]+)")
_INT_RE = re.compile(r"^[0-9]{1,6}$")
# ssh expands %-tokens (%C, %h, %p, %r) and a leading ~ itself.
_PATH_RE = re.compile(r"^(?!-)[A-Za-z0-9_./%@+~:,-]{1,1024}$")
_ALGOS_RE = re.compile(r"^[+^-]?[A-Za-z0-9@._-]{1,128}(,[A-Za-z0-9@._-]{1,128}){0,63}$")
_WORD_RE = re.compile(r"^(?!-)[A-Za-z0-9_.-]{1,253}$")
_ADDRESS_RE = re.compile(r"^(?!-)[A-Za-z0-9.:_-]{1,253}$")
_USER_RE = re.compile(r"^(?!-)[A-Za-z0-9._-]{1,64}$")
# ControlPersist: yes/no or a time (60, 60s, 10m, 1h30m).
_DURATION_RE = re.compile(r"^(?:[0-9]{1,6}[smhdwSMHDW]?){1,4}$")
_JUMP_RE = re.compile(r"^(?:(?!-)[A-Za-z0-9._-]{1,64}@)?(?:\[[0-9A-Fa-f:.]{2,45}\]|"
                      r"(?!-)[A-Za-z0-9._-]{1,253})(?::[0-9]{1,5})?$")

Check = Callable[[str], str | None]


def _match(rx: re.Pattern[str], what: str) -> Check:
    return lambda v: None if rx.fullmatch(v) else f"is not {what}"


def _one_of(*words: str) -> Check:
    allowed = frozenset(words)
    shown = "|".join(words)
    return lambda v: None if v.lower() in allowed else f"is not one of {shown}"


def _port(v: str) -> str | None:
    return None if _INT_RE.fullmatch(v) and 1 <= int(v) <= 65535 else "is not a port number"


def _jumps(v: str) -> str | None:
    if v.lower() == "none" or all(_JUMP_RE.fullmatch(hop) for hop in v.split(",")):
        return None
    return "is not a list of [user@]host[:port] jump hosts"


def _duration(v: str) -> str | None:
    if v.lower() in ("yes", "no", "true", "false") or _DURATION_RE.fullmatch(v):
        return None
    return "is not yes, no or a time (60s, 10m)"


_YES_NO = _one_of("yes", "no", "true", "false")
_INT = _match(_INT_RE, "a whole number")
_PATH = _match(_PATH_RE, "a path of [A-Za-z0-9_./%@+~:,-]")
_ALGOS = _match(_ALGOS_RE, "a comma-separated algorithm list")

# Lower-case option name -> its value's check. ssh matches option names without case.
OPTIONS: dict[str, Check] = {
    "connecttimeout": _INT, "connectionattempts": _INT, "serveraliveinterval": _INT,
    "serveralivecountmax": _INT, "numberofpasswordprompts": _INT,
    "port": _port,
    "user": _match(_USER_RE, "a user name"),
    "stricthostkeychecking": _one_of("yes", "no", "ask", "accept-new", "off", "true",
                                     "false"),
    "userknownhostsfile": _PATH, "globalknownhostsfile": _PATH, "identityfile": _PATH,
    "certificatefile": _PATH, "identityagent": _PATH, "controlpath": _PATH,
    "identitiesonly": _YES_NO, "compression": _YES_NO, "batchmode": _YES_NO,
    "passwordauthentication": _YES_NO, "pubkeyauthentication": _YES_NO,
    "kbdinteractiveauthentication": _YES_NO, "challengeresponseauthentication": _YES_NO,
    "gssapiauthentication": _YES_NO, "tcpkeepalive": _YES_NO, "checkhostip": _YES_NO,
    "hashknownhosts": _YES_NO,
    "controlmaster": _one_of("yes", "no", "ask", "auto", "autoask"),
    "controlpersist": _duration,
    "loglevel": _one_of("quiet", "fatal", "error", "info", "verbose", "debug", "debug1",
                        "debug2", "debug3"),
    "pubkeyacceptedkeytypes": _ALGOS, "pubkeyacceptedalgorithms": _ALGOS,
    "hostkeyalgorithms": _ALGOS, "kexalgorithms": _ALGOS, "ciphers": _ALGOS, "macs": _ALGOS,
    "casignaturealgorithms": _ALGOS,
    "preferredauthentications": _match(re.compile(r"^[a-z-]{1,40}(,[a-z-]{1,40}){0,7}$"),
                                       "a comma-separated list of methods"),
    "addressfamily": _one_of("any", "inet", "inet6"),
    "updatehostkeys": _one_of("yes", "no", "ask"),
    "verifyhostkeydns": _one_of("yes", "no", "ask"),
    "requesttty": _one_of("no", "yes", "force", "auto"),
    "hostkeyalias": _match(_WORD_RE, "a host name"),
    "proxyjump": _jumps,
}

_RUNS = "runs a command on the controller"
_FORWARDS = "hands the controller's agent, environment or ports to the host"
REFUSED_OPTIONS: dict[str, str] = {
    "proxycommand": _RUNS, "localcommand": _RUNS, "permitlocalcommand": _RUNS,
    "knownhostscommand": _RUNS, "match": f"can `exec` (it {_RUNS})",
    "proxyusefdpass": "only serves ProxyCommand",
    "pkcs11provider": "loads a library into ssh on the controller",
    "securitykeyprovider": "loads a library into ssh on the controller",
    "xauthlocation": "names a program the controller runs",
    "include": "reads a config file fleetgate cannot check",
    "forwardagent": _FORWARDS, "forwardx11": _FORWARDS, "forwardx11trusted": _FORWARDS,
    "sendenv": _FORWARDS, "setenv": _FORWARDS, "localforward": _FORWARDS,
    "remoteforward": _FORWARDS, "dynamicforward": _FORWARDS, "tunnel": _FORWARDS,
    "gssapidelegatecredentials": _FORWARDS,
}

# Flags per tool: those that stand alone, those that take the next word (or glue it on), and
# those refused with a reason; any other flag is refused as unknown.
@dataclass(frozen=True)
class Tool:
    alone: frozenset[str]
    with_value: dict[str, Check]
    refused: dict[str, str]


_LIBRARY = "loads a library into ssh on the controller"
_COPY_VALUE_FLAGS: dict[str, Check] = {"-i": _PATH, "-P": _port, "-l": _INT, "-J": _jumps,
                                       "-c": _ALGOS}
_COPY_REFUSED = {"-F": "reads a config file fleetgate cannot check",
                 "-S": "names a program the controller runs",
                 "-D": "names a program the host runs instead of its sftp server"}
TOOLS: dict[str, Tool] = {
    "ssh": Tool(frozenset({"-4", "-6", "-C", "-q", "-T", "-t", "-tt", "-x", "-v", "-vv",
                           "-vvv"}),
                {"-i": _PATH, "-p": _port, "-l": OPTIONS["user"], "-J": _jumps, "-c": _ALGOS,
                 "-m": _ALGOS, "-S": _PATH},
                {"-F": "reads a config file fleetgate cannot check", "-I": _LIBRARY,
                 "-E": "writes a log file on the controller", "-A": _FORWARDS,
                 "-X": _FORWARDS, "-Y": _FORWARDS, "-L": _FORWARDS, "-R": _FORWARDS,
                 "-D": _FORWARDS, "-w": _FORWARDS, "-W": _FORWARDS}),
    "scp": Tool(frozenset({"-4", "-6", "-C", "-q", "-O", "-T", "-p", "-v"}),
                _COPY_VALUE_FLAGS, _COPY_REFUSED),
    "sftp": Tool(frozenset({"-4", "-6", "-C", "-q", "-p", "-v"}),
                 {**_COPY_VALUE_FLAGS, "-B": _INT, "-R": _INT}, _COPY_REFUSED),
}


def option_problem(option: str) -> str | None:
    """Why `Key=Value` (one -o option) is refused, or None."""
    key, sep, value = option.partition("=")
    lower = key.lower()
    if lower in REFUSED_OPTIONS:
        return f"option {key} is refused: it {REFUSED_OPTIONS[lower]}"
    if lower not in OPTIONS:
        return f"option {key!r} is not an ssh option fleetgate allows"
    if not sep:
        return f"option {key} needs Key=Value (one word)"
    why = OPTIONS[lower](value)
    return f"option {key} value {value!r} {why}" if why else None


def args_problem(text: str, tool: str = "ssh") -> str | None:
    """Why `text` cannot be `tool`'s extra arguments, or None when every word fits."""
    # A refused option is named first, whatever else is wrong with the text around it.
    for key in _OPTION_KEY_RE.findall(text):
        if key.lower() in REFUSED_OPTIONS:
            return f"option {key} is refused: it {REFUSED_OPTIONS[key.lower()]}"
    if not ARGS_CHARS_RE.fullmatch(text):
        bad = next(c for c in text if not ARGS_CHARS_RE.fullmatch(c))
        return (f"has {bad!r} in it: only -o Key=Value options and plain flags, no quotes "
                "or shell syntax")
    spec = TOOLS[tool]
    words = text.split()
    i = 0
    while i < len(words):
        word = words[i]
        flag, glued = word[:2], word[2:]
        if word in spec.alone:
            i += 1
            continue
        if flag in spec.refused:
            return f"flag {flag} is refused: it {spec.refused[flag]}"
        if flag != "-o" and flag not in spec.with_value:
            return f"{word!r} is not a {tool} flag fleetgate allows"
        if glued:
            value, i = glued, i + 1
        elif i + 1 < len(words):
            value, i = words[i + 1], i + 2
        else:
            return f"{flag} needs a value"
        if flag == "-o":
            if why := option_problem(value):
                return why
        elif why := spec.with_value[flag](value):
            return f"{flag} value {value!r} {why}"
    return None
