"""The engine contract for a whole run: prefill a prompt, then N decode steps.

The reference run decodes greedily (each next token is the argmax of the last
row); every other run *replays* those token ids, so all runs see identical
inputs and every position can be compared — even where a candidate's argmax
would have chosen another token. :class:`RunOutput` is what one run returns,
whether it went through sessions or through an engine's whole-run hook
(``cmd``, ``openai``).
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from logitlab.engines.base import Engine, StepTiming
from logitlab.engines.topk import TopKRows
from logitlab.errors import InputError


#: Bytes hashed at once by :meth:`RunOutput.fingerprint` and :meth:`RunOutput.bits_key` (the digest does not
#: depend on it).
_HASH_BYTES = 1 << 24


@dataclass
class RunOutput:
    """What one run of the workload produced.

    Attributes:
        logits: ``(n_prompt + n_decode, n_vocab)`` float32, one row per input position.
        input_ids: the token id fed at each position (prompt, then decode tokens).
        generated: the decode token ids (greedy for a reference run, replayed otherwise).
        timings: one entry per engine call (seconds of wall time around the call).
        topk: for engines that return only the top-k log-probabilities per
            position (``openai``): those, and ``logits`` is then empty,
            shape ``(n_positions, 0)``.
        scoring: how such an engine obtained ``topk`` (JSON-ready: its mode,
            requests, their time, the alignment check), for the report; None
            for engines that return logits.
    """

    logits: np.ndarray
    input_ids: list[int]
    generated: list[int]
    timings: list[StepTiming]
    topk: TopKRows | None = None
    scoring: dict[str, Any] | None = None

    def same_bits(self, other: "RunOutput") -> bool:
        """True iff both runs returned bit-identical logits (or top-k data)."""
        if (self.topk is None) != (other.topk is None):
            return False
        if self.topk is not None:
            return self.topk.same_bits(other.topk)
        return self.logits.shape == other.logits.shape and np.array_equal(
            self.logits.view(np.uint32), other.logits.view(np.uint32))

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the logits' bits and shape: equal iff :meth:`same_bits` (up to a hash collision).

        The numerics fingerprint of a result history: little-endian float32
        bytes of ``logits`` after a header naming the shape and dtype; for a
        top-k run, of its rows' ids and float64 bits instead.
        """
        return self._digest(hashlib.sha256())

    def bits_key(self) -> str:
        """A 128-bit key of the logits' dtype, shape and bits (or of the top-k data): equal iff :meth:`same_bits`
        (up to a hash collision, about 2**-64 for 2**32 runs), for telling apart the runs one process holds.

        XXH3-128 (the ``xxhash`` library): 0.022 s for a 2,016 × 49,152 float32 run on this project's 2-core AVX2
        machine, against 0.252 s for the SHA-256 of :meth:`fingerprint` (``benchmarks/bench_fingerprint.py``).
        Not a fingerprint to keep: a result file or history stores :meth:`fingerprint`, whose algorithm is fixed.
        """
        import xxhash

        return self._digest(xxhash.xxh3_128())

    def _digest(self, h: Any) -> str:
        """``h`` (a hashlib-style object) fed the top-k data, or a header naming the logits' dtype and shape and
        then their little-endian bytes, read in place; its hex digest (``topk-`` first for top-k data)."""
        if self.topk is not None:
            h.update(json.dumps(self.topk.to_dict(), sort_keys=True).encode())
            return "topk-" + h.hexdigest()
        logits = np.ascontiguousarray(self.logits, dtype=self.logits.dtype.newbyteorder("<"))
        h.update(f"{logits.dtype.str}{logits.shape}".encode())
        flat = logits.reshape(-1).view(np.uint8)
        for start in range(0, flat.size, _HASH_BYTES):  # the array's own bytes, read in place (no run-sized copy)
            h.update(flat[start:start + _HASH_BYTES])
        return h.hexdigest()

    def seconds(self, kind: str) -> float:
        return float(sum(t.seconds for t in self.timings if t.kind == kind))

    def n_tokens(self, kind: str) -> int:
        return int(sum(t.n_tokens for t in self.timings if t.kind == kind))

    def tokens_per_second(self, kind: str) -> float:
        seconds = self.seconds(kind)
        return self.n_tokens(kind) / seconds if seconds > 0 else float("nan")


def run_workload(
    engine: Engine,
    prompt_ids: Sequence[int],
    n_decode: int,
    replay: Sequence[int] | None = None,
    on_step: Callable[[str, int], None] | None = None,
    out: np.ndarray | None = None,
) -> RunOutput:
    """Prefill ``prompt_ids`` then decode ``n_decode`` tokens, one per call (M=1).

    With ``replay`` the decode tokens are those ids; without, greedy (argmax of
    the previous row). Only the engine calls are timed. An engine with the
    ``workload`` ability (one process or request per run: ``cmd``, ``openai``)
    runs the workload itself (:meth:`~logitlab.engines.base.Engine.run_workload`).
    ``on_step(phase, step)`` is called before each engine call, outside the timed
    region: ``("prefill", 0)``, then ``("decode", 0 … n_decode-1)`` (a supervisor
    records the phase a crash happened in). ``out``: a float32 array of shape
    ``(len(prompt_ids) + n_decode, n_vocab)`` the rows are gathered into (a
    supervisor's shared memory), instead of a new one. Each call's rows go
    straight into it (:meth:`Session.prefill` with ``out=``: an adapter that
    fills it itself, as llamacpp does, holds no second copy of the prompt's rows).

    Raises:
        InputError: ``replay`` shorter than ``n_decode``, or the context is too small.
    """
    if engine.supports("workload"):
        return engine.run_workload(prompt_ids, n_decode, replay)
    if replay is not None and len(replay) < n_decode:
        raise InputError(f"replay has {len(replay)} tokens, {n_decode} needed")
    n_prompt = len(prompt_ids)
    rows = out if out is not None else np.empty((n_prompt + n_decode, engine.n_vocab), dtype=np.float32)
    generated: list[int] = []
    with engine.open_session() as session:
        if on_step is not None:
            on_step("prefill", 0)
        session.prefill(prompt_ids, out=rows[:n_prompt])
        for step in range(n_decode):
            token = int(replay[step]) if replay is not None else int(np.argmax(rows[n_prompt + step - 1]))
            generated.append(token)
            if on_step is not None:
                on_step("decode", step)
            session.decode([token], out=rows[n_prompt + step:n_prompt + step + 1])
        timings = list(session.timings)
    return RunOutput(rows, list(prompt_ids) + generated, generated, timings)


@contextmanager
def environment(knobs: dict[str, str]) -> Iterator[None]:
    """Set environment knobs for the duration of the block, then restore them."""
    saved = {name: os.environ.get(name) for name in knobs}
    os.environ.update(knobs)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
