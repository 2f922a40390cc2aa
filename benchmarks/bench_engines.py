"""Decode tokens/s of llama.cpp and transformers side by side, and logitlab's overhead on each.

Same model (the embedded SmolLM2-135M Q4_1 GGUF; transformers runs it
de-quantised to float32), same machine, same thread count (llama-cpp-python's
default ``n_threads``, which logitlab's hf engine also uses), same prompt and
the same replayed decode tokens. For each engine, two loops alternate
(ABAB over ``--reps`` rounds), both M=1 decode after an untimed prefill:

- **bare**: the engine's own API — ``Llama.eval([token])``; a transformers
  forward with its KV cache, logits left as a tensor.
- **logitlab**: ``Session.decode([token])`` of logitlab's adapter, which also
  checks inputs, times the call and returns a fresh float32 copy of the row.

Each loop is timed end to end (wall clock around the whole decode loop); the
overhead is the median logitlab time over the median bare time, minus 1.

    python benchmarks/bench_engines.py [--tokens 32] [--reps 5] [--engines llamacpp,hf]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from logitlab.engines import engine_class  # noqa: E402
from logitlab.engines.workload import run_workload  # noqa: E402
from logitlab.experiments.prompts import DEFAULT_PROMPT  # noqa: E402


def bare_llamacpp(engine, prompt_ids, tokens) -> float:
    llama = engine.llama
    llama.reset()
    llama.eval(prompt_ids)
    start = time.perf_counter()
    for token in tokens:
        llama.eval([token])
    return time.perf_counter() - start


def bare_hf(engine, prompt_ids, tokens) -> float:
    torch = engine.torch
    with engine.threads(), torch.inference_mode():
        out = engine.forward(torch.tensor([prompt_ids]), use_cache=True)
        cache = engine.output_cache(out)
        start = time.perf_counter()
        for token in tokens:
            out = engine.forward(torch.tensor([[token]]), cache=cache, use_cache=True)
            cache = engine.output_cache(out)
        return time.perf_counter() - start


def via_logitlab(engine, prompt_ids, tokens) -> float:
    with engine.open_session() as session:
        session.prefill(prompt_ids)
        start = time.perf_counter()
        for token in tokens:
            session.decode([token])
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="decode steps per loop")
    parser.add_argument("--reps", type=int, default=5, help="ABAB rounds per engine")
    parser.add_argument("--engines", default="llamacpp,hf")
    args = parser.parse_args()
    bare = {"llamacpp": bare_llamacpp, "hf": bare_hf}
    if "hf" in args.engines:
        import torch  # noqa: F401  (imported here: the load column is the engine's load, not the import)
        import transformers  # noqa: F401
    rows = []
    tokens = None
    for name in args.engines.split(","):
        engine = engine_class(name)(model=None, options={})
        prompt_ids = engine.tokenize(DEFAULT_PROMPT)
        if tokens is None:  # the same replayed tokens on both engines: llama.cpp's... or hf's greedy ones
            tokens = run_workload(engine, prompt_ids, args.tokens).generated
        threads = engine.describe()["effective"].get("n_threads") or engine.describe()["effective"].get("threads")
        bare_loop, ours = bare[name], via_logitlab
        bare_loop(engine, prompt_ids, tokens[:4]), ours(engine, prompt_ids, tokens[:4])  # warm up
        b, o = [], []
        for _ in range(args.reps):
            b.append(bare_loop(engine, prompt_ids, tokens))
            o.append(ours(engine, prompt_ids, tokens))
            o.append(ours(engine, prompt_ids, tokens))
            b.append(bare_loop(engine, prompt_ids, tokens))
        mb, mo = statistics.median(b), statistics.median(o)
        rows.append((name, engine.describe()["engine_version"], threads, len(tokens) / mb, len(tokens) / mo,
                     100 * (mo / mb - 1), 1e6 * (mo - mb) / len(tokens), engine.load_seconds))
        engine.close()
    print(f"decode, M=1, {len(tokens)} replayed tokens after a {len(prompt_ids)}-token prompt, "
          f"median of {2 * args.reps} loops each, {os.cpu_count()} logical cores")
    print(f"{'engine':9} {'version':40} {'threads':>7} {'bare tok/s':>10} {'logitlab tok/s':>14} "
          f"{'overhead':>9} {'per token':>10} {'load s':>7}")
    for name, version, threads, tb, to, pct, us, load in rows:
        print(f"{name:9} {version:40} {threads!s:>7} {tb:10.1f} {to:14.1f} {pct:+8.2f}% {us:8.0f} µs {load:7.2f}")
    if len(rows) == 2:
        print(f"llama.cpp / hf decode speed (bare): {rows[0][3] / rows[1][3]:.2f}x")


if __name__ == "__main__":
    main()
