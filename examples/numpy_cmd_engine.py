#!/usr/bin/env python3
"""A tiny engine in pure numpy that speaks logitlab's ``cmd`` protocol (and has a benchmark mode).

Small and fast enough to build and run at every commit of a repository: the
end-to-end test of ``logitlab history`` and ``logitlab bisect`` keeps a copy of
it in a throw-away git repository and changes it commit by commit. The model
is a toy recurrent language model with fixed random weights (seed 0)::

    s_t = tanh(E[x_t] + s_{t-1} @ W)          state, (DIM,) float32
    h_t = s_t / sqrt(mean(s_t ** 2) + 1e-6)   RMS norm
    logits_t = h_t @ U                        (VOCAB,) float32

Prefill runs the recurrence over the prompt and computes the prompt's logits
in one matrix product; decode runs one token at a time (M=1), feeding the
next id of the tokens file (a replayed run) or the argmax of the last row,
lowest id on ties (the greedy reference run). Token ids are taken modulo
``VOCAB`` (logitlab tokenizes the prompt with the embedded model's GGUF
vocabulary: pass ``vocab=4096`` in the engine options).

Protocol use::

    logitlab ab --engine 'cmd:python examples/numpy_cmd_engine.py --tokens {tokens} --logits {logits}
                 --n-prompt {n_prompt} --n-decode {n_decode}?vocab=4096'

Benchmark mode (no files): ``--bench N`` decodes N tokens after a fixed
32-token prompt and prints ``prefill_seconds=… decode_seconds=…``, e.g. for
``logitlab bench run --metric 'decode_seconds=([0-9.e+-]+)' --lower-is-better``.

Two switches a commit can flip; each does what a real engine change does:

``NORM_FLOAT64``   accumulate the RMS norm's mean of squares in float64 (then
                   round to float32): different rounding, so the logits' bits
                   change; DIM extra float64 operations per token cost nothing
                   measurable.
``CHECK_FINITE``   a debug check left on: scan the output weights for NaN/Inf
                   before every decode step. Real work (VOCAB × DIM reads per
                   token), so decode gets slower; the logits are unchanged.

Timing (``prefill_seconds``/``decode_seconds`` on stderr) covers the model
work only, not Python's start-up or the weights' generation. BLAS runs one
thread unless the environment says otherwise.

Exit status 2 with one ``error:`` line on bad input.
"""

from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

VOCAB = 4096
DIM = 256
SEED = 0
NORM_FLOAT64 = False
CHECK_FINITE = False


class Model:
    """The toy model: weights from ``SEED``, a state carried from token to token."""

    def __init__(self) -> None:
        rng = np.random.default_rng(SEED)
        self.E = rng.standard_normal((VOCAB, DIM), dtype=np.float32)
        self.W = (rng.standard_normal((DIM, DIM), dtype=np.float32) / np.float32(np.sqrt(DIM))).astype(np.float32)
        self.U = rng.standard_normal((DIM, VOCAB), dtype=np.float32)
        self.state = np.zeros(DIM, dtype=np.float32)

    def _step(self, token: int) -> np.ndarray:
        self.state = np.tanh(self.E[token % VOCAB] + self.state @ self.W).astype(np.float32)
        return _norm(self.state)

    def prefill(self, tokens: list[int]) -> np.ndarray:
        """Logits of every prompt position, ``(len(tokens), VOCAB)`` float32."""
        hidden = np.stack([self._step(t) for t in tokens])
        return hidden @ self.U

    def decode(self, token: int) -> np.ndarray:
        """Logits of one more position, ``(VOCAB,)`` float32."""
        if CHECK_FINITE and not np.isfinite(self.U).all():
            raise FloatingPointError("output weights hold NaN/Inf")
        return self._step(token) @ self.U


def _norm(s: np.ndarray) -> np.ndarray:
    if NORM_FLOAT64:
        ms = np.float32(np.mean(s.astype(np.float64) ** 2))
    else:
        ms = np.mean(s * s, dtype=np.float32)
    return (s / np.sqrt(ms + np.float32(1e-6))).astype(np.float32)


def run(tokens: list[int], n_prompt: int, n_decode: int) -> tuple[np.ndarray, list[int], float, float]:
    """Prefill ``tokens[:n_prompt]``, decode ``n_decode`` steps: logits, fed ids, prefill s, decode s."""
    model = Model()
    start = time.perf_counter()
    rows = [model.prefill(tokens[:n_prompt])]
    prefill_seconds = time.perf_counter() - start
    fed: list[int] = []
    start = time.perf_counter()
    for step in range(n_decode):
        index = n_prompt + step
        token = tokens[index] if index < len(tokens) else int(np.argmax(rows[-1][-1]))
        fed.append(token)
        rows.append(model.decode(token)[None, :])
    decode_seconds = time.perf_counter() - start
    return np.concatenate(rows).astype(np.float32), fed, prefill_seconds, decode_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", help="input token ids, whitespace-separated")
    parser.add_argument("--logits", help="output: .npy, else raw little-endian float32")
    parser.add_argument("--n-prompt", type=int, default=None, help="tokens prefilled in one batch (default: all)")
    parser.add_argument("--n-decode", type=int, default=None,
                        help="M=1 decode steps after the prompt (default: the rest of the file)")
    parser.add_argument("--generated", default=None, help="output: the decode token ids fed, one per line")
    parser.add_argument("--bench", type=int, default=None, metavar="N",
                        help="benchmark: decode N tokens after a fixed 32-token prompt, write nothing")
    args = parser.parse_args(argv)

    if args.bench is not None:
        if args.bench < 1:
            print(f"error: --bench {args.bench}: decode at least 1 token", file=sys.stderr)
            return 2
        _, _, prefill_seconds, decode_seconds = run(list(range(1, 33)), 32, args.bench)
        print(f"prefill_seconds={prefill_seconds:.6f} decode_seconds={decode_seconds:.6f}")
        return 0
    if not args.tokens or not args.logits:
        print("error: give --tokens FILE and --logits FILE (or --bench N)", file=sys.stderr)
        return 2
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
    logits, fed, prefill_seconds, decode_seconds = run(tokens, n_prompt, n_decode)
    path = Path(args.logits)
    if path.suffix == ".npy":
        np.save(path, logits)
    else:
        logits.astype("<f4").tofile(path)
    if args.generated:
        Path(args.generated).write_text("".join(f"{t}\n" for t in fed))
    print(f"prefill_seconds={prefill_seconds:.6f} decode_seconds={decode_seconds:.6f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
