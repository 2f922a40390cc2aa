"""Statistical validity of ``logitlab bench`` against the methods other tools use, side by side.

Simulated experiments with known truth (no effect on a drifting machine, no
effect with a first-slot penalty, real effects of 1 %, 3 %, 10 %). Each
experiment draws one machine (per-run noise 2 %, a machine state shared by
each group of 4 consecutive runs, sd 2 %, plus the scenario's drift or
penalty); logitlab runs the 40 runs as alternating ABBA/BAAB blocks, the
anchors see the same 40 runs as 20 control runs then 20 candidate runs
(AAAA…BBBB, a CI job's base-then-PR order):

- logitlab paired: ``paired_comparison`` call faster/slower (paired t over
  blocks, margin from the A/A slots);
- Mann-Whitney U, unpaired, alpha 0.05 (Google Benchmark ``compare.py``);
- Student t, pooled variance, alpha 0.05 (pyperf ``compare_to``);
- |mean change| >= 15 % (the seed report's CI table).

Printed: the false-positive rate (A/A rows: share of experiments flagging a
change) and the power (effect rows: share flagging the true direction).
Targets: logitlab's A/A false-positive rate <= 5 % (+ simulation error)
under drift and slot penalty; its power at 3 % >= the best anchor's.

    python benchmarks/bench_validity.py [--experiments 1000] [--blocks 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

from logitlab.perf.anchors import METHODS, VALIDITY_SCENARIOS, score_methods

SHORT = ("logitlab", "MWU gbench", "t pyperf", "15% CI")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000, help="simulated experiments per scenario")
    parser.add_argument("--blocks", type=int, default=10, help="ABBA/BAAB blocks (4 runs each) per experiment")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    n = args.experiments
    se = math.sqrt(0.05 * 0.95 / n)
    started = time.perf_counter()
    print(f"bench_validity: {n} experiments per row, {args.blocks} blocks = {4 * args.blocks} runs each, "
          f"noise 2%/run + 2%/group of 4, seed {args.seed}")
    print("rate = false-positive rate on A/A rows, power (right direction) on effect rows; "
          f"simulation SE at 5%: {100 * se:.1f} points\n")
    header = f"{'scenario':34s} {'rate':5s} " + " ".join(f"{s:>11s}" for s in SHORT)
    print(header)
    print("-" * len(header))
    results = {}
    for i, scenario in enumerate(VALIDITY_SCENARIOS):
        r = score_methods(scenario, n_experiments=n, n_blocks=args.blocks, seed=args.seed + i)
        results[scenario.label] = r
        key = "flag_rate" if scenario.is_null else "correct_rate"
        kind = "FPR" if scenario.is_null else "power"
        print(f"{scenario.label:34s} {kind:5s} " + " ".join(f"{100 * r[m][key]:10.1f}%" for m in METHODS))
    print()

    limit = 0.05 + 2 * se
    ok = True
    for label in ("A/A, linear drift +10%", "A/A, linear drift +30%", "A/A, first-slot penalty 5%"):
        fpr = results[label][METHODS[0]]["flag_rate"]
        met = fpr <= limit
        ok &= met
        print(f"target  logitlab FPR <= 5% (+2 SE = {100 * limit:.1f}%) under {label[5:]}: "
              f"{100 * fpr:.1f}% -> {'met' if met else 'MISSED'}")
    power = {m: results["real effect 3%"][m]["correct_rate"] for m in METHODS}
    best = max(METHODS[1:], key=lambda m: power[m])
    met = power[METHODS[0]] >= power[best]
    ok &= met
    print(f"target  logitlab power at 3% >= best anchor ({best}): {100 * power[METHODS[0]]:.1f}% vs "
          f"{100 * power[best]:.1f}% -> {'met' if met else 'MISSED'}")
    p1 = {m: results["real effect 1%"][m]["correct_rate"] for m in METHODS}
    best1 = max(METHODS[1:], key=lambda m: p1[m])
    if p1[best1] > p1[METHODS[0]]:
        print(f"note    at 1% {best1} flags more often ({100 * p1[best1]:.1f}% vs {100 * p1[METHODS[0]]:.1f}%), "
              f"but with its A/A false-positive rate of "
              f"{100 * results['A/A, no drift'][best1]['flag_rate']:.1f}% on the same machine: not a valid test")
    print(f"\n{'all targets met' if ok else 'TARGET MISSED'} ({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
