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
``LLAMACPP_CMD_SLOWDOWN=F``      a slowdown of known size for the speed statistics:
                                after the prefill and after each decode step the
                                engine busy-waits F × that call's wall time, so each
                                phase takes (1 + F)× as long (F=0.03: 3 % slower),
                                logits unchanged.

Exit status 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import cmd_protocol as protocol  # this folder (a script's own folder is on sys.path)


def main(argv: list[str] | None = None) -> int:
    parser = protocol.parser(__doc__.split("\n\n")[0], "tokens prefilled in one batch (default: all)")
    parser.add_argument("--model", default=None, help="GGUF model (default: the embedded SmolLM2-135M)")
    args = parser.parse_args(argv)
    return protocol.serve(lambda: run(args))


def run(args) -> int:
    tokens, n_prompt, n_decode = protocol.read_workload(args, "LLAMACPP_CMD_")

    import llama_cpp

    if args.model is None:
        from logitlab.models import default_model_path

        args.model = str(default_model_path())
    kwargs = {"flash_attn": os.environ.get("LLAMACPP_CMD_FLASH_ATTN", "0") not in ("", "0")}
    slowdown = protocol.env_float("LLAMACPP_CMD_SLOWDOWN", 0.0)
    threads = protocol.env_int("LLAMACPP_CMD_THREADS", None)
    if threads is not None:
        kwargs["n_threads"] = kwargs["n_threads_batch"] = threads
    ubatch = protocol.env_int("LLAMACPP_CMD_UBATCH", None)
    if ubatch is not None:
        kwargs["n_batch"] = kwargs["n_ubatch"] = ubatch
    kv = os.environ.get("LLAMACPP_CMD_KV", "")
    if kv:
        from logitlab.engines.llamacpp import KV_TYPES

        kv = protocol.env_choice("LLAMACPP_CMD_KV", "", tuple(KV_TYPES))
        kwargs["type_k"] = kwargs["type_v"] = KV_TYPES[kv]
    n_ctx = max(512, n_prompt + n_decode)
    # the llamacpp engine's default weight repacking on this machine (off on AMX CPUs, where it crashes)
    from logitlab.engines import llamacpp_repack as repack

    with repack.loading(repack.default_choice().use_extra_bufts):
        llama = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, logits_all=True, verbose=False, **kwargs)

    start = time.perf_counter()
    slowed(lambda: llama.eval(tokens[:n_prompt]), slowdown)
    prefill_seconds = time.perf_counter() - start
    fed = []
    start = time.perf_counter()
    for step in range(n_decode):
        index = n_prompt + step
        token = tokens[index] if index < len(tokens) else int(np.argmax(llama.scores[llama.n_tokens - 1]))
        slowed(lambda: llama.eval([token]), slowdown)
        fed.append(token)
    decode_seconds = time.perf_counter() - start

    logits = np.array(llama.scores[: n_prompt + n_decode], dtype=np.float32)
    llama.close()
    protocol.finish(args, logits, fed, prefill_seconds, decode_seconds, "LLAMACPP_CMD_")
    return 0


def slowed(call, fraction: float) -> None:
    """Run ``call``, then busy-wait ``fraction`` × its wall time (a planted slowdown of known size)."""
    start = time.perf_counter()
    call()
    if fraction > 0:
        until = time.perf_counter() + fraction * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass


if __name__ == "__main__":
    sys.exit(main())
