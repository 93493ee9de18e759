"""A probe never prints invalid JSON: a NaN or Infinity in its result becomes null, and the
probe says it could not measure (status error, the fields named) instead of printing a token
the controller's strict reader refuses."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fleetgate.inputs import load_json
from fleetgate.smoke.model import parse_probe_output

PROBES = Path(__file__).resolve().parents[2] / "roles" / "smoke_probes" / "files" / "probes"


@pytest.fixture(scope="module")
def probe_runtime() -> Iterator[ModuleType]:
    sys.path.insert(0, str(PROBES))
    try:
        import fleetgate_probe

        yield fleetgate_probe
    finally:
        sys.path.remove(str(PROBES))
        for name in ("fleetgate_probe", "fleetgate_hostcmd"):
            sys.modules.pop(name, None)


def test_finite_result_is_unchanged(probe_runtime: ModuleType) -> None:
    doc = {"status": "ok", "reason": "", "metrics": {"tflops": 790.5, "samples": [1.0, 2.0]}}
    assert probe_runtime.finite(doc) == doc


def test_nan_and_infinity_become_null_and_an_error(probe_runtime: ModuleType) -> None:
    doc = {"status": "ok", "reason": "", "metrics": {
        "tflops": float("nan"), "busbw_gbps_samples": [1.0, float("inf")]}}
    out = probe_runtime.finite(doc)
    assert out["metrics"] == {"tflops": None, "busbw_gbps_samples": [1.0, None]}
    assert out["status"] == "error"
    assert out["reason"] == ("not a finite number: metrics.tflops (nan), "
                             "metrics.busbw_gbps_samples[1] (inf)")
    text = json.dumps(out, allow_nan=False)
    assert load_json(text, "probe") == out


def test_a_probe_measuring_nan_prints_strict_json(tmp_path: Path) -> None:
    script = tmp_path / "nanprobe.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(PROBES)!r})
        from fleetgate_probe import base_parser, main
        def work(ctx):
            return {{"status": "ok", "metrics": {{"tflops": float("nan")}}}}
        raise SystemExit(main("gemm", base_parser("gemm", 30.0), work))
    """))
    proc = subprocess.run([sys.executable, str(script), "--backend", "cpu"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr  # error: could not measure
    assert "NaN" not in proc.stdout
    report = parse_probe_output(proc.stdout, source="nanprobe")  # the controller accepts it
    assert report.status == "error" and report.metrics == {"tflops": None}
    assert "metrics.tflops (nan)" in report.reason


def _report(metrics: dict[str, object]) -> str:
    return json.dumps({"probe": "gemm", "backend": "cpu", "status": "ok", "duration_s": 1.0,
                       "metrics": metrics})


@pytest.mark.parametrize(("metrics", "where"), [
    ({"tflops": 0.01, "samples": [-0.01, 0.01, 0.01]}, "samples[0]: -0.01 is negative"),
    ({"tflops": -3.0}, "tflops: -3.0 is negative"),
    ({"per_device": [{"busbw_gbps": 1.0}, {"busbw_gbps": -1.0}]},
     "per_device[1].busbw_gbps: -1.0 is negative"),
    ({"gpus": [{"temperature_c": 900}]}, "gpus[0].temperature_c: 900 C is outside"),
])
def test_an_impossible_measurement_is_bad_input_naming_it(metrics: dict[str, object],
                                                          where: str) -> None:
    from fleetgate.errors import BadInput

    with pytest.raises(BadInput) as err:
        parse_probe_output(_report(metrics), source="probe.json")
    assert err.value.field == "metrics" and err.value.reason.startswith(where), err.value


def test_a_signed_checksum_and_plain_measurements_pass() -> None:
    metrics = {"checksum": -0.2569, "checksum_scale": 3.1, "p50_ms": 0.4, "samples": [0.0, 1.0],
               "gpus": [{"temperature_c": -5}], "note": "-1"}
    assert parse_probe_output(_report(metrics)).metrics == metrics


def test_smoke_parse_probe_refuses_a_negative_sample(tmp_path: Path) -> None:
    f = tmp_path / "probe.json"
    f.write_text(_report({"tflops": 0.01, "samples": [-0.01, 0.01, 0.01]}))
    proc = subprocess.run([str(Path(sys.executable).parent / "fleetgate"), "smoke", "parse",
                           "probe", str(f)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"fleetgate: {f}: metrics: samples[0]: -0.01 is negative; "
                                   "a count, size, rate or duration cannot be")
