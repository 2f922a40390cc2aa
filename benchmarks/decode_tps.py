"""Greedy decode speed of the embedded model: a tiny engine harness for ``logitlab bench run``.

Loads SmolLM2-135M-Instruct Q4_1 with llama-cpp-python, prefills a short
prompt, decodes ``--tokens`` tokens greedily one at a time, and prints
``tokens_per_second=<decode tokens / decode seconds>`` (the load and the
prefill are not timed).

    python benchmarks/decode_tps.py --threads 1 --tokens 16
    logitlab bench run --control 'python benchmarks/decode_tps.py --threads 1' \\
        --candidate 'python benchmarks/decode_tps.py --threads 2' \\
        --metric 'tokens_per_second=([0-9.]+)' --higher-is-better --unit tokens/s
"""

from __future__ import annotations

import argparse
import time

import llama_cpp
import numpy as np

from logitlab.engines import llamacpp_repack as repack
from logitlab.models import default_model_path

PROMPT = "The lighthouse keeper had kept a journal for thirty years. Every evening he wrote down"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="n_threads of llama.cpp")
    parser.add_argument("--tokens", type=int, default=16, help="greedy decode steps")
    args = parser.parse_args()
    # the engine's default weight repacking on this machine (off on AMX CPUs, where the repack path crashes)
    with repack.loading(repack.default_choice().use_extra_bufts):
        llama = llama_cpp.Llama(model_path=str(default_model_path()), n_threads=args.threads, n_ctx=256,
                                verbose=False)
    tokens = llama.tokenize(PROMPT.encode("utf-8"))
    llama.eval(tokens)
    start = time.perf_counter()
    for _ in range(args.tokens):
        next_token = int(np.argmax(llama.scores[llama.n_tokens - 1]))
        llama.eval([next_token])
    seconds = time.perf_counter() - start
    print(f"tokens_per_second={args.tokens / seconds:.3f}")


if __name__ == "__main__":
    main()
