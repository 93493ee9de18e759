"""Parsers for everything fleetgate reads on a host, normalized to plain JSON data.

This one file (plugins/module_utils/fleetgate_parsers.py; python/fleetgate/smoke/parsers.py is
a symlink to it) serves every place that reads host tools:
- the controller imports it as `fleetgate.smoke.parsers` (offline triage: `fleetgate smoke
  parse KIND FILE`, device identity, and the tests against real captured outputs);
- Ansible modules import it as `ansible.module_utils.fleetgate_parsers` (AnsiballZ ships it);
- the `smoke_probes` role installs it beside the probes as `fleetgate_parsers.py`, and the
  probes import it from their own directory.

So it is standard library only and runs on the hosts' system Python (3.9 or newer). Every
parser takes the tool's text and returns dicts/lists of str, int, float, bool and None; a text
it cannot make sense of raises ParseError with a one-line reason, never a traceback.

Every number a parser returns is finite and possible (check_values): counters, sizes, rates
and durations are >= 0, temperatures within what a sensor can read, memory used within the
total. An impossible reading is refused with the field named: a negative SRAM count must not
cancel a real DRAM uncorrectable error in a sum, and NaN is not even valid JSON downstream.
JSON input is read strictly (loads_json): no NaN/Infinity, bounded nesting.

Field renames across driver versions are folded here, in one place:
- nvidia-smi XML schema v10..v13: `clocks_throttle_reasons` became `clocks_event_reasons`
  (driver 535); ECC `single_bit`/`double_bit` totals became `sram_*`/`dram_*` counters; v13
  splits `sram_uncorrectable` into `_parity` and `_secded`;
- amd-smi JSON: a top-level list (ROCm 6.0-6.2) or an object with `gpu_data` (later releases);
- rocm-smi JSON: `Device ID` or `GPU ID`, `Card Series` or `Card series`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "FATAL_XIDS",
    "IDENTITY_KINDS",
    "KINDS",
    "NVIDIA_IDENTITY_QUERY",
    "XID_TABLE",
    "ParseError",
    "check_values",
    "cpu_model_name",
    "fingerprint_fields",
    "gpu_identities",
    "loads_json",
    "parse",
    "parse_all_reduce_perf",
    "parse_amd_smi_json",
    "parse_cdi_list",
    "parse_cpuinfo",
    "parse_dkms_status",
    "parse_kernel_log",
    "parse_lscpu",
    "parse_nvidia_container_cli_info",
    "parse_nvidia_smi_csv",
    "parse_nvidia_smi_xml",
    "parse_nvidia_version",
    "parse_rocm_smi_json",
    "parse_rocminfo",
]

T = TypeVar("T")

MAX_INPUT_CHARS = 20_000_000  # a 64-GPU nvidia-smi -q -x is ~1.5 MB; anything far larger is not one
# No tool output we read nests deeper than ~6 levels; a deeper document is not one of them,
# and would overflow the stack of anything recursive that touches it.
MAX_JSON_DEPTH = 64
# The rated range of on-die and board thermal sensors (-55..150 C): outside it a reading is a
# broken sensor or a misread field, not the weather.
TEMPERATURE_C = (-55.0, 150.0)


class ParseError(ValueError):
    """The text is not the output the parser expects; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


# --------------------------------------------------------------------------------------------
# small value helpers

_NA = {"", "n/a", "[n/a]", "na", "not supported", "[not supported]", "none", "unknown",
       "requested functionality has been deprecated", "[unknown error]", "unknown error"}


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    text = " ".join(value.split())
    return None if text.lower() in _NA else text


def _int(value: str | None) -> int | None:
    text = _clean(value)
    if text is None:
        return None
    m = re.match(r"^-?(0x[0-9a-fA-F]+|\d+)", text)
    if not m:
        return None
    return int(m.group(0), 16) if m.group(0).lower().startswith(("0x", "-0x")) else int(m.group(0))


def _float(value: str | None) -> float | None:
    text = _clean(value)
    if text is None:
        return None
    m = re.match(r"^-?\d+(\.\d+)?", text)
    return float(m.group(0)) if m else None


def _flag(value: str | None) -> bool | None:
    """Enabled/Disabled, Yes/No, Active/Not Active -> bool; N/A -> None."""
    text = _clean(value)
    if text is None:
        return None
    low = text.lower()
    if low in ("enabled", "yes", "active", "on", "true", "1"):
        return True
    if low in ("disabled", "no", "not active", "off", "false", "0"):
        return False
    return None


def _pci_id(device_id: str | None) -> str | None:
    """nvidia-smi's `233510DE` (device, vendor) or `0x233510DE` -> `10de:2335`."""
    text = _clean(device_id)
    if text is None:
        return None
    text = text.lower().removeprefix("0x")
    if not re.fullmatch(r"[0-9a-f]{8}", text):
        return None
    return f"{text[4:]}:{text[:4]}"


def _check_size(text: str) -> None:
    if len(text) > MAX_INPUT_CHARS:
        raise ParseError(f"input is {len(text)} characters, more than any tool output we parse")


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999 parses as inf
        raise ValueError(f"{text} is out of range for a number")
    return value


def _too_deep(doc: Any, limit: int) -> bool:
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node \
            if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def loads_json(text: str, what: str) -> Any:
    """Strict JSON (RFC 8259): NaN, Infinity and numbers that overflow to infinity are
    refused, and so is nesting deeper than MAX_JSON_DEPTH; errors are ParseError."""
    try:
        doc = json.loads(text, parse_constant=_json_constant, parse_float=_json_float)
    except RecursionError:
        raise ParseError(f"{what}: JSON nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError is one
        raise ParseError(f"{what}: invalid JSON: {exc}") from None
    if _too_deep(doc, MAX_JSON_DEPTH):
        raise ParseError(f"{what}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return doc


def _is_temperature(key: str) -> bool:
    return key.endswith("_c")


def check_values(doc: T, *, percent: frozenset[str] = frozenset(),
                 temperature: Callable[[str], bool] = _is_temperature, where: str = "",
                 signed: frozenset[str] = frozenset()) -> T:
    """`doc` itself if every number in it is possible for the key it sits under; else
    ParseError naming the field. Every number must be finite; by key, temperatures lie in
    TEMPERATURE_C, `percent` keys in 0..100, `signed` keys (a checksum) may take any sign,
    and every other number (a count, size, rate, power or duration) is >= 0: no value these
    parsers return can be negative."""
    stack: list[tuple[str, str, Any]] = [(where, "", doc)]
    while stack:
        path, key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}" if path
                          else str(k), str(k), v) for k, v in reversed(list(value.items())))
            continue
        if isinstance(value, list):
            stack.extend((f"{path}[{i}]", key, v) for i, v in reversed(list(enumerate(value))))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        field = path or "(value)"
        if isinstance(value, float) and not math.isfinite(value):  # ints always are
            raise ParseError(f"{field}: {value} is not a finite number")
        if temperature(key):
            low, high = TEMPERATURE_C
            if not low <= value <= high:
                raise ParseError(f"{field}: {value} C is outside what a temperature sensor "
                                 f"reads ({low:g}..{high:g} C)")
        elif key in percent:
            if not 0 <= value <= 100:
                raise ParseError(f"{field}: {value}% is not a percentage (0..100)")
        elif value < 0 and key not in signed:
            raise ParseError(f"{field}: {value} is negative; a count, size, rate or duration "
                             "cannot be")
    return doc


def _within(used: Any, total: Any, field: str, total_field: str) -> None:
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and used > total:
        raise ParseError(f"{field}: {used} is more than {total_field} {total}")


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x

def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.find(path)
    return found.text if found is not None and found.text is not None else None


def _ecc_counts(block: ET.Element | None) -> dict[str, int | None]:
    """One `volatile` or `aggregate` block in any schema -> correctable/uncorrectable counts."""
    out: dict[str, int | None] = {
        "sram_correctable": None, "sram_uncorrectable": None,
        "dram_correctable": None, "dram_uncorrectable": None,
    }
    if block is None:
        return out
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        # Schema <= v10 (pre-Ampere drivers): single_bit/double_bit with a total each.
        out["dram_correctable"] = _int(_text(block, "single_bit/total"))
        out["dram_uncorrectable"] = _int(_text(block, "double_bit/total"))
        return out
    out["sram_correctable"] = _int(_text(block, "sram_correctable"))
    out["dram_correctable"] = _int(_text(block, "dram_correctable"))
    out["dram_uncorrectable"] = _int(_text(block, "dram_uncorrectable"))
    if block.find("sram_uncorrectable") is not None:
        out["sram_uncorrectable"] = _int(_text(block, "sram_uncorrectable"))
    else:  # v13: parity and SEC-DED uncorrectable SRAM errors are counted apart
        parts = [_int(_text(block, t)) for t in ("sram_uncorrectable_parity",
                                                 "sram_uncorrectable_secded")]
        known = [p for p in parts if p is not None]
        out["sram_uncorrectable"] = sum(known) if known else None
    return out


def _sum_known(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _clock_events(gpu: ET.Element) -> dict[str, Any]:
    for tag, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                        ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        block = gpu.find(tag)
        if block is None:
            continue
        reasons: dict[str, bool | None] = {}
        for child in block:
            name = child.tag.removeprefix(prefix)
            reasons[name] = _flag(child.text)
        return {"source_tag": tag, "reasons": reasons,
                "active": sorted(k for k, v in reasons.items() if v)}
    return {"source_tag": None, "reasons": {}, "active": []}


def _remapped_rows(gpu: ET.Element) -> dict[str, Any] | None:
    block = gpu.find("remapped_rows")
    if block is None or len(block) == 0:
        return None  # "N/A": the GPU has no row remapper (pre-Ampere, consumer parts)
    hist = block.find("row_remapper_histogram")
    return {
        "correctable": _int(_text(block, "remapped_row_corr")),
        "uncorrectable": _int(_text(block, "remapped_row_unc")),
        "pending": _flag(_text(block, "remapped_row_pending")),
        "failure": _flag(_text(block, "remapped_row_failure")),
        "histogram": {c.tag.removeprefix("row_remapper_histogram_"): _int(c.text)
                      for c in hist} if hist is not None else {},
    }


def _mig(gpu: ET.Element) -> dict[str, Any]:
    devices = []
    block = gpu.find("mig_devices")
    if block is not None:
        for dev in block.findall("mig_device"):
            devices.append({
                "index": _int(_text(dev, "index")),
                "gpu_instance_id": _int(_text(dev, "gpu_instance_id")),
                "compute_instance_id": _int(_text(dev, "compute_instance_id")),
                "sm_count": _int(_text(dev, "device_attributes/shared/multiprocessor_count")),
                "memory_total_mib": _int(_text(dev, "fb_memory_usage/total")),
                "sram_uncorrectable_volatile": _int(
                    _text(dev, "ecc_error_count/volatile_count/sram_uncorrectable")),
            })
    return {
        "current": _flag(_text(gpu, "mig_mode/current_mig")),
        "pending": _flag(_text(gpu, "mig_mode/pending_mig")),
        "devices": devices,
    }


# Plain text fields of one <gpu>: output key -> element.
_GPU_TEXT_FIELDS = (
    ("uuid", "uuid"), ("name", "product_name"), ("brand", "product_brand"),
    ("architecture", "product_architecture"), ("serial", "serial"),
    ("vbios_version", "vbios_version"),
)


def _gpu(index: int, gpu: ET.Element) -> dict[str, Any]:
    volatile = _ecc_counts(gpu.find("ecc_errors/volatile"))
    aggregate = _ecc_counts(gpu.find("ecc_errors/aggregate"))
    retired = gpu.find("retired_pages")
    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")
    return {
        "index": index,
        "minor_number": _int(_text(gpu, "minor_number")),
        "pci_bus_id": _clean(_text(gpu, "pci/pci_bus_id")) or _clean(gpu.get("id")),
        "pci_id": _pci_id(_text(gpu, "pci/pci_device_id")),
        "pci_subsystem_id": _pci_id(_text(gpu, "pci/pci_sub_system_id")),
        **{key: _clean(_text(gpu, tag)) for key, tag in _GPU_TEXT_FIELDS},
        "persistence_mode": _flag(_text(gpu, "persistence_mode")),
        "performance_state": _clean(_text(gpu, "performance_state")),
        "memory_total_mib": _int(_text(gpu, "fb_memory_usage/total")),
        "memory_used_mib": _int(_text(gpu, "fb_memory_usage/used")),
        "temperature_c": _int(_text(gpu, "temperature/gpu_temp")),
        "power_draw_w": _float(_text(power, "power_draw") or _text(power, "instant_power_draw")),
        "power_limit_w": _float(_text(power, "current_power_limit")
                                or _text(power, "enforced_power_limit")),
        "mig": _mig(gpu),
        "ecc": {
            "mode_current": _flag(_text(gpu, "ecc_mode/current_ecc")),
            "mode_pending": _flag(_text(gpu, "ecc_mode/pending_ecc")),
            "volatile": volatile,
            "aggregate": aggregate,
            "uncorrectable_volatile": _sum_known(volatile["sram_uncorrectable"],
                                                 volatile["dram_uncorrectable"]),
            "uncorrectable_aggregate": _sum_known(aggregate["sram_uncorrectable"],
                                                  aggregate["dram_uncorrectable"]),
            "sram_threshold_exceeded": _flag(_text(gpu, "ecc_errors/aggregate/"
                                                   "sram_threshold_exceeded")),
            "channel_repair_pending": _flag(_text(gpu, "ecc_errors/channel_repair_pending")),
            "tpc_repair_pending": _flag(_text(gpu, "ecc_errors/tpc_repair_pending")),
        },
        "retired_pages": {
            "single_bit": _int(_text(retired, "multiple_single_bit_retirement/retired_count")),
            "double_bit": _int(_text(retired, "double_bit_retirement/retired_count")),
            "pending": _flag(_text(retired, "pending_retirement")),
        },
        "remapped_rows": _remapped_rows(gpu),
        "clock_events": _clock_events(gpu),
        "pcie": {
            "gen_current": _int(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
            "gen_max": _int(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
            "width_current": _int(_text(gpu, "pci/pci_gpu_link_info/link_widths/"
                                        "current_link_width")),
            "width_max": _int(_text(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")),
            "replay_counter": _int(_text(gpu, "pci/replay_counter")),
        },
        "reset_required": _flag(_text(gpu, "gpu_reset_status/reset_required")),
        "drain_and_reset_recommended": _flag(
            _text(gpu, "gpu_reset_status/drain_and_reset_recommended")),
        "recovery_action": _clean(_text(gpu, "gpu_recovery_action")),
        "fabric_state": _clean(_text(gpu, "fabric/state")),
        "fabric_status": _clean(_text(gpu, "fabric/status")),
    }


def parse_nvidia_smi_xml(text: str) -> dict[str, Any]:
    """`nvidia-smi -q -x`: driver, CUDA, and per GPU identity, ECC, MIG, clocks, health."""
    _check_size(text)
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise ParseError("XML declares entities; nvidia-smi never does (refusing to expand them)")
    try:
        # Entity declarations are refused above, so expat expands nothing; no DTD is fetched.
        root = ET.fromstring(text.encode())  # noqa: S314
    except ET.ParseError as exc:
        raise ParseError(f"not XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"root element is <{root.tag}>, not <nvidia_smi_log>")
    dtd = re.search(r"nvsmi_device_(v\d+)\.dtd", text[:500])
    gpus = [_gpu(i, g) for i, g in enumerate(root.findall("gpu"))]
    for g in gpus:
        _within(g["memory_used_mib"], g["memory_total_mib"],
                f"gpus[{g['index']}].memory_used_mib", "memory_total_mib")
    return check_values({
        "schema": dtd.group(1) if dtd else None,
        "timestamp": _clean(_text(root, "timestamp")),
        "driver_version": _clean(_text(root, "driver_version")),
        "cuda_version": _clean(_text(root, "cuda_version")),
        "attached_gpus": _int(_text(root, "attached_gpus")),
        "gpu_count": len(gpus),
        "gpus": gpus,
    })


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv,nounits

QUERY_GPU_FIELDS = (
    "index", "pci.bus_id", "pci.device_id", "uuid", "name", "driver_version", "vbios_version",
    "persistence_mode", "ecc.mode.current", "mig.mode.current",
)


def parse_nvidia_smi_csv(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=FIELDS --format=csv[,nounits]` with its header line."""
    _check_size(text)
    rows = [r for r in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if r]
    if not rows:
        raise ParseError("empty CSV")
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]  # "memory.total [MiB]"
    if "index" not in header and "uuid" not in header:
        raise ParseError("CSV header names neither index nor uuid (was --format=csv used?)")
    out = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ParseError(f"line {n} has {len(row)} fields, the header has {len(header)}")
        rec: dict[str, Any] = {}
        for key, raw in zip(header, row, strict=True):
            value = raw.strip()
            if key == "index":
                rec[key] = _int(value)
            elif key == "pci.device_id":
                rec[key] = value
                rec["pci_id"] = _pci_id(value)
            elif key in ("persistence_mode", "ecc.mode.current", "mig.mode.current"):
                rec[key] = _flag(value)
            else:
                rec[key] = _clean(value)
        out.append(rec)
    return check_values(out)


# --------------------------------------------------------------------------------------------
# /proc/driver/nvidia/version

_NVRM_RE = re.compile(
    r"NVRM version:\s*NVIDIA UNIX (?:(?P<open>Open )|[\w-]+ )?Kernel Module(?: for \S+)?\s+"
    r"(?P<version>\d+\.\d+(?:\.\d+)?)")


def parse_nvidia_version(text: str) -> dict[str, Any]:
    """/proc/driver/nvidia/version: the version and flavour of the module actually loaded."""
    _check_size(text)
    m = _NVRM_RE.search(text)
    if not m:
        raise ParseError("no 'NVRM version: NVIDIA UNIX ... Kernel Module VERSION' line")
    gcc = re.search(r"GCC version:\s*(.+)", text)
    return {
        "version": m.group("version"),
        "flavour": "open" if m.group("open") else "proprietary",
        "gcc": " ".join(gcc.group(1).split()) if gcc else None,
    }


# --------------------------------------------------------------------------------------------
# kernel log: NVIDIA Xid events, AMD GPU resets, machine checks

# NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/), folded to what a fleet
# acts on. "fatal": the GPU needs a reset or the node a drain (Azure's NHC fails a node on
# 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120, customTests/azure_gpu_xid.nhc);
# "warn": worth a look, not a gate failure by itself; "app": caused by the application.
XID_TABLE: dict[int, tuple[str, str]] = {
    13: ("Graphics Engine Exception", "app"),
    31: ("GPU memory page fault", "app"),
    43: ("GPU stopped processing", "app"),
    45: ("Preemptive cleanup, due to previous errors", "app"),
    48: ("Double Bit ECC Error (DBE)", "fatal"),
    56: ("Display Engine error", "fatal"),
    57: ("Error programming video memory interface", "fatal"),
    58: ("Unstable video memory interface detected", "fatal"),
    61: ("Internal micro-controller breakpoint/warning", "warn"),
    62: ("Internal micro-controller halt", "fatal"),
    63: ("ECC page retirement or row remapping recording event", "fatal"),
    64: ("ECC page retirement or row remapper recording failure", "fatal"),
    65: ("Video processor exception", "fatal"),
    68: ("NVDEC0 Exception", "fatal"),
    69: ("Graphics Engine class error", "fatal"),
    73: ("NVENC2 Error", "fatal"),
    74: ("NVLink Error", "fatal"),
    79: ("GPU has fallen off the bus", "fatal"),
    80: ("Corrupted data sent to GPU", "fatal"),
    81: ("VGA Subsystem Error", "fatal"),
    92: ("High single-bit ECC error rate", "fatal"),
    94: ("Contained ECC error", "warn"),
    95: ("Uncontained ECC error", "fatal"),
    109: ("Context Switch Timeout Error", "warn"),
    119: ("GSP RPC Timeout", "fatal"),
    120: ("GSP Error", "fatal"),
    121: ("C2C Link Error", "fatal"),
    140: ("Unrecovered ECC Error", "fatal"),
    154: ("GPU Recovery Action Changed", "warn"),
}
FATAL_XIDS = frozenset(code for code, (_, sev) in XID_TABLE.items() if sev == "fatal")

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\):\s*(?P<xid>\d+),\s*(?P<rest>.*)$")
_PID_RE = re.compile(r"pid='?(?P<pid>[^',\s]+)'?(?:,\s*name=(?P<name>[^,]*))?,\s*")
_AMD_EVENTS = (
    (re.compile(r"amdgpu .*GPU reset begin", re.IGNORECASE), "gpu-reset", "fatal"),
    (re.compile(r"amdgpu .*ring \S+ timeout", re.IGNORECASE), "ring-timeout", "fatal"),
    (re.compile(r"amdgpu .*uncorrectable hardware error", re.IGNORECASE), "ras-uncorrectable",
     "fatal"),
    (re.compile(r"amdgpu .*(poison|RAS).*(consumed|detected)", re.IGNORECASE), "ras-poison",
     "fatal"),
)
_MCE_EVENTS = (
    (re.compile(r"mce: \[Hardware Error\]", re.IGNORECASE), "machine-check", "fatal"),
    (re.compile(r"EDAC \S+: \d+ UE ", re.IGNORECASE), "edac-uncorrectable", "fatal"),
    (re.compile(r"EDAC \S+: \d+ CE ", re.IGNORECASE), "edac-correctable", "warn"),
)


def parse_kernel_log(text: str) -> dict[str, Any]:
    """dmesg / journalctl -k text -> NVIDIA Xid events, amdgpu resets, machine checks."""
    _check_size(text)
    xids: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _XID_RE.search(line)
        if m:
            code = int(m.group("xid"))
            rest = m.group("rest").strip()
            pid = _PID_RE.match(rest)
            name, severity = XID_TABLE.get(code, ("unknown Xid", "warn"))
            xids.append({
                "pci": m.group("pci").lower(), "xid": code, "name": name,
                "severity": severity,
                "pid": pid.group("pid") if pid else None,
                "message": rest[pid.end():] if pid else rest,
                "line": line.strip()[:300],
            })
            continue
        for pattern, kind, severity in (*_AMD_EVENTS, *_MCE_EVENTS):
            if pattern.search(line):
                events.append({"kind": kind, "severity": severity, "line": line.strip()[:300]})
                break
    fatal_xids = sorted({x["xid"] for x in xids if x["severity"] == "fatal"})
    return check_values({
        "xid_count": len(xids),
        "xids": xids[-100:],  # a flapping GPU logs thousands; the last hundred tell the story
        "fatal_xids": fatal_xids,
        "events": events[-100:],
        "fatal_events": sorted({e["kind"] for e in events if e["severity"] == "fatal"}),
    })


# --------------------------------------------------------------------------------------------
# AMD: amd-smi, rocm-smi, rocminfo

def _json_document(text: str, what: str) -> Any:
    """amd-smi and rocm-smi may print a warning line before the JSON document."""
    _check_size(text)
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        raise ParseError(f"no JSON document in {what} output")
    return loads_json(text[start:], what)


def _amd_pci_id(vendor: Any, device: Any) -> str | None:
    try:
        v = int(str(vendor), 16) if vendor is not None else 0x1002
        d = int(str(device), 16)
    except (TypeError, ValueError):
        return None
    return f"{v:04x}:{d:04x}"


def _num(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, dict) and "value" in value:  # amd-smi >= 6.2: {"value": 0, "unit": ..}
        return _num(value["value"])
    if isinstance(value, str):
        return _int(value) if re.fullmatch(r"\s*-?\d+\s*", value) else _float(value)
    return None


def parse_amd_smi_json(text: str) -> dict[str, Any]:
    """`amd-smi static|metric|list --json`: a list of per-GPU objects, or {"gpu_data": [...]}.

    Sections that are present are merged per GPU: asic (name, PCI IDs), bus (BDF), vbios,
    driver, ecc (metric --ecc) and bad pages."""
    doc = _json_document(text, "amd-smi")
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        entries = doc["gpu_data"]
    elif isinstance(doc, list):
        entries = doc
    else:
        raise ParseError("amd-smi JSON is neither a list of GPUs nor an object with gpu_data")
    gpus = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ParseError(f"amd-smi entry {n} is not an object")
        asic = entry.get("asic") or {}
        bus = entry.get("bus") or {}
        driver = entry.get("driver") or {}
        vbios = entry.get("vbios") or entry.get("ifwi") or {}
        ecc = entry.get("ecc") or {}
        gpus.append({
            "index": entry.get("gpu", n),
            "name": asic.get("market_name"),
            "pci_id": _amd_pci_id(asic.get("vendor_id"), asic.get("device_id"))
            if asic.get("device_id") is not None else None,
            "pci_bus": bus.get("bdf") or entry.get("bdf"),
            "uuid": entry.get("uuid") or asic.get("asic_serial"),
            "gfx_version": asic.get("target_graphics_version"),
            "vbios_version": vbios.get("version") or vbios.get("part_number"),
            "driver_version": driver.get("version"),
            "ecc": {
                "correctable": _num(ecc.get("total_correctable_count",
                                            ecc.get("total_correctable"))),
                "uncorrectable": _num(ecc.get("total_uncorrectable_count",
                                              ecc.get("total_uncorrectable"))),
                "deferred": _num(ecc.get("total_deferred_count")),
            } if ecc else None,
            "bad_pages": len(entry["bad_pages"]) if isinstance(entry.get("bad_pages"), list)
            else None,
        })
    drivers = {g["driver_version"] for g in gpus if g["driver_version"]}
    return check_values({"gpu_count": len(gpus), "gpus": gpus,
            "driver_version": drivers.pop() if len(drivers) == 1 else None})


def _first(entry: dict[str, Any], *keys: str) -> Any:
    lowered = {k.lower(): v for k, v in entry.items()}
    for key in keys:
        if key.lower() in lowered and _clean(str(lowered[key.lower()])) is not None:
            return lowered[key.lower()]
    return None


def parse_rocm_smi_json(text: str) -> dict[str, Any]:
    """`rocm-smi --showallinfo --json` (or -a): {"card0": {...}, ..., "system": {...}}."""
    doc = _json_document(text, "rocm-smi")
    if not isinstance(doc, dict):
        raise ParseError("rocm-smi JSON must be an object keyed by card")
    cards = sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:]))
    if not cards:
        raise ParseError("rocm-smi JSON has no cardN entries")
    gpus = []
    for card in cards:
        e = doc[card]
        if not isinstance(e, dict):
            raise ParseError(f"rocm-smi {card} is not an object")
        device = _first(e, "Device ID", "GPU ID")
        gpus.append({
            "index": int(card[4:]),
            "card": card,
            "name": _first(e, "Card Series", "Device Name", "Card SKU"),
            "pci_id": _amd_pci_id("0x1002", device) if device else None,
            "device_id": device,
            "pci_bus": _first(e, "PCI Bus"),
            "unique_id": _first(e, "Unique ID"),
            "serial": _first(e, "Serial Number"),
            "vbios_version": _first(e, "VBIOS version"),
            "gfx_version": _first(e, "GFX Version"),
            "vram_total_bytes": _num(_first(e, "VRAM Total Memory (B)")),
            "vram_used_bytes": _num(_first(e, "VRAM Total Used Memory (B)")),
            "temperature_junction_c": _num(_first(e, "Temperature (Sensor junction) (C)")),
            "power_average_w": _num(_first(e, "Average Graphics Package Power (W)",
                                           "Current Socket Graphics Package Power (W)")),
            "power_max_w": _num(_first(e, "Max Graphics Package Power (W)")),
            "pcie_replay_count": _num(_first(e, "PCIe Replay Count")),
            "performance_level": _first(e, "Performance Level"),
        })
    for g in gpus:
        _within(g["vram_used_bytes"], g["vram_total_bytes"],
                f"gpus[{g['index']}].vram_used_bytes", "vram_total_bytes")
    system: dict[str, Any] = doc["system"] if isinstance(doc.get("system"), dict) else {}
    return check_values({"driver_version": _first(system, "Driver version"),
                         "gpu_count": len(gpus), "gpus": gpus})


def parse_rocminfo(text: str) -> dict[str, Any]:
    """`rocminfo`: HSA agents; the GPU agents are what ROCm userland can really use."""
    _check_size(text)
    agents: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if re.match(r"^\s*Agent \d+\s*$", line):
            current = {}
            agents.append(current)
            continue
        m = re.match(r"^\s{2}(Name|Marketing Name|Device Type|Compute Unit|Uuid):\s*(.*)$", line)
        if current is not None and m and m.group(1) not in current:
            current[m.group(1)] = m.group(2).strip()
    if not agents:
        raise ParseError("no 'Agent N' sections (is this rocminfo output?)")
    gpus = [a for a in agents if a.get("Device Type", "").upper() == "GPU"]
    return check_values({
        "agent_count": len(agents),
        "gpu_agent_count": len(gpus),
        "gpu_agents": [{"name": a.get("Name"), "marketing_name": a.get("Marketing Name"),
                        "compute_units": _int(a.get("Compute Unit")), "uuid": a.get("Uuid")}
                       for a in gpus],
    })


# --------------------------------------------------------------------------------------------
# CPU: lscpu, /proc/cpuinfo

def parse_lscpu(text: str) -> dict[str, Any]:
    """`lscpu --json` (util-linux >= 2.30, flat or nested) or plain `lscpu`."""
    _check_size(text)
    fields: dict[str, str] = {}
    stripped = text.lstrip()
    if stripped.startswith("{"):
        doc = loads_json(stripped, "lscpu --json")

        def walk(items: Any) -> None:
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and "field" in item:
                    fields.setdefault(str(item["field"]).rstrip(":").strip(),
                                      str(item.get("data") or ""))
                    walk(item.get("children"))

        walk(doc.get("lscpu") if isinstance(doc, dict) else None)
    else:
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip(), value.strip())
    if "Architecture" not in fields and "CPU(s)" not in fields:
        raise ParseError("no Architecture or CPU(s) field (is this lscpu output?)")
    flags = fields.get("Flags", "").split()
    return check_values({
        "architecture": fields.get("Architecture"),
        "cpus": _int(fields.get("CPU(s)")),
        "online": fields.get("On-line CPU(s) list"),
        "model_name": fields.get("Model name"),
        "vendor": fields.get("Vendor ID"),
        "sockets": _int(fields.get("Socket(s)")),
        "cores_per_socket": _int(fields.get("Core(s) per socket")),
        "threads_per_core": _int(fields.get("Thread(s) per core")),
        "numa_nodes": _int(fields.get("NUMA node(s)")),
        "hypervisor": fields.get("Hypervisor vendor"),
        "simd": [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile",
                             "asimd", "sve") if f in flags],
    })


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """/proc/cpuinfo: processors and model names (x86 and arm64 layouts)."""
    _check_size(text)
    processors = 0
    models: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            processors += 1
        elif key in ("model name", "Model Name", "cpu model"):
            name = " ".join(value.split())
            models[name] = models.get(name, 0) + 1
    if processors == 0:
        raise ParseError("no 'processor' lines (is this /proc/cpuinfo?)")
    return check_values({"processors": processors, "models": models})


# Where /proc/cpuinfo names the CPU, most specific first: x86, old arm ("Hardware" is the SoC,
# "Processor" the core), mips/loongarch.
_CPU_MODEL_KEYS = ("model name", "Hardware", "cpu model", "Processor")


def cpu_model_name(text: str) -> str | None:
    """The CPU's model name from /proc/cpuinfo, or None (many arm64 kernels print none)."""
    lines = [line.partition(":") for line in text.splitlines()]
    for key in _CPU_MODEL_KEYS:
        for name, sep, value in lines:
            if sep and name.strip() == key and value.strip():
                return " ".join(value.split())
    return None


# --------------------------------------------------------------------------------------------
# dkms status

# dkms 3.x: "nvidia/580.95.05, 6.1.0-55-amd64, x86_64: installed (WARNING! ...)" or
# "vpoll/0.1: added"; dkms 2.x: "nvidia, 535.261.03, 6.1.0-55-amd64, x86_64: installed".
_DKMS_RE = re.compile(
    r"^(?P<name>[^,/\s]+)[/,]\s*(?P<version>[^,:\s]+)"
    r"(?:,\s*(?P<kernel>[^,:\s]+))?(?:,\s*(?P<arch>[^,:\s]+))?:\s*(?P<state>[\w-]+)"
    r"(?P<rest>.*)$")


def parse_dkms_status(text: str, *, strict: bool = True) -> list[dict[str, Any]]:
    """`dkms status` -> one entry per module/version[/kernel/arch] line, with its warnings.

    strict=False skips lines it does not recognise instead of refusing the text: what the
    host modules want, where one odd line must not hide the modules that are there."""
    _check_size(text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.lower().startswith(("error", "warning", "deprecated")):
            continue
        m = _DKMS_RE.match(line)
        if not m:
            if not strict:
                continue
            raise ParseError(f"unrecognised dkms status line: {line[:120]!r}")
        rest = m.group("rest").strip()
        out.append({
            "name": m.group("name"), "version": m.group("version"),
            "kernel": m.group("kernel"), "arch": m.group("arch"), "state": m.group("state"),
            "warnings": re.findall(r"\(([^)]*)\)", rest),
        })
    return check_values(out)


# --------------------------------------------------------------------------------------------
# nccl-tests / rccl-tests all_reduce_perf

_PERF_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.*)$")


def _perf_half(cols: list[str]) -> dict[str, Any]:
    """time algbw busbw #wrong, where #wrong is N/A when the run did not check (-c 0)."""
    time_us, algbw, busbw, wrong = cols
    return {"time_us": float(time_us), "algbw_gbps": float(algbw),
            "busbw_gbps": float(busbw), "wrong": None if wrong == "N/A" else int(wrong)}


def parse_all_reduce_perf(text: str) -> dict[str, Any]:
    """all_reduce_perf's result table (not its "Avg bus bandwidth" line, which averages
    every size, small ones included). Each row: size, count, type, redop, root, then
    time/algbw/busbw/#wrong out-of-place and in-place."""
    _check_size(text)
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _PERF_ROW_RE.match(line)
        if not m:
            continue
        cols = m.group(6).split()
        if len(cols) != 8:
            continue
        try:
            rows.append({
                "size_bytes": int(m.group(1)), "count": int(m.group(2)),
                "type": m.group(3), "redop": m.group(4),
                "out_of_place": _perf_half(cols[:4]), "in_place": _perf_half(cols[4:]),
            })
        except ValueError:
            continue
    if not rows:
        raise ParseError("no all_reduce_perf result rows (size count type redop root ...)")
    avg = re.search(r"Avg bus bandwidth\s*:\s*(\d+(?:\.\d+)?)", text)
    ranks = re.findall(r"^#\s+Rank\s+\d+", text, re.MULTILINE)
    largest = max(rows, key=lambda r: r["size_bytes"])
    wrong_values = [h["wrong"] for r in rows for h in (r["out_of_place"], r["in_place"])]
    checked = [w for w in wrong_values if w is not None]
    return check_values({
        "rows": rows,
        "ranks": len(ranks) or None,
        "largest_size_bytes": largest["size_bytes"],
        "busbw_gbps": max(largest["out_of_place"]["busbw_gbps"],
                          largest["in_place"]["busbw_gbps"]),
        "algbw_gbps": max(largest["out_of_place"]["algbw_gbps"],
                          largest["in_place"]["algbw_gbps"]),
        "peak_busbw_gbps": max(max(r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"])
                               for r in rows),
        "wrong": sum(checked) if checked else None,
        "checked": bool(checked),
        "avg_busbw_reported_gbps": float(avg.group(1)) if avg else None,
    })


# --------------------------------------------------------------------------------------------
# container runtime device access

def _field(block: str, key: str) -> str | None:
    m = re.search(rf"(?m)^{re.escape(key)}:\s*(.+)$", block)
    return m.group(1).strip() if m else None


def parse_nvidia_container_cli_info(text: str) -> dict[str, Any]:
    """`nvidia-container-cli info`: what libnvidia-container (the runtime hook) can see."""
    _check_size(text)
    nvrm = re.search(r"NVRM version:\s*(\S+)", text)
    cuda = re.search(r"CUDA version:\s*(\S+)", text)
    devices = []
    for block in re.split(r"(?m)^(?=Device Index:)", text):
        idx = re.match(r"Device Index:\s*(\d+)", block)
        if not idx:
            continue
        devices.append({"index": int(idx.group(1)), "model": _field(block, "Model"),
                        "uuid": _field(block, "GPU UUID"), "bus": _field(block, "Bus Location"),
                        "architecture": _field(block, "Architecture")})
    if nvrm is None and not devices:
        raise ParseError("no 'NVRM version' and no 'Device Index' (nvidia-container-cli info?)")
    return check_values({"nvrm_version": nvrm.group(1) if nvrm else None,
            "cuda_version": cuda.group(1) if cuda else None,
            "device_count": len(devices), "devices": devices})


def parse_cdi_list(text: str) -> dict[str, Any]:
    """`nvidia-ctk cdi list` / `amd-ctk cdi list`: CDI device names; counts numbered GPUs."""
    _check_size(text)
    names = re.findall(r"(?m)^\s*((?:[\w.-]+/)?[\w.-]+\.\w+/gpu=\S+)\s*$", text)
    indexed = sorted({n for n in names if re.search(r"=\d+$", n)})
    return check_values({"devices": names, "gpu_count": len(indexed), "gpus": indexed})


# --------------------------------------------------------------------------------------------
# device identity: what must be equal for two GPUs to share engine and compile caches

# The nvidia-smi query every identity read uses (node_manifest's fingerprint and the triage
# collector), with --format=csv: header included, so parse_nvidia_smi_csv can name the fields.
NVIDIA_IDENTITY_QUERY = ("--query-gpu=index,name,pci.bus_id,pci.device_id,compute_cap,"
                         "driver_version,vbios_version")


def _nvidia_identities(text: str) -> list[dict[str, Any]]:
    return [{"model": r.get("name"), "pci_id": r.get("pci_id"),
             "compute_capability": r.get("compute_cap"), "vbios": r.get("vbios_version"),
             "driver": r.get("driver_version")} for r in parse_nvidia_smi_csv(text)]


def _amd_identities(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"model": g.get("name"), "pci_id": g.get("pci_id"),
             "compute_capability": g.get("gfx_version"), "vbios": g.get("vbios_version"),
             "driver": g.get("driver_version") or doc.get("driver_version")}
            for g in doc.get("gpus", [])]


IDENTITY_KINDS: dict[str, Callable[[str], list[dict[str, Any]]]] = {
    "nvidia-smi-csv": _nvidia_identities,
    "amd-smi": lambda text: _amd_identities(parse_amd_smi_json(text)),
    "rocm-smi": lambda text: _amd_identities(parse_rocm_smi_json(text)),
}


def gpu_identities(kind: str, text: str) -> list[dict[str, Any]]:
    """One identity per GPU (model, pci_id, compute_capability, vbios, driver) from the output
    of `kind`: nvidia-smi-csv (NVIDIA_IDENTITY_QUERY), amd-smi (static) or rocm-smi (JSON).
    Raises ParseError like the parser of that kind."""
    try:
        parser = IDENTITY_KINDS[kind]
    except KeyError:
        raise ParseError(f"no identity for kind {kind!r} "
                         f"(known: {', '.join(sorted(IDENTITY_KINDS))})") from None
    return [{k: _identity_value(v) for k, v in d.items()} for d in parser(text)]


def _identity_value(value: Any) -> str | None:
    return None if value is None else _clean(str(value))


def _joined(values: list[str | None]) -> str | None:
    """The value every device shares; several distinct values are joined, none is None."""
    distinct = list(dict.fromkeys(v for v in values if v is not None))
    return ",".join(distinct) if distinct else None


def fingerprint_fields(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """A host's devices as node_manifest's fingerprint records them: device_model,
    pci_ids (sorted, distinct), compute_capability and driver."""
    return {"device_model": _joined([d["model"] for d in devices]),
            "pci_ids": sorted({d["pci_id"] for d in devices if d["pci_id"]}),
            "compute_capability": _joined([d["compute_capability"] for d in devices]),
            "driver": _joined([d["driver"] for d in devices])}


# --------------------------------------------------------------------------------------------

KINDS: dict[str, Callable[[str], Any]] = {
    "nvidia-smi-xml": parse_nvidia_smi_xml,
    "nvidia-smi-csv": parse_nvidia_smi_csv,
    "nvidia-version": parse_nvidia_version,
    "kernel-log": parse_kernel_log,
    "amd-smi": parse_amd_smi_json,
    "rocm-smi": parse_rocm_smi_json,
    "rocminfo": parse_rocminfo,
    "lscpu": parse_lscpu,
    "cpuinfo": parse_cpuinfo,
    "dkms-status": parse_dkms_status,
    "all-reduce-perf": parse_all_reduce_perf,
    "nvidia-container-cli": parse_nvidia_container_cli_info,
    "cdi-list": parse_cdi_list,
}


def parse(kind: str, text: str) -> Any:
    try:
        parser = KINDS[kind]
    except KeyError:
        raise ParseError(f"unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})") from None
    return parser(text)
