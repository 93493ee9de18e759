"""The torch code paths of the GEMM and inference probes, driven through a FAKE `torch`
(numpy underneath, wall-clock "CUDA events", N pretend devices).

No GPU exists on the development or CI machines. This does not measure anything real: it
exercises the glue a GPU run goes through (device threads, warm-up, event timing, iteration
calibration, the correctness check, per-device aggregation, the shared model and checksum),
so a typo or a wrong index there fails here and not first on a borrowed H200.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.smoke.probeset import install_local
from fleetgate.smoke.thresholds import resolve
from fleetgate.spec.loader import load_class

np = pytest.importorskip("numpy")
REPO = Path(__file__).resolve().parents[2]


class T:
    """Just enough of torch.Tensor, over a numpy array."""

    def __init__(self, a: Any) -> None:
        self.a = np.asarray(a)

    def to(self, x: Any) -> T:
        return T(self.a.astype(x)) if isinstance(x, type) else self

    def float(self) -> T:
        return T(self.a.astype(np.float32))

    def double(self) -> T:
        return T(self.a.astype(np.float64))

    def cpu(self) -> T:
        return self

    def t(self) -> T:
        return T(self.a.T)

    def contiguous(self) -> T:
        return T(np.ascontiguousarray(self.a))

    def reshape(self, *shape: int) -> T:
        return T(self.a.reshape(*shape))

    def abs(self) -> T:
        return T(np.abs(self.a))

    def max(self) -> T:
        return T(self.a.max())

    def sum(self) -> T:
        return T(self.a.sum())

    def clamp_min(self, v: float) -> T:
        return T(np.maximum(self.a, v))

    def __getitem__(self, k: Any) -> T:
        return T(self.a[k])

    def __matmul__(self, o: T) -> T:
        return T(self.a @ o.a)

    def __add__(self, o: T) -> T:
        return T(self.a + o.a)

    def __sub__(self, o: Any) -> T:
        return T(self.a - (o.a if isinstance(o, T) else o))

    def __mul__(self, o: T) -> T:
        return T(self.a * o.a)

    def __truediv__(self, o: T) -> T:
        return T(self.a / o.a)

    def __float__(self) -> float:
        return float(self.a)


class Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: Event) -> float:
        return (end.t - self.t) * 1000.0


def fake_torch(devices: int) -> types.ModuleType:
    torch: Any = types.ModuleType("torch")
    torch.__version__ = "0.0-fake"
    torch.version = types.SimpleNamespace(cuda="0.0-fake", hip=None)
    torch.bfloat16 = torch.float16 = torch.float32 = np.float32
    torch.float64 = np.float64
    torch.float8_e4m3fn = np.float32
    torch.backends = types.SimpleNamespace(
        cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=True)),
        cudnn=types.SimpleNamespace(allow_tf32=True))
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: devices,
        device=lambda d: contextlib.nullcontext(), synchronize=lambda d=None: None,
        Event=Event, get_device_name=lambda d: f"Fake GPU {d}")

    class Generator:
        def __init__(self, device: str = "cpu") -> None:
            self.rng = np.random.RandomState(0)

        def manual_seed(self, s: int) -> Generator:
            self.rng = np.random.RandomState(s)
            return self

    torch.Generator = Generator
    torch.randn = lambda *shape, device=None, generator=None: T(
        generator.rng.standard_normal(shape).astype(np.float32))
    torch.empty = lambda *shape, device=None, dtype=np.float32: T(np.empty(shape, dtype))

    def matmul(a: T, b: T, out: T | None = None) -> T:
        res = a.a @ b.a
        if out is not None:
            out.a[...] = res
            return out
        return T(res)

    torch.matmul = matmul
    torch.tensor = lambda data, dtype=np.float64: T(np.asarray(data, dtype=dtype))
    torch.tanh = lambda x: T(np.tanh(x.a))
    torch.equal = lambda x, y: bool(np.array_equal(x.a, y.a))
    torch.inference_mode = contextlib.nullcontext
    return torch


class Ctx:
    def __init__(self, **args: Any) -> None:
        self.args = types.SimpleNamespace(**args)
        self.tool_versions: dict[str, str] = {}
        self.evidence: dict[str, Any] = {}
        self.phases: list[str] = []

    def phase(self, name: str) -> None:
        self.phases.append(name)

    def remaining(self) -> float:
        return 60.0


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    d = install_local(tmp_path / "probes")
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.setitem(sys.modules, "torch", fake_torch(devices=3))
    mods = {n: importlib.import_module(n) for n in ("gemm", "inference")}
    yield mods
    for n in ("gemm", "inference", "fleetgate_probe", "fleetgate_parsers", "fleetgate_hostcmd"):
        sys.modules.pop(n, None)


def test_torch_gemm_glue_across_devices(probes: dict[str, Any]) -> None:
    ctx = Ctx(dtype="bf16", size=128, min_time=0.05, repeats=3, warmup=2, devices=None)
    m = probes["gemm"].torch_gemm(ctx)
    assert m["devices"] == m["devices_visible"] == 3 and m["device_errors"] == {}
    assert [d["device"] for d in m["per_device"]] == [0, 1, 2]
    assert all(len(d["samples"]) == 3 and d["iterations"] >= 10 for d in m["per_device"])
    assert m["tflops"] == min(d["tflops"] for d in m["per_device"])  # the slowest gates
    assert m["correct"] is True and m["max_rel_err"] < 1e-4
    assert ctx.tool_versions["torch"] == "0.0-fake"
    assert ctx.phases and "on 3 device(s)" in ctx.phases[-1]
    torch = sys.modules["torch"]
    assert torch.backends.cuda.matmul.allow_tf32 is False, "fp32 must not silently be TF32"


def test_torch_gemm_device_subset_and_unavailable_cuda(probes: dict[str, Any]) -> None:
    ctx = Ctx(dtype="fp32", size=64, min_time=0.01, repeats=1, warmup=0, devices="1")
    assert [d["device"] for d in probes["gemm"].torch_gemm(ctx)["per_device"]] == [1]
    sys.modules["torch"].cuda.is_available = lambda: False
    fp = sys.modules["fleetgate_probe"]
    with pytest.raises(fp.ProbeError, match="is_available"):
        probes["gemm"].torch_gemm(ctx)


def test_torch_inference_glue_matches_the_cpu_checksum(probes: dict[str, Any]) -> None:
    ctx = Ctx(batch_size=8, batches=20, max_time=5.0)
    m = probes["inference"].torch_inference(ctx, time.perf_counter())
    expect = resolve(load_class(REPO / "inventory/classes/lab-cpu.yml")).models[
        probes["inference"].MODEL_ID]
    assert len(m["per_device"]) == 3 and m["deterministic"] is True and m["batches"] == 20
    assert abs(m["checksum"] - expect.checksum) <= expect.rtol * m["checksum_scale"]
    assert m["p99_ms"] == max(d["p99_ms"] for d in m["per_device"])


def test_cpu_gemm_shrinks_its_blocks_to_keep_every_repeat_before_the_deadline(
        probes: dict[str, Any]) -> None:
    # A throttled host: the deadline leaves room for far fewer than `repeats` full blocks.
    # The probe must come back with every repeat (shorter blocks), not with one or two.
    class Tight(Ctx):
        def __init__(self, **args: Any) -> None:
            super().__init__(**args)
            self.deadline = time.monotonic() + 3.5

        def remaining(self) -> float:
            return max(0.1, self.deadline - time.monotonic())

    ctx = Tight(dtype="fp32", size=96, min_time=1.0, repeats=5, warmup=0)
    m = probes["gemm"].cpu_gemm(ctx)
    assert len(m["samples"]) == 5, ctx.evidence
    assert "repeats_cut_by_deadline" not in ctx.evidence
    assert ctx.evidence["iterations_cut_by_deadline"] > 0
    assert m["correct"] is True and all(s > 0 for s in m["samples"])
