"""An hf supervised worker forked from a fork server against a new process (``engines/forkserver.py``).

Run:  PYTHONPATH=src python benchmarks/bench_forkserver.py [--rounds 5] [--threads 1]

Each round loads the hf engine on the embedded model in a supervised worker both ways, in alternating order
(ABBA), and times the start: from ``load_supervised`` until the engine's tokenizer answers (the worker started,
PyTorch and transformers imported, the model loaded), then one short run, whose logits must be bit-identical
both ways. The server is started before the first round (its own start, once per process and environment, is
printed apart: the first worker of a server waits for it). Prints the median seconds of each, and the ratio
new process / forked. Reference: a new process per worker (``LOGITLAB_FORKSERVER=0``), as before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from logitlab.engines import forkserver  # noqa: E402
from logitlab.engines.supervised import load_supervised  # noqa: E402
from logitlab.engines.variant import Variant  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"


def start_and_run(variant: Variant, fork: bool) -> tuple[float, bytes, str]:
    """Seconds from load_supervised to the tokenizer's answer, the run's logits bytes, and the worker's kind."""
    os.environ["LOGITLAB_FORKSERVER"] = "1" if fork else "0"
    start = time.perf_counter()
    engine = load_supervised(variant)
    try:
        ids = engine.tokenize(PROMPT)
        seconds = time.perf_counter() - start
        return seconds, engine.run_workload(ids, 4).logits.tobytes(), type(engine._proc).__name__
    finally:
        engine.close(wait=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    variant = Variant("control", "hf", options={"threads": args.threads})
    first, reference, kind = start_and_run(variant, True)
    assert kind == "ForkedWorker", kind
    print(f"the server's first worker (its imports included): {first:.2f} s")
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for fork in ((True, False) if r % 2 == 0 else (False, True)):
            seconds, logits, kind = start_and_run(variant, fork)
            assert kind == ("ForkedWorker" if fork else "Popen"), kind
            assert logits == reference, "a worker's logits differ from the first worker's"
            times[fork].append(seconds)
    forked, fresh = statistics.median(times[True]), statistics.median(times[False])
    print(f"{'worker':>12} {'median s':>9}  (each of {args.rounds} rounds)")
    print(f"{'forked':>12} {forked:>9.2f}  " + " ".join(f"{t:.2f}" for t in times[True]))
    print(f"{'new process':>12} {fresh:>9.2f}  " + " ".join(f"{t:.2f}" for t in times[False]))
    print(f"new process / forked: {fresh / forked:.2f}x; every run's logits bit-identical")
    forkserver.close_servers()
    return 0


if __name__ == "__main__":
    sys.exit(main())
