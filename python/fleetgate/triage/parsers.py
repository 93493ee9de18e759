"""Pure parsers for the tools of the fast-diagnosis walk: `nvidia-smi dmon`, `nvidia-smi topo
-m`, `iostat -xz`, `mpstat`, `ip -s link`, /proc/stat, cgroup CPU files, env files and the
collector's PCI listing. Device lists, lscpu and the kernel log reuse fleetgate.smoke.parsers
(one parser per format in the project).

Every parser takes the tool's text and returns plain data; text it cannot read raises
ParseError (one line). Formats seen in the wild differ in whitespace (tabs in a terminal,
single spaces once pasted into an article), so column splitting is whitespace-tolerant.
Numbers go through smoke's check_values: finite, utilisations within 0..100, temperatures
within what a sensor reads, everything else (rates, sizes, counts) >= 0.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from fleetgate.smoke.parsers import ParseError, check_values, loads_json, parse_kernel_log

__all__ = [
    "ParseError",
    "cpu_usage",
    "parse_amd_metric_usage",
    "parse_cgroup_cpu",
    "parse_dmon",
    "parse_env_file",
    "parse_iostat",
    "parse_ip_link",
    "parse_kernel_events",
    "parse_mpstat",
    "parse_nvidia_smi_list",
    "parse_pci_devices",
    "parse_proc_stat",
    "parse_topo",
]

MAX_CHARS = 20_000_000


def _size(text: str) -> None:
    if len(text) > MAX_CHARS:
        raise ParseError(f"input is {len(text)} characters, more than any tool output we parse")


def _num(token: str) -> float | None:
    try:
        return float(token.replace(",", "."))
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# nvidia-smi -L

_GPU_LINE_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?)(?: \(UUID: (?P<uuid>[^)]*)\))?\s*$")


def parse_nvidia_smi_list(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -L`: one `GPU N: NAME (UUID: ...)` line per device; MIG lines are skipped."""
    _size(text)
    gpus = []
    for line in text.splitlines():
        m = _GPU_LINE_RE.match(line.strip())
        if m:
            gpus.append({"index": int(m.group("index")), "name": m.group("name"),
                         "uuid": m.group("uuid")})
    if not gpus and text.strip():
        raise ParseError("no 'GPU N: NAME' lines (is this nvidia-smi -L output?)")
    return check_values(gpus)


# --------------------------------------------------------------------------------------------
# nvidia-smi dmon

# Columns of `dmon -s pucvmet` in percent (utilisations; power/thermal violation time) and in
# degrees C, for a dmon that prints no units line; a units line (`# Idx W C C % ...`) adds its own.
_DMON_PERCENT = frozenset({"sm", "mem", "enc", "dec", "jpg", "ofa", "pviol", "tviol"})
_DMON_CELSIUS = frozenset({"gtemp", "mtemp"})


def parse_dmon(text: str) -> dict[str, Any]:
    """`nvidia-smi dmon -s ...`: the `# gpu pwr ...` header names the columns; `-` is no value.
    Returns the samples and, per GPU, the mean of every numeric column."""
    _size(text)
    columns: list[str] = []
    units: list[str] = []
    samples: list[dict[str, Any]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if tokens and tokens[0].lower() == "gpu" and not columns:
                columns = [t.lower() for t in tokens]
            elif tokens and tokens[0].lower() == "idx" and columns and not units:
                units = tokens
            continue
        if not columns:
            raise ParseError("a sample line before the '# gpu ...' header (is this dmon output?)")
        tokens = stripped.split()
        if len(tokens) != len(columns):
            raise ParseError(f"sample has {len(tokens)} fields, the header has {len(columns)}")
        if not tokens[0].isdigit():
            raise ParseError(f"sample without a GPU index: {stripped[:60]!r}")
        sample: dict[str, Any] = {"gpu": int(tokens[0])}
        for key, tok in zip(columns[1:], tokens[1:], strict=True):
            sample[key] = None if tok == "-" else _num(tok)
        samples.append(sample)
    if not columns:
        raise ParseError("no '# gpu ...' header line (is this nvidia-smi dmon output?)")
    unit_of = dict(zip(columns[1:], units[1:], strict=False))
    percent = _DMON_PERCENT | {k for k, u in unit_of.items() if u == "%"}
    celsius = _DMON_CELSIUS | {k for k, u in unit_of.items() if u == "C"}
    check_values(samples, percent=percent, temperature=celsius.__contains__, where="samples")
    per_gpu: dict[int, dict[str, float | None]] = {}
    for idx in sorted({s["gpu"] for s in samples}):
        rows = [s for s in samples if s["gpu"] == idx]
        means: dict[str, float | None] = {}
        for key in columns[1:]:
            vals = [r[key] for r in rows if r.get(key) is not None]
            means[key] = round(sum(vals) / len(vals), 3) if vals else None
        means["samples"] = float(len(rows))
        per_gpu[idx] = means
    return {"columns": columns[1:], "units": unit_of, "samples": samples, "per_gpu": per_gpu}


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m

_TOPO_MULTIWORD = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header, even in a pipe


def _topo_header(line: str) -> list[str]:
    if "\t" in line:
        return [t.strip() for t in line.split("\t") if t.strip()]
    text = line
    for name in _TOPO_MULTIWORD:
        text = text.replace(name, name.replace(" ", "_"))
    return [t.replace("_", " ") for t in text.split()]


def parse_topo(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m`: the link matrix between devices and each GPU's CPU and NUMA
    affinity. Stops at the legend."""
    _size(text)
    header: list[str] = []
    rows: dict[str, dict[str, str]] = {}
    for line in _ANSI_RE.sub("", text).splitlines():
        if not line.strip():
            if header:
                break
            continue
        if line.strip().startswith("Legend"):
            break
        if not header:
            header = _topo_header(line)
            if not header or not header[0].startswith(("GPU", "NIC")):
                raise ParseError("the first line does not name GPU columns "
                                 "(is this nvidia-smi topo -m output?)")
            continue
        tokens = [t.strip() for t in line.split("\t") if t.strip()] if "\t" in line \
            else line.split()
        name, values = tokens[0], tokens[1:]
        devices = [h for h in header if h not in _TOPO_MULTIWORD]
        if len(values) < len(devices):
            raise ParseError(f"row {name} has {len(values)} fields for {len(devices)} devices")
        row = dict(zip(devices, values[:len(devices)], strict=True))
        extra = [h for h in header if h in _TOPO_MULTIWORD]
        row.update(zip(extra, values[len(devices):], strict=False))
        rows[name] = row
    if not rows:
        raise ParseError("no device rows (is this nvidia-smi topo -m output?)")
    gpus = [n for n in rows if n.startswith("GPU")]
    links = {f"{a}-{b}": rows[a].get(b) for a in gpus for b in gpus if a < b}

    def affinity(gpu: str, key: str) -> str | None:
        value = rows[gpu].get(key)
        return None if value in (None, "N/A") else value

    return {
        "gpus": gpus,
        "nics": [n for n in rows if n.startswith("NIC")],
        "links": links,
        "cpu_affinity": {g: affinity(g, "CPU Affinity") for g in gpus},
        "numa_affinity": {g: affinity(g, "NUMA Affinity") for g in gpus},
    }


# --------------------------------------------------------------------------------------------
# amd-smi metric --usage --json

def _value(raw: Any) -> float | None:
    """amd-smi prints a number, a string, or {"value": N, "unit": "%"} depending on release."""
    if isinstance(raw, dict):
        raw = raw.get("value")
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    return _num(str(raw).rstrip("%").strip()) if isinstance(raw, str) else None


def parse_amd_metric_usage(text: str) -> dict[int, dict[str, float | None]]:
    """`amd-smi metric --usage --json`: per GPU its gfx (compute) and umc (memory) activity,
    in percent; a top-level list or {"gpu_data": [...]}."""
    _size(text)
    doc = loads_json(text, "amd-smi metric")
    if isinstance(doc, dict):
        doc = doc.get("gpu_data")
    if not isinstance(doc, list) or not doc:
        raise ParseError("amd-smi metric: no GPU list")
    out: dict[int, dict[str, float | None]] = {}
    for n, gpu in enumerate(doc):
        if not isinstance(gpu, dict):
            raise ParseError(f"amd-smi metric: entry {n} is not an object")
        usage: dict[str, Any] = gpu["usage"] if isinstance(gpu.get("usage"), dict) else {}
        index = gpu.get("gpu", n)
        out[int(index) if isinstance(index, int) else n] = {
            "sm": _value(usage.get("gfx_activity", usage.get("gfx_usage"))),
            "mem": _value(usage.get("umc_activity", usage.get("mem_usage"))),
        }
    return check_values(out, percent=frozenset({"sm", "mem"}), where="gpus")


# --------------------------------------------------------------------------------------------
# iostat -xz, mpstat

def _key(name: str) -> str:
    return name.lstrip("%").replace("-", "_").replace("/", "_per_").lower()


def parse_iostat(text: str) -> dict[str, Any]:
    """`iostat -xz [interval count]`: every report's avg-cpu line and device table (`-z` leaves
    out idle devices, so a live report may list none)."""
    _size(text)
    reports: list[dict[str, Any]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("avg-cpu:"):
            keys = [_key(k) for k in line.split()[1:]]
            values = lines[i + 1].split() if i + 1 < len(lines) else []
            if len(values) != len(keys):
                raise ParseError("avg-cpu values do not match its header")
            reports.append({"cpu": {k: _num(v) for k, v in zip(keys, values, strict=True)},
                            "devices": {}})
            i += 2
            continue
        if line.startswith("Device"):
            keys = [_key(k) for k in line.replace("Device:", "Device").split()[1:]]
            if not reports:
                reports.append({"cpu": None, "devices": {}})
            i += 1
            while i < len(lines) and lines[i].strip():
                tokens = lines[i].split()
                if len(tokens) != len(keys) + 1:
                    raise ParseError(f"device row {tokens[0]!r} has {len(tokens) - 1} values "
                                     f"for {len(keys)} columns")
                reports[-1]["devices"][tokens[0]] = {
                    k: _num(v) for k, v in zip(keys, tokens[1:], strict=True)}
                i += 1
            continue
        i += 1
    if not reports:
        raise ParseError("no avg-cpu or Device section (is this iostat -x output?)")
    # Every avg-cpu column and %util/%rrqm/%wrqm are shares of time or requests.
    percent = {_key(k) for k in text.split() if k.startswith("%")}
    check_values(reports, percent=frozenset(percent), where="reports")
    # With an interval, report 1 averages since boot and the rest are the live samples; a
    # single report (no interval, or as quoted in a runbook) is all there is.
    live = reports[1:] if len(reports) > 1 else reports
    return {"reports": len(reports), "since_boot": reports[0] if len(reports) > 1 else None,
            "live": live}


def parse_mpstat(text: str) -> dict[str, Any]:
    """`mpstat [-P ALL] interval count`: the CPU `all` row of the Average block (else the
    last one), as percentages."""
    _size(text)
    header: list[str] = []
    found: dict[str, float | None] | None = None
    for line in text.splitlines():
        tokens = line.split()
        if "CPU" in tokens and any(t.startswith("%") for t in tokens):
            header = tokens[tokens.index("CPU"):]
            offset = tokens.index("CPU")
            continue
        if header and len(tokens) >= offset + len(header) and tokens[offset] == "all":
            values = tokens[offset + 1:offset + len(header)]
            found = {_key(k): _num(v) for k, v in zip(header[1:], values, strict=True)}
    if found is None:
        raise ParseError("no CPU 'all' row (is this mpstat output?)")
    return check_values(found, percent=frozenset(found))


# --------------------------------------------------------------------------------------------
# ip -s link

_IFACE_RE = re.compile(r"^\d+:\s+(?P<name>[^:@\s]+)(?:@\S+)?:\s+<(?P<flags>[^>]*)>(?P<rest>.*)$")


def parse_ip_link(text: str) -> dict[str, dict[str, Any]]:
    """`ip -s link [show dev X]`: per interface its flags, state, MTU and RX/TX counters,
    whatever columns this iproute2 prints (`missed`, `overrun`, `carrier` ...)."""
    _size(text)
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    pending: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        m = _IFACE_RE.match(line.strip())
        if m:
            rest = m.group("rest").split()
            current = {"flags": m.group("flags").split(","), "mtu": None, "state": None,
                       "rx": {}, "tx": {}}
            for key, value in itertools.pairwise(rest):
                if key == "mtu":
                    current["mtu"] = int(value) if value.isdigit() else None
                elif key == "state":
                    current["state"] = value
            out[m.group("name")] = current
            pending = None
            continue
        tokens = line.split()
        if current is None or not tokens:
            continue
        if tokens[0] in ("RX:", "TX:"):
            pending = (tokens[0][:2].lower(), [t.lower() for t in tokens[1:]])
            continue
        if pending and all(t.isdigit() for t in tokens):
            direction, keys = pending
            current[direction] = {k: int(v) for k, v in zip(keys, tokens, strict=False)}
            pending = None
    if not out:
        raise ParseError("no 'N: NAME: <FLAGS>' lines (is this ip -s link output?)")
    return out


# --------------------------------------------------------------------------------------------
# /proc/stat, cgroup CPU

_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat(text: str) -> dict[str, int]:
    """The aggregate `cpu` line of /proc/stat, in clock ticks."""
    for line in text.splitlines():
        tokens = line.split()
        if tokens and tokens[0] == "cpu":
            values = [int(t) for t in tokens[1:1 + len(_STAT_FIELDS)] if t.isdigit()]
            if len(values) < 5:
                break
            return dict(zip(_STAT_FIELDS, values, strict=False))
    raise ParseError("no aggregate 'cpu' line (is this /proc/stat?)")


def cpu_usage(before: dict[str, int], after: dict[str, int]) -> dict[str, float] | None:
    """Percent of CPU time spent busy, in iowait, in steal and idle between two snapshots;
    None when no tick passed."""
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in _STAT_FIELDS}
    total = sum(delta.values())
    if total <= 0:
        return None
    idle = delta["idle"]
    pct = {k: round(100.0 * v / total, 2) for k, v in delta.items()}
    return {"busy": round(100.0 * (total - idle - delta["iowait"]) / total, 2),
            "iowait": pct["iowait"], "steal": pct["steal"], "idle": pct["idle"],
            "user": round(pct["user"] + pct["nice"], 2), "system": pct["system"]}


def _kv(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_cgroup_cpu(*, cpu_max: str | None = None, cfs_quota_us: str | None = None,
                     cfs_period_us: str | None = None, stat_before: str | None = None,
                     stat_after: str | None = None) -> dict[str, Any]:
    """The CPU quota (in CPUs; None = unlimited) of a cgroup v2 `cpu.max` or v1
    `cpu.cfs_quota_us`/`cpu.cfs_period_us`, and the throttling between two `cpu.stat` reads."""
    quota: float | None = None
    version: int | None = None
    if cpu_max is not None and cpu_max.strip():
        parts = cpu_max.split()
        version = 2
        if len(parts) != 2 or not parts[1].isdigit() or not (parts[0] == "max"
                                                             or parts[0].isdigit()):
            raise ParseError(f"cpu.max is not 'QUOTA PERIOD': {cpu_max.strip()[:40]!r}")
        if parts[0] != "max" and int(parts[1]) > 0:
            quota = int(parts[0]) / int(parts[1])
    elif cfs_quota_us is not None and cfs_period_us is not None:
        version = 1
        try:
            q, p = int(cfs_quota_us.strip()), int(cfs_period_us.strip())
        except ValueError:
            raise ParseError("cpu.cfs_quota_us / cpu.cfs_period_us are not integers") from None
        if q > 0 and p > 0:
            quota = q / p
    throttle: dict[str, Any] | None = None
    if stat_before is not None and stat_after is not None:
        b, a = _kv(stat_before), _kv(stat_after)
        if "nr_periods" in a and "nr_throttled" in a:
            periods = a["nr_periods"] - b.get("nr_periods", 0)
            throttled = a["nr_throttled"] - b.get("nr_throttled", 0)
            # v2 reports throttled_usec, v1 throttled_time in ns
            if "throttled_usec" in a:
                secs = (a["throttled_usec"] - b.get("throttled_usec", 0)) / 1e6
            else:
                secs = (a.get("throttled_time", 0) - b.get("throttled_time", 0)) / 1e9
            throttle = {"periods": periods, "throttled": throttled,
                        "throttled_s": round(secs, 3),
                        "ratio": round(throttled / periods, 3) if periods > 0 else None}
    return {"cgroup": version, "quota_cpus": round(quota, 3) if quota is not None else None,
            "throttle": throttle}


# --------------------------------------------------------------------------------------------
# env files, PCI listing, kernel log

_ENV_LINE_RE = re.compile(r"^(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*)$")


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as in /etc/environment (pam_env) and /etc/nccl.conf: `#` comments,
    optional `export`, optional matching quotes."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _ENV_LINE_RE.match(stripped)
        if not m:
            continue
        value = m.group("value").strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[m.group("key")] = value
    return out


# PCI class codes: 0x0300 VGA, 0x0302 3D controller (datacenter GPUs), 0x1200 accelerators.
_GPU_CLASSES = ("0x0300", "0x0302", "0x1200")
_GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd"}


def parse_pci_devices(text: str) -> list[dict[str, Any]]:
    """The collector's sysfs listing (`ADDRESS VENDOR DEVICE CLASS NUMA` per line) -> the GPUs
    and accelerators on the bus, whether or not a driver sees them."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5:
            raise ParseError(f"line {n}: expected ADDRESS VENDOR DEVICE CLASS NUMA")
        addr, vendor, device, cls, numa = parts
        if not cls.startswith(_GPU_CLASSES) or vendor not in _GPU_VENDORS:
            continue
        out.append({"address": addr, "vendor": _GPU_VENDORS[vendor],
                    "pci_id": f"{vendor[2:]}:{device.removeprefix('0x')}",
                    "numa_node": int(numa) if numa.lstrip("-").isdigit() else None})
    return out


_BUS_DROP_RE = re.compile(r"fallen off the bus", re.IGNORECASE)


def parse_kernel_events(text: str) -> dict[str, Any]:
    """dmesg / journalctl -k -> smoke's Xid/amdgpu/MCE reading, plus `fallen off the bus`
    lines that carry no Xid (the driver's own follow-up line, or a non-NVRM bus message)."""
    parsed = parse_kernel_log(text)
    xid_lines = {x["line"] for x in parsed["xids"]}
    parsed["bus_drops"] = [line.strip()[:300] for line in text.splitlines()
                           if _BUS_DROP_RE.search(line) and line.strip()[:300] not in xid_lines]
    return parsed
