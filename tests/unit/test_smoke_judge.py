"""Verdicts and thresholds: a probe report plus a node class -> pass, fail or inconclusive.

Discovery reports are built from the real nvidia-smi / rocm-smi captures, so the checks run
on what the tools really print."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fleetgate.smoke import parsers
from fleetgate.smoke.judge import apply_relative, driver_pin_upstream, judge, model_matches
from fleetgate.smoke.model import CheckResult, ProbeReport
from fleetgate.smoke.thresholds import Plan, resolve
from fleetgate.spec.loader import load_class
from fleetgate.spec.schema import NodeClass

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"


def cls(name: str) -> NodeClass:
    return load_class(REPO / "inventory" / "classes" / f"{name}.yml")


def a100_class(**accel: Any) -> NodeClass:
    """A class that pins exactly what the A100 capture shows (driver 535.54.03)."""
    data = cls("nvidia-h100-535").model_dump()
    data["name"] = "nvidia-h100-535"
    data["driver"]["version"] = "535.54.03-1"
    data["driver"]["persistence"] = False
    data["accelerator"].update({"model": "NVIDIA A100-SXM4-80GB", "count": 1,
                                "pci_ids": ["10de:20b2"], "compute_capability": "8.0", **accel})
    return NodeClass.model_validate(data)


def report(probe: str, backend: str, metrics: dict[str, Any], status: str = "ok",
           reason: str = "") -> ProbeReport:
    return ProbeReport(probe=probe, backend=backend, status=status, reason=reason,  # type: ignore[arg-type]
                       metrics=metrics, duration_s=1.0)


def nvidia_discovery(xml: str = "a100-sxm4-v12.xml", *, module: str = "535.54.03",
                     flavour: str = "proprietary", log: str = "") -> dict[str, Any]:
    smi = parsers.parse_nvidia_smi_xml((FIX / "nvidia-smi" / xml).read_text())
    smi["attached_gpus"] = smi["gpu_count"]  # the capture lists 1 of 4; see test_parsers
    return {"nvidia_smi": "ok", **smi, "module": {"version": module, "flavour": flavour},
            "kernel_log": {"readable": True, **parsers.parse_kernel_log(log)},
            "cpu": {"lscpu": {"cpus": 96}}}


def verdict(nc: NodeClass, probe: str, metrics: dict[str, Any], backend: str = "nvidia",
            plan: Plan | None = None) -> CheckResult:
    return judge("gpu-1", report(probe, backend, metrics), nc, plan or resolve(nc))


# --------------------------------------------------------------------------- discovery

def test_a100_capture_passes_against_a_class_that_pins_it() -> None:
    r = verdict(a100_class(), "discovery", nvidia_discovery())
    assert r.status == "pass", r.reason
    assert "MIG enabled, 4 instance(s)" in r.reason
    assert r.threshold["driver"] == "535.54.03" and r.threshold["count"] == 1


def test_wrong_count_model_pci_and_driver_fail_with_reasons() -> None:
    r = verdict(cls("nvidia-h100-535"), "discovery", nvidia_discovery())
    assert r.status == "fail"
    for fragment in ("1 nvidia device(s), the class expects 8",
                     "model NVIDIA A100-SXM4-80GB is not the class model",
                     "PCI ID 10de:20b2 not in the class's 10de:2330",
                     "loaded driver 535.54.03 is not the pinned 535.261.03"):
        assert fragment in r.reason


def test_driver_not_loaded_is_measured_bad_not_inconclusive() -> None:
    m = {"nvidia_smi": "failed", "module": None, "gpu_count": 0, "gpus": [],
         "nvidia_smi_error": "NVIDIA-SMI has failed because it couldn't communicate with the "
                             "NVIDIA driver", "cpu": {"lscpu": {"cpus": 8}}}
    r = verdict(a100_class(), "discovery", m)
    assert r.status == "fail" and r.probe_status == "ok"
    assert "couldn't communicate" in r.reason and "no NVIDIA kernel module loaded" in r.reason


def test_flavour_and_userspace_kernel_mismatch() -> None:
    m = nvidia_discovery(flavour="open")
    m["driver_version"] = "535.54.04"
    r = verdict(a100_class(), "discovery", m)
    assert "loaded module is open, the class pins proprietary" in r.reason
    assert "userspace/kernel mismatch" in r.reason


def test_uncorrectable_ecc_row_remap_and_reset_required_fail() -> None:
    m = nvidia_discovery()
    g = m["gpus"][0]
    g["ecc"]["uncorrectable_volatile"] = 2
    g["remapped_rows"] = {"pending": True, "failure": False, "uncorrectable": 1}
    g["reset_required"] = True
    r = verdict(a100_class(), "discovery", m)
    assert r.status == "fail"
    assert "2 uncorrectable ECC error(s)" in r.reason
    assert "row remapping pending" in r.reason and "GPU reset required" in r.reason
    assert any("remapped for uncorrectable" in w for w in r.warnings)


def test_fatal_xid_fails_app_xid_warns() -> None:
    log = (FIX / "synthetic" / "dmesg-xid.txt").read_text()
    r = verdict(a100_class(), "discovery", nvidia_discovery(log=log))
    assert r.status == "fail" and "fatal Xid 48, 79" in r.reason
    assert "GPU has fallen off the bus" in r.reason
    assert any(w.startswith("Xid 13 (Graphics Engine Exception)") for w in r.warnings)
    app_only = "[1.0] NVRM: Xid (PCI:0000:86:00): 13, pid=1, name=x, Graphics Exception\n"
    ok = verdict(a100_class(), "discovery", nvidia_discovery(log=app_only))
    assert ok.status == "pass" and ok.warnings


def test_clock_events_and_narrow_pcie_only_warn() -> None:
    nc = a100_class(model="Tesla T4", pci_ids=["10de:1eb8"], compute_capability="7.5")
    m = nvidia_discovery("tesla-t4.xml", module="515.105.01")
    m["gpus"][0]["clock_events"]["active"] = ["hw_thermal_slowdown", "gpu_idle"]
    data = nc.model_dump()
    data["driver"]["version"] = "515.105.01-1"
    data["driver"]["branch"] = "535"
    r = verdict(NodeClass.model_validate(data), "discovery", m)
    assert r.status == "pass", r.reason
    assert any("clock event reasons active: hw_thermal_slowdown" in w for w in r.warnings)
    assert not any("gpu_idle" in w for w in r.warnings)
    assert any("PCIe link x8 of x16" in w for w in r.warnings)


def test_amd_discovery_from_rocm_smi_capture() -> None:
    nc = cls("amd-mi300x-rocm")
    data = nc.model_dump()
    data["accelerator"].update(model="AMD Instinct MI100", count=4, pci_ids=["1002:738c"],
                               compute_capability="gfx908")
    nc = NodeClass.model_validate(data)
    smi = parsers.parse_rocm_smi_json((FIX / "rocm-smi" / "mi100_rocm602.json").read_text())
    rocminfo = {"gpu_agent_count": 4}
    m = {"tool": "rocm-smi", **smi, "rocminfo": rocminfo, "module": {"version": "6.12.12"},
         "cpu": {"lscpu": {"cpus": 64}}, "kernel_log": {"readable": True,
                                                        **parsers.parse_kernel_log("")}}
    r = verdict(nc, "discovery", m, backend="amd")
    assert r.status == "pass", r.reason
    assert any("ECC counters not reported by rocm-smi" in w for w in r.warnings)
    m["rocminfo"] = {"gpu_agent_count": 3}
    m["module"] = {"version": "6.10.5"}
    bad = verdict(nc, "discovery", m, backend="amd")
    assert "rocminfo shows 3 GPU agent(s), rocm-smi 4" in bad.reason
    assert "loaded amdgpu 6.10.5 is not the pinned 6.12.12" in bad.reason


def test_pin_and_model_helpers() -> None:
    assert driver_pin_upstream("nvidia", "580.95.05-1") == "580.95.05"
    assert driver_pin_upstream("amd", "1:6.12.12.60400-2147987.22.04") == "6.12.12"
    assert model_matches("AMD Instinct MI100", "Arcturus GL-XL [Instinct MI100]")
    assert not model_matches("AMD Instinct MI300X", "AMD Instinct MI300A")
    assert model_matches("NVIDIA H200", "nvidia h200")


# --------------------------------------------------------------------------- stack

def stack_metrics(kernel: str, dkms_text: str, container: str | None = None,
                  **extra: Any) -> dict[str, Any]:
    return {"kernel": kernel, "container": container, "loaded_modules": [],
            "dkms": parsers.parse_dkms_status(dkms_text), **extra}


def test_stack_vm_class_pinned_kernel_and_dkms() -> None:
    nc = cls("lab-vm")
    good = "vpoll/0.1, 6.1.0-55-cloud-amd64, x86_64: installed\n"
    assert verdict(nc, "stack", stack_metrics(nc.kernel.abi, good), "cpu").status == "pass"
    built = "vpoll/0.1, 6.1.0-55-cloud-amd64, x86_64: built\n"
    r = verdict(nc, "stack", stack_metrics(nc.kernel.abi, built), "cpu")
    assert r.status == "fail" and "is built, not installed" in r.reason
    other = "vpoll/0.1, 6.1.0-57-cloud-amd64, x86_64: installed\n"
    r = verdict(nc, "stack", stack_metrics("6.1.0-57-cloud-amd64", other), "cpu")
    assert "running kernel 6.1.0-57-cloud-amd64 is not the pinned" in r.reason
    r = verdict(nc, "stack", stack_metrics(nc.kernel.abi, ""), "cpu")
    assert "vpoll/0.1 is not registered" in r.reason


def test_stack_in_a_container_does_not_judge_the_outer_kernel() -> None:
    r = verdict(cls("lab-cpu"), "stack", stack_metrics("6.18.44-fc", "", "podman"), "cpu")
    assert r.status == "pass" and "outer machine" in r.warnings[0]


def test_stack_runtime_must_reach_every_gpu() -> None:
    nc = cls("nvidia-h200-580")
    dkms = "nvidia/580.95.05, 6.1.0-55-amd64, x86_64: installed\n"
    cli = parsers.parse_nvidia_container_cli_info(
        (FIX / "synthetic" / "nvidia-container-cli-info.txt").read_text())
    cdi = parsers.parse_cdi_list((FIX / "synthetic" / "nvidia-ctk-cdi-list.txt").read_text())
    m = stack_metrics(nc.kernel.abi, dkms, runtime={"container_cli": cli, "cdi_list": cdi})
    r = verdict(nc, "stack", m)
    assert "the container runtime sees 2 GPU(s), the class has 8" in r.reason
    assert "CDI lists 2 GPU device(s), the class has 8" in r.reason


# --------------------------------------------------------------------------- gemm/comms/inference

def gemm_metrics(tflops: float, **kw: Any) -> dict[str, Any]:
    return {"tflops": tflops, "tflops_min": tflops, "tflops_max": tflops, "cv": 0.01,
            "correct": True, "max_rel_err": 1e-3, "tolerance": 5e-2, "dtype": "bf16",
            "size": 8192, **kw}


def test_gemm_floor_from_mamf_and_dcgm_ratio() -> None:
    nc = cls("nvidia-h100-535")
    assert resolve(nc).gemm.tflops_min == pytest.approx(0.75 * 792.1, abs=0.1)
    assert verdict(nc, "gemm", gemm_metrics(760.0)).status == "pass"
    r = verdict(nc, "gemm", gemm_metrics(400.0))
    assert r.status == "fail" and "below the floor 594.1" in r.reason and "[MAMF]" in r.reason
    wrong = verdict(nc, "gemm", gemm_metrics(900.0, correct=False, max_rel_err=0.9))
    assert wrong.status == "fail" and "wrong GEMM results" in wrong.reason


def test_comms_floor_applies_only_at_its_message_size() -> None:
    nc = cls("nvidia-h200-580")
    table = parsers.parse_all_reduce_perf(
        (FIX / "synthetic" / "all_reduce_perf-h100x8.txt").read_text())
    m = {"bytes": table["largest_size_bytes"], "ranks": 8, "busbw_gbps": table["busbw_gbps"],
         "wrong": 0, "correct": True}
    assert verdict(nc, "comms", m).status == "pass"  # 439.73 >= Azure's 431 for H200
    low = verdict(nc, "comms", {**m, "busbw_gbps": 300.0})
    assert low.status == "fail" and "[AZNHC] nd96isr_h200_v5" in low.reason
    small = verdict(nc, "comms", {**m, "bytes": 1 << 20, "busbw_gbps": 10.0})
    assert small.status == "pass" and "floor not applied" in small.warnings[0]
    wrong = verdict(nc, "comms", {**m, "wrong": 4096, "correct": False})
    assert wrong.status == "fail" and "#wrong 4096" in wrong.reason
    single = verdict(nc, "comms", {"ranks": 1, "busbw_gbps": 0.0})
    assert single.status == "pass" and "one device" in single.reason


def test_inference_checksum_and_latency_ceiling() -> None:
    nc = cls("lab-cpu")
    plan = resolve(nc)
    expected = plan.models["mlp-tanh-256-512-512-128-v1"].checksum
    m = {"model": "mlp-tanh-256-512-512-128-v1", "checksum": expected + 1e-7,
         "checksum_scale": 10.4, "deterministic": True, "p50_ms": 1.0, "p99_ms": 2.0,
         "cold_start_s": 0.3}
    assert verdict(nc, "inference", m, "cpu").status == "pass"
    bad = verdict(nc, "inference", {**m, "checksum": expected + 0.01}, "cpu")
    assert bad.status == "fail" and "differs from the expected" in bad.reason
    ceiling = plan.model_copy(update={"inference": plan.inference.model_copy(
        update={"p99_ms_max": 1.5})})
    slow = verdict(nc, "inference", m, "cpu", plan=ceiling)
    assert slow.status == "fail" and "p99 2.0 ms is above 1.5 ms" in slow.reason
    unknown = verdict(nc, "inference", {**m, "model": "other"}, "cpu")
    assert unknown.status == "fail"


def test_unmeasured_statuses_are_inconclusive_never_fail() -> None:
    nc = cls("lab-cpu")
    for status in ("timeout", "error"):
        r = judge("h", report("gemm", "cpu", {}, status=status, reason="x"), nc, resolve(nc))
        assert (r.status, r.probe_status) == ("inconclusive", status)
    skipped = judge("h", report("gemm", "none", {}, status="skipped", reason="nothing"),
                    NodeClass.model_validate({**cls("lab-cpu").model_dump(), "accelerator": {
                        **cls("lab-cpu").accelerator.model_dump(), "backend": "none"}}),
                    resolve(nc))
    assert skipped.status == "pass" and skipped.probe_status == "skipped"
    mismatch = judge("h", report("gemm", "nvidia", {}), nc, resolve(nc))
    assert mismatch.status == "inconclusive"


# --------------------------------------------------------------------------- relative

def gemm_results(values: dict[str, float]) -> list[CheckResult]:
    nc = cls("lab-cpu")
    plan = resolve(nc)
    return [judge(h, report("gemm", "cpu", gemm_metrics(v, dtype="fp32", size=512)), nc, plan)
            for h, v in values.items()]


def test_relative_check_fails_the_slow_host_against_the_peer_median() -> None:
    res = apply_relative(gemm_results({"a": 3.0, "b": 3.1, "c": 2.9, "d": 0.36, "e": 3.05}))
    by = {r.host: r for r in res}
    assert by["d"].status == "fail"
    assert "0.12x the peers median 3 (5 peers; margin 0.35)" in by["d"].reason
    assert by["d"].threshold["relative"]["margin"] == 0.35  # lab-shared-cores exception
    assert all(by[h].status == "pass" for h in "abce")


def test_relative_check_needs_enough_peers_and_can_use_a_baseline() -> None:
    few = apply_relative(gemm_results({"a": 3.0, "b": 0.1}))
    # Fail closed: two peers are no reference, so neither host passes on it.
    assert all(r.status == "inconclusive" for r in few)
    assert "relative check has no reference: 2 measured peers, needs 3" in few[1].reason
    baseline = gemm_results({"x": 3.0, "y": 3.0, "z": 3.0})
    res = apply_relative(gemm_results({"a": 0.9}), baseline)
    assert res[0].status == "fail" and "baseline median 3" in res[0].reason


def test_relative_latency_is_lower_is_better() -> None:
    nc = cls("nvidia-h200-580")  # the lab classes do not compare latency (shared cores)
    plan = resolve(nc)
    expected = plan.models["mlp-tanh-256-512-512-128-v1"].checksum
    res = []
    for host, p50 in {"a": 1.0, "b": 1.1, "c": 0.9, "d": 5.0}.items():
        m = {"model": "mlp-tanh-256-512-512-128-v1", "checksum": expected, "checksum_scale": 1,
             "deterministic": True, "p50_ms": p50, "p99_ms": p50 * 2, "cold_start_s": 0.1}
        res.append(judge(host, report("inference", "nvidia", m), nc, plan))
    out = {r.host: r.status for r in apply_relative(res)}
    assert out == {"a": "pass", "b": "pass", "c": "pass", "d": "fail"}


# --------------------------------------------------------------------------- thresholds

def test_thresholds_resolve_for_every_class_with_sources() -> None:
    for path in sorted((REPO / "inventory" / "classes").glob("*.yml")):
        plan = resolve(load_class(path))
        assert plan.sources[0] == "defaults"
        assert set(plan.timeouts_s) == {"discovery", "stack", "gemm", "comms", "inference"}


def test_class_smoke_section_overrides_the_data() -> None:
    data = copy.deepcopy(cls("nvidia-h100-535").model_dump())
    data["smoke"] = {"gemm": {"dtype": "bf16", "size": 8192, "tflops_min": 700.0},
                     "comms": {"busbw_gbps_min": 470.0}, "relative_margin": 0.9,
                     "inference": {"p99_ms_max": 5.0, "cold_start_s_max": None}}
    plan = resolve(NodeClass.model_validate(data))
    assert plan.gemm.tflops_min == 700.0 and plan.gemm.floor_source == "class nvidia-h100-535"
    assert plan.comms.busbw_gbps_min == 470.0 and plan.comms.floor_bytes is None
    assert plan.relative.margin == 0.9 and plan.inference.p99_ms_max == 5.0


def test_sku_floor_only_for_its_dtype_and_size() -> None:
    data = copy.deepcopy(cls("nvidia-h100-535").model_dump())
    data["smoke"] = {"gemm": {"dtype": "fp16", "size": 8192}}
    assert resolve(NodeClass.model_validate(data)).gemm.tflops_min is None
    lab = resolve(cls("lab-cpu"))
    assert lab.relative.margin == 0.35 and "exceptions.lab-shared-cores" in lab.sources
    assert lab.gemm.size == 512 and lab.gemm.warmup == 1 and lab.timeouts_s["discovery"] == 20
    assert set(lab.relative.metrics) == {"gemm"}
    assert set(resolve(cls("nvidia-h200-580")).relative.metrics) == {"gemm", "comms", "inference"}
