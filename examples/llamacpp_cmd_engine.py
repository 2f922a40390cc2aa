#!/usr/bin/env python3
"""Reference implementation of logitlab's ``cmd`` engine protocol, over llama.cpp.

Serves the embedded SmolLM2-135M model (or ``--model``) through the protocol
an engine binary implements (see the README, "Bring your own engine")::

    logitlab ab --engine 'cmd:python examples/llamacpp_cmd_engine.py --tokens {tokens}
                 --logits {logits} --n-prompt {n_prompt} --n-decode {n_decode}'
                --candidate-env LLAMACPP_CMD_FLASH_ATTN=1

What it does, in protocol terms:

1. reads the token ids from ``--tokens`` (whitespace-separated integers);
2. prefills the first ``--n-prompt`` of them in one batch (default: all);
3. decodes ``--n-decode`` steps one token at a time (M=1): step i feeds the
   file's next id if it has one (a replayed run), else the argmax of the last
   row, lowest id on ties (the greedy reference run);
4. writes one float32 row of logits per position (n_prompt + n_decode rows)
   to ``--logits``: ``.npy``, ``.safetensors`` (tensor ``logits``) or, for any
   other suffix, raw little-endian float32;
5. optionally writes the decode ids it fed to ``--generated``;
6. prints ``prefill_seconds=… decode_seconds=…`` on stderr (model loading is
   not included), which logitlab's default timing pattern reads.

Environment knobs, read at start-up (as an engine binary's would be):

``LLAMACPP_CMD_FLASH_ATTN=1``   flash attention on: changes most logit rows.
``LLAMACPP_CMD_THREADS=N``      CPU threads (prefill and decode): changes speed,
                                not numerics (llama.cpp's CPU kernels give the
                                same bits for any thread count) — a knob that
                                does nothing to the logits.
``LLAMACPP_CMD_PERTURB=P:SIZE``  a deliberate fault for tests: every logit of
                                row P (after the run, so greedy choices are
                                unchanged) gets SIZE × a seeded standard normal,
                                like a kernel branch that is wrong at one position.
``LLAMACPP_CMD_PLANT=SHAPE:P:SIZE[:TOKEN]``  a fault of one of the detection-limit
                                shapes at row P, after the run (``cmd_faults.py``).
``LLAMACPP_CMD_KV=TYPE``         KV cache type for K and V (``q8_0``, ``q4_0``, …;
                                with flash attention, as llama.cpp needs).
``LLAMACPP_CMD_UBATCH=N``        ``n_batch`` = ``n_ubatch`` = N: the prompt in
                                forwards of N rows.

Exit status 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
from cmd_faults import FaultError, plant_faults  # this folder (a script's own folder is on sys.path)


def _env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"error: {name}={value!r} is not an integer")


def write_logits(path: Path, logits: np.ndarray) -> None:
    """Write ``(rows, vocab)`` float32 logits in the format the file suffix names."""
    logits = np.ascontiguousarray(logits, dtype="<f4")
    if path.suffix == ".npy":
        np.save(path, logits)
    elif path.suffix == ".safetensors":
        header = json.dumps({"logits": {"dtype": "F32", "shape": list(logits.shape),
                                        "data_offsets": [0, logits.nbytes]}}).encode()
        header += b" " * (-len(header) % 8)
        with path.open("wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + logits.tobytes())
    else:
        logits.tofile(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", required=True, help="input token ids, whitespace-separated")
    parser.add_argument("--logits", required=True, help="output: .npy, .safetensors or raw float32")
    parser.add_argument("--n-prompt", type=int, default=None, help="tokens prefilled in one batch (default: all)")
    parser.add_argument("--n-decode", type=int, default=None,
                        help="M=1 decode steps after the prompt (default: the rest of the file)")
    parser.add_argument("--generated", default=None, help="output: the decode token ids fed, one per line")
    parser.add_argument("--model", default=None, help="GGUF model (default: the embedded SmolLM2-135M)")
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

    import llama_cpp

    if args.model is None:
        from logitlab.models import default_model_path

        args.model = str(default_model_path())
    kwargs = {"flash_attn": os.environ.get("LLAMACPP_CMD_FLASH_ATTN", "0") not in ("", "0")}
    threads = _env_int("LLAMACPP_CMD_THREADS", None)
    if threads is not None:
        kwargs["n_threads"] = kwargs["n_threads_batch"] = threads
    ubatch = _env_int("LLAMACPP_CMD_UBATCH", None)
    if ubatch is not None:
        kwargs["n_batch"] = kwargs["n_ubatch"] = ubatch
    kv = os.environ.get("LLAMACPP_CMD_KV", "")
    if kv:
        from logitlab.engines.llamacpp import KV_TYPES

        if kv not in KV_TYPES:
            print(f"error: LLAMACPP_CMD_KV={kv!r} is not one of {', '.join(KV_TYPES)}", file=sys.stderr)
            return 2
        kwargs["type_k"] = kwargs["type_v"] = KV_TYPES[kv]
    n_ctx = max(512, n_prompt + n_decode)
    # the llamacpp engine's default weight repacking on this machine (off on AMX CPUs, where it crashes)
    from logitlab.engines import llamacpp_repack as repack

    with repack.loading(repack.default_choice().use_extra_bufts):
        llama = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, logits_all=True, verbose=False, **kwargs)

    start = time.perf_counter()
    llama.eval(tokens[:n_prompt])
    prefill_seconds = time.perf_counter() - start
    fed = []
    start = time.perf_counter()
    for step in range(n_decode):
        index = n_prompt + step
        token = tokens[index] if index < len(tokens) else int(np.argmax(llama.scores[llama.n_tokens - 1]))
        llama.eval([token])
        fed.append(token)
    decode_seconds = time.perf_counter() - start

    logits = np.array(llama.scores[: n_prompt + n_decode], dtype=np.float32)
    try:
        plant_faults(logits, dict(os.environ), "LLAMACPP_CMD_")
    except FaultError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_logits(Path(args.logits), logits)
    if args.generated:
        Path(args.generated).write_text("".join(f"{t}\n" for t in fed))
    print(f"prefill_seconds={prefill_seconds:.6f} decode_seconds={decode_seconds:.6f}", file=sys.stderr)
    llama.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
