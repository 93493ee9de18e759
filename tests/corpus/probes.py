"""Bad probe and tool outputs, through every command that reads a recorded one: `smoke parse
KIND FILE` (the probe JSON and the tools' own outputs), `judge --baseline/--canary` (sample
files), `diagnose --from` (a saved triage collection) and `smoke run --baseline` (an earlier
run's results). Each starts from a real capture in tests/fixtures or a valid probe document."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.corpus.base import FIXTURES, Base
from tests.corpus.entry import (
    FIFO_REASON,
    Entry,
    deep_json,
    drop,
    fifo,
    mutated,
    put,
    write,
)

NAN, INF = float("nan"), float("inf")
A100 = FIXTURES / "nvidia-smi" / "a100-sxm4-v12.xml"
ALL_REDUCE = FIXTURES / "synthetic" / "all_reduce_perf-h100x8.txt"
AMD_ECC = FIXTURES / "synthetic" / "amd-smi-metric-ecc-gpu_data.json"
BUSBW_ROW = "68421.1  251.09  439.41"


def _dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2)  # writes NaN and Infinity, as a buggy tool would


Argv = Callable[[Path], tuple[str, ...]]


def parse(kind: str) -> Argv:
    return lambda p: ("smoke", "parse", kind, str(p))


def entries(base: Base) -> list[Entry]:
    probe = json.loads(base.probe.read_text())
    collection = json.loads(base.triage.read_text())
    out: list[Entry] = []

    def add(eid: str, name: str, content: str | bytes | None, argv: Argv, field: str,
            why: str, made: Path | None = None) -> None:
        path = made if made is not None else write(base.dir("probe", eid) / name, content or "")
        out.append(Entry(f"probe-{eid}", "probe", argv(path),
                         tuple(x for x in (f"{eid}/{name}", field) if x), why,
                         inputs=(path,) if made is None else ()))

    def add_fifo(eid: str, name: str, argv: Argv, why: str) -> None:
        add(eid, name, None, argv, FIFO_REASON, why, made=fifo(base.dir("probe", eid) / name))

    def judge_base(p: Path) -> tuple[str, ...]:
        return ("judge", "--baseline", str(p), "--canary", str(base.samples))

    def judge_canary(p: Path) -> tuple[str, ...]:
        return ("judge", "--baseline", str(base.samples), "--canary", str(p))

    def diagnose(p: Path) -> tuple[str, ...]:
        return ("diagnose", "--from", str(p))

    def smoke_baseline(p: Path) -> tuple[str, ...]:
        return ("smoke", "run", "-i", str(base.inventory), "--baseline", str(p))

    # -- a probe's own JSON (smoke parse probe)
    p = parse("probe")
    probe_cases: list[tuple[str, Any, str, str]] = [
        ("nan-metric", put("metrics.tflops", NAN), "tflops|NaN", "a NaN TFLOPS"),
        ("negative-samples", put("metrics.samples", [-0.01, 0.01, 0.01]), "samples",
         "a negative TFLOPS sample"),
        ("negative-duration", put("duration_s", -1.0), "duration_s", "a negative duration"),
        ("nan-duration", put("duration_s", NAN), "duration_s|NaN", "a NaN duration"),
        ("status-unknown", put("status", "great"), "status", "a status that does not exist"),
        ("missing-duration", drop("duration_s"), "duration_s", "no duration"),
    ]
    text = _dumps(probe)
    for eid, mutation, field, why in probe_cases:
        add(eid, "probe.json", _dumps(mutated(probe, mutation)), p, field, why)
    raw: list[tuple[str, str | bytes, str]] = [
        ("huge-number", text.replace('"duration_s": 3.5', '"duration_s": 1e999'),
         "a duration that overflows to infinity"),
        ("two-objects", text + "\n" + text, "two JSON objects"),
        ("empty", "", "no output at all"),
        ("bom", "\ufeff" + text, "a byte-order mark before the JSON"),
        ("invalid-utf8", text.replace('"reason": ""', '"reason": "\udcff"')
         .encode("utf-8", "surrogateescape"), "a byte that is not UTF-8"),
        ("nul-byte", text.replace('"reason": ""', '"reason": "\x00"'), "a raw NUL byte"),
        ("too-deep", text.replace('"evidence": {}', '"evidence": ' + deep_json()),
         "evidence nested past the recursion limit"),
    ]
    for eid, content, why in raw:
        add(eid, "probe.json", content, p, "", why)
    add_fifo("fifo", "probe.json", p, "a named pipe as the probe output")

    # -- the tools' own outputs
    xml = A100.read_text()
    volatile_dbe = "<dram_uncorrectable>0</dram_uncorrectable>"
    tools: list[tuple[str, str, str | bytes, str, str]] = [
        ("nvsmi-negative-ecc", "nvidia-smi-xml", xml.replace(
            volatile_dbe, "<dram_uncorrectable>-5</dram_uncorrectable>", 1),
         "dram_uncorrectable", "a negative ECC error count"),
        ("nvsmi-temperature", "nvidia-smi-xml", xml.replace(
            "<gpu_temp>27 C</gpu_temp>", "<gpu_temp>-300 C</gpu_temp>"), "temperature",
         "a temperature below absolute zero"),
        ("nvsmi-negative-power", "nvidia-smi-xml", xml.replace(
            "<power_draw>67.03 W</power_draw>", "<power_draw>-67.03 W</power_draw>"), "power",
         "a negative power draw"),
        ("nvsmi-billion-laughs", "nvidia-smi-xml", '<?xml version="1.0"?>\n<!DOCTYPE l [\n'
         '<!ENTITY a "aaaaaaaaaa">\n' + "".join(
             f'<!ENTITY {chr(98 + i)} "' + f"&{chr(97 + i)};" * 10 + '">\n' for i in range(9))
         + ']>\n<nvidia_smi_log><driver_version>&j;</driver_version></nvidia_smi_log>\n', "",
         "an XML entity expansion bomb"),
        ("allreduce-negative-busbw", "all-reduce-perf", ALL_REDUCE.read_text().replace(
            BUSBW_ROW, "68421.1  251.09  -439.41"), "busbw", "a negative bus bandwidth"),
        ("allreduce-nan-busbw", "all-reduce-perf", ALL_REDUCE.read_text().replace(
            BUSBW_ROW, "68421.1  251.09     nan"), "busbw", "a NaN bus bandwidth"),
        ("allreduce-negative-time", "all-reduce-perf", ALL_REDUCE.read_text().replace(
            BUSBW_ROW, "-68421.1  251.09  439.41"), "time", "a negative duration"),
        ("amdsmi-negative-ecc", "amd-smi", AMD_ECC.read_text().replace(
            '"total_correctable_count": 0', '"total_correctable_count": -3', 1),
         "correctable", "a negative ECC count"),
        ("dkms-garbage", "dkms-status", "Error! Could not locate dkms.conf\nrandom words\n", "",
         "dkms's error message instead of its status"),
    ]
    for eid, kind, content, field, why in tools:
        add(eid, f"{kind}.out", content, parse(kind), field, why)

    # -- judge sample files
    samples = json.loads(base.samples.read_text())
    results = json.loads(base.results.read_text())
    judge_cases: list[tuple[str, str | bytes, Argv, str, str]] = [
        ("judge-nan-sample", _dumps({"gemm.tflops": [0.01, NAN, 0.011, 0.01, 0.012]}),
         judge_base, "gemm.tflops", "a NaN sample"),
        ("judge-inf-sample", _dumps({"gemm.tflops": [0.01, INF, 0.011, 0.01, 0.012]}),
         judge_canary, "gemm.tflops|Infinity", "an infinite sample"),
        ("judge-negative-count", _dumps({"gemm.tflops": samples["gemm.tflops"],
                                         "discovery.xid": [-1, 0, 0, 0, 0]}),
         lambda q: (*judge_canary(q), "--metric", "discovery.xid:lower:count"),
         "discovery.xid", "a negative event count"),
        ("judge-bad-metric-name", _dumps({"gemm tflops": [0.01]}), judge_base, "gemm tflops",
         "a metric name with a space"),
        ("judge-results-malformed", json.dumps({"results": [{"host": 1}]}), judge_canary,
         "results[0]", "a smoke result that is not one"),
        ("judge-results-nan", _dumps(mutated(results, put("results[0].metrics.samples",
                                                          [0.01, NAN, 0.01, 0.01, 0.01]))),
         judge_base, "samples|NaN", "a NaN in a smoke run's samples"),
        ("judge-too-deep", '{"gemm.tflops": ' + deep_json() + "}", judge_base, "",
         "samples nested past the recursion limit"),
        ("judge-huge", "{" + " " * (65 * 1024 * 1024) + "}", judge_base, "",
         "a 65 MB sample file"),
    ]
    for eid, content, argv, field, why in judge_cases:
        add(eid, "samples.json", content, argv, field, why)
    add_fifo("judge-fifo", "samples.json", judge_base, "a named pipe as a sample file")

    # -- saved triage collections (diagnose --from)
    diag_cases: list[tuple[str, str | bytes, str, str]] = [
        ("diagnose-not-json", "collected: yes\n", "", "not JSON"),
        ("diagnose-not-collection", json.dumps({"a": 1}), "", "JSON that is no collection"),
        ("diagnose-nan-duration", _dumps(mutated(collection, put("collection.duration_s", NAN))),
         "duration_s|NaN", "a NaN collection time"),
        ("diagnose-negative-duration", _dumps(mutated(
            collection, put("collection.duration_s", -3.0))), "duration_s",
         "a negative collection time"),
        ("diagnose-negative-cpus", _dumps(mutated(
            collection, put("collection.facts.cpu_count", -2))), "cpu_count",
         "a negative CPU count"),
        ("diagnose-too-deep", '{"schema": "x", "collection": ' + deep_json() + "}", "",
         "nested past the recursion limit"),
    ]
    for eid, content, field, why in diag_cases:
        add(eid, "triage-h1.json", content, diagnose, field, why)
    add_fifo("diagnose-fifo", "triage-h1.json", diagnose, "a named pipe as the saved collection")

    # -- an earlier run's results as a baseline (read before any host is touched)
    base_cases: list[tuple[str, str | bytes, str, str]] = [
        ("baseline-nan", _dumps(mutated(results, put("results[0].metrics.tflops", NAN))),
         "tflops|NaN", "a NaN in the baseline run"),
        ("baseline-not-results", json.dumps({"gemm.tflops": [0.01]}), "",
         "a sample file where a smoke run's results belong"),
    ]
    for eid, content, field, why in base_cases:
        add(eid, "results.json", content, smoke_baseline, field, why)
    add_fifo("baseline-fifo", "results.json", smoke_baseline,
             "a named pipe as the baseline results")
    return out
