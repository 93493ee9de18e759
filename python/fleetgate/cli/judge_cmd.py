"""`fleetgate judge`: the canary judge on any two sample files, outside a rollout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from fleetgate.cli import output as ui
from fleetgate.errors import BadInput
from fleetgate.judge.explain import explain
from fleetgate.judge.inputs import check_counts, load_samples
from fleetgate.judge.judgement import judge_samples
from fleetgate.judge.model import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_TOLERANCE,
    DEFAULT_UNCERTAINTY_LIMIT,
    METRIC_NAME_RE,
    parse_canary_section,
)

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 4}
_SPEC_RE = re.compile(r"^(?P<name>[^:]+)(?::(?P<direction>[^:]*))?(?::(?P<kind>[^:]*))?$")




def _metric_specs(specs: list[str], base: dict[str, Any], can: dict[str, Any],
                  tolerance: float) -> list[dict[str, Any]]:
    if not specs:
        common = sorted(set(base) & set(can))
        if not common:
            raise BadInput("the two files have no metric in common; name one with --metric",
                           source="--metric")
        return [{"name": n, "direction": "higher", "critical": True, "tolerance": tolerance}
                for n in common]
    out = []
    for spec in specs:
        m = _SPEC_RE.match(spec)
        if not m or not re.match(METRIC_NAME_RE, m["name"]):
            raise BadInput("not NAME[:higher|lower[:continuous|count]]", source="--metric",
                           field=spec)
        direction = m["direction"] or ("lower" if m["kind"] == "count" else "higher")
        if direction not in ("higher", "lower"):
            raise BadInput(f"direction {direction!r} is neither higher nor lower",
                           source="--metric", field=spec)
        kind = m["kind"] or "continuous"
        if kind not in ("continuous", "count"):
            raise BadInput(f"kind {kind!r} is neither continuous nor count", source="--metric",
                           field=spec)
        out.append({"name": m["name"], "direction": direction, "kind": kind, "critical": True,
                     "tolerance": tolerance})
    return out


@ui.documented([
    "fleetgate judge --baseline old.json --canary new.json",
    "fleetgate judge --baseline old.json --canary new.json --metric gemm.tflops --json",
    "fleetgate judge --baseline a.txt --canary b.txt --metric comms.busbw_gbps",
    "fleetgate judge --baseline b.json --canary c.json --metric xid:lower:count",
], "0 pass, 1 fail, 2 bad input (nothing judged), 4 inconclusive (something could not be "
   "measured or bounded)")
def judge_command(
    baseline: Annotated[Path, typer.Option("--baseline", help="Reference samples (file).")],
    canary: Annotated[Path, typer.Option("--canary", help="Candidate samples (file).")],
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", help="NAME[:higher|lower[:continuous|count]]; repeatable.")] = None,
    tolerance: Annotated[float, typer.Option(help="Relative shift that matters.")
                         ] = DEFAULT_TOLERANCE,
    alpha: Annotated[float, typer.Option(help="Significance level of each test.")
                     ] = DEFAULT_ALPHA,
    min_samples: Annotated[int, typer.Option(help="Samples needed per side.")
                           ] = DEFAULT_MIN_SAMPLES,
    uncertainty_limit: Annotated[float, typer.Option(
        help="Worst-case regression a pass may leave open.")] = DEFAULT_UNCERTAINTY_LIMIT,
    self_mode: Annotated[bool, typer.Option(
        "--self", help="The baseline file is the same host before the change.")] = False,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
) -> None:
    """Judge a canary sample file against a baseline sample file, metric by metric:
    Mann-Whitney U with a Hodges-Lehmann shift and its interval (location), Brown-Forsythe
    (spread), an exact test for event counts; then the weighted, fail-closed gate.

    Inputs (either side): `smoke run --json` output, a plain JSON document mapping each
    metric name to a list of numbers, or all_reduce_perf output (comms.busbw_gbps,
    comms.algbw_gbps, comms.wrong).

    --metric NAME:DIRECTION:KIND, DIRECTION higher or lower, KIND continuous or count
    (repeatable; default: every metric both files have, higher is better). Counts are
    lower-is-better."""
    out = ui.fmt(as_json, output)
    base = load_samples(baseline)
    can = load_samples(canary)
    metrics = _metric_specs(metric or [], base, can, tolerance)
    counts = [m["name"] for m in metrics if m.get("kind") == "count"]
    check_counts(base, counts, baseline)
    check_counts(can, counts, canary)
    if not 0 < tolerance < 1:
        raise BadInput(f"{tolerance:g} is not within (0, 1)", source="--tolerance")
    section = parse_canary_section({
        "metrics": metrics, "alpha": alpha, "min_samples": min_samples,
        "uncertainty_limit": uncertainty_limit, "repeats": max(min_samples, 5)},
        source="fleetgate judge", prefix="")
    verdict = judge_samples(section, base, can, mode="self" if self_mode else "baseline",
                            source="fleetgate judge")
    if out is ui.Output.json:
        ui.print_json({"baseline_file": str(baseline), "canary_file": str(canary),
                       **verdict.model_dump(mode="json")})
    else:
        ui.console.print(ui.esc(explain(verdict)))
    raise typer.Exit(EXIT_CODES[verdict.outcome])
