#!/usr/bin/python3 -B
"""fleetgate smoke probe: device discovery.

What is there and in what health, as the vendor tools report it; the controller compares it
with the node class (count, model, PCI IDs, driver pin) and decides.

- nvidia: `nvidia-smi -q -x`, cross-checked with `nvidia-smi --query-gpu=... --format=csv`,
  and /proc/driver/nvidia/version (the module actually loaded, and its flavour).
- amd: `amd-smi static --json` (+ `amd-smi metric --ecc --json`), else `rocm-smi
  --showallinfo --json`; `rocminfo` GPU agents; /sys/module/amdgpu/version.
- cpu / none: `lscpu --json` and /proc/cpuinfo, with the CPU quota this host really has.
- all: the kernel log (dmesg, else journalctl -k) for Xid events, amdgpu resets and machine
  checks.
"""

from __future__ import annotations

import shutil
from typing import Any

import fleetgate_parsers as parsers
from fleetgate_probe import (
    Context,
    ProbeError,
    base_parser,
    container_kind,
    cpu_limits,
    main,
    read_text,
    tail,
)

TOOL_TIMEOUT_S = 60.0


def kernel_log(ctx: Context) -> dict[str, Any]:
    attempts = []
    for argv in (["dmesg", "--kernel", "--nopager"], ["journalctl", "-k", "-b", "0",
                                                        "--no-pager", "-o", "short-iso"]):
        if shutil.which(argv[0]) is None:
            attempts.append(f"{argv[0]}: not installed")
            continue
        proc = ctx.run(argv, timeout=TOOL_TIMEOUT_S)
        if proc.returncode == 0 and proc.stdout.strip():
            out = parsers.parse_kernel_log(proc.stdout)
            out.update(readable=True, source=argv[0])
            return out
        attempts.append(f"{argv[0]}: {tail(proc.stderr) or f'exit {proc.returncode}'}")
    return {"readable": False, "source": None, "reason": "; ".join(attempts), "xid_count": 0,
            "xids": [], "fatal_xids": [], "events": [], "fatal_events": []}


def nvidia(ctx: Context) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    module_text = read_text("/proc/driver/nvidia/version")
    metrics["module"] = parsers.parse_nvidia_version(module_text) if module_text else None
    if shutil.which("nvidia-smi") is None:
        metrics.update(nvidia_smi="missing", gpu_count=0, gpus=[])
        return metrics
    ctx.tool_versions["nvidia-smi"] = "present"
    proc = ctx.run(["nvidia-smi", "-q", "-x"], timeout=TOOL_TIMEOUT_S)
    if proc.returncode != 0:
        # "couldn't communicate with the NVIDIA driver", a version mismatch: measured, and bad.
        metrics.update(nvidia_smi="failed", nvidia_smi_error=tail(proc.stdout + proc.stderr),
                       gpu_count=0, gpus=[])
        return metrics
    smi = parsers.parse_nvidia_smi_xml(proc.stdout)
    metrics.update(nvidia_smi="ok", **smi)
    ctx.tool_versions["nvidia-driver"] = str(smi["driver_version"])
    ctx.tool_versions["cuda-driver-api"] = str(smi["cuda_version"])
    full = list(parsers.QUERY_GPU_FIELDS)
    # Drivers from before MIG reject the whole query for one unknown field: retry without it.
    for fields in (full, [f for f in full if f != "mig.mode.current"]):
        q = ctx.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,nounits"],
                    timeout=TOOL_TIMEOUT_S)
        if q.returncode == 0:
            metrics["query_gpu"] = parsers.parse_nvidia_smi_csv(q.stdout)
            break
        ctx.evidence["query_gpu_error"] = tail(q.stdout + q.stderr)
    return metrics


def amd(ctx: Context) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    version = read_text("/sys/module/amdgpu/version")
    metrics["module"] = ({"version": version.strip()} if version
                         else {"version": None, "loaded": bool(read_text("/sys/module/amdgpu/"
                                                                         "initstate"))})
    if shutil.which("amd-smi"):
        proc = ctx.run(["amd-smi", "static", "--asic", "--bus", "--vbios", "--driver", "--json"],
                       timeout=TOOL_TIMEOUT_S)
        if proc.returncode == 0:
            static = parsers.parse_amd_smi_json(proc.stdout)
            ecc = ctx.run(["amd-smi", "metric", "--ecc", "--json"], timeout=TOOL_TIMEOUT_S)
            if ecc.returncode == 0:
                by_index = {g["index"]: g for g in parsers.parse_amd_smi_json(ecc.stdout)["gpus"]}
                for g in static["gpus"]:
                    g["ecc"] = by_index.get(g["index"], {}).get("ecc")
            metrics.update(tool="amd-smi", **static)
        else:
            ctx.evidence["amd_smi_error"] = tail(proc.stdout + proc.stderr)
    if "tool" not in metrics and shutil.which("rocm-smi"):
        proc = ctx.run(["rocm-smi", "--showallinfo", "--json"], timeout=TOOL_TIMEOUT_S)
        if proc.returncode == 0:
            metrics.update(tool="rocm-smi", **parsers.parse_rocm_smi_json(proc.stdout))
        else:
            ctx.evidence["rocm_smi_error"] = tail(proc.stdout + proc.stderr)
    if "tool" not in metrics:
        metrics.update(tool=None, gpu_count=0, gpus=[])
    if shutil.which("rocminfo"):
        proc = ctx.run(["rocminfo"], timeout=TOOL_TIMEOUT_S)
        metrics["rocminfo"] = (parsers.parse_rocminfo(proc.stdout) if proc.returncode == 0
                               else {"error": tail(proc.stdout + proc.stderr)})
    return metrics


def cpu(ctx: Context) -> dict[str, Any]:
    metrics: dict[str, Any] = {"limits": cpu_limits(), "container": container_kind()}
    try:
        proc = ctx.run(["lscpu", "--json"], timeout=TOOL_TIMEOUT_S)
        if proc.returncode != 0:
            proc = ctx.run(["lscpu"], timeout=TOOL_TIMEOUT_S)
        if proc.returncode != 0:
            raise ProbeError(f"lscpu exited {proc.returncode}: {tail(proc.stderr)}")
        metrics["lscpu"] = parsers.parse_lscpu(proc.stdout)
    except FileNotFoundError:
        metrics["lscpu"] = None
        ctx.evidence["lscpu"] = "not installed"
    cpuinfo = read_text("/proc/cpuinfo")
    metrics["cpuinfo"] = parsers.parse_cpuinfo(cpuinfo) if cpuinfo else None
    return metrics


def work(ctx: Context) -> dict[str, Any]:
    backend = ctx.args.backend
    try:
        if backend == "nvidia":
            metrics = nvidia(ctx)
        elif backend == "amd":
            metrics = amd(ctx)
        else:
            metrics = {}
        metrics["cpu"] = cpu(ctx)
        metrics["kernel_log"] = kernel_log(ctx)
    except parsers.ParseError as exc:
        raise ProbeError(f"unexpected tool output: {exc}") from None
    return {"status": "ok", "metrics": metrics}


if __name__ == "__main__":
    raise SystemExit(main("discovery", base_parser("discovery", 60.0), work))
