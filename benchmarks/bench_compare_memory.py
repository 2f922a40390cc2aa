"""Benchmark: compare_logits' memory on a ds4-sized pair, memory-mapped from disk.

Run:  PYTHONPATH=src python benchmarks/bench_compare_memory.py [--positions 8192] [--vocab 129280]
      [--dir /tmp] [--keep]

Writes two float32 ``.npy`` files of (positions, vocab) logits — by default
8192 x 129,280, the size of a DeepSeek-V4 (ds4) dump, 4.24 GB each — to
``--dir`` (after checking it has room), then runs ``compare_logits`` on them
memory-mapped (``np.load(mmap_mode="r")``) in a fresh process, sampling that
process's memory from ``/proc/self/status`` every 5 ms:

* ``RssAnon``: anonymous memory, i.e. what the process allocated (numpy and
  the numba kernel alike; tracemalloc would miss the kernel's);
* ``RssFile``: pages of the mapped inputs the kernel has touched (the page
  cache; reclaimable, and at most the inputs' size).

It prints the peak of the allocation above the baseline taken just before the
call (the kernel already loaded), relative to the inputs' size, and the
target: inputs + peak extra allocation <= 1.05 x inputs. The files are deleted
at the end unless ``--keep``. The observed array is the reference with 90 % of
entries moved by 1-4 ULPs (every row differs, so every row takes the full
kernel path), as in ``bench_compare.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
TARGET = 1.05

CHILD = r"""
import json, sys, threading, time
import numpy as np
sys.path.insert(0, sys.argv[3])
from logitlab.numerics import compare_logits

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) * 1024
    return out

ref = np.load(sys.argv[1], mmap_mode="r")
# Load (or compile) the kernel for read-only float32 arrays, as the mapped inputs are, on a slice of them:
# the baseline below then holds the compiled code, not the measurement.
compare_logits(ref[:2], np.load(sys.argv[2], mmap_mode="r")[:2])
obs = np.load(sys.argv[2], mmap_mode="r")
base = status()
peak = dict(base)
done = threading.Event()

def sample():
    while not done.is_set():
        s = status()
        for k, v in s.items():
            peak[k] = max(peak[k], v)
        time.sleep(0.005)

thread = threading.Thread(target=sample, daemon=True)
thread.start()
t0 = time.perf_counter()
result = compare_logits(ref, obs)
seconds = time.perf_counter() - t0
done.set(); thread.join()
s = status()
for k, v in s.items():
    peak[k] = max(peak[k], v)
print(json.dumps({"base": base, "peak": peak, "seconds": seconds, "differing_rows": result.differing_rows,
                  "n_positions": result.n_positions, "bit_exact": bool(result)}))
"""


def write_pair(folder: Path, n: int, v: int, seed: int = 0) -> tuple[Path, Path]:
    """Two .npy files written chunk by chunk (never the whole array in memory)."""
    rng = np.random.default_rng(seed)
    paths = folder / "reference.npy", folder / "observed.npy"
    ref = np.lib.format.open_memmap(paths[0], mode="w+", dtype=np.float32, shape=(n, v))
    obs = np.lib.format.open_memmap(paths[1], mode="w+", dtype=np.float32, shape=(n, v))
    step = 64
    for s in range(0, n, step):
        x = rng.standard_normal((min(step, n - s), v), dtype=np.float32) * 3
        ref[s:s + step] = x
        bits = x.view(np.uint32)
        mag = (bits & 0x7FFFFFFF).astype(np.int64)
        ulps = rng.integers(1, 5, x.shape) * rng.choice(np.array([-1, 1]), x.shape)
        mag = np.clip(mag + np.where(rng.random(x.shape) < 0.9, ulps, 0), 0, 0x7F7FFFFF)
        obs[s:s + step] = ((bits & 0x80000000) | mag.astype(np.uint32)).view(np.float32)
    ref.flush()
    obs.flush()
    del ref, obs
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--positions", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=129280)
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where the two input files go")
    p.add_argument("--keep", action="store_true", help="keep the input files")
    args = p.parse_args(argv)
    inputs = 2 * args.positions * args.vocab * 4
    free = shutil.disk_usage(args.dir).free
    if free < inputs * 1.1:
        print(f"error: {args.dir} has {free / 1e9:.1f} GB free; the inputs need {inputs / 1e9:.1f} GB: pass --dir",
              file=sys.stderr)
        return 2
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    folder = Path(tempfile.mkdtemp(prefix="logitlab-bench-memory-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        paths = write_pair(folder, args.positions, args.vocab)
        written = time.perf_counter() - t0
        proc = subprocess.run([sys.executable, "-c", CHILD, str(paths[0]), str(paths[1]), SRC],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        m = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    extra = m["peak"]["RssAnon"] - m["base"]["RssAnon"]
    ratio = (inputs + extra) / inputs
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs, 1-min load {load:.1f} at the start; inputs written in "
          f"{written:.0f} s to {args.dir}{' (kept: ' + str(folder) + ')' if args.keep else ''}")
    print(f"compare_logits on ({args.positions}, {args.vocab}) float32 x 2, memory-mapped: "
          f"inputs {inputs / 1e9:.2f} GB ({inputs / 2**30:.2f} GiB), {m['seconds']:.1f} s, "
          f"{m['differing_rows']}/{m['n_positions']} rows differ")
    print(f"  anonymous memory (allocations): baseline {m['base']['RssAnon'] / 2**20:.0f} MiB, peak "
          f"{m['peak']['RssAnon'] / 2**20:.0f} MiB: peak extra {extra / 2**20:.1f} MiB = {extra / inputs:.3%} of the "
          f"inputs")
    print(f"  mapped input pages resident (page cache) at the peak: {m['peak']['RssFile'] / 2**20:.0f} MiB; "
          f"process high-water RSS {m['peak']['VmHWM'] / 2**20:.0f} MiB")
    print(f"  inputs + peak extra allocation = {ratio:.4f} x inputs (target <= {TARGET:g}x: "
          f"{'met' if ratio <= TARGET else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
