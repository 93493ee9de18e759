#!/usr/bin/python3 -B
"""fleetgate smoke probe: dense GEMM throughput, with its spread and a correctness check.

TFLOPS = 2*M*N*K * iterations / seconds / 1e12, square M = N = K = --size.

- nvidia / amd: torch (the workload's own, if importable) on every visible device at once,
  one thread per device: warm-up, device sync, iterations calibrated so one timed block lasts
  at least --min-time, --repeats blocks timed with device events. TF32 is off, so fp32 means
  fp32. bf16 is the default class dtype; fp8 uses torch._scaled_mm where the build has it.
- cpu: numpy in float32 (the lab's numbers); the BLAS that numpy really loaded is reported,
  since Debian's numpy follows the libblas.so.3 alternative.

Each device also checks 64 rows of its result against a float64 (cpu) or float32 (GPU)
reference, so a fast wrong answer is caught.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from typing import Any

from fleetgate_probe import (
    Context,
    ProbeError,
    base_parser,
    by_backend,
    cpu_limits,
    import_numpy,
    main,
    read_text,
)

DTYPES = ("bf16", "fp16", "fp32", "fp8")
# Max relative error of the checked rows against the reference, per input dtype.
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2, "fp8": 2e-1}
CHECK_ROWS = 64


def tflops(size: int, iterations: int, seconds: float) -> float:
    return 2.0 * size ** 3 * iterations / seconds / 1e12


def summarize(samples: list[float]) -> dict[str, Any]:
    """Median, min, max and spread of the per-repeat TFLOPS figures."""
    med = statistics.median(samples)
    cv = statistics.pstdev(samples) / statistics.fmean(samples) if len(samples) > 1 else 0.0
    return {"tflops": round(med, 6), "tflops_min": round(min(samples), 6),
            "tflops_max": round(max(samples), 6), "cv": round(cv, 6),
            "spread": round((max(samples) - min(samples)) / med, 6) if med else None,
            "samples": [round(s, 6) for s in samples]}


def loaded_blas() -> list[str]:
    """Shared objects with BLAS/LAPACK in their name that this process has mapped."""
    maps = read_text("/proc/self/maps") or ""
    libs = {line.split()[-1] for line in maps.splitlines()
            if any(k in line.rsplit("/", 1)[-1].lower()
                   for k in ("blas", "lapack", "mkl", "blis", "atlas"))}
    return sorted(os.path.realpath(p) for p in libs if p.startswith("/"))


def cpu_gemm(ctx: Context) -> dict[str, Any]:
    args = ctx.args
    if args.dtype != "fp32":
        raise ProbeError(f"dtype {args.dtype} is not supported by the cpu backend "
                         f"(numpy has no fast {args.dtype} GEMM); use fp32")
    np = import_numpy(ctx)
    n = args.size
    ctx.phase(f"numpy matmul {n}^3 fp32: setup")
    rng = np.random.RandomState(1234)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty((n, n), dtype=np.float32)
    ctx.phase(f"numpy matmul {n}^3 fp32: warm-up")
    for _ in range(args.warmup):
        np.matmul(a, b, out=c)
    t0 = time.perf_counter()
    np.matmul(a, b, out=c)
    one = max(time.perf_counter() - t0, 1e-9)
    iterations = max(1, math.ceil(args.min_time / one))
    # A single product that already lasts min_time is a valid first sample.
    samples = [tflops(n, 1, one)] if iterations == 1 else []
    block = one * iterations
    while len(samples) < args.repeats:
        # A degraded host must come out measured-slow, not timed-out, and with enough samples
        # for the judge to tell: when the remaining repeats would not fit the deadline, the
        # blocks shrink (TFLOPS is per iteration, so a shorter block is still a sample). Only
        # when even one-iteration blocks cannot fit are repeats dropped.
        left = args.repeats - len(samples)
        budget = (ctx.remaining() - 2) / (1.5 * left)
        if block > budget and iterations > 1:
            per_iter = block / iterations
            fewer = max(1, int(budget / per_iter))
            if fewer < iterations:
                ctx.evidence["iterations_cut_by_deadline"] = iterations - fewer
                iterations, block = fewer, per_iter * fewer
        if samples and ctx.remaining() < block * 1.5 + 2:
            ctx.evidence["repeats_cut_by_deadline"] = left
            break
        ctx.phase(f"numpy matmul {n}^3 fp32: repeat {len(samples) + 1}/{args.repeats}, "
                  f"{iterations} iters")
        t0 = time.perf_counter()
        for _ in range(iterations):
            np.matmul(a, b, out=c)
        block = time.perf_counter() - t0
        samples.append(tflops(n, iterations, block))
    rows = min(CHECK_ROWS, n)
    ref = a[:rows].astype(np.float64) @ b.astype(np.float64)
    rel_err = float(np.max(np.abs(c[:rows] - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    blas = loaded_blas()
    ctx.tool_versions["blas"] = ", ".join(blas) or "unknown"
    alt = "/etc/alternatives/libblas.so.3-x86_64-linux-gnu"
    ctx.evidence.update(blas_libraries=blas,
                        blas_alternative=os.path.realpath(alt) if os.path.exists(alt) else None,
                        limits=cpu_limits(),
                        threads_env={k: os.environ[k] for k in (
                            "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                            if k in os.environ})
    summary = summarize(samples)
    summary.update(devices=1, per_device=[dict(summary, device="cpu")], size=n, dtype="fp32",
                   iterations=iterations, repeats=len(samples), max_rel_err=rel_err,
                   correct=rel_err <= TOLERANCE["fp32"], tolerance=TOLERANCE["fp32"])
    return summary


def torch_gemm(ctx: Context) -> dict[str, Any]:
    """Untested without a GPU; the arithmetic it relies on (tflops, summarize) is unit-tested."""
    args = ctx.args
    try:
        import torch
    except ImportError:
        raise ProbeError("torch is not importable by /usr/bin/python3 on this host") from None
    ctx.tool_versions["torch"] = torch.__version__
    ctx.tool_versions["torch_cuda"] = str(torch.version.cuda)
    ctx.tool_versions["torch_hip"] = str(getattr(torch.version, "hip", None))
    if not torch.cuda.is_available():
        raise ProbeError("torch.cuda.is_available() is False (driver not loaded, or a CPU-only "
                         "torch build)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    count = torch.cuda.device_count()
    devices = list(range(count)) if args.devices is None else [
        int(d) for d in args.devices.split(",")]
    n = args.size
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}.get(args.dtype)
    fp8 = args.dtype == "fp8"
    if fp8 and not hasattr(torch, "_scaled_mm"):
        raise ProbeError(f"torch {torch.__version__} has no _scaled_mm for fp8 GEMM")
    results: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}

    def one(dev: int) -> None:
        try:
            with torch.cuda.device(dev):
                gen = torch.Generator(device=f"cuda:{dev}").manual_seed(1234 + dev)
                a32 = torch.randn(n, n, device=f"cuda:{dev}", generator=gen)
                b32 = torch.randn(n, n, device=f"cuda:{dev}", generator=gen)
                if fp8:
                    a = a32.to(torch.float8_e4m3fn)
                    b = b32.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major B
                    one_scale = torch.ones((), device=f"cuda:{dev}")

                    def mm() -> Any:
                        return torch._scaled_mm(a, b, scale_a=one_scale, scale_b=one_scale,
                                                out_dtype=torch.bfloat16)
                else:
                    a, b = a32.to(dtype), b32.to(dtype)
                    c = torch.empty(n, n, device=f"cuda:{dev}", dtype=dtype)

                    def mm() -> Any:
                        return torch.matmul(a, b, out=c)
                for _ in range(args.warmup):
                    out = mm()
                torch.cuda.synchronize(dev)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                mm()
                end.record()
                end.synchronize()
                per = max(start.elapsed_time(end) / 1000.0, 1e-9)
                iterations = max(10, math.ceil(args.min_time / per))
                samples = []
                for _ in range(args.repeats):
                    start.record()
                    for _ in range(iterations):
                        out = mm()
                    end.record()
                    end.synchronize()
                    samples.append(tflops(n, iterations, start.elapsed_time(end) / 1000.0))
                rows = min(CHECK_ROWS, n)
                got = out[:rows].float()
                ref = a[:rows].float() @ b.float()
                rel = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                res = summarize(samples)
                res.update(device=dev, name=torch.cuda.get_device_name(dev),
                           iterations=iterations, max_rel_err=rel)
                results[dev] = res
        except Exception as exc:  # one device failing is a result, not a probe crash
            errors[dev] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"

    ctx.phase(f"torch matmul {n}^3 {args.dtype} on {len(devices)} device(s)")
    threads = [threading.Thread(target=one, args=(d,), daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not results:
        raise ProbeError(f"GEMM failed on every device: {errors}")
    per_device = [results[d] for d in sorted(results)]
    worst = min(per_device, key=lambda r: r["tflops"])
    tol = TOLERANCE[args.dtype]
    return {
        "tflops": worst["tflops"],  # the slowest device gates the host
        "tflops_median_devices": statistics.median(r["tflops"] for r in per_device),
        "tflops_min": worst["tflops_min"], "tflops_max": max(r["tflops_max"] for r in per_device),
        "cv": max(r["cv"] for r in per_device), "spread": worst["spread"],
        "devices": len(per_device), "devices_visible": count, "device_errors": errors,
        "per_device": per_device, "size": n, "dtype": args.dtype, "repeats": args.repeats,
        "max_rel_err": max(r["max_rel_err"] for r in per_device), "tolerance": tol,
        "correct": not errors and all(r["max_rel_err"] <= tol for r in per_device),
    }


def work(ctx: Context) -> dict[str, Any]:
    return by_backend(ctx, "no GEMM device", cpu_gemm, torch_gemm)


def parser() -> Any:
    p = base_parser("gemm", 300.0)
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--min-time", type=float, default=1.0,
                   help="seconds one timed block must last at least")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--devices", default=None, help="comma-separated device indexes (all)")
    return p


if __name__ == "__main__":
    raise SystemExit(main("gemm", parser(), work))
