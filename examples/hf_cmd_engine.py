#!/usr/bin/env python3
"""A ``cmd`` engine over Hugging Face transformers: the embedded model in PyTorch, behind the ``cmd`` protocol.

The second reference engine of the protocol (the first, ``llamacpp_cmd_engine.py``,
is llama.cpp): the embedded SmolLM2-135M model, de-quantised to float32 once
into logitlab's cache (the ``hf`` engine's folder), run by transformers::

    logitlab ab --engine 'cmd:python examples/hf_cmd_engine.py --tokens {tokens}
                 --logits {logits} --n-prompt {n_prompt} --n-decode {n_decode}'
                --candidate-env HF_CMD_DTYPE=bfloat16

What it does, in protocol terms: reads the token ids from ``--tokens``;
prefills the first ``--n-prompt`` in one forward; decodes ``--n-decode`` steps
one token at a time with the KV cache (the file's next id where it has one, else
the argmax of the last row, lowest id on ties); writes one float32 row of logits
per position to ``--logits`` (``.npy``, ``.safetensors`` or raw float32);
prints ``prefill_seconds=… decode_seconds=…`` on stderr.

Environment knobs, read at start-up:

``HF_CMD_DTYPE=NAME``     weights and activations: ``float32`` (default), ``bfloat16``
                          or ``float16``; logits are written as float32.
``HF_CMD_ATTN=NAME``      attention implementation: ``sdpa`` (default) or ``eager``.
``HF_CMD_THREADS=N``      torch intra-op threads (default: half the CPUs, at least 1,
                          as the ``hf`` engine).
``HF_CMD_PERTURB``, ``HF_CMD_PLANT``  faults planted after the run (``cmd_faults.py``).

Exit status 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import inspect
import os
import sys
import time

import numpy as np
import cmd_protocol as protocol  # this folder (a script's own folder is on sys.path)

DTYPES = ("float32", "bfloat16", "float16")
ATTNS = ("sdpa", "eager")


def _cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def main(argv: list[str] | None = None) -> int:
    parser = protocol.parser(__doc__.split("\n\n")[0], "tokens prefilled in one forward (default: all)")
    args = parser.parse_args(argv)
    return protocol.serve(lambda: run(args))


def run(args) -> int:
    tokens, n_prompt, n_decode = protocol.read_workload(args, "HF_CMD_")
    dtype = protocol.env_choice("HF_CMD_DTYPE", "float32", DTYPES)
    attn = protocol.env_choice("HF_CMD_ATTN", "sdpa", ATTNS)
    threads = protocol.env_int("HF_CMD_THREADS", max(1, (os.cpu_count() or 2) // 2))
    if threads < 1:
        raise protocol.ProtocolError(f"HF_CMD_THREADS={threads} is not a positive integer")

    import torch
    import transformers

    from logitlab.engines.hf import dequantised_folder
    from logitlab.models import default_model_path

    torch.set_num_threads(threads)
    folder, _ = dequantised_folder(default_model_path())
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), local_files_only=True, dtype=getattr(torch, dtype), attn_implementation=attn).eval()
    # the KV cache's keyword: ``cache`` in newer transformers, ``past_key_values`` before
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    rows = []
    fed = []
    with torch.inference_mode():
        start = time.perf_counter()
        out = model(input_ids=torch.tensor([tokens[:n_prompt]]), use_cache=True)
        rows.append(out.logits[0].float().numpy())
        prefill_seconds = time.perf_counter() - start
        cache = _cache(out)
        start = time.perf_counter()
        for step in range(n_decode):
            index = n_prompt + step
            token = tokens[index] if index < len(tokens) else int(np.argmax(rows[-1][-1]))
            out = model(input_ids=torch.tensor([[token]]), use_cache=True, **{key: cache})
            cache = _cache(out)
            rows.append(out.logits[0].float().numpy())
            fed.append(token)
        decode_seconds = time.perf_counter() - start

    logits = np.concatenate(rows).astype(np.float32)
    protocol.finish(args, logits, fed, prefill_seconds, decode_seconds, "HF_CMD_")
    return 0


if __name__ == "__main__":
    sys.exit(main())
