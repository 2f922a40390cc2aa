"""Harness overhead: ``logitlab ab`` vs a bare llama-cpp-python loop.

Both do the same work on the embedded model: load two engines (control and
candidate, here identical), then 2 warmup runs and 4 × REPEATS measured runs of
the same prompt and the same greedy token ids, one ``eval`` per decode token.
The bare loop only evaluates; ``ab`` also copies logits, compares every run
with the reference on the full vocabulary, logs JSONL and computes the paired
statistics. Timed end to end, the two alternated (ABBA) over several rounds.

Target: ab's wall time ≤ 1.05 × the bare loop's.

The supervisor (issue #29): ``ab`` runs in-process engines in a worker process
(:mod:`logitlab.engines.supervised`); the same ``ab`` with the engines loaded in
this process (``loader=load_engine``, what ab did before) is timed in the same
rounds. Target: supervised ≤ 1.02 × unsupervised.

    python benchmarks/bench_overhead.py [--rounds 3] [--repeats 3] [--tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import llama_cpp

from logitlab.engines import llamacpp_repack as repack
from logitlab.engines.variant import Variant
from logitlab.experiments.ab import AbConfig, run_ab
from logitlab.experiments.isolation import load_engine
from logitlab.experiments.prompts import DEFAULT_PROMPT
from logitlab.models import default_model_path


def bare_loop(prompt_ids: list[int], tokens: list[int], n_runs: int) -> float:
    start = time.perf_counter()
    # the engine's default weight repacking on this machine (off on AMX CPUs, where the repack path crashes)
    with repack.loading(repack.default_choice().use_extra_bufts):
        engines = [llama_cpp.Llama(model_path=str(default_model_path()), n_ctx=512, logits_all=True, verbose=False)
                   for _ in range(2)]
    for run in range(n_runs):
        llama = engines[run % 2]
        llama.reset()
        llama.eval(prompt_ids)
        for token in tokens:
            llama.eval([token])
    elapsed = time.perf_counter() - start
    for llama in engines:
        llama.close()
    return elapsed


def harness(config: AbConfig, log: Path, loader=None) -> tuple[float, list[int], list[int]]:
    start = time.perf_counter()
    result = run_ab(config, log_path=log, loader=loader)
    return time.perf_counter() - start, result.prompt_ids, result.generated_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    variant = Variant("control", "llamacpp")
    config = AbConfig(control=variant, candidate=Variant("candidate", "llamacpp"), prompt=DEFAULT_PROMPT,
                      n_decode=args.tokens, repeats=args.repeats, warmup=1)
    n_runs = 2 + 4 * args.repeats
    with tempfile.TemporaryDirectory() as folder:
        _, prompt_ids, tokens = harness(config, Path(folder) / "warm.jsonl")  # warm caches, get the token ids
        bare, ab, plain = [], [], []
        for round_ in range(args.rounds):
            bare.append(bare_loop(prompt_ids, tokens, n_runs))
            ab.append(harness(config, Path(folder) / f"r{round_}a.jsonl")[0])
            plain.append(harness(config, Path(folder) / f"r{round_}p.jsonl", load_engine)[0])
            plain.append(harness(config, Path(folder) / f"r{round_}q.jsonl", load_engine)[0])
            ab.append(harness(config, Path(folder) / f"r{round_}b.jsonl")[0])
            bare.append(bare_loop(prompt_ids, tokens, n_runs))
    # Each round is bare, ab, ab-unsupervised ×2, ab, bare: its ratios cancel a linear drift within the round.
    rounds = [(ab[2 * i] + ab[2 * i + 1]) / (bare[2 * i] + bare[2 * i + 1]) for i in range(args.rounds)]
    supervised = [(ab[2 * i] + ab[2 * i + 1]) / (plain[2 * i] + plain[2 * i + 1]) for i in range(args.rounds)]
    ratio = statistics.median(rounds)
    sup = statistics.median(supervised)
    print(f"workload: {n_runs} runs × ({len(prompt_ids)} prompt + {args.tokens} decode tokens), 2 engine loads")
    print(f"bare llama-cpp-python loop: median {statistics.median(bare):.3f} s  ({', '.join(f'{t:.3f}' for t in bare)})")
    print(f"logitlab ab (supervised)  : median {statistics.median(ab):.3f} s  ({', '.join(f'{t:.3f}' for t in ab)})")
    print(f"logitlab ab (in process)  : median {statistics.median(plain):.3f} s  "
          f"({', '.join(f'{t:.3f}' for t in plain)})")
    print(f"per-round ratios (ABBA rounds): {', '.join(f'{r:.4f}' for r in rounds)}")
    print(f"ratio ab / bare = {ratio:.4f} (median of rounds)  ({100 * (ratio - 1):+.2f} % extra wall time; target ≤ +5 %: "
          f"{'met' if ratio <= 1.05 else 'NOT met'})")
    print(f"per-round ratios supervised / in process: {', '.join(f'{r:.4f}' for r in supervised)}")
    print(f"ratio supervised / in process = {sup:.4f} (median of rounds)  ({100 * (sup - 1):+.2f} %; target ≤ +2 %: "
          f"{'met' if sup <= 1.02 else 'NOT met'})")


if __name__ == "__main__":
    main()
