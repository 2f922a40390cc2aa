"""What several engine test modules do with a session: M=1 greedy decode, keeping every row."""

from __future__ import annotations

import numpy as np


def greedy(engine, ids, n):
    """M=1 greedy: prompt rows + one row per decode step; returns (rows, generated).

    rows: ``(len(ids) + n, n_vocab)`` float32 logits (the prefill's rows, then one per step);
    generated: the ``n`` greedy token ids.
    """
    with engine.open_session() as session:
        rows = [session.prefill(ids)]
        generated = []
        for _ in range(n):
            generated.append(int(rows[-1][-1].argmax()))
            rows.append(session.decode([generated[-1]]))
    return np.concatenate(rows), generated
