"""Verdicts: a probe report plus the node class and its resolved thresholds -> pass/fail.

Pure functions, no I/O: the testinfra suite calls `judge()` per host and check, the
controller calls `apply_relative()` (the judge family's fleet-relative check) across hosts.
A careful GPU SRE's hand checks, written down: device count/model/PCI ID against the class,
the loaded driver against the pin, ECC, remapped rows and fatal Xids, DKMS state for the
running kernel, runtime device access, a GEMM/all-reduce/inference that is both correct and
fast enough.
"""

from __future__ import annotations

import re
from typing import Any

from fleetgate.judge import floors
from fleetgate.judge.relative import apply_relative
from fleetgate.smoke.model import CheckResult, ProbeReport, ProbeStatus
from fleetgate.smoke.thresholds import Check, Plan
from fleetgate.spec.schema import NodeClass

__all__ = ["apply_relative", "judge", "unmeasured"]


class Verdict:
    """Collects failures and warnings for one check."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.missing: list[str] = []  # inputs the verdict needs and did not get

    def unmeasured(self, msg: str) -> None:
        self.missing.append(msg)

    def fail(self, msg: str) -> None:
        self.failures.append(msg)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def note(self, msg: str) -> None:
        self.notes.append(msg)


def driver_pin_upstream(vendor: str, version: str | None) -> str | None:
    """The kernel module version a package pin implies: epoch and Debian revision dropped;
    for amdgpu-dkms (6.12.12.60400-...) the first three components."""
    if not version:
        return None
    v = version.split(":", 1)[-1].split("-", 1)[0]
    if vendor == "amd":
        v = ".".join(v.split(".")[:3])
    return v


def _norm_tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t not in ("amd", "ati")}


def model_matches(expected: str, reported: str | None) -> bool:
    """Exact (case-insensitive), or every token of the class model in the reported name
    ("AMD Instinct MI100" vs rocm-smi's "Arcturus GL-XL [Instinct MI100]")."""
    if reported is None:
        return False
    if expected.lower() == reported.lower():
        return True
    want = _norm_tokens(expected)
    return bool(want) and want <= _norm_tokens(reported)


# --------------------------------------------------------------------------------------------
# discovery

def _devices_against_class(v: Verdict, nc: NodeClass, gpus: list[dict[str, Any]]) -> None:
    acc = nc.accelerator
    if len(gpus) != acc.count:
        v.fail(f"{len(gpus)} {acc.vendor} device(s), the class expects {acc.count}")
    wrong_model = sorted({str(g.get("name")) for g in gpus
                          if not model_matches(acc.model, g.get("name"))})
    if wrong_model:
        v.fail(f"model {', '.join(wrong_model)} is not the class model {acc.model!r}")
    wrong_pci = sorted({str(g.get("pci_id")) for g in gpus if g.get("pci_id") not in acc.pci_ids})
    if wrong_pci:
        v.fail(f"PCI ID {', '.join(wrong_pci)} not in the class's {', '.join(acc.pci_ids)}")


def _kernel_log(v: Verdict, log: dict[str, Any] | None, *, container: bool = False) -> None:
    if not log:
        # The discovery probe always reports this section: its absence is a probe that did not
        # look, and an unlooked-at log is no evidence of a clean one.
        v.unmeasured("the discovery probe reported no kernel_log section, so no Xid/MCE scan")
        return
    if not log.get("readable", False):
        if container:  # the outer machine's log: not this host's to read, as for the kernel pin
            v.warn(f"container host: the outer machine's kernel log is not readable, Xid/MCE "
                   f"scan skipped ({log.get('reason', '')})")
        else:
            v.unmeasured(f"kernel log not readable, so no Xid/MCE scan "
                         f"({log.get('reason', '')})")
        return
    for xid in log.get("xids", []):
        if xid["severity"] == "fatal":
            continue
        v.warn(f"Xid {xid['xid']} ({xid['name']}) on {xid['pci']}")
    fatal = log.get("fatal_xids") or []
    if fatal:
        lines = [x for x in log.get("xids", []) if x["xid"] in fatal]
        last = lines[-1]["line"] if lines else ""
        v.fail(f"fatal Xid {', '.join(map(str, fatal))} in the kernel log (last: {last})")
    if log.get("fatal_events"):
        v.fail(f"kernel log: {', '.join(log['fatal_events'])}")


def _nvidia_discovery(v: Verdict, nc: NodeClass, plan: Plan, m: dict[str, Any]) -> None:
    pin = driver_pin_upstream("nvidia", nc.driver.version)
    module = m.get("module")
    if m.get("nvidia_smi") == "missing":
        v.fail("nvidia-smi is not installed")
    elif m.get("nvidia_smi") == "failed":
        v.fail(f"nvidia-smi failed: {m.get('nvidia_smi_error', '')}")
    if module is None:
        v.fail("no NVIDIA kernel module loaded (/proc/driver/nvidia/version is absent)")
    else:
        if pin and module.get("version") != pin:
            v.fail(f"loaded driver {module.get('version')} is not the pinned {pin}")
        if nc.driver.flavour and module.get("flavour") != nc.driver.flavour:
            v.fail(f"loaded module is {module.get('flavour')}, the class pins "
                   f"{nc.driver.flavour}")
    if m.get("nvidia_smi") != "ok":
        return
    gpus: list[dict[str, Any]] = m.get("gpus", [])
    _devices_against_class(v, nc, gpus)
    if m.get("attached_gpus") not in (None, len(gpus)):
        v.warn(f"nvidia-smi says attached_gpus={m.get('attached_gpus')} but lists {len(gpus)}")
    if module and m.get("driver_version") not in (None, module.get("version")):
        v.fail(f"nvidia-smi reports driver {m.get('driver_version')}, the loaded module is "
               f"{module.get('version')} (userspace/kernel mismatch)")
    query = m.get("query_gpu")
    if isinstance(query, list):
        xml_uuids = {g.get("uuid") for g in gpus}
        csv_uuids = {r.get("uuid") for r in query}
        if xml_uuids != csv_uuids:
            v.warn("nvidia-smi --query-gpu and -q -x disagree on the GPU UUIDs")
    benign = set(plan.discovery.benign_clock_events)
    for g in gpus:
        tag = f"GPU {g.get('index')} {g.get('pci_bus_id')}"
        ecc = g.get("ecc") or {}
        if ecc.get("uncorrectable_volatile"):
            v.fail(f"{tag}: {ecc['uncorrectable_volatile']} uncorrectable ECC error(s) since "
                   "the driver loaded")
        elif ecc.get("uncorrectable_aggregate"):
            v.warn(f"{tag}: {ecc['uncorrectable_aggregate']} uncorrectable ECC error(s) in "
                   "the GPU's lifetime")
        if ecc.get("mode_current") is False and nc.accelerator.vendor == "nvidia":
            v.warn(f"{tag}: ECC is disabled")
        if ecc.get("mode_pending") is not None and ecc.get("mode_pending") != ecc.get(
                "mode_current"):
            v.warn(f"{tag}: an ECC mode change is pending a GPU reset")
        for key in ("channel_repair_pending", "tpc_repair_pending"):
            if ecc.get(key):
                v.fail(f"{tag}: {key.replace('_', ' ')}")
        retired = g.get("retired_pages") or {}
        if retired.get("pending"):
            v.fail(f"{tag}: page retirement pending (reset the GPU)")
        total = (retired.get("single_bit") or 0) + (retired.get("double_bit") or 0)
        if total >= plan.discovery.retired_pages_max:
            v.fail(f"{tag}: {total} retired pages (limit {plan.discovery.retired_pages_max})")
        rows = g.get("remapped_rows")
        if rows:
            if rows.get("pending"):
                v.fail(f"{tag}: row remapping pending (reset the GPU)")
            if rows.get("failure"):
                v.fail(f"{tag}: row remapping failed (RMA)")
            if rows.get("uncorrectable"):
                v.warn(f"{tag}: {rows['uncorrectable']} row(s) remapped for uncorrectable "
                       "errors")
        if g.get("reset_required"):
            v.fail(f"{tag}: GPU reset required")
        if g.get("drain_and_reset_recommended"):
            v.fail(f"{tag}: drain and reset recommended")
        if g.get("recovery_action") not in (None, "None"):
            v.fail(f"{tag}: recovery action {g['recovery_action']}")
        active = [r for r in (g.get("clock_events") or {}).get("active", []) if r not in benign]
        if active:
            v.warn(f"{tag}: clock event reasons active: {', '.join(active)}")
        pcie = g.get("pcie") or {}
        if pcie.get("width_current") and pcie.get("width_max") and (
                pcie["width_current"] < pcie["width_max"]):
            v.warn(f"{tag}: PCIe link x{pcie['width_current']} of x{pcie['width_max']}")
        mig = g.get("mig") or {}
        if mig.get("current"):
            v.note(f"{tag}: MIG enabled, {len(mig.get('devices', []))} instance(s)")
        if mig.get("pending") is not None and mig.get("pending") != mig.get("current"):
            v.warn(f"{tag}: a MIG mode change is pending a GPU reset")
        if nc.driver.persistence and g.get("persistence_mode") is False:
            v.warn(f"{tag}: persistence mode is off, the class wants it on")


def _amd_discovery(v: Verdict, nc: NodeClass, m: dict[str, Any]) -> None:
    pin = driver_pin_upstream("amd", nc.driver.version)
    module = m.get("module") or {}
    if not module.get("version"):
        v.fail("amdgpu module version unknown: /sys/module/amdgpu/version is absent "
               "(module not loaded, or the in-tree driver instead of amdgpu-dkms)")
    elif pin and module["version"] != pin:
        v.fail(f"loaded amdgpu {module['version']} is not the pinned {pin}")
    if m.get("tool") is None:
        v.fail("neither amd-smi nor rocm-smi could list the devices")
        return
    gpus: list[dict[str, Any]] = m.get("gpus", [])
    _devices_against_class(v, nc, gpus)
    rocminfo = m.get("rocminfo")
    if isinstance(rocminfo, dict) and "gpu_agent_count" in rocminfo:
        if rocminfo["gpu_agent_count"] != len(gpus):
            v.fail(f"rocminfo shows {rocminfo['gpu_agent_count']} GPU agent(s), "
                   f"{m['tool']} {len(gpus)}")
    elif isinstance(rocminfo, dict):
        v.fail(f"rocminfo failed: {rocminfo.get('error', '')}")
    else:
        v.warn("rocminfo not installed: HSA agents not checked")
    for g in gpus:
        ecc = g.get("ecc")
        if ecc and ecc.get("uncorrectable"):
            v.fail(f"GPU {g.get('index')}: {ecc['uncorrectable']} uncorrectable ECC error(s)")
        if g.get("bad_pages"):
            v.warn(f"GPU {g.get('index')}: {g['bad_pages']} bad page(s) retired")
    if all(g.get("ecc") is None for g in gpus):
        v.warn(f"ECC counters not reported by {m['tool']}")


def _cpu_discovery(v: Verdict, m: dict[str, Any]) -> None:
    cpu = m.get("cpu") or {}
    lscpu = cpu.get("lscpu") or {}
    cpuinfo = cpu.get("cpuinfo") or {}
    cpus = lscpu.get("cpus") or cpuinfo.get("processors")
    if not cpus:
        v.fail("no CPUs reported by lscpu or /proc/cpuinfo")
    quota = (cpu.get("limits") or {}).get("cgroup_cpu_quota")
    if quota is not None:
        v.note(f"cgroup CPU quota {quota:g} CPU(s)")


def judge_discovery(report: ProbeReport, nc: NodeClass, plan: Plan) -> Verdict:
    v = Verdict()
    m = report.metrics
    backend = nc.accelerator.backend
    if backend == "nvidia":
        _nvidia_discovery(v, nc, plan, m)
    elif backend == "amd":
        _amd_discovery(v, nc, m)
    _cpu_discovery(v, m)
    _kernel_log(v, m.get("kernel_log"), container=bool((m.get("cpu") or {}).get("container")))
    return v


# --------------------------------------------------------------------------------------------
# stack

def judge_stack(report: ProbeReport, nc: NodeClass) -> Verdict:
    v = Verdict()
    m = report.metrics
    running = str(m.get("kernel"))
    container = m.get("container")
    if container:
        target = nc.kernel.abi
        v.warn(f"{container} container host: the running kernel {running} is the outer "
               "machine's, so the kernel pin is not checked here")
    else:
        target = running
        if running != nc.kernel.abi:
            v.fail(f"running kernel {running} is not the pinned {nc.kernel.abi}")
    entries: list[dict[str, Any]] | None = m.get("dkms")
    if nc.dkms and entries is None:
        v.fail("dkms is not installed, the class pins DKMS modules")
    entries = entries or []
    for mod in nc.dkms:
        mine = [e for e in entries if e["name"] == mod.name and e["version"] == mod.version]
        for_kernel = [e for e in mine if e.get("kernel") == target]
        if not mine:
            others = sorted({e["version"] for e in entries if e["name"] == mod.name})
            v.fail(f"DKMS module {mod.name}/{mod.version} is not registered"
                   + (f" (registered: {', '.join(others)})" if others else ""))
        elif not for_kernel:
            v.fail(f"DKMS module {mod.name}/{mod.version} is "
                   f"{'/'.join(sorted({e['state'] for e in mine}))}, not built for {target}")
        elif for_kernel[0]["state"] != "installed":
            v.fail(f"DKMS module {mod.name}/{mod.version} is {for_kernel[0]['state']}, not "
                   f"installed, for {target}")
    for e in entries:
        if e.get("warnings"):
            v.warn(f"dkms {e['name']}/{e['version']} {e.get('kernel') or ''}: "
                   f"{'; '.join(e['warnings'])}")
        elif e.get("kernel") == target and e["state"] != "installed" and not any(
                mod.name == e["name"] for mod in nc.dkms):
            v.warn(f"dkms {e['name']}/{e['version']} is {e['state']} for {target}")
    if nc.runtime.gpu_toolkit != "none":
        rt = m.get("runtime") or {}
        want = nc.accelerator.count
        cli = rt.get("container_cli")
        if nc.runtime.gpu_toolkit == "nvidia-container-toolkit":
            if not isinstance(cli, dict) or "error" in cli:
                v.fail(f"nvidia-container-cli info: {(cli or {}).get('error', 'not run')}")
            elif cli.get("device_count") != want:
                v.fail(f"the container runtime sees {cli.get('device_count')} GPU(s), "
                       f"the class has {want}")
        cdi = rt.get("cdi_list")
        if nc.runtime.cdi or nc.runtime.gpu_toolkit == "amd-container-toolkit":
            if not isinstance(cdi, dict) or "error" in cdi:
                v.fail(f"CDI device list: {(cdi or {}).get('error', 'not run')}")
            elif cdi.get("gpu_count") != want:
                v.fail(f"CDI lists {cdi.get('gpu_count')} GPU device(s), the class has {want}")
    return v


# --------------------------------------------------------------------------------------------
# gemm, comms, inference

def judge_gemm(report: ProbeReport, plan: Plan) -> Verdict:
    v = Verdict()
    m = report.metrics
    if m.get("device_errors"):
        v.fail(f"GEMM failed on device(s): {m['device_errors']}")
    if not m.get("correct", False):
        v.fail(f"wrong GEMM results: max relative error {m.get('max_rel_err')} > "
               f"{m.get('tolerance')}")
    tflops = m.get("tflops")
    floor = plan.gemm.tflops_min
    if floors.breach(tflops, floor, "higher"):
        v.fail(f"{tflops} TFLOPS {plan.gemm.dtype} {plan.gemm.size}^3 is below the floor "
               f"{floor} ({plan.gemm.floor_source})")
    if (m.get("cv") or 0) > plan.gemm.cv_warn:
        v.warn(f"GEMM repeats vary by CV {m['cv']:.2f} (> {plan.gemm.cv_warn}): noisy host?")
    return v


def judge_comms(report: ProbeReport, plan: Plan) -> Verdict:
    v = Verdict()
    m = report.metrics
    if m.get("ranks") == 1:
        v.note("one device: no all-reduce across a bus to measure")
        return v
    if m.get("correct") is False or m.get("wrong"):
        v.fail(f"all-reduce results wrong (#wrong {m.get('wrong')}, max abs err "
               f"{m.get('max_abs_err')})")
    floor = plan.comms.busbw_gbps_min
    if floor is not None:
        if plan.comms.floor_bytes and m.get("bytes") != plan.comms.floor_bytes:
            v.warn(f"busbw floor {floor} GB/s is for {plan.comms.floor_bytes}-byte messages, "
                   f"measured at {m.get('bytes')}: floor not applied")
        elif floors.breach(m.get("busbw_gbps") or 0, floor, "higher"):
            v.fail(f"busbw {m.get('busbw_gbps')} GB/s is below the floor {floor} "
                   f"({plan.comms.floor_source})")
    return v


def judge_inference(report: ProbeReport, plan: Plan) -> Verdict:
    v = Verdict()
    m = report.metrics
    expect = plan.models.get(str(m.get("model")))
    if expect is None:
        v.fail(f"no expected checksum for model {m.get('model')!r} in the thresholds")
    else:
        scale = abs(float(m.get("checksum_scale") or 0.0)) or 1.0
        got = m.get("checksum")
        if got is None or abs(float(got) - expect.checksum) > expect.rtol * scale:
            v.fail(f"output checksum {got} differs from the expected {expect.checksum} by more "
                   f"than {expect.rtol} x {scale:.4g}")
    if m.get("deterministic") is False:
        v.fail("repeated batches gave different outputs")
    p99_max = plan.inference.p99_ms_max
    if floors.breach(m.get("p99_ms") or 0, p99_max, "lower"):
        v.fail(f"p99 {m.get('p99_ms')} ms is above {p99_max} ms")
    cold_max = plan.inference.cold_start_s_max
    if floors.breach(m.get("cold_start_s") or 0, cold_max, "lower"):
        v.fail(f"cold start {m.get('cold_start_s')} s is above {cold_max} s")
    return v


# --------------------------------------------------------------------------------------------

def threshold_for(check: Check, nc: NodeClass, plan: Plan) -> dict[str, Any]:
    """The thresholds a result records: what it was judged against, and their sources."""
    base: dict[str, Any] = {"sources": plan.sources, "timeout_s": plan.timeouts_s.get(check)}
    if check == "discovery":
        acc = nc.accelerator
        base.update(count=acc.count, model=acc.model, pci_ids=list(acc.pci_ids),
                    driver=driver_pin_upstream(nc.driver.vendor, nc.driver.version),
                    flavour=nc.driver.flavour,
                    retired_pages_max=plan.discovery.retired_pages_max)
    elif check == "stack":
        base.update(kernel=nc.kernel.abi, dkms=[f"{m.name}/{m.version}" for m in nc.dkms],
                    gpu_toolkit=nc.runtime.gpu_toolkit, cdi=nc.runtime.cdi)
    elif check == "gemm":
        base.update(dtype=plan.gemm.dtype, size=plan.gemm.size, tflops_min=plan.gemm.tflops_min,
                    floor_source=plan.gemm.floor_source)
    elif check == "comms":
        base.update(bytes=plan.comms.bytes, busbw_gbps_min=plan.comms.busbw_gbps_min,
                    floor_bytes=plan.comms.floor_bytes, floor_source=plan.comms.floor_source)
    elif check == "inference":
        base.update(p99_ms_max=plan.inference.p99_ms_max,
                    cold_start_s_max=plan.inference.cold_start_s_max,
                    models={k: v.model_dump() for k, v in plan.models.items()})
    if check in plan.relative.metrics:
        rel = plan.relative.metrics[check]
        base["relative"] = {"margin": plan.relative.margin, "metric": rel.metric,
                            "better": rel.better, "min_peers": plan.relative.min_peers}
    return base


def judge(host: str, report: ProbeReport, nc: NodeClass, plan: Plan, *,
          probe_version: str | None = None) -> CheckResult:
    check = report.probe
    common: dict[str, Any] = dict(
        host=host, check=check, node_class=nc.name, backend=report.backend,
        metrics=report.metrics, threshold=threshold_for(check, nc, plan),
        evidence=report.evidence, tool_versions=report.tool_versions,
        probe_version=probe_version, duration_s=report.duration_s)
    if report.backend != nc.accelerator.backend:
        return CheckResult(status="inconclusive", probe_status="error",
                           reason=f"probe ran with backend {report.backend}, the class has "
                                  f"{nc.accelerator.backend}", **common)
    if report.status == "skipped" and nc.accelerator.backend != "none":
        # The class has a device to measure: a probe that skipped it measured nothing.
        return CheckResult(status="inconclusive", probe_status="skipped",
                           reason=f"probe skipped {check}, which class {nc.name} "
                                  f"({nc.accelerator.backend}) expects: {report.reason}",
                           **common)
    if report.status == "skipped":
        return CheckResult(status="pass", probe_status="skipped",
                           reason=f"not applicable: {report.reason}", **common)
    if report.status != "ok":
        return CheckResult(status="inconclusive", probe_status=report.status,
                           reason=f"could not measure: {report.reason}", **common)
    if check == "discovery":
        v = judge_discovery(report, nc, plan)
    elif check == "stack":
        v = judge_stack(report, nc)
    elif check == "gemm":
        v = judge_gemm(report, plan)
    elif check == "comms":
        v = judge_comms(report, plan)
    else:
        v = judge_inference(report, plan)
    status = "fail" if v.failures else "inconclusive" if v.missing else "pass"
    reason = ("; ".join(v.failures + v.missing) if v.failures or v.missing
              else summary_line(check, report.metrics, v.notes))
    return CheckResult(status=status, probe_status="ok", reason=reason,
                       warnings=v.warnings, **common)


def summary_line(check: Check, m: dict[str, Any], notes: list[str]) -> str:
    if check == "gemm":
        text = (f"{m.get('tflops')} TFLOPS {m.get('dtype')} {m.get('size')}^3 "
                f"(min {m.get('tflops_min')}, max {m.get('tflops_max')}, cv {m.get('cv')})")
    elif check == "comms":
        text = (f"busbw {m.get('busbw_gbps')} GB/s, algbw {m.get('algbw_gbps')} GB/s, "
                f"{m.get('ranks')} ranks, {m.get('bytes')} bytes")
    elif check == "inference":
        text = (f"p50 {m.get('p50_ms')} ms, p99 {m.get('p99_ms')} ms, cold start "
                f"{m.get('cold_start_s')} s, checksum ok")
    else:
        text = "as the class expects"
    return "; ".join([text, *notes])


def unmeasured(host: str, check: Check, probe_status: ProbeStatus, reason: str, *,
               nc: NodeClass | None = None, plan: Plan | None = None,
               evidence: dict[str, Any] | None = None) -> CheckResult:
    """A check that produced no probe report: never "fail", always inconclusive."""
    return CheckResult(
        host=host, check=check, status="inconclusive", probe_status=probe_status,
        reason=reason, node_class=nc.name if nc else None,
        backend=nc.accelerator.backend if nc else None,
        threshold=threshold_for(check, nc, plan) if nc and plan else {},
        evidence=evidence or {})
