"""The judge family: fail-closed paths (each one inconclusive with a reason naming what is
missing), the spread and count tests, per-host judging in the controller's gate, and the
`fleetgate judge` command on synthetic documents and on malformed inputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fleetgate.cli import main as cli_main
from fleetgate.judge.judgement import judge_canary, judge_metric
from fleetgate.rollout import gates
from fleetgate.rollout.canary import parse_canary_section
from fleetgate.rollout.measure import Reference
from fleetgate.smoke.judge import apply_relative, judge
from fleetgate.smoke.model import CheckResult
from fleetgate.smoke.thresholds import resolve
from tests.unit.test_smoke_judge import (
    a100_class,
    cls,
    gemm_results,
    nvidia_discovery,
    report,
)

REPO = Path(__file__).resolve().parents[2]
ALL_REDUCE = REPO / "tests" / "fixtures" / "synthetic" / "all_reduce_perf-h100x8.txt"
GEMM = {"name": "gemm.tflops", "direction": "higher", "critical": True}


def draw(mean: float, cv: float, n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in mean * (1 + cv * rng.standard_normal(n))]


# --------------------------------------------------------------------------------------------
# fail closed: every path without a measurement is inconclusive, and says what is missing

def test_probe_skipping_a_check_the_class_expects_is_inconclusive() -> None:
    nc = cls("lab-cpu")
    r = judge("h", report("gemm", "cpu", {}, status="skipped", reason="no device"), nc,
              resolve(nc))
    assert (r.status, r.probe_status) == ("inconclusive", "skipped")
    assert "probe skipped gemm, which class lab-cpu (cpu) expects" in r.reason


def test_unreadable_kernel_log_is_inconclusive_on_a_real_host() -> None:
    nc = a100_class()
    m = nvidia_discovery()
    m["kernel_log"] = {"readable": False, "reason": "dmesg: read kernel buffer failed"}
    r = judge("gpu-1", report("discovery", "nvidia", m), nc, resolve(nc))
    assert r.status == "inconclusive"
    assert "kernel log not readable, so no Xid/MCE scan" in r.reason


def test_unreadable_kernel_log_of_a_container_host_is_the_outer_machines() -> None:
    nc = a100_class()
    m = nvidia_discovery()
    m["kernel_log"] = {"readable": False, "reason": "dmesg: operation not permitted"}
    m["cpu"]["container"] = "podman"
    r = judge("gpu-1", report("discovery", "nvidia", m), nc, resolve(nc))
    assert r.status == "pass" and any("outer machine's kernel log" in w for w in r.warnings)


def test_too_few_peers_for_the_relative_check_is_inconclusive() -> None:
    res = apply_relative(gemm_results({"a": 3.0, "b": 3.1}))
    assert [r.status for r in res] == ["inconclusive", "inconclusive"]
    assert "2 measured peers, needs 3 (min_peers)" in res[0].reason


def test_kernel_log_section_missing_from_the_probe_is_inconclusive() -> None:
    nc = a100_class()
    m = nvidia_discovery()
    del m["kernel_log"]
    r = judge("gpu-1", report("discovery", "nvidia", m), nc, resolve(nc))
    assert r.status == "inconclusive"
    assert "reported no kernel_log section, so no Xid/MCE scan" in r.reason


@pytest.mark.parametrize("value", [None, 0, -1.0, "fast", True, float("nan")])
def test_relative_metric_missing_from_an_ok_probe_is_inconclusive(value: object) -> None:
    res = gemm_results({"a": 3.0, "b": 3.1, "c": 2.9, "d": 3.05})
    if value is None:
        del res[3].metrics["tflops"]
    else:
        res[3].metrics["tflops"] = value
    by = {r.host: r for r in apply_relative(res)}
    assert by["d"].status == "inconclusive"
    assert "relative check has no value: tflops is" in by["d"].reason
    assert "needs a number > 0" in by["d"].reason
    assert [by[h].status for h in "abc"] == ["pass", "pass", "pass"]


@pytest.mark.parametrize("bad", [None, "n/a", float("nan")])
def test_a_repeat_that_did_not_measure_is_no_data_not_dropped(bad: object) -> None:
    sec = parse_canary_section({"metrics": [GEMM]})
    ref = Reference(mode="promoted", hosts=["p1", "p2"], results=[
        _gemm_result(h, draw(100, 0.02, 5, i)) for i, h in enumerate(("p1", "p2"))])
    samples: list[Any] = draw(100, 0.02, 6, 20)
    samples[2] = bad
    v = gates._judge_host(_ctl(ref), sec, "h1", [_gemm_result("h1", samples)])
    assert v.outcome == "inconclusive"
    assert "canary has 1 non-finite value(s)" in v.metrics[0].reason


def test_relative_check_left_to_the_canary_is_not_judged_twice() -> None:
    res = apply_relative(gemm_results({"a": 3.0, "b": 0.1}), skip=("gemm",))
    assert [r.status for r in res] == ["pass", "pass"]
    assert "reference_n" not in res[1].threshold["relative"]


def test_missing_metric_is_inconclusive_and_named() -> None:
    sec = {"metrics": [GEMM, {"name": "comms.busbw_gbps", "direction": "higher"}]}
    g = judge_canary(sec, {"gemm.tflops": draw(100, 0.01, 10, 1), "comms.busbw_gbps":
                           draw(50, 0.01, 10, 2)}, {"gemm.tflops": draw(100, 0.01, 5, 3)})
    assert g.outcome == "inconclusive"
    comms = g.metrics[1]
    assert comms.outcome == "nodata"
    assert "metric comms.busbw_gbps missing on the canary" in comms.reason
    assert "no data: comms.busbw_gbps" in g.reason


def test_too_noisy_baseline_is_inconclusive_with_the_bound_it_reached() -> None:
    v = judge_metric(GEMM, draw(100, 0.3, 10, 4), draw(100, 0.3, 5, 5))
    assert v.outcome == "nodata"
    assert "baseline too noisy to bound the change" in v.reason
    assert v.worst_shift is not None and v.worst_shift > v.uncertainty_limit


def test_noise_widens_the_interval_instead_of_voiding_the_verdict() -> None:
    # CV 0.08 used to be "baseline too noisy" (max_baseline_cv 0.05); with 16 a side the
    # interval still bounds the change, so it passes.
    v = judge_metric(GEMM, draw(100, 0.08, 16, 6), draw(100, 0.08, 16, 7))
    assert v.outcome == "pass", v.reason
    assert v.shift_ci is not None and v.shift_ci[0] < 0 < v.shift_ci[1]


def _ctl(reference: Reference, before: dict[str, list[CheckResult]] | None = None) -> Any:
    return SimpleNamespace(reference=reference, before=before or {})


def _gemm_result(host: str, samples: list[Any]) -> CheckResult:
    finite = [v for v in samples if isinstance(v, float) and np.isfinite(v)]
    return CheckResult(host=host, check="gemm", status="pass", probe_status="ok", reason="",
                       metrics={"tflops": float(np.median(finite)), "samples": samples})


def test_last_wave_without_any_reference_is_inconclusive_never_skipped() -> None:
    sec = parse_canary_section({"metrics": [GEMM]})
    ref = Reference(mode="promoted", missing="no reference: no old-version host left and no "
                    "host promoted in an earlier wave")
    v = gates._judge_host(_ctl(ref), sec, "h1", [_gemm_result("h1", draw(100, .01, 5, 8))])
    assert v.outcome == "inconclusive" and v.host == "h1" and v.mode == "promoted"
    assert "no host promoted in an earlier wave" in v.metrics[0].reason


def test_last_wave_self_mode_without_before_samples_is_inconclusive() -> None:
    sec = parse_canary_section({"metrics": [GEMM]})
    v = gates._judge_host(_ctl(Reference(mode="self")), sec, "h1",
                          [_gemm_result("h1", draw(100, .01, 5, 9))])
    assert v.outcome == "inconclusive"
    assert "no before-change samples of h1" in v.metrics[0].reason


def test_each_canary_host_is_judged_on_its_own_against_promoted_peers() -> None:
    sec = parse_canary_section({"metrics": [GEMM]})
    promoted = [_gemm_result(h, draw(100, 0.02, 5, i)) for i, h in enumerate(("p1", "p2"))]
    ref = Reference(mode="promoted", hosts=["p1", "p2"], results=promoted)
    good = gates._judge_host(_ctl(ref), sec, "h1", [_gemm_result("h1", draw(100, .02, 5, 10))])
    slow = gates._judge_host(_ctl(ref), sec, "h2", [_gemm_result("h2", draw(33, .02, 5, 11))])
    assert (good.outcome, slow.outcome) == ("pass", "fail")
    assert slow.reference_hosts == ["p1", "p2"] and slow.metrics[0].n_canary == 5
    assert slow.metrics[0].canary == pytest.approx(draw(33, .02, 5, 11))


# --------------------------------------------------------------------------------------------
# beyond Kayenta: spread and counts

def test_double_spread_with_the_same_median_is_marginal_or_fails_as_the_plan_says() -> None:
    rng = np.random.default_rng(12)
    base = list(100 + 2 * rng.standard_normal(60))
    can = list(100 + 4 * rng.standard_normal(60))
    marginal = judge_canary({"metrics": [GEMM]}, {"gemm.tflops": base}, {"gemm.tflops": can})
    assert marginal.metrics[0].outcome == "marginal" and marginal.outcome == "inconclusive"
    assert "Brown-Forsythe" in marginal.metrics[0].reason
    failing = judge_canary({"metrics": [{**GEMM, "spread": "fail"}]}, {"gemm.tflops": base},
                           {"gemm.tflops": can})
    assert failing.outcome == "fail"
    off = judge_canary({"metrics": [{**GEMM, "spread": "off"}]}, {"gemm.tflops": base},
                       {"gemm.tflops": can})
    assert off.outcome == "pass"


XID = {"name": "discovery.xid_count", "direction": "lower", "kind": "count", "critical": True}


def test_counts_rising_from_an_all_zero_baseline_fail() -> None:
    g = judge_canary({"metrics": [XID]}, {"discovery.xid_count": [0.0] * 16},
                     {"discovery.xid_count": [3.0, 4.0, 2.0, 3.0, 5.0]})
    m = g.metrics[0]
    assert g.outcome == "fail" and m.canary_events == 17 and m.baseline_events == 0
    assert m.count_p is not None and m.count_p < 1e-6


def test_a_few_events_over_a_zero_baseline_are_never_a_pass() -> None:
    g = judge_canary({"metrics": [XID]}, {"discovery.xid_count": [0.0] * 16},
                     {"discovery.xid_count": [1.0, 0.0, 1.0, 1.0, 0.0]})
    assert g.metrics[0].outcome == "marginal" and g.outcome == "inconclusive"


def test_count_metric_must_be_lower_is_better() -> None:
    from fleetgate.errors import BadInput

    with pytest.raises(BadInput, match="direction must be lower"):
        parse_canary_section({"metrics": [{**XID, "direction": "higher"}]})


# --------------------------------------------------------------------------------------------
# fleetgate judge

def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fleetgate", "judge", *args])
    with pytest.raises(SystemExit) as exc:
        cli_main.main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def write(tmp: Path, name: str, doc: Any) -> str:
    p = tmp / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def test_judge_synthetic_documents_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    base = write(tmp_path, "base.json", {"gemm.tflops": draw(100, 0.01, 12, 20)})
    same = write(tmp_path, "same.json", {"gemm.tflops": draw(100, 0.01, 12, 21)})
    slow = write(tmp_path, "slow.json", {"gemm.tflops": draw(80, 0.01, 12, 22)})
    few = write(tmp_path, "few.json", {"gemm.tflops": [100.0, 99.0]})
    rc, out, _ = run_cli(capsys, monkeypatch, "--baseline", base, "--canary", same)
    assert rc == 0 and "gate (baseline): PASS" in " ".join(out.split())
    rc, out, _ = run_cli(capsys, monkeypatch, "--baseline", base, "--canary", slow, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["outcome"] == "fail"
    m = doc["metrics"][0]
    assert m["canary"] == pytest.approx(draw(80, 0.01, 12, 22)) and m["tolerance"] == 0.05
    assert m["p_value"] < 0.005 and m["shift_ci"][1] < -0.15
    rc, out, _ = run_cli(capsys, monkeypatch, "--baseline", base, "--canary", few)
    assert rc == 4 and "too few samples" in " ".join(out.split())


def test_judge_all_reduce_perf_through_the_parser(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, _ = run_cli(capsys, monkeypatch, "--baseline", str(ALL_REDUCE), "--canary",
                         str(ALL_REDUCE), "--metric", "comms.busbw_gbps", "--min-samples", "2",
                         "--alpha", "0.5", "--json")
    doc = json.loads(out)
    assert doc["metrics"][0]["baseline"] == [439.73, 439.73] or len(
        doc["metrics"][0]["baseline"]) >= 2
    assert doc["metrics"][0]["name"] == "comms.busbw_gbps" and rc in (0, 4)


SMOKE_RESULT = {"host": "h", "check": "gemm", "status": "pass", "probe_status": "ok",
                "reason": "", "metrics": {"tflops": 1.0, "samples": [1.0, 1.1]}}


def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    ok = write(tmp, "ok.json", {"gemm.tflops": [1.0, 2.0, 3.0, 4.0, 5.0]})
    d = tmp / "adir"
    d.mkdir()
    (tmp / "latin1.json").write_bytes(b"\xff\xfe{")
    cases: list[tuple[Any, str]] = [
        (str(tmp / "missing.json"), "no such file"),
        (str(d), "is a directory"),
        (str(tmp / "latin1.json"), "not UTF-8"),
        (write(tmp, "empty.json", "   \n"), "empty file"),
        (write(tmp, "broken.json", '{"a": [1, 2'), "invalid JSON"),
        (write(tmp, "list.json", "[1, 2, 3]"), "not a list"),
        (write(tmp, "str.json", '"text"'), "not a str"),
        (write(tmp, "nometrics.json", {}), "no metrics"),
        (write(tmp, "scalar.json", {"gemm.tflops": 3.0}), "must be a list of numbers"),
        (write(tmp, "strings.json", {"gemm.tflops": [1.0, "2"]}), "sample is not a number"),
        (write(tmp, "bools.json", {"gemm.tflops": [True, 1.0]}), "sample is not a number"),
        (write(tmp, "nested.json", {"gemm.tflops": [[1.0]]}), "sample is not a number"),
        (write(tmp, "badname.json", {"1bad name": [1.0]}), "is not a name"),
        (write(tmp, "huge.json", {"m": [1.0] * 2001}), "more than 2000 samples"),
        (write(tmp, "results.json", {"results": {"a": 1}}), "results must be a list"),
        (write(tmp, "badresult.json", {"results": [{"host": "h"}]}),
         "results[0].check: not a smoke result: required field is missing (and 3 more)"),
        (write(tmp, "badhost.json", {"results": [{**SMOKE_RESULT, "host": 1}]}),
         "results[0].host: not a smoke result: Input should be a valid string, got int"),
        # Strict JSON, and the line names the sample (json.dumps writes NaN and Infinity).
        (write(tmp, "nan.json", {"gemm.tflops": [1.0, float("nan"), 3.0]}),
         "'gemm.tflops'[1]: not a sample file: invalid JSON: NaN is not a JSON number"),
        (write(tmp, "inf.json", {"results": [
            {**SMOKE_RESULT, "metrics": {"samples": [1.0, float("-inf")]}}]}),
         "results[0].metrics.samples[1]: not a sample file: invalid JSON: -Infinity is not"),
        (write(tmp, "badsamples.json", {"results": [
            {**SMOKE_RESULT, "metrics": {"samples": [1.0, "x"]}}]}), "sample is not a number"),
        (write(tmp, "text.txt", "hello, this is not all_reduce_perf output\n"),
         "all_reduce_perf"),
    ]
    out = [(["--baseline", ok, "--canary", f], why) for f, why in cases]
    out += [
        (["--baseline", ok, "--canary", ok, "--metric", "bad name!"], "not NAME"),
        (["--baseline", ok, "--canary", ok, "--metric", "gemm.tflops:sideways"],
         "neither higher nor lower"),
        (["--baseline", ok, "--canary", ok, "--metric", "gemm.tflops:lower:gauge"],
         "neither continuous nor count"),
        (["--baseline", ok, "--canary", ok, "--metric", "gemm.tflops:higher:count"],
         "direction must be lower"),
        (["--baseline", ok, "--canary", ok, "--tolerance", "1.5"], "not within (0, 1)"),
        (["--baseline", ok, "--canary", ok, "--alpha", "0.9"], "alpha"),
        (["--baseline", ok, "--canary", ok, "--min-samples", "2"], "can never reach alpha"),
        (["--baseline", ok, "--canary", ok, "--uncertainty-limit", "-1"], "uncertainty_limit"),
        (["--baseline", ok, "--canary", write(tmp, "other.json", {"x": [1.0]})],
         "no metric in common"),
        # A count metric's samples are whole numbers of events, on either side.
        (["--baseline", write(tmp, "xid.json", {"xid": [0, 0, -1, 0, 0]}), "--canary",
          write(tmp, "xid0.json", {"xid": [0, 0, 0, 0, 0]}), "--metric", "xid:lower:count"],
         "xid.json: xid[2]: -1 is not a count of events"),
        (["--baseline", str(tmp / "xid0.json"), "--canary",
          write(tmp, "xidh.json", {"xid": [0, 0.5, 0, 0, 0]}), "--metric", "xid:lower:count"],
         "xidh.json: xid[1]: 0.5 is not a count of events"),
        (["--baseline", ok], "--canary"),
        (["--baseline", ok, "--canary", ok, "--tolerance", "abc"], "abc"),
    ]
    return out


def test_judge_malformed_inputs_exit_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    cases = _bad_cases(tmp_path)
    assert len(cases) >= 20
    for args, why in cases:
        rc, out, err = run_cli(capsys, monkeypatch, *args)
        assert rc == 2, (args, rc, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (args, err)
        assert why in lines[0], (args, lines[0])
        assert "Traceback" not in err and out == ""
        assert "[type=" not in err and "validation error" not in err
