"""Smoke thresholds as data: thresholds.yml, resolved per node class into one plan.

The plan says both how to measure (probe arguments, deadlines) and how to judge (floors,
relative margin, expected model checksums), and which data layers made each value.
"""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetgate.errors import BadInput, validation_error
from fleetgate.spec.loader import read_yaml
from fleetgate.spec.schema import NodeClass

DATA_FILE = Path(__file__).with_name("thresholds.yml")
Check = Literal["discovery", "stack", "gemm", "comms", "inference"]
CHECKS: tuple[Check, ...] = ("discovery", "stack", "gemm", "comms", "inference")
PERF_CHECKS: tuple[Check, ...] = ("gemm", "comms", "inference")


class _Model(BaseModel):
    # No inf/nan anywhere: YAML's `.inf` is a float, and a floor no host can reach is no floor.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# A floor or ceiling: finite (see _Model) and positive, since 0 would check nothing.
Limit = Annotated[float, Field(gt=0)]


class RelativeMetric(_Model):
    metric: str
    better: Literal["higher", "lower"]


class RelativePlan(_Model):
    margin: Annotated[float, Field(gt=0, le=1)]
    min_peers: Annotated[int, Field(ge=2)]
    metrics: dict[str, RelativeMetric]


class GemmPlan(_Model):
    dtype: Literal["bf16", "fp16", "fp32", "fp8"]
    size: Annotated[int, Field(ge=64, le=65536)]
    min_time_s: Annotated[float, Field(gt=0)]
    repeats: Annotated[int, Field(ge=1, le=100)]
    warmup: Annotated[int, Field(ge=0, le=100)]
    cv_warn: Annotated[float, Field(gt=0)]
    tflops_min: Limit | None = None
    floor_source: str | None = None


class CommsPlan(_Model):
    bytes: Annotated[int, Field(ge=1024)]
    ranks: Annotated[int, Field(ge=2, le=64)]
    min_time_s: Annotated[float, Field(gt=0)]
    repeats: Annotated[int, Field(ge=1, le=100)]
    iters: Annotated[int, Field(ge=1)]
    warmup_iters: Annotated[int, Field(ge=0)]
    busbw_gbps_min: Limit | None = None
    floor_bytes: Annotated[int, Field(ge=1)] | None = None
    floor_source: str | None = None


class InferencePlan(_Model):
    batches: Annotated[int, Field(ge=10, le=100000)]
    batch_size: Annotated[int, Field(ge=1, le=4096)]
    max_time_s: Annotated[float, Field(gt=0)]
    p99_ms_max: Limit | None = None
    cold_start_s_max: Limit | None = None


class DiscoveryPlan(_Model):
    retired_pages_max: Annotated[int, Field(ge=0)]
    benign_clock_events: list[str]


class ModelExpectation(_Model):
    checksum: float
    rtol: Annotated[float, Field(gt=0)]


class Plan(_Model):
    """Everything the suite needs for one node class."""

    node_class: str
    sku: str
    backend: str
    timeouts_s: dict[str, Limit]
    relative: RelativePlan
    gemm: GemmPlan
    comms: CommsPlan
    inference: InferencePlan
    discovery: DiscoveryPlan
    models: dict[str, ModelExpectation]
    sources: list[str]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class ThresholdData(_Model):
    schema_: Literal[1] = Field(alias="schema")
    defaults: dict[str, Any]
    backends: dict[str, dict[str, Any]] = Field(default_factory=dict)
    skus: dict[str, dict[str, Any]] = Field(default_factory=dict)
    exceptions: list[dict[str, Any]] = Field(default_factory=list)


def _non_finite(doc: Any, path: str = "") -> str | None:
    """The dotted path of the first inf/nan number in `doc` (the free-form sku and exception
    layers are plain data until resolve() builds a Plan from them), or None."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return path or "(top level)"
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) \
        else ()
    for key, value in items:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        found = _non_finite(value, where)
        if found is not None:
            return found
    return None


@functools.lru_cache(maxsize=4)
def load_data(path: Path = DATA_FILE) -> ThresholdData:
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise BadInput("thresholds must be a YAML mapping", source=path)
    bad = _non_finite(raw)
    if bad is not None:
        raise BadInput("not a finite number (.inf and .nan are no threshold)", source=path,
                       field=bad)
    try:
        data = ThresholdData.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, path) from None
    for n, exc_entry in enumerate(data.exceptions):
        if not {"name", "match", "reason"} <= set(exc_entry):
            raise BadInput("an exception needs name, match and reason", source=path,
                           field=f"exceptions[{n}]")
        if not set(exc_entry["match"]) <= {"class", "sku", "backend"}:
            raise BadInput("match keys are class, sku and backend", source=path,
                           field=f"exceptions[{n}].match")
    return data


def resolve(nc: NodeClass, data: ThresholdData | None = None) -> Plan:
    data = data or load_data()
    backend = nc.accelerator.backend
    sku = nc.accelerator.model
    sources = ["defaults"]
    layer = copy.deepcopy(data.defaults)
    if backend in data.backends:
        layer = _merge(layer, data.backends[backend])
        sources.append(f"backends.{backend}")
    gemm_dtype, gemm_size = nc.smoke.gemm.dtype, nc.smoke.gemm.size
    sku_data = data.skus.get(sku, {})
    gemm_floor: dict[str, Any] = {}
    if sku_data:
        floor = (sku_data.get("gemm") or {}).get(gemm_dtype)
        if floor and floor.get("size") == gemm_size:
            gemm_floor = {"tflops_min": floor["tflops_min"],
                          "floor_source": f"skus.{sku}: {floor.get('source', '')}".strip()}
        comms = sku_data.get("comms") or {}
        if "busbw_gbps_min" in comms:
            layer = _merge(layer, {"comms": {
                "busbw_gbps_min": comms["busbw_gbps_min"],
                "floor_bytes": comms.get("bytes"),
                "floor_source": f"skus.{sku}: {comms.get('source', '')}".strip()}})
        sources.append(f"skus.{sku}")
    for entry in data.exceptions:
        match = entry["match"]
        if (match.get("class", nc.name) == nc.name and match.get("sku", sku) == sku
                and match.get("backend", backend) == backend):
            layer = _merge(layer, {k: v for k, v in entry.items()
                                   if k not in ("name", "match", "reason")})
            sources.append(f"exceptions.{entry['name']}")
    gemm = {**layer["gemm"], "dtype": gemm_dtype, "size": gemm_size, **gemm_floor}
    smoke = nc.smoke
    set_fields = smoke.model_fields_set
    if smoke.gemm.tflops_min is not None:
        gemm.update(tflops_min=smoke.gemm.tflops_min, floor_source=f"class {nc.name}")
    comms = dict(layer["comms"])
    if smoke.comms.busbw_gbps_min is not None:
        comms.update(busbw_gbps_min=smoke.comms.busbw_gbps_min, floor_bytes=None,
                     floor_source=f"class {nc.name}")
    inference = dict(layer["inference"])
    if smoke.inference.p99_ms_max is not None:
        inference["p99_ms_max"] = smoke.inference.p99_ms_max
    if smoke.inference.cold_start_s_max is not None:
        inference["cold_start_s_max"] = smoke.inference.cold_start_s_max
    relative = dict(layer["relative"])
    relative["metrics"] = {k: v for k, v in relative["metrics"].items() if v is not None}
    if "relative_margin" in set_fields:
        relative["margin"] = smoke.relative_margin
    if set_fields or any(v is not None for v in (
            smoke.gemm.tflops_min, smoke.comms.busbw_gbps_min, smoke.inference.p99_ms_max,
            smoke.inference.cold_start_s_max)):
        sources.append(f"class {nc.name}")
    try:
        return Plan(node_class=nc.name, sku=sku, backend=backend,
                    timeouts_s=layer["timeouts_s"], relative=RelativePlan(**relative),
                    gemm=GemmPlan(**gemm), comms=CommsPlan(**comms),
                    inference=InferencePlan(**inference),
                    discovery=DiscoveryPlan(**layer["discovery"]),
                    models={k: ModelExpectation(**v) for k, v in layer["models"].items()},
                    sources=sources)
    except (ValidationError, TypeError, KeyError) as exc:
        raise BadInput(f"thresholds do not resolve for class {nc.name}: "
                       f"{' '.join(str(exc).split())[:300]}", source=DATA_FILE) from None
