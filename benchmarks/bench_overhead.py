"""Harness overhead: ``logitlab ab`` vs a bare llama-cpp-python loop, and supervised vs in-process engines.

All three do the same work on the embedded model: load two engines (control and
candidate, here identical), then 2 warmup runs and 4 × REPEATS measured runs of
the same prompt and the same greedy token ids, one ``eval`` per decode token.
The bare loop only evaluates; ``ab`` also copies logits, compares every run
with the reference on the full vocabulary, logs JSONL and computes the paired
statistics.

Each measurement runs in a fresh Python process, as a user's ``logitlab ab``
does: logitlab's own modules (and its comparison kernel, compiled once) are
imported before the clock starts; the clock then runs from the call to its
return, so every variant pays the engine library's import and its engine loads
(the supervised ``ab`` pays them in its two worker processes, which load side by
side on the machine's two cores while the measuring process waits — that is how
the supervisor loads, so it is part of what it costs; the others load in the
measuring process, one after the other). The model's SHA-256 is on disk after the
first measurement (``models.file_sha256``), as it is after a user's first
command. The three alternate in ABBA rounds (bare, ab, in-process ab
×2, ab, bare), so a linear drift cancels within a round; the figures are the
median of the per-round ratios and a 95 % t interval of their geometric mean.

Targets:

- ab's wall time ≤ 1.05 × the bare loop's;
- the supervisor (issue #29: in-process engines run in a worker process,
  :mod:`logitlab.engines.supervised`) ≤ 1.02 × the same ``ab`` with the engines
  loaded in the measuring process (``loader=load_engine``, what ab did before).

Then, in one process, where the supervisor's cost lies: the wall time of one run
outside the engine's own timed steps, in process and supervised (8 alternating
pairs on two warm engines).

    python benchmarks/bench_overhead.py [--rounds 4] [--repeats 3] [--tokens 64]
    python benchmarks/bench_overhead.py --demo [--rounds 3]   # make demo's ab: supervised vs in process
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _config(args: argparse.Namespace):
    """The A/A workload; with ``--demo``, ``make demo``'s ``logitlab ab --candidate flash_attn=1`` (5 blocks)."""
    from logitlab.engines.variant import Variant
    from logitlab.experiments.ab import AbConfig
    from logitlab.experiments.prompts import DEFAULT_PROMPT

    candidate = Variant("candidate", "llamacpp", options={"flash_attn": "1"} if args.demo else {})
    return AbConfig(control=Variant("control", "llamacpp"), candidate=candidate, prompt=DEFAULT_PROMPT,
                    n_decode=args.tokens, repeats=5 if args.demo else args.repeats, warmup=1)


def _warm_logitlab() -> None:
    """Import what ``ab`` imports and compile the comparison kernel once, before the clock."""
    import numpy as np

    from logitlab.experiments.ab import run_ab  # noqa: F401
    from logitlab.numerics.compare import compare_logits

    a = np.zeros((2, 64), np.float32)
    compare_logits(a, a + np.float32(1e-3))


def bare_loop(prompt_ids: list[int], tokens: list[int], n_runs: int) -> float:
    start = time.perf_counter()
    import llama_cpp

    from logitlab.engines import llamacpp_repack as repack
    from logitlab.models import default_model_path

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


def one(mode: str, args: argparse.Namespace) -> dict:
    """One measurement in this (fresh) process: ``bare``, ``ab`` (supervised), ``plain`` (in process) or
    ``ids`` (a first ab whose prompt and greedy ids the bare loop replays)."""
    _warm_logitlab()
    if mode == "bare":
        ids = json.loads(Path(args.ids).read_text())
        return {"seconds": bare_loop(ids["prompt"], ids["tokens"], 2 + 4 * args.repeats)}
    from logitlab.experiments.ab import run_ab
    from logitlab.experiments.isolation import load_engine

    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        result = run_ab(_config(args), log_path=Path(folder) / "runs.jsonl",
                        loader=load_engine if mode == "plain" else None)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "prompt": result.prompt_ids, "tokens": result.generated_ids}


def per_run_cost(tokens: int, pairs: int = 8) -> tuple[float, float]:
    """Median seconds of one run outside the engine's timed steps: (in process, supervised)."""
    from logitlab.engines.supervised import load_supervised
    from logitlab.engines.variant import Variant
    from logitlab.engines.workload import run_workload
    from logitlab.experiments.isolation import load_engine
    from logitlab.experiments.prompts import DEFAULT_PROMPT

    variant = Variant("control", "llamacpp")
    plain, supervised = load_engine(variant), load_supervised(variant)
    try:
        prompt = plain.tokenize(DEFAULT_PROMPT)
        replay = run_workload(plain, prompt, tokens).generated
        supervised.run_workload(prompt, tokens, replay)
        outside: dict[str, list[float]] = {"plain": [], "supervised": []}
        for _ in range(pairs):
            for kind in ("plain", "supervised", "supervised", "plain"):
                start = time.perf_counter()
                out = (run_workload(plain, prompt, tokens, replay) if kind == "plain"
                       else supervised.run_workload(prompt, tokens, replay))
                outside[kind].append(time.perf_counter() - start - out.seconds("prefill") - out.seconds("decode"))
                del out
        return statistics.median(outside["plain"]), statistics.median(outside["supervised"])
    finally:
        plain.close()
        supervised.close(wait=True)


def demo(args: argparse.Namespace) -> None:
    """``make demo``'s ab, supervised vs in process, each in a fresh process, rounds of ab, in process ×2, ab."""
    times: dict[str, list[float]] = {"ab": [], "plain": []}
    with tempfile.TemporaryDirectory() as folder:
        _child("ab", args, Path(folder) / "unused.json")  # warms the caches
        for _ in range(args.rounds):
            for mode in ("ab", "plain", "plain", "ab"):
                times[mode].append(_child(mode, args, Path(folder) / "unused.json")["seconds"])
    ratios = [(times["ab"][2 * i] + times["ab"][2 * i + 1]) / (times["plain"][2 * i] + times["plain"][2 * i + 1])
              for i in range(args.rounds)]
    print(f"make demo's ab (candidate flash_attn=1, 5 blocks, {args.tokens} decode tokens); each in a fresh process")
    for mode, label in (("ab", "supervised"), ("plain", "in process")):
        print(f"{label:<10}: median {statistics.median(times[mode]):.3f} s  "
              f"({', '.join(f'{t:.3f}' for t in times[mode])})")
    sup = statistics.median(ratios)
    print(f"per-round ratios supervised / in process: {', '.join(f'{r:.4f}' for r in ratios)}")
    print(f"ratio supervised / in process = {sup:.4f} (median of rounds; {_interval(ratios)})  "
          f"({100 * (sup - 1):+.2f} %; target ≤ +2 %: {'met' if sup <= 1.02 else 'NOT met'})")


def _child(mode: str, args: argparse.Namespace, ids: Path) -> dict:
    command = [sys.executable, __file__, "--one", mode, "--ids", str(ids), "--repeats", str(args.repeats),
               "--tokens", str(args.tokens)] + (["--demo"] if args.demo else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: the {mode} measurement failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _interval(ratios: list[float]) -> str:
    """95 % t interval of the geometric mean of per-round ratios."""
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    if len(logs) < 2:
        return "n/a"
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return f"geometric mean {math.exp(mean):.4f}, 95 % CI {math.exp(mean - half):.4f}–{math.exp(mean + half):.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--demo", action="store_true",
                        help="time make demo's ab (candidate flash_attn=1, 5 blocks), supervised vs in process only")
    parser.add_argument("--one", choices=("bare", "ab", "plain", "ids"), help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args)))
        return
    if args.demo:
        demo(args)
        return
    n_runs = 2 + 4 * args.repeats
    with tempfile.TemporaryDirectory() as folder:
        ids = Path(folder) / "ids.json"
        first = _child("ids", args, ids)  # warms the caches, gives the token ids
        ids.write_text(json.dumps({"prompt": first["prompt"], "tokens": first["tokens"]}))
        times: dict[str, list[float]] = {"bare": [], "ab": [], "plain": []}
        for _ in range(args.rounds):
            for mode in ("bare", "ab", "plain", "plain", "ab", "bare"):
                times[mode].append(_child(mode, args, ids)["seconds"])
    pairs = {m: [t[2 * i] + t[2 * i + 1] for i in range(args.rounds)] for m, t in times.items()}
    rounds = [a / b for a, b in zip(pairs["ab"], pairs["bare"])]
    supervised = [a / p for a, p in zip(pairs["ab"], pairs["plain"])]
    ratio, sup = statistics.median(rounds), statistics.median(supervised)
    print(f"workload: {n_runs} runs × ({len(first['prompt'])} prompt + {args.tokens} decode tokens), 2 engine loads; "
          f"each measurement in a fresh process")
    for mode, label in (("bare", "bare llama-cpp-python loop"), ("ab", "logitlab ab (supervised)  "),
                        ("plain", "logitlab ab (in process)  ")):
        print(f"{label}: median {statistics.median(times[mode]):.3f} s  "
              f"({', '.join(f'{t:.3f}' for t in times[mode])})")
    print(f"per-round ratios ab / bare (ABBA rounds): {', '.join(f'{r:.4f}' for r in rounds)}")
    print(f"ratio ab / bare = {ratio:.4f} (median of rounds; {_interval(rounds)})  ({100 * (ratio - 1):+.2f} % extra "
          f"wall time; target ≤ +5 %: {'met' if ratio <= 1.05 else 'NOT met'})")
    print(f"per-round ratios supervised / in process: {', '.join(f'{r:.4f}' for r in supervised)}")
    print(f"ratio supervised / in process = {sup:.4f} (median of rounds; {_interval(supervised)})  "
          f"({100 * (sup - 1):+.2f} %; target ≤ +2 %: {'met' if sup <= 1.02 else 'NOT met'})")
    plain, super_ = per_run_cost(args.tokens)
    print(f"one run outside the engine's timed steps (median of 16 each, warm engines): in process "
          f"{plain * 1e3:.2f} ms, supervised {super_ * 1e3:.2f} ms ({(super_ - plain) * 1e3:+.2f} ms a run)")


if __name__ == "__main__":
    main()
