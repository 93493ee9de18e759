"""`fleetgate preflight warmup`: import the declared model stack, then one-batch warm-up, on
one host per node class (story 1: CI passed on CPU, staging on NVIDIA, and the new pool
crash-looped on a wheel that expected CUDA libraries -- a per-class import and warm-up
catches that before traffic does).

Two steps, both real:
1. the stack's modules are imported by the host's /usr/bin/python3, each timed, through one
   ad-hoc Ansible run (`command` with an argv list: module names never pass through a shell);
2. the smoke suite's inference probe runs on the same hosts (`run_smoke(only="inference")`):
   framework import, model build, the first batch (cold start) and a warm-up batch, judged
   against the class's inference thresholds.
A class succeeds when every chosen host imported the whole stack and passed the warm-up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from fleetgate.errors import BadInput
from fleetgate.runner import ansible
from fleetgate.runner.inventory import HOST_RE, Inventory, Sources, resolve_inventory
from fleetgate.smoke import run_smoke
from fleetgate.smoke.model import CheckResult
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass

MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,7}$")
MAX_MODULES = 32
# What the inference probe itself imports per backend: the stack when none is declared.
DEFAULT_STACK = {"cpu": ["numpy"], "nvidia": ["torch"], "amd": ["torch"], "none": []}
IMPORT_TIMEOUT_S = 300
Outcome = Literal["pass", "fail", "inconclusive"]

# Runs on the host with its system Python. One JSON line: per module ok, seconds, version or
# the error -- a dynamic-linker error ("libcudart.so.12: cannot open shared object file") is
# exactly what story 1's pods died of.
IMPORT_SCRIPT = r"""
import importlib, json, sys, time
out = []
for name in sys.argv[1:]:
    t0 = time.perf_counter()
    try:
        mod = importlib.import_module(name)
        out.append({"module": name, "ok": True, "seconds": round(time.perf_counter() - t0, 4),
                    "version": str(getattr(mod, "__version__", "") or "") or None})
    except BaseException as exc:
        out.append({"module": name, "ok": False, "seconds": round(time.perf_counter() - t0, 4),
                    "error": (type(exc).__name__ + ": " + " ".join(str(exc).split()))[:400]})
print(json.dumps(out))
"""


def parse_stack(values: Iterable[str]) -> list[str] | None:
    """`--import torch --import transformers,safetensors` -> module names; None if none given."""
    names = [n.strip() for v in values for n in v.split(",")]
    if not names:
        return None
    bad = [n for n in names if not MODULE_RE.fullmatch(n)]
    if bad:
        raise BadInput("not a Python module name", source="--import", field=repr(bad[0]))
    if len(names) > MAX_MODULES:
        raise BadInput(f"at most {MAX_MODULES} modules", source="--import")
    return list(dict.fromkeys(names))


@dataclass
class HostWarmup:
    host: str
    imports: list[dict[str, Any]] = field(default_factory=list)
    import_error: str | None = None  # the step itself failed (unreachable, no python3 ...)
    import_s: float | None = None
    warmup: dict[str, Any] = field(default_factory=dict)  # the inference CheckResult

    @property
    def outcome(self) -> Outcome:
        if self.import_error is not None:
            return "inconclusive"
        if not all(i["ok"] for i in self.imports):
            return "fail"
        status = self.warmup.get("status")
        return status if status in ("pass", "fail") else "inconclusive"


@dataclass
class ClassWarmup:
    name: str
    backend: str
    stack: list[str]
    hosts: list[HostWarmup]

    @property
    def outcome(self) -> Outcome:
        outcomes = {h.outcome for h in self.hosts}
        return "fail" if "fail" in outcomes else ("inconclusive" if "inconclusive" in outcomes
                                                  else "pass")

    @property
    def cold_start_s(self) -> float | None:
        """The slowest chosen host: import of the stack plus the probe's cold start."""
        times = [(h.import_s or 0.0) + h.warmup["metrics"]["cold_start_s"] for h in self.hosts
                 if isinstance(h.warmup.get("metrics", {}).get("cold_start_s"), int | float)]
        return round(max(times), 4) if times else None

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.name, "backend": self.backend, "stack": self.stack,
                "outcome": self.outcome, "cold_start_s": self.cold_start_s,
                "hosts": [{**asdict(h), "outcome": h.outcome} for h in self.hosts]}


@dataclass
class WarmupRun:
    classes: list[ClassWarmup]
    run_dirs: list[str]

    @property
    def exit_code(self) -> int:
        outcomes = {c.outcome for c in self.classes}
        return 1 if "fail" in outcomes else 4 if "inconclusive" in outcomes else 0


def choose_hosts(hostvars: dict[str, dict[str, Any]], node_class: str | None, every: bool
                 ) -> dict[str, tuple[NodeClass, list[str]]]:
    """Class name -> (class, hosts to warm): the first host of each class by name, or all."""
    classes: dict[str, NodeClass] = {}
    members: dict[str, list[str]] = {}
    for host in sorted(hostvars):
        name = hostvars[host].get("fleetgate_class")
        if not name or (node_class is not None and name != node_class):
            continue
        # The inventory layer's one host-name rule: LIMIT_RE now takes regex patterns.
        if not HOST_RE.fullmatch(host):
            raise BadInput("host name cannot be passed to Ansible as a pattern",
                           source="inventory", field=repr(host))
        if name not in classes:
            try:
                classes[name] = resolve_class(str(name))[1]
            except BadInput as exc:
                raise BadInput(exc.reason, source=host, field="fleetgate_class") from None
        members.setdefault(name, []).append(host)
    return {n: (classes[n], hosts if every else hosts[:1]) for n, hosts in members.items()}


def _import_stack(inventory: Inventory, stacks: dict[str, list[str]], hosts_of: dict[str, str]
                  ) -> tuple[dict[str, HostWarmup], str]:
    """One ad-hoc run per distinct stack (normally one); host -> its imports."""
    out: dict[str, HostWarmup] = {}
    run_dirs = []
    by_stack: dict[tuple[str, ...], list[str]] = {}
    for host, cls in hosts_of.items():
        by_stack.setdefault(tuple(stacks[cls]), []).append(host)
    for stack, hosts in by_stack.items():
        if not stack:
            out.update({h: HostWarmup(h, import_s=0.0) for h in hosts})
            continue
        args = json.dumps({"argv": ["/usr/bin/python3", "-c", IMPORT_SCRIPT, *stack]})
        result = ansible.run(inventory=inventory, module="command", module_args=args,
                             limit=",".join(hosts), timeout=IMPORT_TIMEOUT_S)
        run_dirs.append(str(result.run_dir))
        for h in hosts:
            hr = result.hosts.get(h)
            hw = out[h] = HostWarmup(h)
            stdout = next((str(r.get("stdout", "")) for r in (hr.results if hr else [])
                           if "stdout" in r), None)
            try:
                doc = json.loads(stdout) if stdout is not None else None
            except json.JSONDecodeError:
                doc = None
            if not isinstance(doc, list):
                hw.import_error = (f"{hr.outcome}: {hr.message}" if hr is not None
                                   else result.error or "no result")
                continue
            hw.imports = [d for d in doc if isinstance(d, dict)]
            hw.import_s = round(sum(float(d.get("seconds") or 0) for d in hw.imports), 4)
    return out, ";".join(run_dirs)


def warmup(inventory: Sources, *, node_class: str | None = None, every: bool = False,
           stack: list[str] | None = None, forks: int = 20) -> WarmupRun:
    inv = resolve_inventory(inventory)
    if node_class is not None:
        resolve_class(node_class)  # an unknown class is bad input before anything runs
    chosen = choose_hosts(inv.hostvars, node_class, every)
    if not chosen:
        raise BadInput("no host of " + (f"class {node_class}" if node_class else "any class"),
                       source=inv.label)
    stacks = {n: stack if stack is not None else DEFAULT_STACK[nc.accelerator.backend]
              for n, (nc, _) in chosen.items()}
    hosts_of = {h: n for n, (_, hosts) in chosen.items() for h in hosts}
    per_host, import_dirs = _import_stack(inv, stacks, hosts_of)
    # The warm-up is worth running even where an import failed: it says whether the
    # framework itself starts, which narrows the failure to the declared stack.
    smoke = run_smoke(inv, limit=",".join(hosts_of), only="inference",
                      forks=min(forks, len(hosts_of)))
    for r in smoke.results:
        if r.host in per_host:
            per_host[r.host].warmup = _warmup_dict(r)
    classes = [ClassWarmup(n, nc.accelerator.backend, stacks[n], [per_host[h] for h in hosts])
               for n, (nc, hosts) in sorted(chosen.items())]
    return WarmupRun(classes, [d for d in (import_dirs, smoke.run_dir) if d])


def _warmup_dict(r: CheckResult) -> dict[str, Any]:
    keep = ("cold_start_s", "p50_ms", "p99_ms", "checksum", "deterministic", "model")
    return {"status": r.status, "probe_status": r.probe_status, "reason": r.reason,
            "metrics": {k: r.metrics[k] for k in keep if k in r.metrics},
            "threshold": r.threshold}
