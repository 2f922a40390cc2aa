"""A long run's file written again by the next run (engines/run_files.py) against a new file per run.

Run:  PYTHONPATH=src python benchmarks/bench_run_files.py [--positions 2016 8208] [--rounds 5]
                                                          [--engine-positions 2016] [--engine-rounds 4]

Two parts, each side by side in one process, the two ways alternating (ABBA):

- **the file alone**, for a float32 run of ``--positions`` × 49,152: a second process writes the run into a new
  ``/dev/shm`` file that this process maps, and the array is then dropped (what a supervised run cost before: its
  pages faulted in, zeroed and freed), against the same process writing into the kept file through
  ``/proc/<pid>/fd/<fd>`` (``MAP_POPULATE``); median seconds of ``--rounds`` and the ratio new / kept;
- **the engine**: the llamacpp engine in its supervised worker (what ``ab`` runs), the embedded model, a prompt of
  ``--engine-positions`` - 16 tokens + 16 replayed decode tokens, each run's wall time (the call, and dropping the
  array) with run files kept (the default) and with :meth:`RunFiles.take` turned off: the median of each, their
  ratio's geometric mean with a 95 % Student t interval over ``--engine-rounds`` ABBA rounds, and the engine's own
  steps (prefill + decode seconds) of each.

Reference: a new file per run (before). The numbers depend on a quiet machine: run nothing beside it.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from logitlab.engines import run_files  # noqa: E402

VOCAB = 49152
_WRITER = """
import mmap, os, sys, numpy as np
path, n, fresh = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "new"
if fresh:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600); os.ftruncate(fd, n)
    m = mmap.mmap(fd, n)
else:
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
os.close(fd)
rows = np.full(n // 4, 1.5, dtype=np.float32)
for line in sys.stdin:
    np.frombuffer(m, dtype=np.float32)[:] = rows
    print("done", flush=True)
"""


def file_alone(positions: int, rounds: int) -> None:
    n = positions * VOCAB * 4
    where = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    folder = Path(tempfile.mkdtemp(dir=where))
    files = run_files.RunFiles()
    first = folder / "run-0.f32"
    np.zeros(n // 4, dtype=np.float32).tofile(first)
    kept_array = files.keep(first, (positions, VOCAB))
    del kept_array
    gc.collect()
    kept = files.take(n)

    def new() -> float:
        path = folder / "run-new.f32"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _WRITER, str(path), str(n), "new"], input="go\n", text=True,
                       check=True, capture_output=True)
        a = files.keep(path, (positions, VOCAB))
        del a
        gc.collect()
        return time.perf_counter() - start

    def reused() -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _WRITER, kept.proc_path, str(n), "kept"], input="go\n", text=True,
                       check=True, capture_output=True)
        a = kept.array((positions, VOCAB))
        del a
        gc.collect()
        kept.taken = True  # hold it for the next round (the kept way's file)
        return time.perf_counter() - start

    # the writer's start-up (an interpreter, numpy, its rows) is in both: measured apart and taken off
    t_new, t_kept, t_start = [], [], []
    for r in range(rounds):
        s = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mmap, os, sys, numpy as np; np.full(" + str(n // 4) +
                        ", 1.5, dtype=np.float32)"], check=True)
        t_start.append(time.perf_counter() - s)
        order = (new, reused) if r % 2 == 0 else (reused, new)
        for fn in order:
            (t_new if fn is new else t_kept).append(fn())
    start = statistics.median(t_start)
    a, b = statistics.median(t_new) - start, statistics.median(t_kept) - start
    print(f"file alone  {positions:6d} x {VOCAB} ({n / 1e9:.2f} GB): new file {a:.3f} s, kept file {b:.3f} s "
          f"(each less the writer's start and its own rows, {start:.3f} s), new / kept {a / b:.1f}", flush=True)
    files.put_back(kept)
    files.release()
    os.rmdir(folder)


def engine(positions: int, rounds: int) -> None:
    from logitlab.engines.supervised import load_supervised
    from logitlab.engines.variant import Variant
    from logitlab.experiments.prompts import DEFAULT_PROMPT

    n_decode = 16
    n_ctx = -(-(positions + 64) // 256) * 256
    worker = load_supervised(Variant("control", "llamacpp", options={"n_ctx": str(n_ctx)}))
    try:
        ids = worker.tokenize(" ".join([DEFAULT_PROMPT] * (positions // 40 + 2)))[:positions - n_decode]
        replay = [int(t) for t in ids[:n_decode]]
        take = run_files.RUN_FILES.take

        def run(keep: bool) -> tuple[float, float]:
            run_files.RUN_FILES.take = take if keep else (lambda n_bytes: None)
            try:
                start = time.perf_counter()
                out = worker.run_workload(ids, n_decode, replay)
                steps = out.seconds("prefill") + out.seconds("decode")
                del out
                gc.collect()
                return time.perf_counter() - start, steps
            finally:
                run_files.RUN_FILES.take = take

        run(True), run(True)  # warm: the model's pages, a kept file
        walls = {True: [], False: []}
        steps = {True: [], False: []}
        ratios = []
        for r in range(rounds):
            got = {}
            for keep in ((True, False, False, True) if r % 2 == 0 else (False, True, True, False)):
                wall, step = run(keep)
                walls[keep].append(wall)
                steps[keep].append(step)
                got.setdefault(keep, []).append(wall)
            ratios.append(statistics.mean(got[False]) / statistics.mean(got[True]))
        logs = [math.log(x) for x in ratios]
        mean = statistics.mean(logs)
        half = 0.0
        if len(logs) > 1:
            from scipy import stats

            half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        print(f"engine      {positions:6d} positions, {rounds} ABBA rounds: run wall (call + drop) kept "
              f"{statistics.median(walls[True]):.3f} s, new file {statistics.median(walls[False]):.3f} s; new / kept "
              f"{math.exp(mean):.3f} (95% CI {math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}); engine steps "
              f"kept {statistics.median(steps[True]):.3f} s, new {statistics.median(steps[False]):.3f} s", flush=True)
    finally:
        worker.close(wait=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, nargs="*", default=[2016, 8208])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engine-positions", type=int, nargs="*", default=[2016])
    parser.add_argument("--engine-rounds", type=int, default=4)
    args = parser.parse_args()
    for n in args.positions:
        file_alone(n, args.rounds)
    for n in args.engine_positions:
        engine(n, args.engine_rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
