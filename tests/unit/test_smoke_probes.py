"""The on-host probes, run for real on this machine as plain scripts (the cpu backend), their
watchdog against a real hang, and the arithmetic of the GPU paths that cannot run here."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fleetgate.smoke.model import parse_probe_output
from fleetgate.smoke.probeset import install_local, probe_argv, set_version
from fleetgate.smoke.thresholds import resolve
from fleetgate.spec.loader import load_class

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe set laid out as the role installs it."""
    return install_local(tmp_path_factory.mktemp("probes"))


@pytest.fixture(scope="module")
def mods(probes: Path) -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(probes))
    try:
        yield {n: importlib.import_module(n) for n in ("gemm", "comms", "inference",
                                                       "fleetgate_probe")}
    finally:
        sys.path.remove(str(probes))
        for n in ("gemm", "comms", "inference", "fleetgate_probe", "fleetgate_parsers",
                  "fleetgate_hostcmd"):
            sys.modules.pop(n, None)


def run_probe(probes: Path, name: str, *args: str, python: str = sys.executable,
              timeout: float = 120) -> tuple[dict[str, Any], int, float]:
    t0 = time.monotonic()
    proc = subprocess.run([python, str(probes / f"{name}.py"), *args], capture_output=True,
                          text=True, timeout=timeout, check=False)
    doc = json.loads(proc.stdout)  # exactly one JSON object, or this raises
    assert proc.stdout.count("\n") == 1
    return doc, proc.returncode, time.monotonic() - t0


def test_probe_set_version_matches_sha256sum(probes: Path) -> None:
    files = {p.name: p.read_bytes() for p in probes.iterdir() if p.name != "VERSION"}
    assert "fleetgate_parsers.py" in files and "discovery.py" in files
    listing = subprocess.run(  # noqa: S602 - the role's documented shell pipeline, verbatim
        "LC_ALL=C sha256sum -- $(ls -A | grep -vx VERSION | LC_ALL=C sort) | sha256sum",
        shell=True, cwd=probes, capture_output=True, text=True, check=True).stdout.split()[0]
    assert set_version(files) == listing == (probes / "VERSION").read_text().strip()


def test_discovery_cpu(probes: Path) -> None:
    doc, rc, _ = run_probe(probes, "discovery", "--backend", "cpu")
    assert rc == 0 and doc["status"] == "ok" and doc["probe"] == "discovery"
    assert doc["metrics"]["cpu"]["lscpu"]["cpus"] == os.cpu_count()
    assert "readable" in doc["metrics"]["kernel_log"]
    parse_probe_output(json.dumps(doc))  # the controller's model accepts it


def test_stack_cpu(probes: Path) -> None:
    doc, rc, _ = run_probe(probes, "stack", "--backend", "cpu")
    assert rc == 0 and doc["metrics"]["kernel"] == os.uname().release


def test_gemm_cpu_measures_and_checks_its_product(probes: Path) -> None:
    doc, rc, _ = run_probe(probes, "gemm", "--backend", "cpu", "--dtype", "fp32", "--size",
                           "256", "--min-time", "0.2", "--repeats", "3", "--warmup", "1")
    m = doc["metrics"]
    assert rc == 0 and doc["status"] == "ok"
    assert m["correct"] is True and m["max_rel_err"] < 1e-5
    assert len(m["samples"]) == 3 and m["tflops_min"] <= m["tflops"] <= m["tflops_max"]
    assert doc["evidence"]["blas_libraries"], "the BLAS numpy really loaded is reported"
    assert doc["tool_versions"]["numpy"]


def test_gemm_cpu_refuses_bf16_as_could_not_measure(probes: Path) -> None:
    doc, rc, _ = run_probe(probes, "gemm", "--backend", "cpu", "--dtype", "bf16", "--size", "64")
    assert (doc["status"], rc) == ("error", 1) and "not supported by the cpu backend" in \
        doc["reason"]


@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no /usr/bin/python3")
def test_gemm_without_numpy_is_an_error_not_a_crash(probes: Path) -> None:
    has_numpy = subprocess.run([SYSTEM_PYTHON, "-c", "import numpy"], capture_output=True,
                               check=False).returncode == 0
    if has_numpy:
        pytest.skip("the system python has numpy here")
    doc, rc, _ = run_probe(probes, "gemm", "--backend", "cpu", "--dtype", "fp32", "--size", "64",
                           python=SYSTEM_PYTHON)
    assert (doc["status"], rc) == ("error", 1) and "numpy is not importable" in doc["reason"]


def test_comms_cpu_ring_all_reduce_over_loopback(probes: Path) -> None:
    doc, rc, _ = run_probe(probes, "comms", "--backend", "cpu", "--bytes", str(1 << 20),
                           "--ranks", "3", "--min-time", "0.1", "--repeats", "2")
    m = doc["metrics"]
    assert rc == 0 and m["correct"] is True and m["wrong"] == 0 and m["ranks"] == 3
    assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * 2 * 2 / 3, rel=1e-3)
    assert m["transport"] == "tcp-loopback"


def test_inference_cpu_matches_the_expected_checksum(probes: Path) -> None:
    doc, rc, _ = run_probe(probes, "inference", "--backend", "cpu", "--batches", "50")
    m = doc["metrics"]
    expect = resolve(load_class(REPO / "inventory/classes/lab-cpu.yml")).models[m["model"]]
    assert rc == 0 and m["deterministic"] is True and m["batches"] == 50
    assert abs(m["checksum"] - expect.checksum) <= expect.rtol * m["checksum_scale"]
    assert 0 < m["p50_ms"] <= m["p99_ms"] <= m["max_ms"] and m["cold_start_s"] > 0


def test_expected_checksum_is_the_float64_model(mods: dict[str, ModuleType]) -> None:
    """thresholds.yml's checksum is recomputed here from the probe's own model definition."""
    np = pytest.importorskip("numpy")
    inf = mods["inference"]
    h = np.asarray(inf.inputs(8), dtype=np.float64).reshape(8, inf.DIMS[0])
    layers = inf.weights()
    for k, (w, b, i, o) in enumerate(layers):
        h = h @ np.asarray(w).reshape(i, o) + np.asarray(b)
        if k < len(layers) - 1:
            h = np.tanh(h)
    checksum = float((h * np.asarray(inf.checksum_weights(8)).reshape(8, -1)).sum())
    plan = resolve(load_class(REPO / "inventory/classes/lab-cpu.yml"))
    assert plan.models[inf.MODEL_ID].checksum == pytest.approx(checksum, abs=1e-12)


def test_none_backend_is_skipped(probes: Path) -> None:
    for name in ("gemm", "comms", "inference"):
        doc, rc, _ = run_probe(probes, name, "--backend", "none")
        assert (doc["status"], rc) == ("skipped", 0)


# --------------------------------------------------------------------------- the watchdog

HANG_PROBE = textwrap.dedent("""\
    import sys
    from fleetgate_probe import base_parser, main

    def work(ctx):
        # A tool that hangs and ignores SIGTERM, as nvidia-smi does on a wedged GPU.
        ctx.run(["sh", "-c", "trap '' TERM; echo $$ > " + sys.argv[-1] + "; sleep 600"])
        return {"status": "ok"}

    p = base_parser("gemm", 2.0)
    p.add_argument("pidfile")
    raise SystemExit(main("gemm", p, work))
    """)


def test_hung_tool_gives_timeout_within_the_budget_and_no_orphan(probes: Path,
                                                                  tmp_path: Path) -> None:
    script = probes / "hang_probe.py"
    script.write_text(HANG_PROBE)
    pidfile = tmp_path / "pid"
    try:
        doc, rc, wall = run_probe(probes, "hang_probe", "--backend", "cpu", "--timeout", "2",
                                  str(pidfile), timeout=30)
    finally:
        script.unlink()
    assert (doc["status"], rc) == ("timeout", 124)
    assert "hung in: sh -c" in doc["reason"] and doc["evidence"]["phase"].startswith("sh -c")
    assert wall < 2 + 2 * 2 + 2, "deadline + TERM grace + KILL grace, not the tool's 600 s"
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the SIGTERM-ignoring tool was killed with its group


def test_caller_sigterm_still_yields_one_json_object(probes: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(probes / "gemm.py"), "--backend", "cpu",
                             "--dtype", "fp32", "--size", "512", "--min-time", "30",
                             "--timeout", "60"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    doc = json.loads(out)
    assert doc["status"] == "timeout" and "stopped by signal 15" in doc["reason"]
    assert proc.returncode == 124


def test_probe_crash_is_error_with_evidence(probes: Path) -> None:
    # argparse rejects a negative size only in the work: numpy raises, the probe reports it.
    doc, rc, _ = run_probe(probes, "gemm", "--backend", "cpu", "--dtype", "fp32", "--size", "-1")
    assert (doc["status"], rc) == ("error", 1) and "traceback" in doc["evidence"]


# --------------------------------------------------------------------------- GPU arithmetic

def test_tflops_formula_and_spread(mods: dict[str, ModuleType]) -> None:
    gemm = mods["gemm"]
    # 8192^3 bf16, 100 iterations in 0.1392 s -> 2*8192^3*100/0.1392/1e12 = 789.88 TFLOPS
    assert gemm.tflops(8192, 100, 0.1392) == pytest.approx(789.88, abs=0.01)
    s = gemm.summarize([780.0, 790.0, 800.0])
    assert (s["tflops"], s["tflops_min"], s["tflops_max"]) == (790.0, 780.0, 800.0)
    assert s["spread"] == pytest.approx(20 / 790, abs=1e-6)
    assert s["cv"] == pytest.approx(8.1650 / 790, abs=1e-5)


def test_busbw_formula(mods: dict[str, ModuleType]) -> None:
    comms = mods["comms"]
    assert comms.busbw(100.0, 8) == pytest.approx(175.0)
    assert comms.busbw(100.0, 2) == pytest.approx(100.0)
    s = comms.summarize(1 << 30, 8, [0.004, 0.0045, 0.005])
    assert s["algbw_gbps"] == pytest.approx((1 << 30) / 0.0045 / 1e9, rel=1e-6)
    assert s["busbw_gbps"] == pytest.approx(s["algbw_gbps"] * 1.75, rel=1e-6)


def test_latency_percentiles(mods: dict[str, ModuleType]) -> None:
    inf = mods["inference"]
    s = inf.latency_summary([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert (s["p50_ms"], s["p99_ms"], s["max_ms"]) == (50.5, 99.0, 100.0)


def test_probe_command_lines_follow_the_class() -> None:
    h200 = load_class(REPO / "inventory/classes/nvidia-h200-580.yml")
    argv = probe_argv("gemm", h200, resolve(h200))
    assert argv[:3] == ["/usr/bin/python3", "-B", "/opt/fleetgate/probes/gemm.py"]
    assert argv[argv.index("--dtype") + 1] == "bf16" and argv[argv.index("--size") + 1] == "8192"
    comms = probe_argv("comms", h200, resolve(h200))
    assert comms[comms.index("--bytes") + 1] == str(16 << 30)
    assert comms[comms.index("--gpus") + 1] == "8"
    stack = probe_argv("stack", h200, resolve(h200))
    assert stack[stack.index("--toolkit") + 1] == "nvidia-container-toolkit" and "--cdi" in stack
