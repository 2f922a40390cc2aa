"""Benchmark: compare_logits vs one np.array_equal on (2048, 49152) float32 logits.

Run:  PYTHONPATH=src python benchmarks/bench_compare.py [--positions N] [--vocab V]
      [--repeats R] [--workers W] [--chunk-rows C]

Two arrays of realistic-looking logits (normal, std 3); the observed array is
the reference plus small noise on most entries, with 8 top-2 swaps
at near-tie positions (margin < 0.1).  Two kinds of noise are timed:

* ``ulp``: 90 % of entries moved by ±1..4 ULPs (the seed report's slot-order
  bias: last-ULP-scale deltas everywhere);
* ``abs``: Gaussian noise of std 0.02 logits on 90 % of entries (a kernel
  variant such as flash attention on/off: max |Δ| ~ 0.12).

Prints time of compare_logits (on one thread and on its default thread
count, or on --workers threads) and of np.array_equal (best of R), their ratio,
the peak memory compare_logits allocates above its two inputs (tracemalloc
sees numpy's allocations) relative to the inputs' size, and whether the
targets are met: compare <= 4x array_equal; inputs + peak extra <= 1.5x inputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numba
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from logitlab.numerics import classify, compare_logits  # noqa: E402

TIME_TARGET = 4.0
MEMORY_TARGET = 1.5


def make_pair(n: int, v: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ref = np.empty((n, v), np.float32)
    obs = np.empty((n, v), np.float32)
    step = 64
    for s in range(0, n, step):
        x = rng.standard_normal((min(step, n - s), v), dtype=np.float32) * 3
        ref[s:s + step] = x
        touched = rng.random(x.shape) < 0.9
        if kind == "ulp":  # move the magnitude by 1..4 ULPs, either way, keeping the sign
            bits = x.view(np.uint32)
            mag = (bits & 0x7FFFFFFF).astype(np.int64)
            ulps = rng.integers(1, 5, x.shape) * rng.choice(np.array([-1, 1]), x.shape)
            mag = np.clip(mag + np.where(touched, ulps, 0), 0, 0x7F7FFFFF)
            y = ((bits & 0x80000000) | mag.astype(np.uint32)).view(np.float32)
        else:
            y = x + np.where(touched, rng.standard_normal(x.shape, dtype=np.float32) * 0.02, 0)
        obs[s:s + step] = y
    # a few near-tie flips: swap the top two logits of 8 positions whose
    # reference top1-top2 margin is below 0.1
    top2 = np.sort(np.partition(ref, v - 2, axis=1)[:, -2:], axis=1)
    near = np.flatnonzero(top2[:, 1] - top2[:, 0] < 0.1)
    for r in rng.choice(near, size=min(8, near.size), replace=False):
        t = np.argsort(obs[r])[-2:]
        obs[r, t] = obs[r, t[::-1]]
    return ref, obs


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(kind: str, args) -> dict:
    ref, obs = make_pair(args.positions, args.vocab, kind)
    inputs = ref.nbytes + obs.nbytes
    thread_counts = [args.workers] if args.workers else [1, None]  # None: compare_logits' default
    result = compare_logits(ref, obs, chunk_rows=args.chunk_rows)  # warm-up (and the verdict shown)
    # Alternate the calls so that machine drift hits all alike; keep the best of each.
    t_eq = float("inf")
    t_cmp = {w: float("inf") for w in thread_counts}
    for _ in range(args.repeats):
        t_eq = min(t_eq, best_of(lambda: np.array_equal(ref, obs), 1))
        for w in thread_counts:
            t_cmp[w] = min(t_cmp[w], best_of(lambda: compare_logits(ref, obs, workers=w, chunk_rows=args.chunk_rows), 1))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    compare_logits(ref, obs, chunk_rows=args.chunk_rows)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    ratio_m = (inputs + peak) / inputs
    print(f"[{kind}] {args.positions} x {args.vocab} float32, inputs {inputs / 2**20:.0f} MiB, "
          f"verdict {classify(result).word}, differing rows {result.differing_rows}, "
          f"flips {len(result.flips)}")
    print(f"  np.array_equal        {t_eq * 1e3:9.1f} ms")
    for w, t in t_cmp.items():
        ratio_t = t / t_eq
        label = f"{w} thread{'s' if w != 1 else ''}" if w else f"default ({default_workers()})"
        verdict = "met" if ratio_t <= TIME_TARGET else "MISSED by %.2fx" % (ratio_t / TIME_TARGET)
        print(f"  compare_logits, {label:12s} {t * 1e3:7.1f} ms = {ratio_t:5.2f} x array_equal "
              f"(target <= {TIME_TARGET:g}x: {verdict})")
    print(f"  peak extra memory     {peak / 2**20:9.1f} MiB = {peak / inputs:6.2%} of inputs; "
          f"total {ratio_m:.3f} x inputs (target <= {MEMORY_TARGET:g}x: "
          f"{'met' if ratio_m <= MEMORY_TARGET else 'MISSED'})")
    return {"kind": kind, "t_eq": t_eq, "t_cmp": t_cmp, "peak": peak, "inputs": inputs}


def default_workers() -> int:
    return min(os.cpu_count() or 1, 8)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--positions", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--chunk-rows", type=int, default=None)
    p.add_argument("--kind", choices=["ulp", "abs", "both"], default="both")
    args = p.parse_args(argv)
    print(f"numpy {np.__version__}, numba {numba.__version__}, {os.cpu_count()} CPUs, "
          f"chunk_rows={args.chunk_rows or 'default'}, best of {args.repeats}")
    for kind in (["ulp", "abs"] if args.kind == "both" else [args.kind]):
        run(kind, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
