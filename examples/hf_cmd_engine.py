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

import argparse
import inspect
import os
import sys
import time
from pathlib import Path

import numpy as np
from cmd_faults import FaultError, plant_faults  # this folder (a script's own folder is on sys.path)
from llamacpp_cmd_engine import write_logits

DTYPES = ("float32", "bfloat16", "float16")
ATTNS = ("sdpa", "eager")


def _choice(name: str, default: str, valid: tuple[str, ...]) -> str:
    """The knob's value; exit 2 with one ``error:`` line when it is not one of ``valid``."""
    value = os.environ.get(name) or default
    if value not in valid:
        print(f"error: {name}={value!r} is not one of {', '.join(valid)}", file=sys.stderr)
        sys.exit(2)
    return value


def _cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", required=True, help="input token ids, whitespace-separated")
    parser.add_argument("--logits", required=True, help="output: .npy, .safetensors or raw float32")
    parser.add_argument("--n-prompt", type=int, default=None, help="tokens prefilled in one forward (default: all)")
    parser.add_argument("--n-decode", type=int, default=None,
                        help="M=1 decode steps after the prompt (default: the rest of the file)")
    parser.add_argument("--generated", default=None, help="output: the decode token ids fed, one per line")
    args = parser.parse_args(argv)

    try:
        tokens = [int(t) for t in Path(args.tokens).read_text().split()]
    except (OSError, ValueError) as exc:
        print(f"error: cannot read token ids from {args.tokens}: {exc}", file=sys.stderr)
        return 2
    n_prompt = len(tokens) if args.n_prompt is None else args.n_prompt
    n_decode = len(tokens) - n_prompt if args.n_decode is None else args.n_decode
    if not 1 <= n_prompt <= len(tokens) or n_decode < 0 or len(tokens) > n_prompt + n_decode:
        print(f"error: {len(tokens)} tokens in {args.tokens} do not fit --n-prompt {n_prompt} "
              f"--n-decode {n_decode}", file=sys.stderr)
        return 2
    dtype = _choice("HF_CMD_DTYPE", "float32", DTYPES)
    attn = _choice("HF_CMD_ATTN", "sdpa", ATTNS)
    threads = os.environ.get("HF_CMD_THREADS") or str(max(1, (os.cpu_count() or 2) // 2))
    if not threads.isdigit() or int(threads) < 1:
        print(f"error: HF_CMD_THREADS={threads!r} is not a positive integer", file=sys.stderr)
        return 2

    import torch
    import transformers

    from logitlab.engines.hf import dequantised_folder
    from logitlab.models import default_model_path

    torch.set_num_threads(int(threads))
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
    try:
        plant_faults(logits, dict(os.environ), "HF_CMD_")
    except FaultError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_logits(Path(args.logits), logits)
    if args.generated:
        Path(args.generated).write_text("".join(f"{t}\n" for t in fed))
    print(f"prefill_seconds={prefill_seconds:.6f} decode_seconds={decode_seconds:.6f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
