"""Per-row constant offsets between two runs' top-k log-probabilities: the softmax normaliser, and what is left.

A log-probability is ``logit - log Z`` with one normaliser ``log Z`` per row.
Two implementations of the softmax over the same logits (llama-server sums
``expf`` in float32 in the order a partial sort leaves; logitlab's
:meth:`~logitlab.engines.topk.TopKRows.from_logits` sums in float64) return
log-probabilities that differ by a constant per row — measured here: up to
2.3e-4 nats on the embedded model, i.e. hundreds of float32 ULPs — while the
differences *within* a row (``lp_j - lp_a`` = ``logit_j - logit_a``) agree to
the rounding of the returned values. So "ULP-level on the returned top-k" can
honestly mean only: after removing each row's constant, the entries agree to
a few ULPs. :func:`row_offsets` measures both parts; :func:`on_normaliser`
moves one run's rows onto the other's normaliser for a comparison that should
not be about the normaliser (full logits against a server's top-k).

What the offset also carries: a change of the probability mass outside the
returned top-k shifts every returned log-probability of that row by the same
amount. The offsets are therefore reported, never silently dropped.

Nothing here prints or knows about engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from logitlab.engines.topk import TopKRows
from logitlab.errors import InputError

__all__ = ["RowOffsets", "row_offsets", "on_normaliser"]


@dataclass(frozen=True)
class RowOffsets:
    """Per-row constant offsets of ``observed - reference`` top-k log-probabilities, and the residuals.

    Attributes
    ----------
    positions : list[int]
        Positions where both runs returned a row sharing at least one token.
    offset : list[float or None]
        Per position (``n_positions`` long): ``observed - reference`` at the
        anchor token, the first token of the reference row (most likely first)
        that the observed row also returned (nats). None where not compared.
    residual : list[float or None]
        Per position: ``max_j |(o_j - o_a) - (r_j - r_a)|`` over the tokens both
        rows returned, i.e. the largest disagreement of the within-row
        differences (log-probability gaps, which equal logit gaps), in nats.
    residual_ulp : list[float or None]
        ``residual`` in float32 ULPs at the row's scale: divided by
        ``np.spacing(np.float32(m))``, ``m`` the largest ``|value|`` among the
        shared entries of both rows (the spacing the returned float32 values
        are rounded to).
    max_abs_offset, max_residual, max_residual_ulp : float
        Maxima over ``positions`` (0 when none).
    """

    positions: list
    offset: list
    residual: list
    residual_ulp: list
    max_abs_offset: float
    max_residual: float
    max_residual_ulp: float

    def sentence(self) -> str:
        """One line for a report: the normaliser part and the within-row part."""
        if not self.positions:
            return "per-row offsets: no position where both runs returned a shared token"
        return (f"per-row constant (softmax normaliser): max |offset| = {self.max_abs_offset:.3g} nats over "
                f"{len(self.positions)} positions; within-row differences (logit gaps) agree to "
                f"{self.max_residual:.3g} nats = {self.max_residual_ulp:.3g} ULP (float32, row scale)")

    def to_dict(self) -> dict[str, Any]:
        return {"positions": self.positions, "offset": self.offset, "residual": self.residual,
                "residual_ulp": self.residual_ulp, "max_abs_offset": self.max_abs_offset,
                "max_residual": self.max_residual, "max_residual_ulp": self.max_residual_ulp}


def _anchor(ref_keys: tuple, obs: dict) -> Any:
    return next((key for key in ref_keys if key in obs), None)


def row_offsets(reference: TopKRows, observed: TopKRows) -> RowOffsets:
    """Split ``observed - reference`` per row into a constant and a residual (see :class:`RowOffsets`).

    Parameters
    ----------
    reference, observed : TopKRows
        Same number of positions; keys compared as given (ids or text).

    Returns
    -------
    RowOffsets

    Raises
    ------
    InputError
        The runs differ in length.

    Examples
    --------
    >>> a = TopKRows.from_mappings([None, {7: -0.25, 3: -2.0}], k=2)
    >>> b = TopKRows.from_mappings([None, {7: -0.2498, 3: -1.9998}], k=2)
    >>> r = row_offsets(a, b)
    >>> r.positions, round(r.offset[1], 6), r.max_residual < 1e-6
    ([1], 0.0002, True)
    """
    n = reference.n_positions
    if observed.n_positions != n:
        raise InputError(f"top-k runs differ in length: reference {n} positions, observed {observed.n_positions}")
    offset: list[float | None] = [None] * n
    residual: list[float | None] = [None] * n
    residual_ulp: list[float | None] = [None] * n
    positions = []
    for r in range(n):
        rk, rv, ok, ov = reference.keys[r], reference.values[r], observed.keys[r], observed.values[r]
        if not rk or not ok:
            continue
        ref, obs = dict(zip(rk, rv)), dict(zip(ok, ov))
        anchor = _anchor(rk, obs)
        if anchor is None or not (math.isfinite(ref[anchor]) and math.isfinite(obs[anchor])):
            continue
        shared = [key for key in rk if key in obs and math.isfinite(ref[key]) and math.isfinite(obs[key])]
        c = obs[anchor] - ref[anchor]
        worst = max(abs((obs[key] - obs[anchor]) - (ref[key] - ref[anchor])) for key in shared)
        scale = max(max(abs(ref[key]), abs(obs[key])) for key in shared)
        positions.append(r)
        offset[r], residual[r] = float(c), float(worst)
        residual_ulp[r] = float(worst / np.spacing(np.float32(scale))) if scale > 0 else 0.0
    return RowOffsets(
        positions=positions, offset=offset, residual=residual, residual_ulp=residual_ulp,
        max_abs_offset=max((abs(offset[r]) for r in positions), default=0.0),
        max_residual=max((residual[r] for r in positions), default=0.0),
        max_residual_ulp=max((residual_ulp[r] for r in positions), default=0.0),
    )


def on_normaliser(rows: TopKRows, like: TopKRows) -> TopKRows:
    """``rows`` with each row shifted by a constant so that its anchor token has ``like``'s value.

    The anchor is the first token of ``like``'s row (most likely first) that
    ``rows`` also holds. Where ``like``'s values are all float32 numbers (as
    servers return them), the shifted values are rounded to float32 too, so
    that a comparison measures float32 ULPs on both sides (rows without a
    shared token, or missing in ``like``, are not shifted but rounded alike).

    Parameters
    ----------
    rows : TopKRows
        Typically :meth:`TopKRows.from_logits` of full logits (float64 log-softmax).
    like : TopKRows
        The run whose per-row normaliser is taken (a server's top-k).

    Returns
    -------
    TopKRows
        Same keys and order as ``rows``.

    Raises
    ------
    InputError
        The runs differ in length.
    """
    if rows.n_positions != like.n_positions:
        raise InputError(f"top-k runs differ in length: {rows.n_positions} and {like.n_positions} positions")
    f32 = all(float(np.float32(v)) == v for vals in like.values if vals for v in vals if math.isfinite(v))
    values = []
    for keys, vals, lk, lv in zip(rows.keys, rows.values, like.keys, like.values):
        if not keys:
            values.append(vals)
            continue
        own = dict(zip(keys, vals))
        anchor = _anchor(lk, own) if lk else None
        if anchor is not None:
            base = dict(zip(lk, lv))[anchor]
            vals = tuple(base + (v - own[anchor]) for v in vals)  # like's anchor value + the row's own gaps
        values.append(tuple(float(np.float32(v)) if f32 else float(v) for v in vals))
    return TopKRows(rows.keys, tuple(values), rows.requested_k)
