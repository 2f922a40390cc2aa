"""A run's SHA-256 fingerprint against its XXH3-128 key (``RunOutput.fingerprint`` vs ``RunOutput.bits_key``).

Run:  PYTHONPATH=src python benchmarks/bench_fingerprint.py [--positions 2016 8208] [--vocab 49152] [--rounds 7]

``ab`` fingerprints the reference and the first candidate run with SHA-256 (the result and the history keep those);
each later candidate run is told apart from the first by a key of its bits (``candidate_self_exact``), and
``invariance determinism`` groups its runs by that key. This prints, for a float32 run of each size, the median
seconds of both over ``--rounds`` interleaved rounds (in memory, then read from a spilled run's mapping, as ab's
reference is read), and the ratio SHA-256 / XXH3. Reference: SHA-256 (hashlib, SHA-NI where the CPU has it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import numpy as np  # noqa: E402

from logitlab.engines.workload import RunOutput  # noqa: E402
from logitlab.engines.spill import is_spilled, spill  # noqa: E402


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, nargs="+", default=[2016, 8208])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'positions':>9} {'GB':>6} {'where':>7} {'SHA-256 s':>10} {'XXH3 s':>8} {'ratio':>6}")
    for n in args.positions:
        logits = rng.standard_normal((n, args.vocab), dtype=np.float32)
        for where, array in (("memory", logits), ("spilled", spill(logits))):
            if where == "spilled" and not is_spilled(array):
                print(f"{n:>9} {'':>6} spilled: not on disk here (LOGITLAB_SPILL, a memory file system): skipped")
                continue
            run = RunOutput(array, [], [], [])
            assert run.fingerprint() and run.bits_key()  # warm: the pages in, xxhash imported
            sha, xxh = [], []
            for _ in range(args.rounds):
                sha.append(_seconds(run.fingerprint))
                xxh.append(_seconds(run.bits_key))
            s, x = statistics.median(sha), statistics.median(xxh)
            print(f"{n:>9} {array.nbytes / 1e9:>6.2f} {where:>7} {s:>10.3f} {x:>8.3f} {s / x:>6.1f}")
        del logits, array, run
    return 0


if __name__ == "__main__":
    sys.exit(main())
