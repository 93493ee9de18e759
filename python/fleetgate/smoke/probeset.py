"""The probe set as the smoke_probes role installs it, and the command line of each probe.

The set is every file of roles/smoke_probes/files/probes plus this package's parsers.py
under the name fleetgate_parsers.py; VERSION is the SHA-256 of `sha256sum`-style lines over
the set sorted by name (what roles/smoke_probes/tasks/main.yml computes).
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from fleetgate.site import content_root
from fleetgate.smoke.thresholds import Check, Plan
from fleetgate.spec.schema import NodeClass

PROBES_DIR = "/opt/fleetgate/probes"
PARSERS_NAME = "fleetgate_parsers.py"
PARSERS_SOURCE = Path(__file__).with_name("parsers.py")
PYTHON = "/usr/bin/python3"
PYTHON_FLAGS = ("-B",)  # no __pycache__ in the probe directory: it holds exactly the set
# Seconds the caller allows beyond a probe's own deadline before coreutils `timeout` kills
# it: the probe's watchdog needs ~4 s (SIGTERM, grace, SIGKILL) to answer by itself.
CALLER_GRACE_S = 15


def role_probes_dir() -> Path:
    return content_root() / "roles" / "smoke_probes" / "files" / "probes"


def probe_files(role_dir: Path | None = None) -> dict[str, bytes]:
    """name -> content of every file the role installs (VERSION excluded)."""
    role_dir = role_dir or role_probes_dir()
    files = {p.name: p.read_bytes() for p in sorted(role_dir.iterdir()) if p.is_file()}
    files[PARSERS_NAME] = PARSERS_SOURCE.read_bytes()
    return files


def set_version(files: dict[str, bytes]) -> str:
    listing = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n"
                      for name, data in sorted(files.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def install_local(dest: Path, role_dir: Path | None = None) -> Path:
    """Lay the probe set out in a local directory, as the role would (tests, benchmarks)."""
    dest.mkdir(parents=True, exist_ok=True)
    files = probe_files(role_dir)
    for name, data in files.items():
        (dest / name).write_bytes(data)
        (dest / name).chmod(0o755)
    (dest / "VERSION").write_text(set_version(files) + "\n")
    return dest


def probe_argv(check: Check, nc: NodeClass, plan: Plan, *, probes_dir: str = PROBES_DIR,
               python: str = PYTHON) -> list[str]:
    """The probe's own command line for this class (no caller timeout around it)."""
    backend = nc.accelerator.backend
    timeout = plan.timeouts_s[check]
    argv = [python, *PYTHON_FLAGS, f"{probes_dir}/{check}.py", "--backend", backend,
            "--timeout", f"{timeout:g}"]
    if check == "stack":
        argv += ["--toolkit", nc.runtime.gpu_toolkit]
        if nc.runtime.cdi:
            argv.append("--cdi")
    elif check == "gemm":
        g = plan.gemm
        argv += ["--dtype", g.dtype, "--size", str(g.size), "--min-time", f"{g.min_time_s:g}",
                 "--repeats", str(g.repeats), "--warmup", str(g.warmup)]
    elif check == "comms":
        c = plan.comms
        argv += ["--bytes", str(c.bytes), "--ranks", str(c.ranks),
                 "--min-time", f"{c.min_time_s:g}", "--repeats", str(c.repeats),
                 "--iters", str(c.iters), "--warmup-iters", str(c.warmup_iters)]
        if backend in ("nvidia", "amd"):
            argv += ["--gpus", str(nc.accelerator.count)]
    elif check == "inference":
        i = plan.inference
        argv += ["--batches", str(i.batches), "--batch-size", str(i.batch_size),
                 "--max-time", f"{i.max_time_s:g}"]
    return argv


def remote_command(check: Check, nc: NodeClass, plan: Plan, *,
                   probes_dir: str = PROBES_DIR) -> str:
    """What the suite runs over SSH: the probe under coreutils `timeout` as a last line of
    defence (rc 124/137) should the probe's own watchdog ever fail to answer."""
    limit = int(plan.timeouts_s[check]) + CALLER_GRACE_S
    argv = ["timeout", "-k", "5", str(limit), *probe_argv(check, nc, plan,
                                                          probes_dir=probes_dir)]
    return " ".join(shlex.quote(a) for a in argv)


def host_budget_s(checks: list[Check], plan: Plan) -> float:
    """The most one host's sequential checks may take, transport included."""
    return sum(plan.timeouts_s[c] + CALLER_GRACE_S + 10 for c in checks) + 30
