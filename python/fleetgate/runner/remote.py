"""A batch on an execution node: ansible-runner's streaming protocol, carried by SSH.

AWX sends jobs to execution nodes through Receptor; Receptor cannot be installed here, so SSH
carries the same three steps: `transmit` runs here (the playbook's project, a static inventory
and the run's kwargs, as one stream), `ansible-runner worker` runs on the node, and its output
stream comes back into `process` here, which writes the same artifacts and calls the same
event handler as a local run (runner/ansible.py).

The worker is detached on the node and writes its stream to a file there
(~/.fleetgate-jobs/JOB/stream, then an `rc` file), so the job outlives this process and the
controller: whoever holds the rollout's lease re-attaches by job id and reads the stream from
the start, and a second start of the same job id is refused by the node (`mkdir` of the job
dir), so a re-attach never applies twice. The job dir records its rollout (`owner`); attaching
for any other rollout is refused there. The controller keeps only the pointer (node, job id).

Everything that reaches the remote shell is checked against a strict pattern here; the node's
connection values were checked with the inventory (runner/connection_vars.py) and are checked
again (RemoteNode).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import yaml
from ansible_runner import interface
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fleetgate.errors import BadInput
from fleetgate.runner.connection_vars import value_problem
from fleetgate.runner.inventory import EXEC_NODES_GROUP, Inventory
from fleetgate.site import content_root

JOB_RE = r"^[a-z]{1,16}-[0-9a-f]{8}$"
OWNER_RE = r"^[a-z0-9][a-z0-9-]{2,80}$"
NODE_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
JOBS_DIR = ".fleetgate-jobs"  # under the node user's home
# Exit codes of the remote scripts below that are answers, not a lost connection.
REFUSED, NO_JOB, NEVER_STARTED = 3, 4, 5
# A dropped stream is re-opened from where it broke this many times, RETRY_S apart, before the
# node counts as lost: a node that is gone refuses at once, a blip recovers.
RETRIES = 3
RETRY_S = 2.0
SSH_BASE = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3")
# The env a remote run gets: Ansible's own settings only. The controller's paths (its venv on
# PATH, fleetgate's ansible.cfg, the vars plugin that needs fleetgate installed) mean nothing
# on the node; the shipped project carries its own ansible.cfg instead.
REMOTE_ENV_KEYS = ("ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_FORKS", "ANSIBLE_NOCOLOR",
                   "ANSIBLE_RETRY_FILES_ENABLED", "ANSIBLE_PIPELINING", "ANSIBLE_TIMEOUT",
                   "ANSIBLE_STDOUT_CALLBACK")
PROJECT_CFG = """\
# Written by fleetgate for a batch on an execution node (runner/remote.py).
[defaults]
roles_path = ./roles
module_utils = ./fleetgate_module_utils
retry_files_enabled = False
duplicate_dict_key = error
host_key_checking = True
stdout_callback = default
callback_result_format = yaml

[ssh_connection]
pipelining = True
"""


SshWord = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:/@%+=~^-]{1,1100}$")]


class RemoteNode(BaseModel):
    """How to reach one execution node: its inventory connection values, checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(pattern=NODE_RE)]
    address: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.:_][A-Za-z0-9.:_-]{0,252}$")]
    port: int = Field(default=22, ge=1, le=65535)
    user: Annotated[str, StringConstraints(
        pattern=r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")] | None = None
    key_file: Annotated[str, StringConstraints(
        pattern=r"^[A-Za-z0-9_./%@+~:,][A-Za-z0-9_./%@+~:,-]{0,1023}$")] | None = None
    # ansible_ssh_common_args, split: every word passed runner/ssh_args.py's allow-list.
    ssh_args: list[SshWord] = Field(default_factory=list)


def few(names: list[str]) -> str:
    """Up to five names, and how many more: what an error line can carry."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def member_node(inv: Inventory, name: str, *, source: Path | str, field: str) -> RemoteNode:
    """Execution node `name`, which must be in the inventory group fleetgate_execution_nodes,
    with connection values that pass the same checks as any host's (bad input otherwise)."""
    members = {h for h, groups in inv.groups_of().items() if EXEC_NODES_GROUP in groups}
    if name not in members:
        raise BadInput(f"{name} is not in inventory group {EXEC_NODES_GROUP} (members: "
                       f"{few(sorted(members)) or 'none'})", source=source, field=field)
    return node_from_hostvars(name, inv.hostvars.get(name, {}), source=inv.label)


def node_from_hostvars(name: str, hv: Mapping[str, Any], *, source: str) -> RemoteNode:
    """The node's connection values from the inventory, each through the same check as any
    host's (a value that could smuggle an option or shell word is bad input)."""
    for var in ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
                "ansible_ssh_common_args"):
        if var in hv and (why := value_problem(name, var, hv[var])):
            raise BadInput(why, source=source, field=f"hosts.{name}.{var}")
    args = str(hv.get("ansible_ssh_common_args") or "")
    return RemoteNode.model_validate({
        "name": name, "address": str(hv.get("ansible_host") or name),
        "port": int(hv.get("ansible_port") or 22),
        "user": str(hv["ansible_user"]) if hv.get("ansible_user") else None,
        "key_file": str(hv["ansible_ssh_private_key_file"])
        if hv.get("ansible_ssh_private_key_file") else None,
        "ssh_args": shlex.split(args)})


def ssh_argv(node: RemoteNode, script: str) -> list[str]:
    ssh = shutil.which("ssh") or "/usr/bin/ssh"
    argv = [ssh, *SSH_BASE, *node.ssh_args, "-p", str(node.port)]
    if node.key_file:
        argv += ["-o", "IdentitiesOnly=yes", "-i", node.key_file]
    if node.user:
        argv += ["-l", node.user]
    # One argv word for the remote shell; it holds only names checked against JOB_RE/OWNER_RE.
    return [*argv, node.address, script]


def _checked(job: str, owner: str) -> tuple[str, str]:
    if not re.fullmatch(JOB_RE, job):
        raise ValueError(f"job id {job!r} does not match {JOB_RE}")
    if not re.fullmatch(OWNER_RE, owner):
        raise ValueError(f"owner {owner!r} does not match {OWNER_RE}")
    return job, owner


def _owner_check(job: str, owner: str) -> str:
    return (f'd="$HOME/{JOBS_DIR}/{job}"; '
            f'[ -d "$d" ] || {{ echo "no job {job} on this node" >&2; exit {NO_JOB}; }}; '
            'o=$(cat "$d/owner" 2>/dev/null || true); '
            f'[ "$o" = "{owner}" ] || {{ echo "job {job} belongs to rollout ${{o:-unknown}},'
            f' not {owner}: only its lease holder attaches" >&2; exit {REFUSED}; }}; ')


def start_script(job: str, owner: str) -> str:
    """Reads the transmit stream on stdin and starts the worker detached (setsid), its stream
    to a file. `mkdir` of the job dir is the once-only guard: a second start of the same job
    finds it and starts nothing. The payload holds the run's variables: private (umask 077),
    and deleted with the worker's own copy as soon as the worker ends."""
    job, owner = _checked(job, owner)
    base = f'"$HOME/{JOBS_DIR}"'
    return (
        f"set -eu; umask 077; mkdir -p {base}; d={base}/{job}; p=\"$d.payload.$$\"; "
        'cat > "$p"; '
        f'if ! mkdir "$d" 2>/dev/null; then rm -f "$p"; {_owner_check(job, owner)}'
        f"echo exists; exit 0; fi; "
        f'printf "%s\\n" {owner} > "$d/owner"; mv "$p" "$d/payload"; '
        "setsid sh -c 'echo $$ > \"$1/pid\"; "
        "ansible-runner worker --private-data-dir \"$1/work\" < \"$1/payload\" "
        "> \"$1/stream\" 2> \"$1/worker.err\"; echo $? > \"$1/rc.tmp\"; "
        "rm -rf \"$1/payload\" \"$1/work\"; mv \"$1/rc.tmp\" \"$1/rc\"' job \"$d\" "
        "< /dev/null > /dev/null 2>&1 & "
        "echo started")


def attach_script(job: str, owner: str, offset: int) -> str:
    """The job's stream from byte `offset`, followed until the worker ends (tail --pid)."""
    job, owner = _checked(job, owner)
    start = int(offset) + 1
    return (
        f"set -u; {_owner_check(job, owner)}"
        'n=0; while [ ! -f "$d/pid" ] && [ ! -f "$d/rc" ]; do n=$((n+1)); '
        f'[ $n -gt 150 ] && {{ echo "job {job} never started" >&2; exit {NEVER_STARTED}; }}; '
        "sleep 0.2; done; "
        f'if [ -f "$d/rc" ]; then exec tail -c +{start} "$d/stream"; fi; '
        f'exec tail -c +{start} --pid="$(cat "$d/pid")" -f "$d/stream"')


def collect_script(job: str, owner: str) -> str:
    """Once the controller holds the job's result: the job dir goes (its stream is the run's
    unredacted record)."""
    job, owner = _checked(job, owner)
    # `process` stops at the stream's eof line, a moment before the worker's own exit.
    return (f'set -u; {_owner_check(job, owner)}n=0; '
            'while [ ! -f "$d/rc" ] && [ $n -lt 100 ]; do sleep 0.2; n=$((n+1)); done; '
            '[ -f "$d/rc" ] && rm -rf "$d"')


def state_script(job: str, owner: str) -> str:
    job, owner = _checked(job, owner)
    return (f'set -u; {_owner_check(job, owner)}'
            '[ -f "$d/rc" ] && echo done || echo running')


@dataclass
class RemoteJob:
    """The pointer the controller keeps: which node, which job, for which rollout."""

    node: RemoteNode
    job: str
    owner: str
    attach_only: bool = False  # re-attaching after a crash: never start the job
    timeout_s: float = 3600.0


@dataclass
class RemoteRun:
    status: str
    rc: int | None
    lost: str = ""  # why the stream broke off: the node (or the way to it) is gone
    stats: None = None  # as ansible-runner's Runner; the stats event is what counts


class NodeLost(Exception):
    pass


class _Follow:
    """The job's stream as the file object `process` reads (readline, read): one `ssh tail`,
    re-opened from the byte it broke at when the connection drops."""

    def __init__(self, job: RemoteJob, deadline: float):
        self.job = job
        self.deadline = deadline
        self.offset = 0
        self.lost = ""
        self.refused = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.err: IO[bytes] | None = None
        self._open()

    def _open(self) -> None:
        if self.err is not None:
            self.err.close()
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the connection
        self.proc = subprocess.Popen(
            ssh_argv(self.job.node, attach_script(self.job.job, self.job.owner, self.offset)),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.err)

    def _stderr(self) -> str:
        if self.err is None:
            return ""
        self.err.seek(0)
        lines = self.err.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    def _reopen(self) -> bool:
        """After this connection's end: True when a new one is open to read on."""
        assert self.proc is not None
        rc = self.proc.wait()
        if rc == 0:
            return False  # tail ended with the worker: the stream is whole
        why = self._stderr()
        if rc in (REFUSED, NO_JOB):
            self.refused = why
            return False
        if rc == NEVER_STARTED:
            self.lost = f"execution node {self.job.node.name}: {why}"
            return False
        for _ in range(RETRIES):
            if time.monotonic() > self.deadline:
                break
            time.sleep(RETRY_S)
            self._open()
            assert self.proc is not None and self.proc.stdout is not None
            if self.proc.stdout.peek(1):  # type: ignore[attr-defined]
                return True
            rc = self.proc.wait()
            if rc == 0:
                return False
            why = self._stderr() or why
        self.lost = (f"execution node {self.job.node.name} lost mid-job "
                     f"(ssh exit {rc}: {why or 'connection closed'})")
        return False

    def readline(self, size: int = -1) -> bytes:
        buf = b""
        while True:
            assert self.proc is not None and self.proc.stdout is not None
            if time.monotonic() > self.deadline:
                self.close()
                self.lost = (f"execution node {self.job.node.name}: no end of the job's "
                             "stream before the batch's timeout")
                return b""
            chunk = self.proc.stdout.readline()
            buf += chunk
            self.offset += len(chunk)
            if buf.endswith(b"\n"):
                return buf
            if not self._reopen():
                # A half line is as good as none: `process` reads the stream as ended.
                return b""

    def read(self, size: int = -1) -> bytes:
        buf = b""
        while size < 0 or len(buf) < size:
            assert self.proc is not None and self.proc.stdout is not None
            chunk = self.proc.stdout.read(size - len(buf) if size >= 0 else -1)
            buf += chunk
            self.offset += len(chunk)
            if chunk and (size < 0 or len(buf) >= size):
                break
            if not chunk and not self._reopen():
                break
        return buf

    # What ansible-runner's Base64IO asks of the stream it reads the artifacts' zip from.
    @property
    def closed(self) -> bool:
        return False

    def flush(self) -> None:
        return None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def write(self, data: bytes) -> int:
        raise OSError("the job's stream is read-only")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.err is not None:
            self.err.close()


def _project(pdd: Path, playbook: Path) -> str:
    """The playbook's directory as the project, fleetgate's roles and module_utils beside it,
    and an ansible.cfg that points at them. Returns the playbook's name in the project."""
    project = pdd / "project"
    shutil.copytree(playbook.parent, project, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    content = content_root()
    if not (project / "roles").exists() and (content / "roles").is_dir():
        shutil.copytree(content / "roles", project / "roles", symlinks=False,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    utils = content / "plugins" / "module_utils"
    if utils.is_dir():
        shutil.copytree(utils, project / "fleetgate_module_utils",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (project / "ansible.cfg").write_text(PROJECT_CFG)
    return playbook.name


def static_inventory(inv: Inventory) -> dict[str, Any]:
    """The inventory as Ansible resolved it here (vars plugins included, so the node needs no
    fleetgate), as a YAML inventory: every host with its variables, every group's members."""
    if inv.vaulted:
        names = ", ".join(v for v, _ in inv.vaulted[:3])
        raise BadInput(f"vaulted values ({names}) are decrypted on the controller only; "
                       "they cannot be sent to an execution node", source=inv.label,
                       field="execution")
    children: dict[str, Any] = {}
    for host, groups in inv.groups_of().items():
        for g in groups:
            if g not in ("all", "ungrouped"):
                children.setdefault(g, {"hosts": {}})["hosts"][host] = None
    return {"all": {"hosts": inv.hostvars, "children": dict(sorted(children.items()))}}


def transmit(kwargs: Mapping[str, Any], inv: Inventory, playbook: Path,
             secrets: Mapping[str, str], out: IO[bytes]) -> None:
    """ansible-runner's transmit step into `out`: kwargs, then the zipped private data dir."""
    with tempfile.TemporaryDirectory(prefix="fg-transmit-") as tmp:
        pdd = Path(tmp)
        name = _project(pdd, playbook)
        (pdd / "inventory").mkdir()
        (pdd / "inventory" / "hosts.yml").write_text(
            yaml.safe_dump(static_inventory(inv), sort_keys=False))
        envvars = {k: v for k, v in dict(kwargs.get("envvars") or {}).items()
                   if k in REMOTE_ENV_KEYS}
        # Secret values travel inside the payload (the node runs the play), never on an argv.
        extravars = {**dict(kwargs.get("extravars") or {}), **dict(secrets)}
        interface.run(streamer="transmit", _output=out, private_data_dir=str(pdd),
                      playbook=name, ident=kwargs["ident"], limit=kwargs.get("limit"),
                      timeout=kwargs.get("timeout"), envvars=envvars, extravars=extravars,
                      fact_cache_type="memory", quiet=True)


def _start(job: RemoteJob, payload: IO[bytes]) -> None:
    payload.seek(0)
    proc = subprocess.run(ssh_argv(job.node, start_script(job.job, job.owner)), stdin=payload,
                          capture_output=True, timeout=300, check=False)
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        raise NodeLost(f"execution node {job.node.name}: the job did not start (ssh exit "
                       f"{proc.returncode}: {why[-1][:300] if why else 'no reason given'})")


def job_state(job: RemoteJob) -> str:
    """absent | running | done | unknown (the node did not answer, or refused: another
    rollout's job)."""
    try:
        proc = subprocess.run(ssh_argv(job.node, state_script(job.job, job.owner)),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                              check=False)
    except subprocess.TimeoutExpired:
        return "unknown"
    if proc.returncode == NO_JOB:
        return "absent"
    out = proc.stdout.decode(errors="replace").strip()
    return out if proc.returncode == 0 and out in ("running", "done") else "unknown"


def collect(job: RemoteJob) -> None:
    subprocess.run(ssh_argv(job.node, collect_script(job.job, job.owner)),
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)


def run(job: RemoteJob, kwargs: Mapping[str, Any], *, inv: Inventory, playbook: Path,
        secrets: Mapping[str, str], event_handler: Callable[[dict[str, Any]], bool],
        on_started: Callable[[], None] = lambda: None) -> RemoteRun:
    """transmit -> start on the node (unless re-attaching) -> follow its stream into process.
    `on_started` is called once the node holds the job (the controller's pointer is valid)."""
    run_dir = Path(kwargs["private_data_dir"])
    if not job.attach_only:
        with tempfile.TemporaryFile() as payload:
            transmit(kwargs, inv, playbook, secrets, payload)
            try:
                _start(job, payload)
            except (NodeLost, subprocess.TimeoutExpired) as exc:
                return RemoteRun(status="error", rc=None, lost=str(exc))
    on_started()
    status: dict[str, Any] = {}

    def on_status(data: dict[str, Any], runner_config: Any = None) -> None:
        status.update(data)

    follow = _Follow(job, time.monotonic() + job.timeout_s)
    try:
        p = interface.run(streamer="process", _input=follow, private_data_dir=str(run_dir),
                          ident=kwargs["ident"], event_handler=event_handler,
                          status_handler=on_status, quiet=True)
    finally:
        follow.close()
    if follow.refused:
        return RemoteRun(status="error", rc=None,
                         lost=f"execution node {job.node.name}: {follow.refused}")
    if follow.lost or p.status == "error":
        return RemoteRun(status="error", rc=None, lost=follow.lost or str(
            status.get("job_explanation") or "the job's stream ended without its end"))
    rc_file = run_dir / "artifacts" / str(kwargs["ident"]) / "rc"
    try:
        rc: int | None = int(rc_file.read_text().strip())
    except (OSError, ValueError):
        rc = 0 if p.status == "successful" else 1
    collect(job)
    return RemoteRun(status=str(p.status), rc=rc)


def pointer(job: RemoteJob) -> dict[str, Any]:
    """What the batch dir keeps of a remote job (remote.json): never its content."""
    return {"node": job.node.name, "job": job.job, "owner": job.owner,
            "dir": f"~/{JOBS_DIR}/{job.job}"}


def write_pointer(path: Path, job: RemoteJob) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(pointer(job), f)
