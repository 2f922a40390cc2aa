"""The noise floor of one compared pair: how far the change moves competing tokens where nothing flipped.

A change to an engine (another kernel, another reduction order, a quantised
KV cache) moves every logit of a position a little. What decides whether an
argmax can flip is how far it moves the *competing* tokens against each other:
the **top-k Δ spread** of a position,

    spread = max Δ − min Δ over top-k(reference) ∪ top-k(observed),  Δ = observed − reference.

A position cannot change its argmax unless its spread reaches its reference
top1–top2 margin, nor its top-k set unless the spread reaches its k-th/(k+1)-th
gap (both tokens that trade places are in the union; proof in
:func:`topk_spread`). So the spread is the one statistic that flips, top-k
changes and the near-tie guard are all judged by.

The **floor** of a pair is a high quantile (p99) of the spread over the
positions that differ but did not flip: what this change does to a position
when it is only noise. So that a few positions far outside cannot raise the
floor they are judged against, positions beyond ``floor_factor²`` × the
median spread are left out of the p99 (they are then outside the floor by
far; with a median of 0 none is left out by this rule), and then, top-down,
the largest spread while it exceeds ``floor_factor`` × the p99 of the others
(with ~100 positions the p99 is nearly their maximum, so one position 8× the
median would otherwise lift the floor enough to sit inside it). :func:`measure_floor` computes it from a comparison's
``row_topk_spread``; the verdict (:mod:`logitlab.numerics.verdict`) calls a
position *outside the floor* when its spread exceeds ``floor_factor`` × the
floor.

Sources: the spread bound is the argument of the near-tie guard (the seed
report's M=K verify study); using a high quantile of a pair's own
differences as its tolerance, and a multiplicative fence around it, is the
robust-statistics practice of judging outliers against the bulk of the same
sample (Tukey's fences; Hampel's identifier), here on a ratio scale because
spreads of one pair span orders of magnitude only when something else is
going on. Measured on this project's embedded model (12 real pairs:
llama.cpp flash attention, q8_0/q4_0 KV cache, M=K verify, batch and
prefill/decode paths; transformers float32/bfloat16, eager/sdpa, M=K verify):
the largest spread of a pair is at most 1.6× its p99, and the spread at any
flip at most 1.53× the p99.

Nothing here prints or knows about engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from logitlab.errors import InputError
from logitlab.jsonio import PlainRecord
from logitlab.numerics.comparison import Comparison

__all__ = ["FLOOR_QUANTILE", "FLOOR_STATISTICS", "NoiseFloor", "measure_floor", "topk_spread", "spread_ulps", "row_ulps"]

#: Percentile (0-100) of the top-k Δ spread that is the floor.
FLOOR_QUANTILE = 99.0
#: Per-position statistics a floor is measured on (:func:`measure_floor`'s ``of``).
FLOOR_STATISTICS = ("spread", "sd")


def topk_spread(reference: np.ndarray, observed: np.ndarray, k: int = 5) -> np.ndarray:
    """Per row, the spread of Δ over the tokens that could decide an argmax or a top-k set.

    Parameters
    ----------
    reference, observed : ndarray, shape (n, n_vocab)
        Logits (any float dtype; computed in float64).
    k : int, optional
        Top-k size, >= 1 (capped at n_vocab). Default 5.

    Returns
    -------
    ndarray of float64, shape (n,)
        ``max Δ − min Δ`` over ``top-k(reference) ∪ top-k(observed)``,
        ``Δ = observed − reference`` (logits).

    Raises
    ------
    InputError
        The arrays are not 2-D of one shape.

    Notes
    -----
    If the argmax changes from ``a`` to ``b``, then ``observed[b] >=
    observed[a]`` and ``reference[a] - reference[b] >= margin_ref``, so
    ``Δ_b − Δ_a >= margin_ref``; both tokens are in the union, hence
    ``spread >= margin_ref``. The same argument with the token that leaves
    the reference top-k and one that enters gives ``spread >= kth_gap_ref``.

    Examples
    --------
    >>> ref = np.array([[3.0, 2.9, 0.0, -1.0]])
    >>> obs = np.array([[2.8, 3.0, 0.0, -1.0]])
    >>> round(float(topk_spread(ref, obs, k=2)[0]), 6)  # Δ = -0.2 at token 0, +0.1 at token 1
    0.3
    """
    ref = np.asarray(reference, dtype=np.float64)
    obs = np.asarray(observed, dtype=np.float64)
    if ref.shape != obs.shape or ref.ndim != 2:
        raise InputError(f"topk_spread needs two (n, n_vocab) arrays of one shape, got {ref.shape} and {obs.shape}")
    k = max(1, min(int(k), ref.shape[1]))
    cut = ref.shape[1] - k
    idx = np.concatenate([np.argpartition(ref, cut, axis=1)[:, cut:],
                          np.argpartition(obs, cut, axis=1)[:, cut:]], axis=1)
    delta = np.take_along_axis(obs, idx, axis=1) - np.take_along_axis(ref, idx, axis=1)
    return delta.max(axis=1) - delta.min(axis=1)


def row_ulps(comparison: Comparison, position: int, x: float) -> float:
    """``x`` (logits) in ULPs at row ``position``'s scale; 0.0 when the row is bit-exact.

    The row's scale is the spacing of its largest |reference logit| (as in
    ``row_scaled_ulp``), recovered as ``row_max_abs_diff / row_scaled_ulp``.
    """
    max_abs, scaled = comparison.row_max_abs_diff[position], comparison.row_scaled_ulp[position]
    return x * scaled / max_abs if max_abs and scaled else 0.0


def spread_ulps(comparison: Comparison, position: int) -> float:
    """The top-k Δ spread of one position in ULPs at that row's scale (:func:`row_ulps`); NaN without a spread."""
    spread = (comparison.row_topk_spread or [None] * comparison.n_positions)[position]
    return math.nan if spread is None else row_ulps(comparison, position, spread)


@dataclass(frozen=True)
class NoiseFloor(PlainRecord):
    """The noise floor of one comparison (see the module notes).

    Attributes
    ----------
    statistic : str
        What was measured, e.g. ``"top-5 Δ spread"``.
    quantile : float
        The percentile taken (:data:`FLOOR_QUANTILE`).
    value : float or None
        The floor: that percentile of the statistic over the noise positions
        (logits); None when not measured.
    positions : int
        Noise positions: positions that differ, keep their argmax and have a
        defined spread.
    median, max : float or None
        Of the statistic over the noise positions (logits).
    measured : bool
        ``positions >= min_positions``: enough positions for a floor. When
        False, the fixed thresholds decide.
    min_positions : int
        The minimum that applied.
    excluded : int
        Noise positions left out of the p99 because their spread exceeds
        ``floor_factor²`` × the median.
    reason : str
        One line: what was measured, or why not.
    """

    statistic: str
    quantile: float
    value: float | None
    positions: int
    median: float | None
    max: float | None
    measured: bool
    min_positions: int
    excluded: int
    reason: str


def _g(x: float) -> str:
    return f"{x:.4g}"


def measure_floor(comparison: Comparison, *, min_positions: int = 8, floor_factor: float = 4.0,
                  of: str = "spread") -> NoiseFloor:
    """The p99 of a per-position statistic over the positions that differ and did not flip.

    Parameters
    ----------
    comparison : Comparison
        A full-vocabulary or top-k comparison with ``row_topk_spread``.
    min_positions : int, optional
        Fewest noise positions for a floor. Default 8: below that the p99 is
        the largest of a handful of values, and a systematic offset or an
        outlier cannot be told from chance.
    floor_factor : float, optional
        Positions whose spread exceeds ``floor_factor**2`` × the median spread
        are left out of the p99, then (top-down) the largest spread while it
        exceeds ``floor_factor`` × the p99 of the others: a position never
        raises the bar it is judged against. Default 4 (a window of 16× the
        median; on real pairs the largest spread was at most 3.5× the median
        and 1.6× the p99).
    of : str, optional
        The statistic (:data:`FLOOR_STATISTICS`): ``"spread"`` (default), the
        top-k Δ spread (``row_topk_spread``); ``"sd"``, the Δ standard
        deviation over the whole row (``row_std_diff``; full-vocabulary data
        only). The spread decides flips but rests on ~2k entries; the row's
        sd rests on all V of them, so it sees a position whose every logit
        moved more than the others' (a wrong kernel branch at one position)
        long before the spread does: measured on flash attention's pair of
        the embedded model, a planted N(0, 1) row is 5.8× the others' p99
        of the sd but 3.8× by the spread.

    Returns
    -------
    NoiseFloor
        ``measured`` False (and ``value`` None when no position qualifies)
        when there are fewer than ``min_positions`` noise positions, or the
        comparison has no such statistic (spreads: data saved before they were
        recorded; sd: top-k data).

    Raises
    ------
    InputError
        ``of`` is not one of :data:`FLOOR_STATISTICS`.
    """
    if of not in FLOOR_STATISTICS:
        raise InputError(f"unknown floor statistic {of!r}; known: {', '.join(FLOOR_STATISTICS)}")
    statistic = f"top-{comparison.top_k} Δ spread" if of == "spread" else "Δ sd of the row"
    rows = comparison.row_topk_spread if of == "spread" else (comparison.row_std_diff if comparison.scope == "full"
                                                              else None)
    if rows is None:
        why = ("the comparison has no top-k Δ spreads (saved by an older logitlab)" if of == "spread" else
               "top-k data has no Δ over the whole row")
        return NoiseFloor(statistic, FLOOR_QUANTILE, None, 0, None, None, False, min_positions, 0,
                          f"noise floor not measured: {why}; the fixed thresholds decide")
    values = np.array([
        s for i, s in enumerate(rows)
        if comparison.row_differing[i] and s is not None and math.isfinite(s)
        and comparison.row_argmax_ref[i] == comparison.row_argmax_obs[i]
    ], dtype=np.float64)
    n = int(values.size)
    if n == 0:
        return NoiseFloor(statistic, FLOOR_QUANTILE, None, 0, None, None, False, min_positions, 0,
                          f"noise floor not measured: no differing position kept its argmax "
                          f"(min_positions = {min_positions}); the fixed thresholds decide")
    median, largest = float(np.median(values)), float(values.max())
    bulk = np.sort(values[values <= floor_factor ** 2 * median] if median > 0 else values)
    # A position cannot raise its own bar: the largest value is left out while it exceeds
    # floor_factor × the p99 of the others (top-down, one at a time; it is then outside the floor).
    while bulk.size > 1 and bulk[-1] > floor_factor * float(np.percentile(bulk[:-1], FLOOR_QUANTILE)):
        bulk = bulk[:-1]
    value = float(np.percentile(bulk, FLOOR_QUANTILE))
    excluded = n - int(bulk.size)
    if n < min_positions:
        return NoiseFloor(statistic, FLOOR_QUANTILE, value, n, median, largest, False, min_positions, excluded,
                          f"noise floor not measured: {n} differing position(s) kept their argmax < min_positions "
                          f"= {min_positions}; the fixed thresholds decide")
    left_out = (f"; {excluded} position(s) beyond {floor_factor ** 2:g}× the median or {floor_factor:g}× the p"
                f"{FLOOR_QUANTILE:g} of the others left out of it" if excluded else "")
    return NoiseFloor(statistic, FLOOR_QUANTILE, value, n, median, largest, True, min_positions, excluded,
                      f"noise floor: p{FLOOR_QUANTILE:g} of the {statistic} over the {n} differing positions that "
                      f"kept their argmax = {_g(value)} (median {_g(median)}, max {_g(largest)}{left_out})")
