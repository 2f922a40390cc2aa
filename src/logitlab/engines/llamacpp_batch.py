"""Several sequences in one ``llama_decode`` on llama.cpp (low-level llama-cpp-python API).

``Llama.eval`` drives a single sequence; batch invariance needs B sequences
(seq ids 0..B-1) in one ``llama_batch``. :class:`LlamaCppBatch` opens a second
``llama_context`` on the engine's already loaded model, with the engine's
context parameters (threads, flash attention, KV types, ``n_ubatch``) and room
for B sequences, and evaluates any set of sequences in one ``llama_decode``
call (``n_batch`` is raised to hold them). The engine's own context is not
touched. Every run clears the KV cache first, so "alone" (B=1) and "in a batch"
run on the same context and differ only in the batch's composition.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from logitlab.engines.base import BatchRun, check_outputs
from logitlab.engines.llamacpp import LlamaCppEngine
from logitlab.errors import EngineError, InputError


def split_rows(n_tokens: int, size: int) -> list[int]:
    """``n_tokens`` rows cut into forwards of at most ``size`` rows, in order."""
    return [min(size, n_tokens - start) for start in range(0, n_tokens, size)]


class LlamaCppBatch(BatchRun):
    """A llama.cpp context for up to ``n_seq_max`` parallel sequences on an engine's model.

    Args:
        engine: a loaded :class:`LlamaCppEngine` (its model is shared, not reloaded).
        n_seq_max: most sequences in one batch.
        n_tokens: most tokens in one batch, over all its sequences.
        kv_unified: one KV buffer shared by all sequences (llama.cpp's classic layout,
            default) or one stream per sequence.

    Use as a context manager, or call :meth:`close`.

    Raises:
        InputError: ``n_seq_max`` or ``n_tokens`` below 1.
        EngineError: llama.cpp could not create the context.
    """

    def __init__(self, engine: LlamaCppEngine, n_seq_max: int, n_tokens: int, *, kv_unified: bool = True):
        import llama_cpp

        if n_seq_max < 1 or n_tokens < 1:
            raise InputError(f"a batch needs at least one sequence and one token, got {n_seq_max} and {n_tokens}")
        if n_seq_max > llama_cpp.llama_max_parallel_sequences():
            raise InputError(f"llama.cpp supports at most {llama_cpp.llama_max_parallel_sequences()} parallel "
                             f"sequences, {n_seq_max} asked")
        self._lib = llama_cpp
        self.engine = engine
        self.n_vocab = engine.n_vocab
        params = llama_cpp.llama_context_params.from_buffer_copy(engine.llama.context_params)
        per_sequence = int(params.n_ctx)
        params.n_seq_max = n_seq_max
        params.kv_unified = kv_unified
        # Unified: all sequences share n_ctx cells; otherwise each stream gets n_ctx / n_seq_max.
        params.n_ctx = max(per_sequence, n_tokens) if kv_unified else max(per_sequence, n_tokens) * n_seq_max
        params.n_batch = max(int(params.n_batch), n_tokens)
        params.n_ubatch = min(int(params.n_ubatch), int(params.n_batch))
        self.params = {"mode": "parallel sequences (seq ids) in one llama_decode, no padding",
                       "n_ctx": int(params.n_ctx), "n_batch": int(params.n_batch), "n_ubatch": int(params.n_ubatch),
                       "n_seq_max": n_seq_max, "kv_unified": kv_unified,
                       "n_threads": int(params.n_threads), "n_threads_batch": int(params.n_threads_batch)}
        self.n_tokens = n_tokens
        self.ctx = llama_cpp.llama_init_from_model(engine.llama._model.model, params)
        if not self.ctx:
            raise EngineError(f"llama.cpp could not create a context for {n_seq_max} sequences ({self.params})")
        self.batch = llama_cpp.llama_batch_init(n_tokens, 0, n_seq_max)

    def __enter__(self) -> "LlamaCppBatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self._lib.llama_batch_free(self.batch)
            self._lib.llama_free(self.ctx)
            self.ctx = None

    def forward_rows(self, sequences: Sequence[Sequence[int]]) -> list[int]:
        """One ``llama_decode`` of all tokens, split into micro-batches of ``n_ubatch`` rows in order (llama.cpp's
        simple split, used with a unified KV cache)."""
        return split_rows(sum(len(s) for s in sequences), self.params["n_ubatch"])

    def run(self, sequences: Sequence[Sequence[int]], padding: str = "none", *, outputs: str = "all",
            keep: Callable[[np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
        """Evaluate the sequences (seq ids 0..B-1, positions from 0) in one ``llama_decode``; no padding.

        With ``outputs="last"`` only each sequence's last token has its output flag (``llama_batch.logits``) set,
        as llama.cpp's server sets it when it prefills: llama.cpp's output buffer then holds B rows instead of
        every token's, and its graph runs the last layer's rows after attention only for those tokens
        (``inp_out_ids``), so a row's bits may differ from the same row with every flag set.

        Returns:
            One float32 array per sequence, freshly copied: ``(len(sequence), n_vocab)``, or ``(1, n_vocab)``
            with ``outputs="last"`` — or what ``keep`` made of it, called on each as soon as it is copied.

        Raises:
            InputError: too many sequences or tokens for this context, an empty sequence, or an unknown
                ``outputs``.
            EngineError: ``llama_decode`` failed.
        """
        check_outputs(outputs)
        last_only = outputs == "last"
        lib = self._lib
        total = sum(len(s) for s in sequences)
        if not sequences or any(len(s) == 0 for s in sequences):
            raise InputError("a batch needs at least one sequence, and no empty sequence")
        if len(sequences) > self.params["n_seq_max"] or total > self.n_tokens:
            raise InputError(f"{len(sequences)} sequences of {total} tokens exceed this batch context "
                             f"({self.params['n_seq_max']} sequences, {self.n_tokens} tokens)")
        lib.llama_memory_clear(lib.llama_get_memory(self.ctx), True)
        batch = self.batch
        index = 0
        spans = []
        for seq_id, seq in enumerate(sequences):
            spans.append((index, index + len(seq)))
            for pos, token in enumerate(seq):
                batch.token[index] = int(token)
                batch.pos[index] = pos
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = seq_id
                batch.logits[index] = 0 if last_only and pos < len(seq) - 1 else 1
                index += 1
        batch.n_tokens = total
        code = lib.llama_decode(self.ctx, batch)
        if code != 0:
            raise EngineError(f"llama_decode of {len(sequences)} sequences ({total} tokens) failed with code {code}")
        out = []
        for start, stop in spans:
            start = stop - 1 if last_only else start
            rows = np.empty((stop - start, self.n_vocab), dtype=np.float32)
            for row, i in enumerate(range(start, stop)):
                pointer = lib.llama_get_logits_ith(self.ctx, i)
                if not pointer:  # llama.cpp answers NULL for a token without an output
                    raise EngineError(f"llama.cpp has no logits for token {i} of the batch")
                rows[row] = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
            out.append(rows if keep is None else keep(rows))
            del rows  # kept: only the engine's buffer and the next sequence's rows are held
        return out
