"""Sequential runs on real A/As: how often ``ab --repeats auto`` ends "equivalent" with each pre-registered δ.

Issue #36 item 4: for a sequential run δ is fixed before the first look (``--margin``, else ``--noise``
calibration files, else 2 %). This benchmark measures, on the embedded model and this machine, what each
source of δ gives a real A/A:

1. ``--calibrations`` saved A/As (``logitlab ab --repeats CAL_REPEATS --json``): the ``--noise`` files;
2. ``--runs`` test A/As of ``--max-repeats`` blocks each (``logitlab ab --repeats MAX_REPEATS --json``);
3. each test A/A's decode block log ratios fed, block after block, to the rule ``ab --repeats auto`` runs
   after each block (:func:`logitlab.perf.sequential.sequential_step`, O'Brien-Fleming-type spending, looks
   from block 3) with δ from: the default (2 %); one calibration A/A (``--noise FILE``: test run ``j`` takes
   calibration ``j mod K``); all of them pooled (``--noise F1 --noise F2 ...``: the pooled block sd and the
   between-run sd ``tau``, :func:`logitlab.experiments.ab_calibration.ab_calibration`), the repeated CIs
   carrying ``tau`` as ``ab`` does with such a calibration, and (for comparison) not.

The rule reads nothing but the block log ratios in run order, so replaying it on the blocks of a fixed
12-block run gives the call and the blocks used that ``--repeats auto`` would have given on those blocks. The
share of test A/As ending "equivalent", "faster"/"slower" (false calls) and "inconclusive" is printed with
Clopper-Pearson 95 % intervals (``scipy.stats.binomtest``), with the mean blocks to a decision. ``--shift S``
adds ``log(1 / (1 + S))`` to every block's log ratio (a candidate exactly ``1 + S`` times slower on every
block, on the same real noise) and prints the share called "slower" with each δ.

Every ``ab`` result is kept in ``--out-dir`` (``cal<i>.json``, ``run<j>.json``); a rerun reuses what is
there (``--table-only``: runs nothing). Nothing else should run on the machine meanwhile.

    python benchmarks/bench_sequential_real.py [--calibrations 6] [--runs 20] [--tokens 32] [--cal-repeats 8]
        [--max-repeats 12] [--isolation session] [--shift 0.03] [--out-dir out/sequential_real] [--table-only]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_validity import clopper_pearson  # noqa: E402

from logitlab.experiments.ab_calibration import ab_calibration  # noqa: E402
from logitlab.perf.prereg import DEFAULT_SEQUENTIAL_MARGIN  # noqa: E402
from logitlab.perf.sequential import sequential_step  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("equivalent", "faster", "slower", "inconclusive")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrations", type=int, default=6, help="saved A/As for --noise")
    parser.add_argument("--runs", type=int, default=20, help="test A/As")
    parser.add_argument("--tokens", type=int, default=32, help="decode tokens a run")
    parser.add_argument("--cal-repeats", type=int, default=8, help="blocks of a calibration A/A")
    parser.add_argument("--max-repeats", type=int, default=12, help="budget of blocks of --repeats auto")
    parser.add_argument("--isolation", default="session", choices=("session", "engine", "process"))
    parser.add_argument("--shift", type=float, default=0.03, help="a slowdown added to the real blocks")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "out" / "sequential_real")
    parser.add_argument("--table-only", action="store_true", help="run nothing: the table of what --out-dir has")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    cals = [args.out_dir / f"cal{i}.json" for i in range(args.calibrations)]
    runs = [args.out_dir / f"run{j}.json" for j in range(args.runs)]
    if not args.table_only:
        todo = [(p, args.cal_repeats) for p in cals if not p.exists()] + \
               [(p, args.max_repeats) for p in runs if not p.exists()]
        for n, (path, repeats) in enumerate(todo, 1):
            start = time.perf_counter()
            _ab(path, repeats, args)
            print(f"[{n}/{len(todo)}] {path.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    cals = [p for p in cals if p.exists()]
    runs = [p for p in runs if p.exists()]
    if not cals or not runs:
        print(f"error: {args.out_dir} holds {len(cals)} calibration(s) and {len(runs)} test run(s)", file=sys.stderr)
        return 2
    _table(cals, runs, args)
    return 0


def _ab(path: Path, repeats: int, args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "logitlab", "ab", "--tokens", str(args.tokens), "--repeats", str(repeats),
           "--isolation", args.isolation, "--no-detection-limit", "--json", str(path), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not path.exists():
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")


def _decode(path: Path) -> dict:
    return json.loads(path.read_text())["speed"]["decode"]


def _replay(ratios: list[float], margin: float, budget: int, tau: float) -> tuple[str, int]:
    """The call and blocks used of ``--repeats auto`` on these blocks, in run order (CIs carrying ``tau``)."""
    for n in range(1, min(len(ratios), budget) + 1):
        decision = sequential_step(ratios[:n], margin=margin, max_blocks=budget, between_run_sd=tau)
        if decision.stop:
            return decision.call, n
    raise SystemExit(f"error: a test run has {len(ratios)} blocks, fewer than the budget {budget}")


def _table(cals: list[Path], runs: list[Path], args: argparse.Namespace) -> None:
    budget = args.max_repeats
    pooled = ab_calibration([str(p) for p in cals], budget)
    singles = [ab_calibration(str(p), budget) for p in cals]
    decodes = [_decode(p) for p in runs]
    blocks = [list(d["block_log_ratios"]) for d in decodes]
    sds = [d["sd_log_ratio"] for d in decodes]
    means = [d["mean_log_ratio"] for d in decodes]
    print(f"calibration: {len(cals)} A/As of {args.cal_repeats} blocks; one-A/A δ "
          f"{100 * min(s.margin for s in singles):.2f}-{100 * max(s.margin for s in singles):.2f} %; pooled: "
          f"δ {100 * pooled.margin:.2f} % ({pooled.basis})")
    print(f"test runs: {len(runs)} A/As of {budget} blocks, {args.tokens} tokens, {args.isolation} isolation; "
          f"block sd {100 * min(sds):.2f}-{100 * max(sds):.2f} % (median {100 * sorted(sds)[len(sds) // 2]:.2f} %); "
          f"run mean ratio sd {100 * statistics.stdev(means):.2f} %")
    tau = pooled.between_run_sd or 0.0
    rules = [("default (2 %)", [DEFAULT_SEQUENTIAL_MARGIN] * len(runs), 0.0),
             ("one calibration A/A", [singles[j % len(singles)].margin for j in range(len(runs))], 0.0),
             (f"{len(cals)} A/As pooled, CIs of the blocks only", [pooled.margin] * len(runs), 0.0),
             (f"{len(cals)} A/As pooled, CIs carry tau (ab's rule)", [pooled.margin] * len(runs), tau)]
    shift = -math.log1p(args.shift)
    print(f"\n| δ from | δ | A/A equivalent [95 % CI] | false calls [95 % CI] | inconclusive | blocks to a "
          f"decision (mean) | {100 * args.shift:g} % slower called slower [95 % CI] | its blocks (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, margins, carried in rules:
        aa = [_replay(r, m, budget, carried) for r, m in zip(blocks, margins)]
        slow = [_replay([x + shift for x in r], m, budget, carried) for r, m in zip(blocks, margins)]
        n = len(aa)
        equivalent = sum(c == "equivalent" for c, _ in aa)
        false = sum(c in ("faster", "slower") for c, _ in aa)
        inconclusive = sum(c == "inconclusive" for c, _ in aa)
        called = sum(c == "slower" for c, _ in slow)
        delta = (f"{100 * margins[0]:.2f} %" if len(set(margins)) == 1
                 else f"{100 * min(margins):.2f}-{100 * max(margins):.2f} %")
        print(f"| {name} | {delta} | {equivalent}/{n} {_ci(equivalent, n)} | {false}/{n} {_ci(false, n)} | "
              f"{inconclusive}/{n} | {sum(b for _, b in aa) / n:.1f} | {called}/{n} {_ci(called, n)} | "
              f"{sum(b for _, b in slow) / n:.1f} |")


def _ci(k: int, n: int) -> str:
    low, high = clopper_pearson(k, n)
    return f"[{100 * low:.0f}-{100 * high:.0f} %]"


if __name__ == "__main__":
    sys.exit(main())
