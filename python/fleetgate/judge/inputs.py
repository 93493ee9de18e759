"""Sample files for `fleetgate judge`: metric name -> samples, from any of

- `smoke run --json` output (a results list): `CHECK.FIELD` from each measured result's
  `FIELD_samples` (the GEMM probe's plain `samples` are `gemm.tflops`), else its headline
  value, across every host in the file;
- a plain JSON document `{"metric": [values...]}`;
- all_reduce_perf output (text), through the smoke parser: `comms.busbw_gbps` and
  `comms.algbw_gbps` at the largest message size (out-of-place and in-place, every run in
  the file), and `comms.wrong` per row as an event count.

Anything else is one BadInput naming the file, the field and the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput, validated
from fleetgate.inputs import load_json, read_input
from fleetgate.judge.model import METRIC_NAME_RE, samples
from fleetgate.smoke import parsers
from fleetgate.smoke.model import CheckResult

MAX_BYTES = 64 * 1024 * 1024
_PLAIN_SAMPLES = {"gemm": "tflops"}


def _read(path: Path) -> str:
    return read_input(path, max_bytes=MAX_BYTES)  # a FIFO or device is refused, never read


def _from_smoke(doc: dict[str, Any], path: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for i, raw in enumerate(doc["results"]):
        r = validated(CheckResult, raw, path, prefix=f"results[{i}]", what="not a smoke result")
        if r.probe_status != "ok":
            continue
        fields = {k[:-len("_samples")] for k, v in r.metrics.items()
                  if k.endswith("_samples") and isinstance(v, list)}
        if r.check in _PLAIN_SAMPLES and isinstance(r.metrics.get("samples"), list):
            fields.add(_PLAIN_SAMPLES[r.check])
        for f in fields:
            key = ("samples" if _PLAIN_SAMPLES.get(r.check) == f
                   and not isinstance(r.metrics.get(f"{f}_samples"), list) else f"{f}_samples")
            vals = samples(r.metrics[key], source=str(path),
                           field=f"results[{i}].metrics.{key}")
            out.setdefault(f"{r.check}.{f}", []).extend(vals)
    return out


def _from_plain(doc: dict[str, Any], path: Path) -> dict[str, list[float]]:
    import re

    out: dict[str, list[float]] = {}
    for name, vals in doc.items():
        if not isinstance(name, str) or not re.match(METRIC_NAME_RE, name):
            raise BadInput(f"metric name {name!r} is not a name ({METRIC_NAME_RE})",
                           source=path, field=str(name))
        if not isinstance(vals, list):
            raise BadInput(f"samples must be a list of numbers, got {type(vals).__name__}",
                           source=path, field=name)
        out[name] = samples(vals, source=str(path), field=name)
    return out


def _from_all_reduce(text: str, path: Path) -> dict[str, list[float]]:
    try:
        doc = parsers.parse_all_reduce_perf(text)
    except parsers.ParseError as exc:
        raise BadInput(f"not a smoke result, a {{metric: [values]}} document or "
                       f"all_reduce_perf output: {exc}", source=path) from None
    rows = doc.get("rows") or []
    if not rows:
        raise BadInput("all_reduce_perf output without a result row", source=path)
    top = max(r["size_bytes"] for r in rows)
    out: dict[str, list[float]] = {"comms.busbw_gbps": [], "comms.algbw_gbps": [],
                                   "comms.wrong": []}
    for r in rows:
        for place in ("out_of_place", "in_place"):
            p = r.get(place) or {}
            if r["size_bytes"] == top:
                out["comms.busbw_gbps"].append(float(p["busbw_gbps"]))
                out["comms.algbw_gbps"].append(float(p["algbw_gbps"]))
            wrong = p.get("wrong")
            if isinstance(wrong, int | float) and math.isfinite(wrong):
                out["comms.wrong"].append(float(wrong))
    return out


def load_samples(path: Path) -> dict[str, list[float]]:
    """Metric name -> samples from one file (see the module doc for the formats)."""
    text = _read(path)
    if not text.strip():
        raise BadInput("empty file", source=path)
    if text.lstrip()[:1] not in ("{", "[", '"'):  # not JSON: all_reduce_perf's text
        return _from_all_reduce(text, path)
    # Strict: a NaN or Infinity sample is not JSON, and not a measurement either.
    doc = load_json(text, path, what="not a sample file")
    if not isinstance(doc, dict):
        raise BadInput(f"a sample file holds a JSON object, not a {type(doc).__name__}",
                       source=path)
    if "results" in doc:
        if not isinstance(doc["results"], list):
            raise BadInput("results must be a list of smoke results", source=path,
                           field="results")
        return _from_smoke(doc, path)
    if not doc:
        raise BadInput("no metrics in the document", source=path)
    return _from_plain(doc, path)


def check_counts(loaded: Mapping[str, list[float]], counts: Iterable[str], path: Path) -> None:
    """A count metric's samples are events per sample: whole numbers >= 0. Judging would
    call anything else "no data" (inconclusive); read from a file, it is bad input."""
    for name in counts:
        for i, v in enumerate(loaded.get(name, ())):
            if v < 0 or v != int(v):
                raise BadInput(f"{v:g} is not a count of events (a whole number >= 0)",
                               source=path, field=f"{name}[{i}]")
