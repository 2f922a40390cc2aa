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

Second part, optional stopping (``--repeats auto``, logitlab.perf.sequential),
on perf/simulate.py's machine (2 % noise per slot, 2 % per block, the
scenario's drift over the budget or first-slot penalty): the sequential design
(looks after every block from 3 to a budget of 12), the fixed design (10
blocks: its MDE at 80 % power is about 2 %) and the naive one ("peek": after
every block, stop at the first paired-t p < 0.05, same 12 looks). Printed: the
rate of each call and the blocks run (mean, 90th percentile). Targets: the
sequential A/A false-positive rate <= 5 % (peeking must show the inflation);
its power at the MDE >= the fixed design's (same power); on average >= 30 %
fewer blocks than the fixed design at twice the MDE; the A/A called
"equivalent" (not left inconclusive) in >= 80 % of runs with δ pre-registered at
3 % (1.5x the fixed design's MDE). The sequential design's δ is fixed before the
first look (logitlab.perf.prereg; default 2 %); a last table sets that beside δ
from the A/A of the blocks so far (the rule before issue 36): the A/A
"equivalent" rate, and at a true 2 % change the power and the share called
"equivalent" (the price of a wider δ).

    python benchmarks/bench_validity.py [--experiments 1000] [--blocks 10] [--seed 0]
                                        [--part all|anchors|sequential] [--budget 12]
"""

from __future__ import annotations

import argparse
import math
import time

from logitlab.perf.validity_sim import METHODS, VALIDITY_SCENARIOS, score_methods
from logitlab.perf.power import minimum_detectable_effect
from logitlab.perf.prereg import calibrated_margin
from logitlab.perf.simulate_sequential import simulate_sequential

SHORT = ("logitlab", "MWU gbench", "t pyperf", "15% CI")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000, help="simulated experiments per scenario")
    parser.add_argument("--blocks", type=int, default=10, help="ABBA/BAAB blocks (4 runs each) per experiment")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--part", choices=("all", "anchors", "sequential"), default="all")
    parser.add_argument("--budget", type=int, default=12, help="max blocks of the sequential design")
    args = parser.parse_args()
    ok = True
    if args.part in ("all", "anchors"):
        ok &= anchors_part(args)
    if args.part in ("all", "sequential"):
        ok &= sequential_part(args)
    return 0 if ok else 1


def anchors_part(args: argparse.Namespace) -> bool:
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
    return ok


#: Rows of the sequential part: label, true effect, simulate_blocks extras.
SEQ_NOISE = dict(noise_sd=0.02, block_sd=0.02)
SEQ_SCENARIOS = (
    ("A/A, no drift", 1.0, {}),
    ("A/A, linear drift +10%", 1.0, {"drift": 0.10}),
    ("A/A, linear drift +30%", 1.0, {"drift": 0.30}),
    ("A/A, first-slot penalty 5%", 1.0, {"first_slot_penalty": 0.05}),
    ("real effect 2%", 1.02, {}),
    ("real effect 3%", 1.03, {}),
    ("real effect 4%", 1.04, {}),
    ("real effect 5%", 1.05, {}),
    ("real effect 10%", 1.10, {}),
)


def sequential_part(args: argparse.Namespace) -> bool:
    n, budget, fixed_n = args.experiments, args.budget, args.blocks
    se = math.sqrt(0.05 * 0.95 / n)
    limit = 0.05 + 2 * se
    mde = minimum_detectable_effect(SEQ_NOISE["noise_sd"], fixed_n)
    started = time.perf_counter()
    print(f"\nbench_validity, optional stopping: {n} experiments per row; noise 2%/slot + 2%/block "
          f"(block log-ratio sd 2%); fixed design {fixed_n} blocks (MDE {100 * mde:.1f}% at 80% power); "
          f"auto = O'Brien-Fleming-type spending, looks after blocks 3..{budget}; peek = paired t after every "
          f"block from 3, stop at the first p < 0.05, budget {budget}; fixed and peek: margin from the A/A; auto: "
          f"margin pre-registered, 2% (the default)")
    print("rate = faster-or-slower share (FPR on A/A rows, power on effect rows); eq = 'equivalent' share; "
          "blocks = mean / 90th percentile blocks run\n")
    header = (f"{'scenario':28s} {'rate':5s} | {'fixed-' + str(fixed_n):>13s} | {'peek':>13s} {'blocks':>9s} | "
              f"{'auto':>13s} {'blocks':>9s}")
    print(header)
    print(f"{'':34s} | {'rate':>6s} {'eq':>6s} | {'rate':>6s} {'eq':>6s} {'mean/p90':>9s} | {'rate':>6s} {'eq':>6s} "
          f"{'mean/p90':>9s}")
    print("-" * len(header))
    res: dict[str, dict[str, dict]] = {}
    for i, (label, effect, extra) in enumerate(SEQ_SCENARIOS):
        row = {}
        for design, size in (("fixed", fixed_n), ("peek", budget), ("auto", budget)):
            row[design] = simulate_sequential(n, design=design, max_blocks=size, effect=effect,
                                              seed=args.seed + 100 + i, **SEQ_NOISE, **extra)
        res[label] = row
        kind = "FPR" if effect == 1.0 else "power"
        f, p, a = row["fixed"], row["peek"], row["auto"]
        print(f"{label:28s} {kind:5s} | {100 * f['flagged']:5.1f}% {100 * f['equivalent']:5.1f}% | "
              f"{100 * p['flagged']:5.1f}% {100 * p['equivalent']:5.1f}% {p['mean_blocks']:5.1f}/{p['p90_blocks']:<3.0f} | "
              f"{100 * a['flagged']:5.1f}% {100 * a['equivalent']:5.1f}% {a['mean_blocks']:5.1f}/{a['p90_blocks']:<3.0f}",
              flush=True)
    margins = margin_table(args, n, budget)
    pocock = {label: simulate_sequential(n, design="auto", max_blocks=budget, effect=effect, spending="pocock",
                                         seed=args.seed + 100 + i, **SEQ_NOISE, **extra)
              for i, (label, effect, extra) in enumerate(SEQ_SCENARIOS) if label in (
                  "A/A, no drift", "real effect 2%", "real effect 4%")}
    print("ablation, Pocock-type spending: " + "; ".join(
        f"{label}: rate {100 * r['flagged']:.1f}%, eq {100 * r['equivalent']:.1f}%, blocks {r['mean_blocks']:.1f}"
        for label, r in pocock.items()))
    print()

    ok = True
    for label, _, _ in SEQ_SCENARIOS[:4]:
        fpr = res[label]["auto"]["flagged"]
        met = fpr <= limit
        ok &= met
        print(f"target  auto FPR <= 5% (+2 SE = {100 * limit:.1f}%) under {label[5:]}: {100 * fpr:.1f}% "
              f"(peeking: {100 * res[label]['peek']['flagged']:.1f}%) -> {'met' if met else 'MISSED'}")
    peek = res["A/A, no drift"]["peek"]["flagged"]
    print(f"check   peeking inflates the FPR above 5% + 2 SE: {100 * peek:.1f}% -> "
          f"{'shown' if peek > limit else 'NOT SHOWN'}")
    p_auto, p_fixed = res["real effect 2%"]["auto"]["flagged"], res["real effect 2%"]["fixed"]["flagged"]
    met = p_auto >= p_fixed - 2 * math.sqrt(0.25 / n)
    ok &= met
    print(f"target  auto power at the MDE (2%) >= fixed-{fixed_n} (same power, within 2 SE): {100 * p_auto:.1f}% vs "
          f"{100 * p_fixed:.1f}% -> {'met' if met else 'MISSED'}")
    p3 = res["real effect 3%"]
    print(f"power   at 3%: auto {100 * p3['auto']['flagged']:.1f}%, fixed-{fixed_n} {100 * p3['fixed']['flagged']:.1f}%")
    two = res["real effect 4%"]["auto"]["mean_blocks"]
    met = two <= 0.7 * fixed_n
    ok &= met
    print(f"target  auto mean blocks at 2x MDE (4%) <= 70% of {fixed_n}: {two:.1f} ({100 * (1 - two / fixed_n):.0f}% "
          f"fewer) -> {'met' if met else 'MISSED'}")
    for label, (aa, _) in margins.items():
        eq = aa["equivalent"]
        met = eq >= 0.80
        if label == "pre-registered 3%":
            ok &= met
        print(f"{'target' if label == 'pre-registered 3%' else 'A/A eq'}  auto A/A called equivalent within the "
              f"budget >= 80% (δ {label}): {100 * eq:.1f}% (fixed-{fixed_n}, δ from its A/A: "
              f"{100 * res['A/A, no drift']['fixed']['equivalent']:.1f}%) -> {'met' if met else 'MISSED'}")
    print(f"\n{'all targets met' if ok else 'TARGET MISSED'} ({time.perf_counter() - started:.0f} s)")
    return ok


def margin_rules(budget: int) -> tuple[tuple[str, float | str | None], ...]:
    """The margins the last table compares: label -> simulate_sequential's margin."""
    cal = calibrated_margin(SEQ_NOISE["noise_sd"], 12, max_blocks=budget, file="simulated", basis="").margin
    return (("from the A/A (old rule)", "a/a"), ("pre-registered 2% (default)", None), ("pre-registered 3%", 0.03),
            (f"calibrated, --noise ({100 * cal:.1f}%)", cal), ("one block's noise, 1.96 sd (4.0%)", 0.0400))


def margin_table(args: argparse.Namespace, n: int, budget: int) -> dict[str, tuple[dict, dict]]:
    """Sequential A/A and 2 % runs under each δ rule; prints one row per rule, returns label -> (A/A, 2 %)."""
    print(f"\nδ fixed before the first look vs from the A/A of the blocks so far (auto, budget {budget}, "
          f"same noise, no drift; calibrated: prereg.calibrated_margin of a 12-block A/A at this 2% block sd)")
    print(f"{'δ':34s} | {'A/A rate':>8s} {'eq':>6s} {'blocks':>7s} | {'2% power':>8s} {'2% eq':>6s} {'blocks':>7s}")
    out = {}
    for label, margin in margin_rules(budget):
        aa = simulate_sequential(n, design="auto", max_blocks=budget, effect=1.0, margin=margin,
                                 seed=args.seed + 200, **SEQ_NOISE)
        two = simulate_sequential(n, design="auto", max_blocks=budget, effect=1.02, margin=margin,
                                  seed=args.seed + 300, **SEQ_NOISE)
        out[label] = (aa, two)
        print(f"{label:34s} | {100 * aa['flagged']:7.1f}% {100 * aa['equivalent']:5.1f}% {aa['mean_blocks']:7.1f} | "
              f"{100 * two['flagged']:7.1f}% {100 * two['equivalent']:5.1f}% {two['mean_blocks']:7.1f}", flush=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
