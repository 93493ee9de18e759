#!/usr/bin/python3 -B
"""fleetgate smoke probe: the driver stack around the devices.

- the running kernel (`uname -r`), and whether this host is a container (whose kernel is the
  outer machine's, so a kernel pin cannot be checked from inside);
- `dkms status`: every registered module/version and its state per kernel;
- the kernel modules loaded now (/proc/modules);
- for classes with a GPU toolkit, whether the container runtime's device layer reaches the
  GPUs: `nvidia-container-cli info` (libnvidia-container, what the runtime hook uses) and,
  with CDI, `nvidia-ctk cdi list`; `amd-ctk cdi list` for AMD.
The controller compares all of it with the class pins.
"""

from __future__ import annotations

import platform
import shutil
from typing import Any

import fleetgate_parsers as parsers
from fleetgate_probe import Context, ProbeError, base_parser, container_kind, main, read_text, tail

TOOL_TIMEOUT_S = 60.0
TOOLKITS = ("nvidia-container-toolkit", "amd-container-toolkit", "none")


def loaded_modules() -> list[str]:
    text = read_text("/proc/modules") or ""
    return sorted({line.split()[0] for line in text.splitlines() if line.strip()})


def runtime_devices(ctx: Context, toolkit: str, cdi: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"toolkit": toolkit, "cdi": cdi}
    if toolkit == "nvidia-container-toolkit":
        if shutil.which("nvidia-container-cli") is None:
            out["container_cli"] = {"error": "nvidia-container-cli not installed"}
        else:
            proc = ctx.run(["nvidia-container-cli", "info"], timeout=TOOL_TIMEOUT_S)
            out["container_cli"] = (parsers.parse_nvidia_container_cli_info(proc.stdout)
                                    if proc.returncode == 0
                                    else {"error": tail(proc.stdout + proc.stderr)})
        ctk = "nvidia-ctk"
    else:
        ctk = "amd-ctk"
    if cdi or toolkit == "amd-container-toolkit":
        if shutil.which(ctk) is None:
            out["cdi_list"] = {"error": f"{ctk} not installed"}
        else:
            proc = ctx.run([ctk, "cdi", "list"], timeout=TOOL_TIMEOUT_S)
            out["cdi_list"] = (parsers.parse_cdi_list(proc.stdout + "\n" + proc.stderr)
                               if proc.returncode == 0
                               else {"error": tail(proc.stdout + proc.stderr)})
    return out


def work(ctx: Context) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "kernel": platform.release(),
        "container": container_kind(),
        "loaded_modules": loaded_modules(),
    }
    if shutil.which("dkms") is None:
        metrics["dkms"] = None
    else:
        proc = ctx.run(["dkms", "status"], timeout=TOOL_TIMEOUT_S)
        if proc.returncode != 0:
            raise ProbeError(f"dkms status exited {proc.returncode}: {tail(proc.stderr)}")
        try:
            metrics["dkms"] = parsers.parse_dkms_status(proc.stdout)
        except parsers.ParseError as exc:
            raise ProbeError(str(exc)) from None
        ctx.evidence["dkms_status"] = proc.stdout[-4000:]
    if ctx.args.toolkit != "none":
        metrics["runtime"] = runtime_devices(ctx, ctx.args.toolkit, ctx.args.cdi)
    return {"status": "ok", "metrics": metrics}


def parser() -> Any:
    p = base_parser("stack", 60.0)
    p.add_argument("--toolkit", choices=TOOLKITS, default="none")
    p.add_argument("--cdi", action="store_true", help="the class uses CDI device specs")
    return p


if __name__ == "__main__":
    raise SystemExit(main("stack", parser(), work))
