"""How often does the judge get it right? Simulated trials with known answers.

Each trial draws samples for a baseline and a canary, runs the real judge
(`fleetgate.judge.judgement.judge_canary`, plan defaults unless a flag overrides them) and
records the gate outcome. Not a test: it prints a table, or JSON with --json.

Noise: per-run lognormal spread with the given coefficient of variation (CV), positive and
mildly skewed like throughput timings. Event counts: Poisson per sample.

Cells (issue 20's targets), each from --trials trials (default 1000):

* 10% / 5% regression and no change at CV 0.05, 16 samples a side; no change at CV 0.10;
  the 5% rows again with a 2.5% tolerance (a 5% regression against the default 5% tolerance
  sits on the boundary: ~50% by definition) at 16, 24 and 32 samples a side;
* no change at CV 0.05 with the old benchmark's 10 canary / 20 baseline samples (the
  configuration that used to halt ~48% of healthy rollouts on max_baseline_cv);
* 2x spread with the same median (CV 0.05 -> 0.10), at 16 and at 48 samples a side;
* event counts from an all-zero baseline: Poisson(3) per canary sample, and exactly 3 events
  over 5 canary samples (the edge: marginal, never a pass);
* a batch of 4 canaries, one 3x slower, each judged on its own against one baseline
  (16 baseline samples), at CV 0.03 and 0.05 with 8 samples per host, and at CV 0.05 with 16:
  detection of the slow host and how many healthy hosts of the batch failed.

"detected" is the share of trials whose verdict is not a pass (fail, or inconclusive for a
marginal spread or count); "fail" is the share that failed outright.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from fleetgate.judge.judgement import judge_canary
from fleetgate.judge.model import DEFAULT_ALPHA, DEFAULT_TOLERANCE, CanarySection

MEAN = 140.0
Draw = Callable[[np.random.Generator], tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]


def lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray[Any, Any]:
    if cv == 0:
        return np.full(n, mean)
    sigma = math.sqrt(math.log1p(cv * cv))
    return mean * np.exp(sigma * rng.standard_normal(n) - sigma * sigma / 2)


def shifted(factor: float, cv: float, n_can: int, n_base: int) -> Draw:
    return lambda rng: (lognormal(rng, MEAN, cv, n_base),
                        lognormal(rng, MEAN * factor, cv, n_can))


def wider(cv: float, ratio: float, n: int) -> Draw:
    # Same median, `ratio` x the spread: normal noise around the same centre.
    return lambda rng: (MEAN * (1 + cv * rng.standard_normal(n)),
                        MEAN * (1 + ratio * cv * rng.standard_normal(n)))


def counts(rate: float, n_can: int, n_base: int, exact: int | None = None) -> Draw:
    def draw(rng: np.random.Generator) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        can = rng.poisson(rate, n_can).astype(float)
        if exact is not None:  # exactly `exact` events spread over the canary samples
            can = np.bincount(rng.integers(0, n_can, exact), minlength=n_can).astype(float)
        return np.zeros(n_base), can
    return draw


# (case, kind, draw, target text, check(rates) -> met)
Check = Callable[[dict[str, float]], bool]
Cell = tuple[str, str, Draw, str, Check]


def detected(share: int, by: str = "fail") -> tuple[str, Check]:
    """The target that at least `share`% of trials are caught: failed outright (`by` "fail"),
    or any verdict but a pass ("detected")."""
    return f">= {share}% detected", lambda r: r[by] >= share


def quiet(inconclusive: int) -> tuple[str, Check]:
    """No change: at most 0.5% of trials fail, at most `inconclusive`% are inconclusive."""
    return (f"<= 0.5% fail, <= {inconclusive}% inconcl.",
            lambda r: r["fail"] <= 0.5 and r["inconclusive"] <= inconclusive)


def noted(note: str, target: tuple[str, Check]) -> tuple[str, Check]:
    """The same check, shown as a note: a row that finds how many samples the target needs."""
    return note, target[1]


def shift_cell(factor: float, cv: float, n_can: int, n_base: int, target: tuple[str, Check],
               suffix: str = "") -> Cell:
    """A canary at `factor` x the baseline's mean (a regression, or 1.0: no change)."""
    change = "no change" if factor == 1 else f"{round((1 - factor) * 100)}% regression"
    return (f"{change}, CV {cv:.2f}, {n_can}/{n_base}{suffix}", "continuous",
            shifted(factor, cv, n_can, n_base), *target)


def spread_cell(ratio: float, n: int, target: tuple[str, Check]) -> Cell:
    what = "no change, same spread" if ratio == 1 else f"{ratio:g}x spread, same median"
    return f"{what}, {n}/{n}", "continuous", wider(0.05, ratio, n), *target


TOL = ", tol 2.5%"  # section() reads it from the case: the metric's tolerance is 2.5%
CELLS: list[Cell] = [
    shift_cell(0.90, 0.05, 16, 16, detected(95)),
    shift_cell(1.0, 0.05, 16, 16, quiet(2)),
    shift_cell(1.0, 0.10, 16, 16, quiet(5)),
    shift_cell(0.95, 0.05, 16, 16, detected(80)),
    shift_cell(0.95, 0.05, 16, 16, detected(80), TOL),
    shift_cell(0.95, 0.05, 24, 24, noted("(samples needed)", detected(80)), TOL),
    shift_cell(0.95, 0.05, 32, 32, noted("(samples needed)", detected(80)), TOL),
    shift_cell(1.0, 0.05, 24, 24, quiet(2), TOL),
    shift_cell(1.0, 0.05, 10, 20, noted("(was 47.8% inconcl.)", quiet(2)), " (old)"),
    spread_cell(2.0, 16, detected(90, "detected")),
    spread_cell(2.0, 48, noted("(samples needed)", detected(90, "detected"))),
    spread_cell(2.0, 64, noted("(samples needed)", detected(90, "detected"))),
    spread_cell(1.0, 64, quiet(2)),
    ("counts 0 -> Poisson(3)/sample, 5/16", "count", counts(3.0, 5, 16), *detected(99)),
    ("counts 0 -> exactly 3 events, 5/16", "count", counts(0.0, 5, 16, exact=3),
     *detected(99, "detected")),
]


def section(kind: str, args: argparse.Namespace, case: str = "") -> CanarySection:
    metric: dict[str, Any] = ({"name": "xid_events", "direction": "lower", "kind": "count",
                               "critical": True} if kind == "count" else
                              {"name": "gemm", "direction": "higher", "critical": True,
                               "tolerance": 0.025 if "tol 2.5%" in case else args.tolerance})
    return CanarySection.model_validate({"metrics": [metric], "alpha": args.alpha})


def run_cell(sec: CanarySection, draw: Draw, trials: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    name = sec.metrics[0].name
    out: Counter[str] = Counter()
    for _ in range(trials):
        base, can = draw(rng)
        out[judge_canary(sec, {name: base}, {name: can}).outcome] += 1
    rates = {k: 100 * out[k] / trials for k in ("pass", "fail", "inconclusive")}
    rates["detected"] = 100 - rates["pass"]
    return rates


def run_batch(sec: CanarySection, cv: float, trials: int, seed: int, per_host: int = 8,
              n_base: int = 16) -> dict[str, float]:
    """4 canaries, the first 3x slower, each judged on its own against one baseline."""
    rng = np.random.default_rng(seed)
    slow_caught = 0
    healthy_failed = 0
    healthy_not_pass = 0
    trials_with_a_healthy_failed = 0
    for _ in range(trials):
        base = {"gemm": lognormal(rng, MEAN, cv, n_base)}
        verdicts = [judge_canary(sec, base, {"gemm": lognormal(
            rng, MEAN / 3 if h == 0 else MEAN, cv, per_host)}) for h in range(4)]
        slow_caught += verdicts[0].outcome == "fail"
        bad = sum(v.outcome == "fail" for v in verdicts[1:])
        healthy_failed += bad
        healthy_not_pass += sum(v.outcome != "pass" for v in verdicts[1:])
        trials_with_a_healthy_failed += bad > 0
    return {"slow_failed": 100 * slow_caught / trials, "healthy_failed": healthy_failed,
            "healthy_not_pass": healthy_not_pass, "healthy_hosts": 3 * trials,
            "trials_with_a_healthy_failed": trials_with_a_healthy_failed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    ap.add_argument("--seed", type=int, default=20240)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for i, (case, kind, draw, target, met) in enumerate(CELLS):
        rates = run_cell(section(kind, args, case), draw, args.trials, args.seed + i)
        rows.append({"case": case, **rates, "target": target, "met": met(rates)})
    batches = []
    for j, (cv, per_host) in enumerate(((0.03, 8), (0.05, 8), (0.05, 16))):
        b = run_batch(section("continuous", args), cv, args.trials, args.seed + 100 + j,
                      per_host=per_host)
        batches.append({"case": f"one 3x slow host in 4, CV {cv:g}, {per_host}/host vs 16", **b,
                        "target": ">= 99.9% detected, 0 healthy failed",
                        "met": b["slow_failed"] >= 99.9 and b["healthy_failed"] == 0})
    elapsed = time.perf_counter() - t0
    settings = {"tolerance": args.tolerance, "alpha": args.alpha, "trials": args.trials,
                "seed": args.seed, "elapsed_s": round(elapsed, 1)}
    if args.json:
        json.dump({"settings": settings, "rows": rows, "batches": batches}, sys.stdout,
                  indent=2)
        print()
        return 0

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"judge quality: {args.trials} trials/cell, tolerance "
                        f"{args.tolerance:g}, alpha {args.alpha:g}")
    for col in ("case", "pass %", "fail %", "inconcl. %", "detected %", "target", "met"):
        table.add_column(col, justify="right" if col.endswith("%") else "left")
    for r in rows:
        table.add_row(r["case"], f"{r['pass']:.1f}", f"{r['fail']:.1f}",
                      f"{r['inconclusive']:.1f}", f"{r['detected']:.1f}", r["target"],
                      "met" if r["met"] else "NOT met")
    console = Console(width=150)
    console.print(table)
    for b in batches:
        console.print(f"{b['case']}: slow host failed {b['slow_failed']:.1f}%; healthy hosts "
                      f"failed {b['healthy_failed']}/{b['healthy_hosts']} (not passed "
                      f"{b['healthy_not_pass']}), trials with a healthy host failed "
                      f"{b['trials_with_a_healthy_failed']} -> "
                      f"{'met' if b['met'] else 'NOT met'}")
    console.print(f"{args.trials * (len(rows) + 4 * len(batches))} judgements in {elapsed:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
