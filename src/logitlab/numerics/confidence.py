"""KL divergence grouped by how sure the reference was: the top-1 probability buckets.

A mean KLD over a run is dominated by the positions where the reference
itself is undecided (a flat distribution moves a lot for a small change in
the logits), so the same mean can hide a change that only touches uncertain
positions or one that also moves confident ones. :func:`kld_by_confidence`
splits the per-position KLD of a comparison by the reference's top-1
probability, as the HTML report draws it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from logitlab.errors import InputError

__all__ = ["CONFIDENCE_EDGES", "ConfidenceBucket", "kld_by_confidence"]

#: Bucket edges of the reference's top-1 probability: [0, .25), [.25, .5), [.5, .75), [.75, .95), [.95, 1].
CONFIDENCE_EDGES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)


@dataclass(frozen=True)
class ConfidenceBucket:
    """Positions whose reference top-1 probability lies in ``[low, high)`` (the last bucket includes 1).

    Attributes:
        low, high: the bucket's edges (probabilities).
        positions: positions in the bucket.
        mean_kld: their mean KL divergence (nats); None for an empty bucket.
        max_kld: their largest KL divergence (nats); None for an empty bucket.
        share: their part of the summed KLD of all bucketed positions (0-1; None when that sum is 0 or infinite).
    """

    low: float
    high: float
    positions: int
    mean_kld: float | None
    max_kld: float | None
    share: float | None

    @property
    def label(self) -> str:
        close = "]" if self.high >= 1.0 else ")"
        return f"[{self.low:g}, {self.high:g}{close}"


def kld_by_confidence(row_kld: Sequence[float | None], row_top1_prob: Sequence[float | None],
                      edges: Sequence[float] = CONFIDENCE_EDGES) -> list[ConfidenceBucket]:
    """Per-position KLD grouped by the reference's top-1 probability.

    Parameters
    ----------
    row_kld : sequence of float or None, length n_positions
        KL(P_ref || P_obs) per position (nats), as ``Comparison.row_kld``.
    row_top1_prob : sequence of float or None, length n_positions
        The reference's top-1 probability per position, as
        ``Comparison.row_top1_prob_ref``. Positions where either value is
        None (bit-identical rows, undefined values) are left out.
    edges : sequence of float
        Increasing bucket edges from 0 to 1; default :data:`CONFIDENCE_EDGES`.

    Returns
    -------
    list of ConfidenceBucket
        One per bucket, in order, empty buckets included.

    Raises
    ------
    InputError
        The sequences differ in length, or the edges do not rise from 0 to 1.
    """
    if len(row_kld) != len(row_top1_prob):
        raise InputError(f"row_kld has {len(row_kld)} entries, row_top1_prob {len(row_top1_prob)}")
    edges = [float(e) for e in edges]
    if len(edges) < 2 or edges[0] != 0.0 or edges[-1] != 1.0 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise InputError(f"confidence edges must rise from 0 to 1, got {edges}")
    groups: list[list[float]] = [[] for _ in edges[1:]]
    for kld, prob in zip(row_kld, row_top1_prob):
        if kld is None or prob is None or math.isnan(kld) or math.isnan(prob):
            continue
        i = next((j for j, high in enumerate(edges[1:]) if prob < high), len(groups) - 1)
        groups[i].append(float(kld))
    total = sum(sum(g) for g in groups)
    return [ConfidenceBucket(low, high, len(g), sum(g) / len(g) if g else None, max(g) if g else None,
                             sum(g) / total if 0 < total < math.inf else None)
            for low, high, g in zip(edges, edges[1:], groups)]
