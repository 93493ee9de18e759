#!/usr/bin/python3 -B
"""fleetgate smoke probe: all-reduce bandwidth and correctness.

algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' definition, so figures compare
with published floors).

- nvidia / amd: `all_reduce_perf` from nccl-tests / rccl-tests when installed, one process
  over the local devices (-g N), its result table parsed (not its averaged "Avg bus
  bandwidth" line); otherwise torch.distributed (NCCL/RCCL) with one process per device.
- cpu: a real ring all-reduce over loopback TCP between --ranks processes (reduce-scatter
  then all-gather, numpy float32 adds), timed across ranks and checked against the expected
  sum on every rank.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import threading
import time
from typing import Any

import fleetgate_parsers as parsers
import fleetgate_probe
from fleetgate_probe import Context, ProbeError, base_parser, by_backend, cpu_limits, main, tail

ALL_REDUCE_PERF_DIRS = ("/usr/local/bin", "/opt/nccl-tests/build", "/opt/rccl-tests/build",
                        "/usr/bin")


def busbw(algbw: float, ranks: int) -> float:
    return algbw * 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def summarize(bytes_: int, ranks: int, seconds: list[float]) -> dict[str, Any]:
    """seconds: the time of one all-reduce, per repeat. GB/s are 1e9 bytes/s, as nccl-tests."""
    per = statistics.median(seconds)
    algbw = bytes_ / per / 1e9
    algs = [bytes_ / s / 1e9 for s in seconds]
    cv = statistics.pstdev(algs) / statistics.fmean(algs) if len(algs) > 1 else 0.0
    return {"bytes": bytes_, "ranks": ranks, "time_us": round(per * 1e6, 3),
            "algbw_gbps": round(algbw, 6), "busbw_gbps": round(busbw(algbw, ranks), 6),
            "busbw_gbps_samples": [round(busbw(a, ranks), 6) for a in algs],
            "cv": round(cv, 6)}


# --------------------------------------------------------------------------------------------
# cpu: ring all-reduce over loopback

def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed the ring")
        got += n


def _ring_rank(rank: int, n: int, count: int, listener: socket.socket, ports: list[int],
               conn: Any) -> None:
    """One rank: connects to its right neighbour, accepts its left, then serves commands."""
    import numpy as np

    try:
        right = socket.create_connection(("127.0.0.1", ports[(rank + 1) % n]), timeout=30)
        left, _ = listener.accept()
        for s in (left, right):
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        chunk = count // n
        base = (np.arange(count, dtype=np.float32) % 251) / np.float32(251)
        data = np.empty(count, dtype=np.float32)
        tmp = np.empty(chunk, dtype=np.float32)

        def exchange(send: Any, recv: Any) -> None:
            err: list[BaseException] = []

            def sender() -> None:
                try:
                    right.sendall(memoryview(send).cast("B"))
                except BaseException as exc:
                    err.append(exc)
            t = threading.Thread(target=sender)
            t.start()
            _recv_exact(left, memoryview(recv).cast("B"))
            t.join()
            if err:
                raise err[0]

        def all_reduce() -> None:
            for step in range(n - 1):  # reduce-scatter
                s_idx, r_idx = (rank - step) % n, (rank - step - 1) % n
                exchange(data[s_idx * chunk:(s_idx + 1) * chunk], tmp)
                data[r_idx * chunk:(r_idx + 1) * chunk] += tmp
            for step in range(n - 1):  # all-gather
                s_idx, r_idx = (rank - step + 1) % n, (rank - step) % n
                exchange(data[s_idx * chunk:(s_idx + 1) * chunk],
                         data[r_idx * chunk:(r_idx + 1) * chunk])

        conn.send(("ready", None))
        while True:
            cmd, iterations = conn.recv()
            if cmd == "stop":
                break
            if cmd == "check":
                np.multiply(base, np.float32(rank + 1), out=data)
                all_reduce()
                expected = base * np.float32(n * (n + 1) / 2)
                err = float(np.max(np.abs(data - expected)))
                conn.send(("checked", err))
                continue
            data.fill(0.0)  # timed runs: the bytes move and add all the same, nothing grows
            conn.send(("armed", None))
            conn.recv()  # ("go", t) from the parent, after every rank is armed
            t0 = time.perf_counter()
            for _ in range(iterations):
                all_reduce()
            conn.send(("timed", time.perf_counter() - t0))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))


def cpu_comms(ctx: Context) -> dict[str, Any]:
    args = ctx.args
    fleetgate_probe.import_numpy(ctx)  # the ring workers import it themselves
    n = args.ranks
    if n < 2:
        raise ProbeError("--ranks must be at least 2 for an all-reduce")
    count = max(n, (args.bytes // 4) // n * n)
    nbytes = count * 4
    listeners = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        listeners.append(s)
    ports = [s.getsockname()[1] for s in listeners]
    fork = mp.get_context("fork")
    pipes, procs = [], []
    for r in range(n):
        parent_end, child_end = fork.Pipe()
        p = fork.Process(target=_ring_rank, args=(r, n, count, listeners[r], ports, child_end),
                         daemon=True)
        p.start()
        pipes.append(parent_end)
        procs.append(p)

    def gather(expect: str) -> list[Any]:
        out = []
        for conn in pipes:
            kind, value = conn.recv()
            if kind == "error":
                raise ProbeError(f"ring all-reduce failed: {value}")
            if kind != expect:
                raise ProbeError(f"ring all-reduce: expected {expect}, got {kind}")
            out.append(value)
        return out

    def timed(iterations: int) -> float:
        for conn in pipes:
            conn.send(("time", iterations))
        gather("armed")
        for conn in pipes:
            conn.send(("go", None))
        return float(max(gather("timed"))) / iterations  # done when the slowest rank is

    try:
        ctx.phase(f"ring all-reduce: {n} ranks connecting on 127.0.0.1")
        gather("ready")
        ctx.phase(f"ring all-reduce: correctness, {nbytes} bytes x {n} ranks")
        for conn in pipes:
            conn.send(("check", None))
        errors = gather("checked")
        ctx.phase("ring all-reduce: calibration")
        one = timed(1)
        iterations = max(1, math.ceil(args.min_time / max(one, 1e-9)))
        samples = []
        for r in range(args.repeats):
            ctx.phase(f"ring all-reduce: repeat {r + 1}/{args.repeats}, {iterations} iters")
            samples.append(timed(iterations))
        ctx.phase("ring all-reduce: final correctness check")
        for conn in pipes:
            conn.send(("check", None))
        errors += gather("checked")
    finally:
        for conn in pipes:
            with contextlib.suppress(OSError):
                conn.send(("stop", None))
        for p in procs:
            p.join(timeout=5)
        for s in listeners:
            s.close()
    max_err = max(errors)
    expected_max = 250 / 251 * n * (n + 1) / 2
    out = summarize(nbytes, n, samples)
    out.update(transport="tcp-loopback", algorithm="ring", iterations=iterations,
               repeats=args.repeats, max_abs_err=max_err,
               correct=max_err <= 1e-5 * expected_max, wrong=sum(e > 1e-5 * expected_max
                                                                   for e in errors))
    ctx.evidence["limits"] = cpu_limits()
    return out


# --------------------------------------------------------------------------------------------
# nvidia / amd

def find_all_reduce_perf(explicit: str | None) -> str | None:
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("all_reduce_perf", path=":".join(ALL_REDUCE_PERF_DIRS))
    return found


def nccl_tests(ctx: Context, binary: str, ngpus: int) -> dict[str, Any]:
    args = ctx.args
    size = str(args.bytes)
    argv = [binary, "-b", size, "-e", size, "-f", "2", "-g", str(ngpus), "-c", "1",
            "-n", str(args.iters), "-w", str(args.warmup_iters)]
    proc = ctx.run(argv)
    ctx.evidence["all_reduce_perf_tail"] = proc.stdout[-3000:]
    if proc.returncode != 0:
        raise ProbeError(f"all_reduce_perf exited {proc.returncode}: "
                         f"{tail(proc.stdout + proc.stderr)}")
    try:
        table = parsers.parse_all_reduce_perf(proc.stdout)
    except parsers.ParseError as exc:
        raise ProbeError(str(exc)) from None
    version = re.search(r"nccl-tests version\s+(\S+)|NCCL version\s+(\S+)", proc.stdout)
    if version:
        ctx.tool_versions["nccl"] = next(g for g in version.groups() if g)
    return {"tool": "all_reduce_perf", "bytes": table["largest_size_bytes"],
            "ranks": table["ranks"] or ngpus, "algbw_gbps": table["algbw_gbps"],
            "busbw_gbps": table["busbw_gbps"], "peak_busbw_gbps": table["peak_busbw_gbps"],
            "wrong": table["wrong"], "correct": table["wrong"] == 0,
            "avg_busbw_reported_gbps": table["avg_busbw_reported_gbps"], "rows": table["rows"]}


def _torch_rank(rank: int, world: int, port: int, nbytes: int, iters: int, warmup: int,
                repeats: int, queue: Any) -> None:
    """One process per device (spawned): NCCL/RCCL all-reduce, timed and checked on rank 0."""
    try:
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        count = nbytes // 4
        x = torch.zeros(count, dtype=torch.float32, device=f"cuda:{rank}")
        for _ in range(warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) / iters)
        y = torch.full((count,), float(rank + 1), dtype=torch.float32, device=f"cuda:{rank}")
        dist.all_reduce(y)
        err = float((y - world * (world + 1) / 2).abs().max())
        queue.put((rank, samples, err, None))
        dist.destroy_process_group()
    except BaseException as exc:
        queue.put((rank, [], None, f"{type(exc).__name__}: {exc}"))


def torch_comms(ctx: Context, ngpus: int) -> dict[str, Any]:
    """Untested without GPUs; summarize()/busbw() are unit-tested."""
    args = ctx.args
    if ngpus < 2:
        return {"tool": "torch.distributed", "ranks": ngpus, "busbw_gbps": 0.0,
                "algbw_gbps": None, "correct": None,
                "note": "one device: an all-reduce moves no bytes across a bus"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn = mp.get_context("spawn")
    queue = spawn.Queue()
    ctx.phase(f"torch.distributed all-reduce over {ngpus} devices")
    procs = [spawn.Process(target=_torch_rank, daemon=True,
                           args=(r, ngpus, port, args.bytes, args.iters, args.warmup_iters,
                                 args.repeats, queue)) for r in range(ngpus)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=ctx.remaining()) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    failed = [r for r in results if r[3]]
    if failed:
        raise ProbeError(f"torch.distributed all-reduce failed: {failed[0][3]}")
    per_repeat = [max(r[1][i] for r in results) for i in range(args.repeats)]
    out = summarize(args.bytes // 4 * 4, ngpus, per_repeat)
    max_err = max(r[2] for r in results)
    out.update(tool="torch.distributed", max_abs_err=max_err, correct=max_err == 0.0)
    return out


def gpu_comms(ctx: Context) -> dict[str, Any]:
    try:
        import torch
        ctx.tool_versions["torch"] = torch.__version__
        ngpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        ngpus = 0  # all_reduce_perf needs no torch; --gpus gives the count
    if ctx.args.gpus:
        ngpus = ctx.args.gpus
    binary = find_all_reduce_perf(ctx.args.all_reduce_perf)
    if binary:
        ctx.tool_versions["all_reduce_perf"] = binary
        if ngpus == 0:
            raise ProbeError("all_reduce_perf is installed but the GPU count is unknown "
                             "(pass --gpus, or install torch)")
        return nccl_tests(ctx, binary, ngpus)
    if ngpus == 0:
        raise ProbeError("neither all_reduce_perf (nccl-tests/rccl-tests) nor a torch that "
                         "sees the GPUs is available")
    return torch_comms(ctx, ngpus)


def work(ctx: Context) -> dict[str, Any]:
    return by_backend(ctx, "nothing to all-reduce across", cpu_comms, gpu_comms)


def parser() -> Any:
    p = base_parser("comms", 300.0)
    p.add_argument("--bytes", type=int, default=64 * 2**20, help="message size per rank")
    p.add_argument("--ranks", type=int, default=4, help="cpu: ring all-reduce processes")
    p.add_argument("--min-time", type=float, default=0.5, help="cpu: seconds per timed block")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=20, help="gpu: timed iterations")
    p.add_argument("--warmup-iters", type=int, default=5, help="gpu: warm-up iterations")
    p.add_argument("--gpus", type=int, default=0, help="gpu: device count (default: all)")
    p.add_argument("--all-reduce-perf", default=None, help="path to all_reduce_perf")
    return p


if __name__ == "__main__":
    raise SystemExit(main("comms", parser(), work))
