"""An engine with a planted batch-size bucket: llama.cpp whose batched rows change only above a batch size.

Registered as ``bucket-llamacpp`` by ``register()`` (``unregister()`` takes it out again). Everything runs on
llama.cpp; only a batch of more than :data:`THRESHOLD` sequences (``open_batch(...).run``) gets every 7th logit of
every row raised by :data:`BUMP` — as an attention backend that switches to another algorithm above a batch size
would move them. Sessions (prefill, decode, determinism runs) and batches of up to :data:`THRESHOLD` sequences are
llama.cpp's own bits, so an invariance matrix must find it on the ``batch`` axis alone, and only at B >
:data:`THRESHOLD`.

A worker process imports this module by its name (``bucket_engine``): tests put ``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from logitlab.engines import register_engine
from logitlab.engines.base import BatchRun
from logitlab.engines.llamacpp import LlamaCppEngine

NAME = "bucket-llamacpp"
#: The largest batch that runs llama.cpp's own bits.
THRESHOLD = 2
#: Added to every 7th logit of every row of a larger batch (logits).
BUMP = np.float32(1e-3)


class BucketBatch(BatchRun):
    """llama.cpp's batch, its rows moved above :data:`THRESHOLD` sequences."""

    def __init__(self, inner: BatchRun):
        self.inner = inner
        self.pads = inner.pads
        self.params = {**inner.params, "planted": f"every 7th logit + {BUMP} above B={THRESHOLD}"}

    def run(self, sequences: Sequence[Sequence[int]], padding: str = "right", *, outputs: str = "all",
            keep: Callable[[np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
        rows = self.inner.run(sequences, padding, outputs=outputs)
        if len(sequences) > THRESHOLD:
            for array in rows:
                array[:, ::7] += BUMP
        return rows if keep is None else [keep(r) for r in rows]

    def forward_rows(self, sequences: Sequence[Sequence[int]]) -> list[int] | None:
        return self.inner.forward_rows(sequences)

    def close(self) -> None:
        self.inner.close()


class BucketLlamaCpp(LlamaCppEngine):
    name = NAME
    BATCH_BUCKETS = (THRESHOLD,)  # the planted bucket: batches of 1..THRESHOLD sequences, then the others

    def open_batch(self, max_sequences: int, max_tokens: int) -> BatchRun:
        return BucketBatch(super().open_batch(max_sequences, max_tokens))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "engine": NAME}


def register() -> None:
    register_engine(NAME, "bucket_engine:BucketLlamaCpp")


def unregister() -> None:
    from logitlab.engines import ENGINES

    ENGINES.pop(NAME, None)
