"""What the invariance probes run on the engine (each a module-level function of the engine, so that it runs
in a supervised engine's worker through :func:`~logitlab.engines.supervised.call_engine`), and the inputs
they build: the batch's other sequences (:func:`filler_sequences`), a setting as text (:func:`setting_text`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from logitlab.engines.base import Engine
from logitlab.engines.spill import spill
from logitlab.engines.workload import run_workload
from logitlab.errors import InputError
from logitlab.experiments.invariance_results import PADDINGS


def filler_sequences(ids: Sequence[int], count: int) -> list[list[int]]:
    """``count`` other sequences built from ``ids``: rotated, and alternately longer / shorter.

    Sequence i (1-based) is ``ids`` rotated by 3i tokens, cut or extended to
    ``len(ids) + 4i`` tokens for odd i (the prompt gets padded) and
    ``max(1, len(ids) - 3i)`` for even i.
    """
    ids = list(ids)
    out = []
    for i in range(1, count + 1):
        k = (3 * i) % len(ids)
        rotated = ids[k:] + ids[:k]
        length = len(ids) + 4 * i if i % 2 else max(1, len(ids) - 3 * i)
        out.append((rotated * (length // len(ids) + 1))[:length])
    return out



def batch_rows(engine: Engine, ids: Sequence[int], batches: dict[Any, list[list[int]]],
               padding: Sequence[str] | None) -> dict[str, Any]:
    """The prompt alone, then every batch at every padding (a batch of one sequence once), on one batch backend.

    ``batches``: label (sortable: the batch probe's ``(B, slot)``) -> the batch's sequences.
    Returns ``alone`` (``(len(ids), n_vocab)`` float32 logits), ``runs`` (``(label, padding, rows)`` with one
    array per sequence, in label order), ``paddings``, ``pads`` (whether the backend pads) and ``params``. Each
    run's rows are kept on disk as soon as the backend returns them where they are large
    (:func:`~logitlab.engines.spill.spill`: read-only arrays), and cross to a supervised engine's parent in
    files of their own (:mod:`~logitlab.engines.call_buffers`).

    Raises:
        InputError: the engine has no batches.
    """
    engine.require("batch", "invariance batch")
    labels = sorted(batches)
    max_tokens = max(sum(len(s) for s in seqs) for seqs in batches.values())
    backend = engine.open_batch(max(len(seqs) for seqs in batches.values()), max_tokens)
    try:
        paddings = list(padding or PADDINGS) if backend.pads else ["none"]
        # each run kept on disk as it comes (spill.py), so that the worker holds one batch's rows at a time
        alone = backend.run([list(ids)], paddings[0], keep=spill)[0]
        runs = [(label, pad, backend.run(batches[label], pad, keep=spill))
                for label in labels for pad in (paddings[:1] if len(batches[label]) == 1 else paddings)]
        shapes = {"alone": backend.forward_rows([list(ids)]),
                  "batches": {label: backend.forward_rows(batches[label]) for label in labels}}
        return {"alone": alone, "runs": runs, "paddings": paddings, "pads": backend.pads, "params": backend.params,
                "forward_rows": shapes}
    finally:
        backend.close()


def prefill_decode_rows(engine: Engine, prompt_ids: Sequence[int], n_decode: int) -> dict[str, Any]:
    """One prefill of prompt + ``n_decode`` greedy tokens, and each position again from a decode step after a
    prefill of the tokens before it (and, where the engine can, from a forward without a KV cache).

    Returns ``generated``, ``sequence``, ``full`` (its ``(len(sequence), n_vocab)`` prefill rows), ``paths``
    (``(name, text, rows)`` per way of computing a position) and ``no_kv_cache``; the arrays are float32,
    kept on disk where they are large (:func:`~logitlab.engines.spill.spill`: read-only).

    Raises:
        InputError: fewer than 2 tokens in all.
    """
    recompute = engine.open_recompute_session if engine.supports("recompute") else None
    no_kv_cache = getattr(engine, "kv_cache", True) is False
    if no_kv_cache:
        recompute = None  # the engine already recomputes: its decode check is the recompute check
    generated = run_workload(engine, prompt_ids, n_decode).generated if n_decode else []
    sequence = list(prompt_ids) + list(generated)
    if len(sequence) < 2:
        raise InputError("prefill-decode needs at least 2 tokens: a longer prompt or --tokens >= 1")
    with engine.open_session() as session:
        full = spill(session.prefill(sequence))
    openers = [("decode vs prefill", engine.open_session, "prefill of tokens 0..p-1, then one decode step (KV cache)")]
    if recompute:
        openers.append(("recompute vs prefill", recompute, "one forward over tokens 0..p without a KV cache"))
    paths = []
    for name, open_session, text in openers:
        # Row p is position p; position 0 (nothing to prefill before it) is a one-token prefill. Each row goes
        # into one array as it comes (not a list stacked at the end: two copies), kept on disk when done.
        rows = np.empty(full.shape, dtype=full.dtype)
        with open_session() as session:
            rows[0] = session.prefill(sequence[:1])[0]
        for p in range(1, len(sequence)):
            with open_session() as session:
                session.prefill(sequence[:p])
                rows[p] = session.decode([sequence[p]])[0]
        paths.append((name, text, spill(rows)))
        del rows
    return {"generated": list(generated), "sequence": sequence, "full": full, "paths": paths,
            "no_kv_cache": no_kv_cache, "forward_rows": engine.forward_rows(len(sequence))}


def engine_forward_rows(engine: Engine, n_tokens: int) -> list[int] | None:
    """:meth:`Engine.forward_rows` of ``engine`` (a function, so that it runs in a supervised engine's worker)."""
    return engine.forward_rows(n_tokens)


def setting_text(options: dict[str, Any]) -> str:
    """Engine options as ``n_ubatch=4, n_threads=2`` ("" for none)."""
    return ", ".join(f"{key}={value}" for key, value in options.items())


def planted_decode_row(engine: Engine, sequence: Sequence[int], position: int, token: int) -> np.ndarray:
    """The decode path's row at ``position`` with ``token`` fed there instead (``--self-check``): a prefill of
    ``sequence[:position]``, then one decode step. Returns a ``(n_vocab,)`` float32 row."""
    with engine.open_session() as session:
        session.prefill(list(sequence[:position]))
        return np.array(session.decode([int(token)])[0], dtype=np.float32)
