"""Resolution of interleaved decode steps (issue #36 item 3): real A/As and a planted slowdown, quiet and loaded.

``ab`` times whole runs in ABBA/BAAB order; :mod:`logitlab.experiments.interleave` alternates the two arms'
decode steps (``chunk`` steps a turn) inside one block, timed by the worker's wall or CPU clock. This
benchmark runs it for real on the embedded model (llamacpp, both arms supervised: two engine objects loaded
for each run, as ``ab --isolation session`` does) and prints, per machine state and configuration
(``clock:chunk[:pin][:inproc][:renew|:respawn]``):

- the A/A runs: the block sd of the decode log ratio within runs (``sigma`` of
  ``logitlab.perf.between_run_variance``), the false calls (``faster`` or ``slower``) with their Clopper-Pearson
  95 % interval, the instance effect across runs (its ``tau``);
- the MDE at 80 % power of the blocks a run used and of the blocks that fit in ``--budget`` seconds of the
  runs' own pace (``perf.minimum_detectable_effect`` at the A/A block sd);
- the planted runs (the candidate busy-waits ``--plant`` × each step's own time: exactly (1 + plant)× slower
  in the run's clock): the share called ``slower``, with its interval, and the mean ratio;
- then, from each block's step times, the same figures for three block estimators (``ESTIMATORS``: the block's
  throughput ratio, and the median and the 20 % trimmed mean of the per-step log ratios), each run's call by a
  one-sample t interval over its blocks.

``:respawn`` loads a new pair of supervised engines (new worker processes) before every measured block, so an
offset of one pair of objects becomes block noise (with ``:pin`` the new workers start on this process's CPUs,
all but the last, and decode on the last); ``:renew`` re-creates both objects inside their workers
(:func:`logitlab.experiments.interleave.renew_engine`). ``--blocks 0`` runs blocks until ``--budget`` seconds
have passed since the warm-up block (the respawns included).

Machine states: ``quiet`` (nothing else should run) and ``load`` (``--load-factor`` × cores busy-loop
processes started by the benchmark and stopped at the end of the state). Runs are interleaved across
configurations and kinds; each run's record is appended to ``--out`` (JSON lines) as it ends.

    python benchmarks/bench_interleave.py --states load --configs cpu:1,wall:1 --runs 16 --blocks 4
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import trim_mean

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from logitlab.engines import engine_class  # noqa: E402
from logitlab.engines.supervised import call_engine, load_supervised  # noqa: E402
from logitlab.engines.variant import Variant  # noqa: E402
from logitlab.engines.workload import run_workload  # noqa: E402
from logitlab.experiments.interleave import interleaved_block, renew_engine, warm_engine  # noqa: E402
from logitlab.perf import between_run_variance, minimum_detectable_effect, paired_comparison  # noqa: E402
from logitlab.perf.design import PATTERNS  # noqa: E402
from logitlab.perf.equivalence import three_way_call  # noqa: E402
from logitlab.perf.power import detectable_log_change  # noqa: E402

# the same interval and the same bounded load as the whole-run benchmark beside this one
from bench_real_validity import _machine_state, clopper_pearson  # noqa: E402

PROMPT = "The lighthouse keeper had kept a journal for thirty years. Every evening he wrote down"


def one_run(clock: str, chunk: int, pin: bool, inproc: bool, plant: float, args: argparse.Namespace,
            index: int, renew: str = "") -> dict[str, Any]:
    """Load a control and a candidate (the same variant), warm up with one block, run ``--blocks`` blocks;
    where ``pin``, both arms decode on the last CPU and this process runs on the others (``inproc``: the engines
    are in this process, which then decodes on the last CPU). ``renew``: before every measured block, ``renew``
    re-creates both engine objects in their processes (:func:`renew_engine`, warmed with 8 steps), ``respawn``
    closes both and loads new ones (new worker processes, warmed the same way)."""
    start = time.perf_counter()
    if inproc:  # both engines in this process: one thread decodes both arms (no worker processes)
        control, candidate = (engine_class("llamacpp")(model=None, options={}) for _ in range(2))
    else:
        control = load_supervised(Variant("control", "llamacpp"))
        candidate = load_supervised(Variant("candidate", "llamacpp"))
    cpus = sorted(os.sched_getaffinity(0))
    try:
        if pin and not inproc:
            os.sched_setaffinity(0, cpus[:-1] or cpus)
        ids = control.tokenize(PROMPT)
        reference = run_workload(control, ids, args.tokens) if inproc else control.run_workload(ids, args.tokens)
        tokens = reference.generated
        pinned = cpus[-1:] if pin else None
        # one warm-up block, not analysed
        interleaved_block(control, candidate, ids, tokens, chunk=chunk, clock=clock, plant=plant, cpus=pinned)
        measured = time.perf_counter()
        blocks = []
        for b in itertools.count():
            # --blocks N: N blocks; --blocks 0: blocks until --budget seconds have passed since the warm-up (an even
            # number, at least 2: as many ABBA as BAAB blocks)
            if b >= args.blocks > 0 or (not args.blocks and b >= 2 and b % 2 == 0
                                        and time.perf_counter() - measured >= args.budget):
                break
            if renew == "respawn":
                control.close()
                candidate.close()
                control = load_supervised(Variant("control", "llamacpp"))
                candidate = load_supervised(Variant("candidate", "llamacpp"))
            for engine in (control, candidate) if renew else ():
                if renew == "respawn":  # new workers: loaded once, warmed
                    call_engine(engine, warm_engine, ids, 8, phase="warm-up")
                else:
                    call_engine(engine, renew_engine, ids, 8, phase="renew")
            blocks.append(interleaved_block(control, candidate, ids, tokens, pattern=PATTERNS[(b + index) % 2],
                                            chunk=chunk, clock=clock, plant=plant, cpus=pinned))
        block_seconds = (time.perf_counter() - measured) / len(blocks)
    finally:
        os.sched_setaffinity(0, cpus)
        control.close()
        candidate.close()
    comparison = paired_comparison([b.decode_block() for b in blocks], higher_is_better=True,
                                   metric="decode tokens/s", unit="tokens/s", margin=args.margin)
    return {"clock": clock, "chunk": chunk, "pin": pin, "inproc": inproc, "renew": renew, "plant": plant,
            "index": index,
            "call": comparison.call,
            "ratio": comparison.ratio, "ci": [comparison.ci_low, comparison.ci_high], "mde": comparison.mde,
            "log_ratios": comparison.block_log_ratios, "whole_log_ratios": [b.decode_log_ratio() for b in blocks],
            "realised_plant": float(np.mean([b.candidate_steps.sum() / b.candidate_engine_steps.sum() - 1
                                             for b in blocks])),
            "block_seconds": block_seconds, "seconds": time.perf_counter() - start,
            "steps": [[b.control_steps.tolist(), b.candidate_steps.tolist()] for b in blocks]}


def table(records: list[dict[str, Any]], budget: float) -> None:
    """Per state and configuration: the A/A runs' figures, the MDE at ``budget`` seconds of blocks at the runs'
    pace (``blocks``; ``+tau``: with the runs' instance effect, which more blocks do not shrink:
    ``expm1((t_.975 + t_.8) sqrt(tau^2 + sd^2 / blocks))``), and the planted runs' detection."""
    keys = dict.fromkeys((r["state"], _name(r)) for r in records)
    print(f"\n{'state':6} {'config':24} {'A/A runs':>8} {'block sd':>8} {'false calls [95% CI]':>24} {'tau (p)':>14} "
          f"{'MDE run':>8} {'s/block':>8} {'blocks':>6} {'MDE@' + format(budget, 'g') + 's':>9} {'+tau':>9} "
          f"{'planted':>8} "
          f"{'called slower [95% CI]':>24} {'mean ratio':>10}")
    for state, config in keys:
        rows = [r for r in records if (r["state"], _name(r)) == (state, config)]
        aa = [r for r in rows if r["plant"] == 0]
        planted = [r for r in rows if r["plant"] > 0]
        cells = [f"{state:6} {config:24} {len(aa):8d}"]
        if len(aa) >= 2:
            between = between_run_variance([r["log_ratios"] for r in aa])
            sd = between.within_sd  # a block's noise within a run: tau is added below, not twice
            false = sum(r["call"] in ("faster", "slower") for r in aa)
            lo, hi = clopper_pearson(false, len(aa))
            pace = float(np.mean([r["block_seconds"] for r in rows]))
            fit = max(2, int(budget // pace))
            mde_run = float(np.median([r["mde"] for r in aa if r["mde"] is not None]))
            mde_budget = minimum_detectable_effect(sd, fit)
            mde_tau = _mde_with_tau(sd, between.between_sd, fit)
            cells.append(f"{100 * sd:7.2f}% {false:3d}/{len(aa):<3d} {100 * false / len(aa):5.1f}% "
                         f"[{100 * lo:4.1f}-{100 * hi:4.1f}%] {100 * between.between_sd:5.2f}% "
                         f"({'-' if between.p_value is None else format(between.p_value, '.2f')}) "
                         f"{100 * mde_run:7.2f}% {pace:8.2f} {fit:6d} {100 * mde_budget:8.2f}% {100 * mde_tau:8.2f}%")
        else:
            cells.append(" " * 111)
        if planted:
            hits = sum(r["call"] == "slower" for r in planted)
            lo, hi = clopper_pearson(hits, len(planted))
            mean = math.exp(float(np.mean([math.log(r["ratio"]) for r in planted])))
            cells.append(f"{len(planted):8d} {hits:3d}/{len(planted):<3d} {100 * hits / len(planted):5.1f}% "
                         f"[{100 * lo:4.1f}-{100 * hi:4.1f}%] {mean:10.4f}")
        print(" ".join(cells))


#: Block estimators of the decode log ratio from the steps (a run's record keeps each block's step times): the
#: block's throughput ratio, and two robust ones over the per-step log ratios log(control / candidate) of the same
#: token at the same position (what a pre-empted step does to its pair is left out with the tail).
ESTIMATORS = {
    "sum": lambda a, b: math.log(a.sum() / b.sum()),
    "median": lambda a, b: float(np.median(np.log(a / b))),
    "trim20": lambda a, b: float(trim_mean(np.log(a / b), 0.2)),
}


def _mde_with_tau(sd: float, tau: float, blocks: int) -> float:
    """The MDE (80 % power, alpha 0.05) of ``blocks`` blocks of sd ``sd`` when the run also carries an offset of sd
    ``tau``, which more blocks do not shrink: ``expm1((t_.975 + t_.8) sqrt(tau^2 + sd^2 / blocks))``, df blocks - 1
    (:func:`logitlab.perf.power.detectable_log_change`)."""
    from scipy import stats

    critical = float(stats.t.ppf(0.975, blocks - 1))
    return math.expm1(detectable_log_change(critical, math.sqrt(tau ** 2 + sd ** 2 / blocks), blocks - 1, 0.8))


def estimator_table(records: list[dict[str, Any]], budget: float, margin: float) -> None:
    """Per state, configuration and block estimator (records with steps): the A/A block sd (within runs), the
    instance effect, the false calls (``faster`` or ``slower``: the call :func:`logitlab.perf.three_way_call` makes
    of a one-sample t interval over the run's block log ratios, df = blocks - 1, at equivalence margin ``margin``),
    the MDE at ``budget`` seconds (as :func:`table`) and the planted runs called ``slower``."""
    from scipy import stats

    with_steps = [r for r in records if r.get("steps")]
    if not with_steps:
        return
    print(f"\n{'state':6} {'config':24} {'estimator':9} {'block sd':>8} {'tau (p)':>14} {'false calls [95% CI]':>24} "
          f"{'blocks':>6} {'MDE@' + format(budget, 'g') + 's':>9} {'+tau':>7} {'called slower [95% CI]':>24} "
          f"{'mean ratio':>10}")

    def call(values: list[float]) -> str:
        v = np.asarray(values)
        half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
        return three_way_call(v.mean() - half, v.mean() + half, math.log1p(margin))

    for state, config in dict.fromkeys((r["state"], _name(r)) for r in with_steps):
        rows = [r for r in with_steps if (r["state"], _name(r)) == (state, config)]
        pace = float(np.mean([r["block_seconds"] for r in rows]))
        fit = max(2, int(budget // pace))
        for est, fn in ESTIMATORS.items():
            runs = {kind: [[fn(np.asarray(a), np.asarray(b)) for a, b in r["steps"]] for r in rows
                           if (r["plant"] > 0) == kind] for kind in (False, True)}
            cells = [f"{state:6} {config:24} {est:9}"]
            aa, planted = runs[False], runs[True]
            if len(aa) >= 2:
                between = between_run_variance(aa)
                sd = between.within_sd  # a block's noise within a run (tau apart)
                false = sum(call(v) in ("faster", "slower") for v in aa)
                lo, hi = clopper_pearson(false, len(aa))
                mde = minimum_detectable_effect(sd, fit)
                mde_tau = _mde_with_tau(sd, between.between_sd, fit)
                cells.append(f"{100 * sd:7.2f}% {100 * between.between_sd:5.2f}% "
                             f"({'-' if between.p_value is None else format(between.p_value, '.2f')}) "
                             f"{false:3d}/{len(aa):<3d} {100 * false / len(aa):5.1f}% "
                             f"[{100 * lo:4.1f}-{100 * hi:4.1f}%] "
                             f"{fit:6d} {100 * mde:8.2f}% {100 * mde_tau:6.2f}%")
            else:
                cells.append(" " * 70)
            if planted:
                hits = sum(call(v) == "slower" for v in planted)
                lo, hi = clopper_pearson(hits, len(planted))
                mean = math.exp(float(np.mean([np.mean(v) for v in planted])))
                cells.append(f"{hits:3d}/{len(planted):<3d} {100 * hits / len(planted):5.1f}% "
                             f"[{100 * lo:4.1f}-{100 * hi:4.1f}%] {mean:10.4f}")
            print(" ".join(cells))


def _name(r: dict[str, Any]) -> str:
    return (f"{r['clock']}:{r['chunk']}" + (":pin" if r.get("pin") else "")
            + (":inproc" if r.get("inproc") else "") + (f":{r['renew']}" if r.get("renew") else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", default="quiet,load", help="comma list of quiet, load")
    parser.add_argument("--configs", default="cpu:1:pin,wall:1:pin,wall:1,wall:32",
                        help="comma list of clock:chunk[:pin][:inproc][:renew|:respawn] (wall or cpu; "
                             "chunk = tokens/2 is the whole-run design; pin: both arms on the last CPU, this "
                             "process on the others; "
                             "inproc: both engines in this process, no workers; renew: both objects re-created in "
                             "their processes before each block; respawn: new worker processes before each block)")
    parser.add_argument("--runs", type=int, default=16, help="A/A runs (and as many planted runs) a configuration")
    parser.add_argument("--planted-runs", type=int, default=None, help="planted runs a configuration (default --runs)")
    parser.add_argument("--blocks", type=int, default=4,
                        help="measured blocks a run (after one warm-up block); 0: as many as --budget seconds take")
    parser.add_argument("--tokens", type=int, default=64, help="decode steps an arm runs per block")
    parser.add_argument("--plant", type=float, default=0.03, help="the candidate's planted slowdown (fraction)")
    parser.add_argument("--margin", type=float, default=0.02, help="equivalence margin δ of the calls")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of blocks for the projected MDE")
    parser.add_argument("--load-factor", type=float, default=2.0, help="busy processes per core in the load state")
    parser.add_argument("--load-seconds", type=float, default=4 * 3600,
                        help="the most seconds a busy process runs (it ends by itself then)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "interleave.jsonl")
    parser.add_argument("--table-only", action="store_true", help="print the table of --out and stop")
    args = parser.parse_args()
    configs = [(c.split(":")[0], int(c.split(":")[1]), ":pin" in c, ":inproc" in c,
                "respawn" if ":respawn" in c else "renew" if ":renew" in c else "") for c in args.configs.split(",")]
    if any(inproc and renew == "respawn" for *_, inproc, renew in configs):
        parser.error(":respawn loads new worker processes: it does not go with :inproc (use :renew)")
    if args.blocks == 1 or args.blocks < 0:
        parser.error("--blocks is 0 (as many as --budget seconds take) or at least 2")
    if args.table_only:
        records = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        table(records, args.budget)
        estimator_table(records, args.budget, args.margin)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    planted_runs = args.runs if args.planted_runs is None else args.planted_runs
    for state in args.states.split(","):
        with _machine_state(state, args):
            for index in range(max(args.runs, planted_runs)):
                for clock, chunk, pin, inproc, renew in configs:
                    for plant in ((0.0,) if index < args.runs else ()) + ((args.plant,) if index < planted_runs
                                                                          else ()):
                        record = {"state": state, **one_run(clock, chunk, pin, inproc, plant, args, index, renew)}
                        records.append(record)
                        with args.out.open("a") as f:
                            f.write(json.dumps(record) + "\n")
                        label = (f"{clock}:{chunk}" + (":pin" if pin else "") + (":inproc" if inproc else "")
                                 + (f":{renew}" if renew else ""))
                        print(f"{state} {label} plant {plant:g} run {index}: "
                              f"{record['call']} {record['ratio']:.4f} [{record['ci'][0]:.4f}-{record['ci'][1]:.4f}] "
                              f"{record['seconds']:.1f}s", flush=True)
    table(records, args.budget)
    estimator_table(records, args.budget, args.margin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
