"""Hosts as Ansible resolves them: the one place fleetgate reads an inventory.

Every command reads hosts through `resolve_inventory()`, which asks Ansible itself
(`ansible-inventory --list`), so whatever Ansible accepts works here too: INI, YAML, a
directory with group_vars/host_vars, an executable script, an inventory plugin's config,
several sources at once. An answer is kept for the rest of the process, keyed by the
sources' files and the limit, so one command asks once however many runs it makes; an edited
file is asked about again. A source Ansible cannot parse is bad input (one line, exit 2),
not a warning followed by a run against fewer hosts than the operator meant; so is a host
whose connection variables could smuggle an option or a shell word into the ssh command line,
or whose node class is not a class name.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput, FleetgateError
from fleetgate.inputs import check_inventory_source
from fleetgate.runner import redact, vault
from fleetgate.runner.connection_vars import host_problems
from fleetgate.runner.private_state import private_state_dir, replace_private
from fleetgate.site import content_env, content_root, current_site
from fleetgate.spec.schema import CLASS_NAME_RE

# The inventory group whose members are execution nodes (rollout plans, `smoke run
# --execution-node`, the lab's inventory).
EXEC_NODES_GROUP = "fleetgate_execution_nodes"
# Host names reach command lines (--limit, --hosts=ansible://HOST) and file names.
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
# A limit is Ansible's host-pattern grammar: names, globs, ranges, groups, ',' and ':' lists,
# '!' and '&', and '~regex'. It reaches Ansible as one argv word, never a shell, so what
# matters is that it cannot be read as an option (a leading '-') or a file of patterns ('@'),
# and has no space or control character (Ansible would split or strip it silently).
LIMIT_RE = re.compile(r"^(?!-)[A-Za-z0-9_.:*,!&\[\]~()|?+^${}\\-]{1,500}$")
# A pattern piece without '~' names hosts or groups: no regex syntax (it would match nothing).
PLAIN_PATTERN_RE = re.compile(r"^[!&]?[A-Za-z0-9_.:*\[\]-]+$")
# ansible.inventory.manager.split_host_pattern: without ',' a limit is split on ':' outside
# brackets, and whatever this does not match is dropped (tests keep the two in step).
_PATTERN_PIECE_RE = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
RESOLVE_TIMEOUT_S = 120

Sources = Path | Sequence[Path]


def plain_ansible_json(obj: Any) -> Any:
    """ansible-inventory --list (ansible-core 2.19) wraps untrusted strings, such as a vars
    plugin's values, as {"__ansible_unsafe": "..."}; callers want plain data."""
    if isinstance(obj, dict):
        if len(obj) == 1 and ("__ansible_unsafe" in obj or "__ansible_vault" in obj):
            return next(iter(obj.values()))
        return {k: plain_ansible_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain_ansible_json(v) for v in obj]
    return obj


@dataclass(frozen=True)
class Inventory:
    """One resolution: the sources as given (absolute), the limit, Ansible's answer."""

    sources: tuple[Path, ...]
    limit: str | None
    doc: Mapping[str, Any]

    @property
    def label(self) -> str:
        """The sources as one string, for messages and records."""
        return ",".join(str(p) for p in self.sources)

    @property
    def hostvars(self) -> dict[str, dict[str, Any]]:
        """Every host -> its variables (vars plugins included), sorted by host. `_meta`
        leaves out a host that has no variables at all; group membership still names it."""
        hv = self.doc.get("_meta", {}).get("hostvars", {})
        names = set(hv) | set(self.groups_of())
        return {h: dict(hv.get(h) or {}) for h in sorted(names)}

    @property
    def hosts(self) -> list[str]:
        return list(self.hostvars)

    @functools.cached_property
    def vaulted(self) -> list[tuple[str, str]]:
        """(host.variable, ciphertext) of every ansible-vault value, found once per resolution:
        every Ansible run decrypts them for the redactor first (runner/vault.py)."""
        return list(vault.ciphertexts(self.hostvars))

    def groups_of(self) -> dict[str, list[str]]:
        """Host -> every group it is in, directly or through children (sorted). Computed once
        per resolution: smoke asks it for each group of its hosts (hosts_source)."""
        return self._groups

    @functools.cached_property
    def _groups(self) -> dict[str, list[str]]:
        out: dict[str, set[str]] = {}
        for group in self.doc:
            if group != "_meta":
                for h in self._members(group, set()):
                    out.setdefault(h, set()).add(group)
        return {h: sorted(g) for h, g in out.items()}

    def _members(self, group: str, seen: set[str]) -> set[str]:
        if group in seen:
            return set()
        seen.add(group)
        entry = self.doc.get(group) or {}
        found = set(entry.get("hosts") or [])
        for child in entry.get("children") or []:
            found |= self._members(child, seen)
        return found

    def runner_sources(self) -> list[str]:
        """What ansible-runner's `inventory` takes: each source, as `-i` would."""
        return [str(p) for p in self.sources]

    def answer_for(self, hosts: Sequence[str]) -> dict[str, Any]:
        """This resolution narrowed to `hosts`, as ansible-inventory --list answers: their
        variables, and the groups they are in with only them as members."""
        wanted = set(hosts)
        groups = {g for h in hosts for g in self.groups_of().get(h, [])}
        allvars = self.doc.get("_meta", {}).get("hostvars", {}) or {}
        doc: dict[str, Any] = {"_meta": {"hostvars": {h: allvars.get(h) or {} for h in hosts}}}
        for group, entry in self.doc.items():
            if group == "_meta" or group not in groups:
                continue
            entry = entry or {}
            doc[group] = {
                "hosts": [h for h in entry.get("hosts") or [] if h in wanted],
                "children": [c for c in entry.get("children") or [] if c in groups]}
        return doc

    def narrowed(self, hosts: Sequence[str]) -> Inventory:
        """The same resolution with only `hosts` in it (a job for some of them, sent whole
        to an execution node)."""
        return Inventory(self.sources, self.limit, self.answer_for(hosts))

    def hosts_source(self, workdir: Path, hosts: Sequence[str], name: str) -> Path:
        """An inventory of these hosts of this resolution, for a tool that resolves again by
        itself (testinfra's --ansible-inventory, one process per group of hosts): an inventory
        script in `workdir` that answers with the hosts' variables and groups as resolved
        here. Re-reading the operator's sources instead costs every process a whole
        resolution (17 s for a 10,000-host INI file), and a dynamic source could answer
        differently. `name` becomes the file's name; hosts are checked names (HOST_RE)."""
        script = host_path(workdir, name, ".py", prefix="inventory-")
        data = stand_in_answer(script)
        data.write_text(json.dumps(self.answer_for(hosts)))
        script.write_text(f"#!{sys.executable}\nimport sys\n"
                          f"sys.stdout.write(open({str(data)!r}).read())\n")
        script.chmod(0o700)  # run by this user only; it sits in a private run dir
        return script


def stand_in_answer(script: Path) -> Path:
    """The JSON that a stand-in from Inventory.hosts_source prints: a tool that can take the
    answer itself (the smoke suite's testinfra) reads it instead of running the script."""
    return script.with_suffix(".json")


def ansible_env() -> dict[str, str]:
    """The environment for Ansible's own command-line tools: fleetgate's content (its
    ansible.cfg, roles, vars plugin) and the site's node classes, which the vars plugin reads."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ,
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            **content_env(),
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_NOCOLOR": "1",
            "PYTHONDONTWRITEBYTECODE": "1"}


def split_limit(limit: str) -> list[str]:
    """The patterns Ansible reads a limit as (for a limit with a regex in it)."""
    if "," in limit:
        return [p for p in limit.split(",") if p]
    return _PATTERN_PIECE_RE.findall(limit)


def limit_problem(limit: str) -> str | None:
    """Why Ansible would not read `limit` as the operator wrote it, or None."""
    if not LIMIT_RE.fullmatch(limit):
        return ("host pattern has characters outside [A-Za-z0-9_.:*,!&[]~()|?+^${}\\-] "
                "or starts with '-'")
    if "~" not in limit:
        return None if all(PLAIN_PATTERN_RE.fullmatch(p) for p in re.split("[,:]", limit)
                           if p) else "regex syntax outside a '~regex' pattern"
    if "," not in limit and (dropped := _PATTERN_PIECE_RE.sub("", limit).replace(":", "")):
        return (f"Ansible would drop {dropped!r} from it (an unclosed '['?) and match "
                f"{':'.join(split_limit(limit))!r} instead")
    for piece in split_limit(limit):
        bare = piece.lstrip("!&")
        if not bare.startswith("~"):
            if not PLAIN_PATTERN_RE.fullmatch(piece):
                return (f"{piece!r} has regex syntax but no leading '~'"
                        + (" (Ansible splits a limit on ',' before it reads a regex, so a "
                           "regex cannot hold one)" if "," in limit else ""))
            continue
        try:
            re.compile(bare[1:])
        except re.error as exc:
            return f"{piece!r} is not a regular expression: {exc}"
    return None


def validate_limit(limit: str | None) -> str | None:
    if limit is None:
        return None
    if why := limit_problem(limit):
        raise BadInput(why, source="--limit", field=repr(limit))
    return limit


def host_path(directory: Path, host: str, suffix: str, *, prefix: str = "") -> Path:
    """`directory/{prefix}HOST{suffix}`: a host name becomes a file name only once checked
    (no '/', no leading '.'), so a run's files stay in its run directory."""
    if not HOST_RE.fullmatch(host):
        raise BadInput("host name has characters outside [A-Za-z0-9_.-]", source="inventory",
                       field=f"hosts.{host!r}")
    return directory / f"{prefix}{host}{suffix}"


def source_paths(inventory: Sources) -> tuple[Path, ...]:
    paths = (inventory,) if isinstance(inventory, Path) else tuple(inventory)
    if not paths:
        raise BadInput("no inventory given", source="--inventory")
    for p in paths:
        if not p.exists():
            raise BadInput("no such file or directory", source=str(p))
        if not (p.is_file() or p.is_dir()):
            raise BadInput("not a regular file or directory", source=str(p))
        if not os.access(p, os.R_OK):
            raise BadInput("not readable", source=str(p))
        check_inventory_source(p)  # a FIFO inside a directory would stall ansible-inventory
    return tuple(p.resolve() for p in paths)


_CACHE: dict[tuple[object, ...], Inventory] = {}


def _source_files(paths: tuple[Path, ...]) -> list[Path]:
    """Every file the sources' answer is read from: a directory's files, and for a file
    source the group_vars/ and host_vars/ Ansible reads beside it."""
    out: list[Path] = []
    for p in paths:
        if p.is_file():
            out += [p, *sorted(f for d in ("group_vars", "host_vars")
                               for f in (p.parent / d).rglob("*") if f.is_file())]
        else:
            out += sorted(f for f in p.rglob("*") if f.is_file())
    return out


def _signature(paths: tuple[Path, ...]) -> tuple[object, ...]:
    """(path, mtime, size) of each of the sources' files: this process's cache key."""
    return tuple((str(f), st.st_mtime_ns, st.st_size)
                 for f in _source_files(paths) for st in (f.stat(),))


_PLUGIN_LINE_RE = re.compile(rb"^plugin\s*:", re.M)


def _static(files: Sequence[Path]) -> bool:
    """Whether the sources' files are their whole answer: no executable (an inventory script)
    and no plugin config (a cloud or constructed plugin), whose answer can change while the
    files stay the same."""
    for path in files:
        try:
            if os.access(path, os.X_OK):
                return False
            if path.suffix in (".yml", ".yaml", ".json") and _PLUGIN_LINE_RE.search(
                    path.read_bytes()):
                return False
        except OSError:
            return False
    return True


def unchanged_key(inventory: Sources) -> tuple[object, ...] | None:
    """The sources' files as they are now, where they are the whole answer (_static): while
    the key stays equal, so does Ansible's answer. None for sources whose answer can change
    while their files stay the same (a script, a plugin config)."""
    paths = source_paths(inventory)
    return _signature(paths) if _static(_source_files(paths)) else None


# Answers are also kept on disk, in the state dir, for the next fleetgate process: every
# command, batch worker and smoke run would otherwise start ansible-inventory again (about
# 0.8 s of CPU each, hundreds of times in a rollout's life) for the same files. An answer is
# kept only for static sources, and found again only under a key made of everything it was
# computed from: the sources' contents, the node classes and the site (the vars plugin), the
# ansible.cfg, the ANSIBLE_*/FLEETGATE_* environment, and the code of Ansible, fleetgate and
# its plugins. What is loaded is validated again, like a fresh answer.
CACHE_DIR = "inventory-cache"
CACHE_KEEP = 64  # answers kept; the oldest go first


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.cache
def _code_signature() -> tuple[object, ...]:
    """(path, mtime, size) of the code that computes an answer: Ansible's inventory and vars
    code, fleetgate's package (the vars plugin loads classes through it) and its plugins.
    Once per process: it walks some 400 files, and the code does not change under it."""
    spec = importlib.util.find_spec("ansible")  # found, not imported
    base = Path(spec.origin).parent if spec and spec.origin else Path(sys.prefix)
    roots = [base / sub for sub in ("inventory", "plugins/inventory", "plugins/vars", "vars")]
    roots += [Path(__file__).resolve().parents[1], content_root() / "plugins" / "vars"]
    out: list[object] = [sys.version]
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(out)


def _answer_key(paths: tuple[Path, ...], limit: str | None) -> str | None:
    """The disk cache's key for this resolution, or None when its answer is not all in files
    (see _static)."""
    files = _source_files(paths)
    if not _static(files):
        return None
    env = ansible_env()
    classes = Path(env["FLEETGATE_CLASSES_DIR"])
    data = [*files, Path(env["ANSIBLE_CONFIG"]),
            *(sorted(f for f in classes.rglob("*") if f.is_file()) if classes.is_dir() else [])]
    doc = {"sources": [str(p) for p in paths], "limit": limit,
           "files": [(str(f), _digest(f)) for f in data if f.is_file()],
           "env": sorted((k, v) for k, v in env.items()
                         if k.startswith(("ANSIBLE_", "FLEETGATE_"))),
           "code": _code_signature()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _holds_plain_secret(obj: Any, key: str = "") -> bool:
    """A plaintext credential among the answer's values (an INI's ansible_password=...):
    such an answer is not written to disk. Vaulted values are ciphertext, and a *_file key
    (ansible_ssh_private_key_file) names a path, so neither counts."""
    if isinstance(obj, Mapping):
        return any(_holds_plain_secret(v, str(k)) for k, v in obj.items())
    if isinstance(obj, list):
        return any(_holds_plain_secret(v, key) for v in obj)
    return (isinstance(obj, str) and bool(redact.SECRET_KEY_RE.search(key))
            and not key.endswith("_file") and not obj.startswith(vault.HEADER))


def _cached_answer(key: str, paths: tuple[Path, ...], limit: str | None) -> Inventory | None:
    # Looked up without creating anything: a command refused for bad input leaves no state.
    path = current_site().state_dir / CACHE_DIR / f"{key}.json"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        doc = rec["doc"]
        if rec.get("key") != key or not isinstance(doc, dict):
            raise ValueError(key)
        inv = Inventory(paths, limit, doc)
        validate_hosts(inv)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, BadInput):
        # Unreadable, or not what this key's answer could be: ask Ansible again.
        path.unlink(missing_ok=True)
        return None
    return inv


def _keep_answer(key: str, inv: Inventory) -> None:
    if _holds_plain_secret(inv.doc):
        return
    d = private_state_dir() / CACHE_DIR
    replace_private(d / f"{key}.json", json.dumps({"key": key, "doc": inv.doc}))
    kept = sorted(d.glob("*.json"), key=lambda f: f.stat().st_mtime_ns)
    for old in kept[:-CACHE_KEEP]:
        old.unlink(missing_ok=True)


_UNPARSED_RE = re.compile(r"^\[ERROR\]: Completely failed to parse inventory source (.+)$", re.M)
_PLUGIN_FAILED_RE = re.compile(r"^\[WARNING\]: Failed to parse inventory with '([\w.]+)' "
                               r"plugin: (.+)$", re.M)
_SCRIPT_STDERR_RE = re.compile(r"^Standard error from inventory script:\n+(.+)$", re.M)
_TAGGED_TYPE_RE = re.compile(r"<class '(?:[\w.]+\.)?_AnsibleTagged(\w+)'>")


def _ansible_error(text: str) -> str:
    """The line that says why: Ansible's [ERROR] line, else the last thing it printed."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR!"))]
    return (errors[0] if errors else " ".join(lines))[-300:] or "(no output)"


def _plugin_meant(source: Path, failures: dict[str, str]) -> str | None:
    """Which inventory plugin the operator meant for a source every plugin refused. Ansible
    tries them all in turn, and the INI plugin's complaint about a broken script's output
    ("Expected key=value") hides the script's own exit code or JSON error."""
    if source.is_file() and os.access(source, os.X_OK) and "script" in failures:
        return "script"
    if source.suffix in (".yml", ".yaml", ".json"):
        # `auto` takes plugin configs (constructed, cloud plugins); without a `plugin:` key
        # the file was meant as a YAML inventory.
        auto = failures.get("auto", "")
        if auto and "no root 'plugin' key" not in auto:
            return "auto"
        if "yaml" in failures:
            return "yaml"
    if "ini" in failures:
        return "ini"
    return next(iter(failures), None)


def _failure(stderr: str, stdout: str, label: str) -> BadInput:
    """ansible-inventory's non-zero exit as one line naming the source that failed."""
    unparsed = _UNPARSED_RE.search(stderr)
    if not unparsed:
        # Not a parse failure: a vars plugin (fleetgate_class's missing class), a bad option.
        reason = _ansible_error(stderr or stdout).removeprefix("[ERROR]: ")
        return BadInput(f"ansible-inventory failed: {reason}", source=label)
    source = unparsed.group(1).strip()
    failures: dict[str, str] = {}
    for m in _PLUGIN_FAILED_RE.finditer(stderr):
        failures.setdefault(m.group(1), _TAGGED_TYPE_RE.sub(lambda t: t.group(1).lower(),
                                                            m.group(2).strip()))
    plugin = _plugin_meant(Path(source), failures)
    if plugin is None:
        why = ("the directory holds no inventory file" if Path(source).is_dir()
               else "no inventory plugin accepts it")
        return BadInput(f"Ansible failed to parse inventory source: {why}", source=source)
    reason = failures[plugin]
    script_err = _SCRIPT_STDERR_RE.search(stderr) if plugin == "script" else None
    if script_err:
        reason += f" (its stderr: {script_err.group(1).strip()[:200]})"
    return BadInput(f"Ansible failed to parse inventory source with the {plugin!r} plugin: "
                    f"{reason[:400]}", source=source)


def _class_problem(value: object) -> str | None:
    # Commands load the class by this name from the classes directory. The vars plugin checks
    # a host's own fleetgate_class, but one set in group_vars or [all:vars] reaches here as is.
    if isinstance(value, str) and re.fullmatch(CLASS_NAME_RE, value):
        return None
    text = repr(value)
    return (f"fleetgate_class {text if len(text) <= 60 else text[:57] + '...'} is not a node "
            f"class name ({CLASS_NAME_RE})")


def host_var_problems(host: str, hv: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(variable, reason) for each of `host`'s variables that cannot safely reach a command:
    its connection variables (runner/connection_vars.py) and its node class."""
    problems = host_problems(host, hv)
    if "fleetgate_class" in hv and (why := _class_problem(hv["fleetgate_class"])):
        problems.append(("fleetgate_class", why))
    return problems


def validate_hosts(inv: Inventory) -> None:
    """Every host name and connection variable, before anything runs against them: the first
    problem as BadInput (sources, hosts.HOST.VAR, why), with a count of the rest."""
    problems: list[tuple[str, str]] = []
    for name, hv in inv.hostvars.items():
        if not HOST_RE.fullmatch(name):
            problems.append((f"hosts.{name!r}", "host name has characters outside [A-Za-z0-9_.-]"))
            continue
        problems += [(f"hosts.{name}.{var}", why) for var, why in host_var_problems(name, hv)]
    if problems:
        field, reason = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BadInput(reason + more, source=inv.label, field=field)


def resolve_inventory(inventory: Sources | Inventory, limit: str | None = None) -> Inventory:
    """Ansible's view of the inventory (within `limit`, a host pattern). Bad input: a source
    that is missing or does not parse, a host name or connection variable that cannot safely
    reach a command (`validate_hosts`)."""
    if isinstance(inventory, Inventory):
        if inventory.limit == limit:
            return inventory
        inventory = inventory.sources
    paths = source_paths(inventory)
    limit = validate_limit(limit)
    label = ",".join(str(p) for p in paths)
    key = (paths, limit, _signature(paths))
    if key in _CACHE:
        return _CACHE[key]
    try:
        disk_key = _answer_key(paths, limit)
        if disk_key is not None and (kept := _cached_answer(disk_key, paths, limit)):
            _CACHE[key] = kept
            return kept
    except (OSError, FleetgateError):
        disk_key = None  # no usable state dir or classes: resolve without the disk cache
    argv = [str(Path(sys.executable).parent / "ansible-inventory"), "--list"]
    for p in paths:
        argv += ["-i", str(p)]
    if limit:
        argv += ["--limit", limit]
    # Ansible only warns about a source it cannot parse and carries on without its hosts.
    env = {**ansible_env(), "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True"}
    try:
        # No stdin: Ansible refuses to start when the stdin it inherits is non-blocking (a CI
        # runner's, or one an ssh left so), and it never needs to read it here.
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL,
                              env=env, check=False)
    except subprocess.TimeoutExpired:
        raise BadInput(f"ansible-inventory did not answer in {RESOLVE_TIMEOUT_S}s",
                       source=label) from None
    if proc.returncode != 0:
        raise _failure(proc.stderr, proc.stdout, label)
    try:
        doc = plain_ansible_json(json.loads(proc.stdout))
    except json.JSONDecodeError as exc:
        raise BadInput(f"ansible-inventory printed no JSON: {exc}", source=label) from None
    if not isinstance(doc, dict):
        raise BadInput("ansible-inventory printed no inventory", source=label)
    inv = Inventory(paths, limit, doc)
    validate_hosts(inv)
    _CACHE[key] = inv
    if disk_key is not None:
        with contextlib.suppress(OSError, FleetgateError):
            _keep_answer(disk_key, inv)
    return inv
