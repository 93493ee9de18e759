"""How often does the canary judge get it right? Simulated trials with known answers.

Each trial draws GEMM throughput samples for baseline hosts and one canary host, runs the real
`judge_canary()` (one critical metric, higher is better, plan defaults unless overridden) and
records the gate outcome. Not a test: it prints a table, or JSON with --json.

Noise: per-run lognormal spread with the given coefficient of variation (CV): positive and
mildly skewed like throughput timings (the rank test does not depend on the shape under no
change; the shape only moves power a little). The lab measured the cpu GEMM probe
(fp32 512^3, shared 2-core lab) at CV 0.03-0.2 within one quiet run and 0.232 under heavy
load, so CV 0.03 / 0.10 / 0.20 are simulated. --host-cv adds a per-host offset (baseline
repeats come from several hosts, 5 repeats each); it is 0 by default because lab hosts are
containers on one machine, and real fleets should measure theirs.

Cases: no change (gate should pass: any halt is a false halt), a 2% slowdown (inside the 5%
tolerance: should pass), a 10% slowdown (should fail: detection rate) and a 3x slowdown (must
always fail). Sizes: canary 5 / baseline 10, canary 10 / baseline 20, and self mode (one host,
before/after) with 5 and with 10 repeats.

Aims: detection of 10% >= 99% and false halts (fail or inconclusive on no change) <= 1%.
What the defaults (tolerance 0.05, alpha 0.01, max_baseline_cv 0.05, 5 repeats) give, from the
default run (seed 20240, 1000 trials a cell, ~20 s):

* CV 0.03, canary 5 / baseline 10 and 10/20: both aims met (detect 99.9% / 100%, false halt
  0.3% / 0%); 3x always fails; a 2% change passes 97.5% / 99.5%.
* Self mode with 5 before / 5 after: NOT met even at CV 0.03 (detect 96.1%, false halt 2.6%):
  5 samples a side leave the exact U test three possible p-values under 0.02 and the CV of 5
  before-samples is a rough estimate. Self mode with 10/10 meets both aims, so plans in self
  mode should set repeats: 10.
* CV 0.10 and 0.20: no threshold meets both aims with 5-20 samples. Telling 0% from -10% with
  both error rates <= 1% needs the standard error of the shift <= 10% / 4.65; at CV 0.10 with
  a 1:2 canary:baseline ratio that takes ~35 canary repeats, at CV 0.20 ~140. The judge refuses
  to PASS on a baseline noisier than max_baseline_cv (NODATA -> inconclusive, a halt for a
  human) instead of passing a 10% regression it cannot see, while a clear regression
  (significant and beyond tolerance) still FAILS through the noise. So at CV 0.10-0.20 a 10%
  regression is almost never a silent pass (0-0.6%, 6.5% for self 5/5), detection as FAIL is
  7-56%, and no change is ~99% "inconclusive": the honest price of a few noisy repeats. With
  the noise gate off (--max-baseline-cv 0.3) no change passes ~99% at CV 0.10, but a 10%
  regression then passes silently 73% of the time (5/10).
* alpha 0.01 rather than 0.05: once the noise exceeds the tolerance's reach the false-FAIL rate
  is alpha itself (4-6% at alpha 0.05 for CV 0.10-0.20, 0.4-1.7% at 0.01). 5 samples a side
  still reach 0.01 (smallest exact p 1/252 = 0.004). The cost: self 5/5 at CV 0.03 detects
  96.1% instead of 99.6%.
* --host-cv: repeats from one host share its offset, which the U test takes for independent
  samples. A 2% host-to-host spread at CV 0.03 gives a 3.5% false-fail rate at 5/10 (0.6% at
  10/20; none in self mode, where the offset cancels). Measure the fleet's host spread; if it
  is not small, use self mode or more baseline hosts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from fleetgate.rollout.canary import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_BASELINE_CV,
    DEFAULT_TOLERANCE,
    CanarySection,
    judge_canary,
    judge_self,
)

CASES: dict[str, float] = {"no change": 1.0, "2% slower": 0.98, "10% slower": 0.90,
                           "3x slower": 1 / 3}
# (label, canary samples, baseline samples, self mode)
SIZES: list[tuple[str, int, int, bool]] = [("5/10", 5, 10, False), ("10/20", 10, 20, False),
                                           ("self 5/5", 5, 5, True), ("self 10/10", 10, 10, True)]
REPEATS_PER_HOST = 5
MEAN_GFLOPS = 140.0


def lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray[Any, Any]:
    if cv == 0:
        return np.full(n, mean)
    sigma = math.sqrt(math.log1p(cv * cv))
    return mean * np.exp(sigma * rng.standard_normal(n) - sigma * sigma / 2)


def host_samples(rng: np.random.Generator, mean: float, cv: float, host_cv: float,
                 n: int) -> np.ndarray[Any, Any]:
    """n repeats spread over ceil(n / 5) hosts, each with its own offset."""
    hosts = math.ceil(n / REPEATS_PER_HOST)
    offsets = lognormal(rng, 1.0, host_cv, hosts)
    per_host = [lognormal(rng, mean * offsets[h], cv, REPEATS_PER_HOST) for h in range(hosts)]
    return np.concatenate(per_host)[:n]


def run_cell(section: CanarySection, cv: float, host_cv: float, size: tuple[str, int, int, bool],
             factor: float, trials: int, seed: int) -> Counter[str]:
    _, n_can, n_base, self_mode = size
    rng = np.random.default_rng(seed)
    outcomes: Counter[str] = Counter()
    for _ in range(trials):
        if self_mode:
            # One host: its offset cancels between before and after.
            before = lognormal(rng, MEAN_GFLOPS, cv, n_base)
            after = lognormal(rng, MEAN_GFLOPS * factor, cv, n_can)
            verdict = judge_self(section, {"gemm_gflops": before}, {"gemm_gflops": after})
        else:
            base = host_samples(rng, MEAN_GFLOPS, cv, host_cv, n_base)
            canary = host_samples(rng, MEAN_GFLOPS * factor, cv, host_cv, n_can)
            verdict = judge_canary(section, {"gemm_gflops": base}, {"gemm_gflops": canary})
        outcomes[verdict.outcome] += 1
    return outcomes


def aim(case: str, rates: dict[str, float]) -> tuple[str, bool | None]:
    """The figure that matters for the case, and whether its aim is met (None: no aim)."""
    if case == "no change":
        halts = rates["fail"] + rates["inconclusive"]
        return f"false halt {halts:.1f}% (false fail {rates['fail']:.1f}%)", halts <= 1.0
    if case == "2% slower":
        return f"pass {rates['pass']:.1f}%", None
    if case == "10% slower":
        return (f"detect {rates['fail']:.1f}% (silent pass {rates['pass']:.1f}%)",
                rates["fail"] >= 99.0)
    return f"fail {rates['fail']:.1f}%", rates["fail"] == 100.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--cv", type=float, nargs="+", default=[0.03, 0.10, 0.20])
    ap.add_argument("--host-cv", type=float, default=0.0)
    ap.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    ap.add_argument("--max-baseline-cv", type=float, default=DEFAULT_MAX_BASELINE_CV)
    ap.add_argument("--seed", type=int, default=20240)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)

    section = CanarySection.model_validate({
        "metrics": [{"name": "gemm_gflops", "direction": "higher", "critical": True,
                     "tolerance": args.tolerance}],
        "alpha": args.alpha, "max_baseline_cv": args.max_baseline_cv})
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for ci, cv in enumerate(args.cv):
        for si, size in enumerate(SIZES):
            for ki, (case, factor) in enumerate(CASES.items()):
                seed = args.seed + 1000 * ci + 100 * si + ki
                counts = run_cell(section, cv, args.host_cv, size, factor, args.trials, seed)
                rates = {k: 100 * counts[k] / args.trials
                         for k in ("pass", "fail", "inconclusive")}
                summary, met = aim(case, rates)
                rows.append({"cv": cv, "size": size[0], "case": case, **rates,
                             "summary": summary, "aim_met": met})
    elapsed = time.perf_counter() - t0
    settings = {"tolerance": args.tolerance, "alpha": args.alpha,
                "max_baseline_cv": args.max_baseline_cv, "min_samples": section.min_samples,
                "host_cv": args.host_cv, "trials": args.trials, "seed": args.seed,
                "noise": "lognormal", "elapsed_s": round(elapsed, 1)}
    if args.json:
        json.dump({"settings": settings, "rows": rows}, sys.stdout, indent=2)
        print()
        return 0

    from rich.console import Console
    from rich.table import Table

    table = Table(title=(f"canary judge quality: {args.trials} trials/cell, tolerance "
                         f"{args.tolerance:g}, alpha {args.alpha:g}, max_baseline_cv "
                         f"{args.max_baseline_cv:g}, host CV {args.host_cv:g}"))
    for col in ("noise CV", "canary/base", "case", "pass %", "fail %", "inconcl. %", "figure",
                "aim"):
        table.add_column(col, justify="right" if col.endswith("%") else "left")
    last_cv = None
    for r in rows:
        if last_cv is not None and r["cv"] != last_cv:
            table.add_section()
        last_cv = r["cv"]
        mark = {True: "met", False: "NOT met", None: "-"}[r["aim_met"]]
        table.add_row(f"{r['cv']:g}", r["size"], r["case"], f"{r['pass']:.1f}",
                      f"{r['fail']:.1f}", f"{r['inconclusive']:.1f}", r["summary"], mark)
    console = Console(width=140)
    console.print(table)
    console.print(f"{len(rows) * args.trials} judgements in {elapsed:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
