"""The collector's JSON document (the fleetgate_collect module) and what it says once parsed.

A document that does not have the collector's shape is rejected whole (MalformedCollection);
a single tool whose text cannot be parsed only makes that one tool "unparsed", so one odd
tool never hides what the others saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetgate.errors import validation_error
from fleetgate.smoke import parsers as smoke_parsers
from fleetgate.triage import parsers

SCHEMA = "fleetgate.triage.collect/v1"
CommandStatus = Literal["ok", "failed", "missing", "timeout", "skipped"]
ToolStatus = Literal["ok", "failed", "missing", "timeout", "skipped", "unparsed", "absent"]


class MalformedCollection(ValueError):
    """The text is not a collector document; the message is one line."""


# A time the collector measured or was given: finite and not negative.
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class CommandOut(BaseModel):
    model_config = ConfigDict(extra="ignore")
    argv: list[str]
    status: CommandStatus
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: Seconds = 0.0


class Facts(BaseModel):
    """The collector's facts about the host; the CPU counts divide the CPU window."""

    model_config = ConfigDict(extra="allow")
    cpu_count: Annotated[int, Field(ge=1)] | None = None
    cpus_allowed: Annotated[int, Field(ge=1)] | None = None


class FileOut(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str
    text: str | None = None
    error: str | None = None


class Collection(BaseModel):
    model_config = ConfigDict(extra="ignore")
    schema_: Literal["fleetgate.triage.collect/v1"]
    mode: Literal["diagnose", "identity"]
    duration_s: Seconds
    timeout_s: Seconds
    facts: Facts
    env: dict[str, str]
    commands: dict[str, CommandOut]
    files: dict[str, FileOut]


def collection_text(value: Any) -> str:
    """The collector's document as JSON text, from the fleetgate_collect module's result
    (a mapping) or from a saved file (text); anything else becomes text that will not load."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value or "")


def load_collection(text: str) -> Collection:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedCollection(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MalformedCollection("not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise MalformedCollection(f"schema is {str(doc.get('schema'))[:60]!r}, not {SCHEMA}")
    try:
        return Collection.model_validate({**doc, "schema_": doc["schema"]})
    except ValidationError as exc:
        # `FIELD: reason`, as every other document's errors read (no source: the caller's).
        raise MalformedCollection(validation_error(exc, "").one_line()) from None


@dataclass
class Tool:
    """One tool's outcome: its status and, when ok, its parsed output."""

    name: str
    status: ToolStatus
    data: Any = None
    detail: str = ""  # stderr or parse error, one line

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "ok":
            return f"{self.name}: ok"
        return f"{self.name}: {self.status}" + (f" ({self.detail})" if self.detail else "")


PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "nvidia_smi_list": ("nvidia-smi -L", parsers.parse_nvidia_smi_list),
    "nvidia_smi_query": ("nvidia-smi --query-gpu", smoke_parsers.parse_nvidia_smi_csv),
    "amd_smi_static": ("amd-smi static", smoke_parsers.parse_amd_smi_json),
    "rocminfo": ("rocminfo", smoke_parsers.parse_rocminfo),
    "dmesg": ("dmesg", parsers.parse_kernel_events),
    "journalctl_k": ("journalctl -k", parsers.parse_kernel_events),
    "nvidia_smi_dmon": ("nvidia-smi dmon", parsers.parse_dmon),
    "amd_smi_metric": ("amd-smi metric", parsers.parse_amd_metric_usage),
    "iostat": ("iostat", parsers.parse_iostat),
    "mpstat": ("mpstat", parsers.parse_mpstat),
    "nvidia_smi_topo": ("nvidia-smi topo -m", parsers.parse_topo),
    "lscpu": ("lscpu", smoke_parsers.parse_lscpu),
    "ip_link_0": ("ip -s link", parsers.parse_ip_link),
    "ip_link_1": ("ip -s link", parsers.parse_ip_link),
}


def _one_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[-1].split())[:limit] if lines else ""


def tool(c: Collection, key: str) -> Tool:
    label, parse = PARSERS[key]
    out = c.commands.get(key)
    if out is None:
        return Tool(label, "absent")
    if out.status != "ok":
        detail = _one_line(out.stderr) or (f"rc {out.rc}" if out.rc is not None else "")
        if out.status == "timeout":
            detail = f"no answer in {c.timeout_s:g}s"
        return Tool(label, out.status, detail=detail)
    try:
        return Tool(label, "ok", data=parse(out.stdout))
    except parsers.ParseError as exc:
        return Tool(label, "unparsed", detail=str(exc)[:200])


def text_of(c: Collection, key: str) -> str | None:
    f = c.files.get(key)
    return f.text if f is not None else None


@dataclass
class NcclVar:
    value: str
    source: str


@dataclass
class Evidence:
    """Everything the stages read, parsed; built once from a collection."""

    backend: str
    expected_gpus: int
    tools: dict[str, Tool]
    kernel_log: Tool
    pci_gpus: list[dict[str, Any]] | None
    cpu: dict[str, float] | None
    window_s: float
    cgroup: dict[str, Any] | None
    cpus_allowed: int | None
    nccl: dict[str, NcclVar] = field(default_factory=dict)
    infiniband: list[str] | None = None


def _kernel_log(c: Collection) -> Tool:
    """dmesg where the kernel lets us read it, else the journal's kernel log."""
    dmesg = tool(c, "dmesg")
    if dmesg.ok:
        return dmesg
    journal = tool(c, "journalctl_k")
    out = c.commands.get("journalctl_k")
    # "-- No entries --" (and rc 0) is what journalctl prints with no journal to read
    lines = [ln for ln in (out.stdout if out else "").splitlines()
             if ln.strip() and not ln.startswith("-- ")]
    if journal.ok and lines:
        return journal
    if journal.ok:
        journal = Tool(journal.name, "failed", detail="no journal entries")
    return Tool("kernel log", "failed" if dmesg.status != "missing" else "missing",
                detail="; ".join(t.describe() for t in (dmesg, journal)))


def _nccl(c: Collection) -> dict[str, NcclVar]:
    # Lowest precedence first: nccl.conf files, then the login environment, then the process
    # environment -- NCCL lets an environment variable override its config files.
    merged: dict[str, NcclVar] = {}
    for key in ("etc_nccl_conf", "home_nccl_conf", "etc_environment"):
        f = c.files.get(key)
        if f is not None and f.text:
            for k, v in parsers.parse_env_file(f.text).items():
                if k.startswith("NCCL_"):
                    merged[k] = NcclVar(v, f.path)
    for k, v in c.env.items():
        if k.startswith("NCCL_"):
            merged[k] = NcclVar(v, "environment")
    return merged


def _cgroup(c: Collection) -> dict[str, Any] | None:
    v2 = text_of(c, "cgroup2_cpu_max")
    try:
        if v2 is not None:
            return parsers.parse_cgroup_cpu(cpu_max=v2,
                                            stat_before=text_of(c, "cgroup2_cpu_stat_0"),
                                            stat_after=text_of(c, "cgroup2_cpu_stat_1"))
        quota, period = text_of(c, "cgroup1_cfs_quota_us"), text_of(c, "cgroup1_cfs_period_us")
        if quota is not None and period is not None:
            return parsers.parse_cgroup_cpu(cfs_quota_us=quota, cfs_period_us=period,
                                            stat_before=text_of(c, "cgroup1_cpu_stat_0"),
                                            stat_after=text_of(c, "cgroup1_cpu_stat_1"))
    except parsers.ParseError:
        return None
    return None


def _cpu(c: Collection) -> tuple[dict[str, float] | None, float]:
    before, after = text_of(c, "proc_stat_0"), text_of(c, "proc_stat_1")
    if before is None or after is None:
        return None, 0.0
    try:
        b, a = parsers.parse_proc_stat(before), parsers.parse_proc_stat(after)
    except parsers.ParseError:
        return None, 0.0
    # USER_HZ is 100 on every Linux ABI we meet: ticks over CPUs give the window's length
    window = (sum(a.values()) - sum(b.values())) / 100.0 / (c.facts.cpu_count or 1)
    return parsers.cpu_usage(b, a), round(window, 2)


def build(c: Collection, *, backend: str, expected_gpus: int) -> Evidence:
    tools = {key: tool(c, key) for key in PARSERS if key not in ("dmesg", "journalctl_k")}
    pci_text = text_of(c, "pci_devices")
    try:
        pci = parsers.parse_pci_devices(pci_text) if pci_text is not None else None
    except parsers.ParseError:
        pci = None
    ib = c.files.get("infiniband")
    cpu, window = _cpu(c)
    return Evidence(
        backend=backend, expected_gpus=expected_gpus, tools=tools, kernel_log=_kernel_log(c),
        pci_gpus=pci, cpu=cpu, window_s=window, cgroup=_cgroup(c),
        cpus_allowed=c.facts.cpus_allowed, nccl=_nccl(c),
        infiniband=(ib.text or "").split() if ib is not None and ib.text is not None else None)
