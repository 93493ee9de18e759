#!/usr/bin/python3 -B
"""fleetgate smoke probe: a tiny deterministic model served batch by batch.

The model is built in code, no weights are downloaded: an MLP 256-512-512-128 with tanh,
whose weights, biases and inputs are closed-form functions of their indices (sin/cos), so
every host builds exactly the same model. Reported:
- cold_start_s: framework import + model build + device upload + the first batch;
- one warm-up batch, then --batches timed batches (device-synchronised): p50, p99, max;
- checksum: a position-weighted sum of the logits of the fixed evaluation batch, in float64,
  and checksum_scale, the same sum over their absolute values; the controller compares the
  checksum with the expected value of this model (MODEL_ID) within a tolerance relative to
  the scale. Every timed batch must also reproduce the first batch's logits bit for bit.

Backends: cpu uses numpy float32; nvidia / amd use torch float32 with TF32 off.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from fleetgate_probe import Context, ProbeError, base_parser, import_numpy, main

MODEL_ID = "mlp-tanh-256-512-512-128-v1"
DIMS = (256, 512, 512, 128)


def weights() -> list[tuple[list[float], list[float], int, int]]:
    """(row-major W of shape in x out, bias of out, in, out) per layer, plain floats."""
    layers = []
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(DIMS)):
        scale = 1.0 / math.sqrt(fan_in)
        w = [math.sin(0.37 * i + 0.11 * j + layer) * scale
             for i in range(fan_in) for j in range(fan_out)]
        b = [0.01 * math.cos(0.5 * j + layer) for j in range(fan_out)]
        layers.append((w, b, fan_in, fan_out))
    return layers


def inputs(batch: int) -> list[float]:
    return [math.sin(0.013 * k + 0.5) for k in range(batch * DIMS[0])]


def checksum_weights(batch: int) -> list[float]:
    out = DIMS[-1]
    return [1.0 + ((i * 7 + j * 13) % 17) / 17.0 for i in range(batch) for j in range(out)]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, math.ceil(q / 100.0 * len(sorted_values)) - 1)
    return sorted_values[k]


def latency_summary(times_s: list[float]) -> dict[str, float]:
    ms = sorted(t * 1000.0 for t in times_s)
    return {"p50_ms": round(statistics.median(ms), 6), "p99_ms": round(percentile(ms, 99), 6),
            "max_ms": round(ms[-1], 6), "mean_ms": round(statistics.fmean(ms), 6)}


def mlp(x: Any, layers: list[tuple[Any, Any]], tanh: Callable[[Any], Any]) -> Any:
    """The model's forward pass, one code for numpy and torch arrays: tanh between layers."""
    h = x
    for k, (w, b) in enumerate(layers):
        h = h @ w + b
        if k < len(layers) - 1:
            h = tanh(h)
    return h


def cpu_inference(ctx: Context, t_start: float) -> dict[str, Any]:
    np = import_numpy(ctx)
    ctx.phase("build model")
    layers = [(np.asarray(w, dtype=np.float64).reshape(i, o).astype(np.float32),
               np.asarray(b, dtype=np.float32)) for w, b, i, o in weights()]
    batch = ctx.args.batch_size
    x = np.asarray(inputs(batch), dtype=np.float64).reshape(batch, DIMS[0]).astype(np.float32)

    def forward() -> Any:
        return mlp(x, layers, np.tanh)

    ctx.phase("first batch")
    first = forward()
    cold = time.perf_counter() - t_start
    forward()  # the one-batch warm-up
    times: list[float] = []
    identical = True
    ctx.phase(f"{ctx.args.batches} timed batches")
    deadline = time.perf_counter() + ctx.args.max_time
    for _ in range(ctx.args.batches):
        t0 = time.perf_counter()
        out = forward()
        times.append(time.perf_counter() - t0)
        identical = identical and bool(np.array_equal(out, first))
        if time.perf_counter() > deadline:
            break
    weights_cs = np.asarray(checksum_weights(batch), dtype=np.float64).reshape(batch, -1)
    checksum = float(np.sum(first.astype(np.float64) * weights_cs))
    scale = float(np.sum(np.abs(first.astype(np.float64)) * weights_cs))
    return {"cold_start_s": round(cold, 6), "checksum": checksum, "checksum_scale": scale,
            "deterministic": identical,
            "batches": len(times), "batch_size": batch, **latency_summary(times)}


def torch_inference(ctx: Context, t_start: float) -> dict[str, Any]:
    """Untested without a GPU; the model, checksum and percentiles are shared with cpu."""
    try:
        import torch
    except ImportError:
        raise ProbeError("torch is not importable by /usr/bin/python3 on this host") from None
    ctx.tool_versions["torch"] = torch.__version__
    if not torch.cuda.is_available():
        raise ProbeError("torch.cuda.is_available() is False")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batch = ctx.args.batch_size
    per_device = []
    checksums = []
    for dev in range(torch.cuda.device_count()):
        t_dev = time.perf_counter()
        ctx.phase(f"build model on cuda:{dev}")
        layers = [(torch.tensor(w, dtype=torch.float64).reshape(i, o).float().to(dev),
                   torch.tensor(b, dtype=torch.float32).to(dev)) for w, b, i, o in weights()]
        x = torch.tensor(inputs(batch), dtype=torch.float64).reshape(batch, DIMS[0]).float()
        x = x.to(dev)

        def forward(x: Any = x, layers: Any = layers) -> Any:
            return mlp(x, layers, torch.tanh)

        with torch.inference_mode():
            first = forward()
            torch.cuda.synchronize(dev)
            cold = time.perf_counter() - (t_start if dev == 0 else t_dev)
            forward()
            torch.cuda.synchronize(dev)
            times, identical = [], True
            deadline = time.perf_counter() + ctx.args.max_time
            for _ in range(ctx.args.batches):
                t0 = time.perf_counter()
                out = forward()
                torch.cuda.synchronize(dev)
                times.append(time.perf_counter() - t0)
                identical = identical and bool(torch.equal(out, first))
                if time.perf_counter() > deadline:
                    break
            cs = torch.tensor(checksum_weights(batch), dtype=torch.float64).reshape(batch, -1)
            checksum = float((first.double().cpu() * cs).sum())
            scale = float((first.double().cpu().abs() * cs).sum())
        checksums.append(checksum)
        per_device.append({"device": dev, "cold_start_s": round(cold, 6), "checksum": checksum,
                           "checksum_scale": scale,
                           "deterministic": identical, "batches": len(times),
                           **latency_summary(times)})
    if not per_device:
        raise ProbeError("torch sees no device")
    worst = max(per_device, key=lambda r: r["p99_ms"])
    return {"cold_start_s": per_device[0]["cold_start_s"],
            "checksum": max(checksums, key=lambda c: abs(c - checksums[0])),
            "checksum_scale": per_device[0]["checksum_scale"],
            "deterministic": all(r["deterministic"] for r in per_device),
            "batches": worst["batches"], "batch_size": batch,
            "p50_ms": max(r["p50_ms"] for r in per_device), "p99_ms": worst["p99_ms"],
            "max_ms": worst["max_ms"], "mean_ms": worst["mean_ms"], "per_device": per_device}


def work(ctx: Context) -> dict[str, Any]:
    t_start = time.perf_counter()
    backend = ctx.args.backend
    if backend == "none":
        return {"status": "skipped", "reason": "backend none: no inference device"}
    metrics = cpu_inference(ctx, t_start) if backend == "cpu" else torch_inference(ctx, t_start)
    metrics["model"] = MODEL_ID
    return {"status": "ok", "metrics": metrics}


def parser() -> Any:
    p = base_parser("inference", 300.0)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-time", type=float, default=10.0,
                   help="stop timing batches after this many seconds")
    return p


if __name__ == "__main__":
    raise SystemExit(main("inference", parser(), work))
