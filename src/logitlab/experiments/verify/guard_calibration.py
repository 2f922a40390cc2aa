"""Calibrating the near-tie guard's τ, and evaluating a guarded run against M=1 greedy decoding.

The guard itself (the block decision, rollback, the speculative loop) is
:mod:`logitlab.experiments.verify.guard`; see its docstring for what the guard
guarantees and what only the calibration bounds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.experiments.verify.guard import REDECODE, VERIFY, SpeculativeRun, row_margins
from logitlab.numerics.compare import compare_logits, merge_comparisons
from logitlab.numerics.floor import measure_floor, topk_spread

__all__ = ["Calibration", "calibrate", "GuardEvaluation", "evaluate_run", "fraction"]


# -- calibration ---------------------------------------------------------------
@dataclass
class Calibration:
    """How ``--guard auto`` chose τ, and what other choices would cost.

    Attributes:
        tau: the chosen margin, ``safety × floor`` (logits); ``safety ×
            max_topk_spread`` when the floor could not be measured.
        safety: the safety factor.
        floor: the noise floor: p99 of the top-k Δ spread over the calibration rows
            that differ and kept their argmax (logits); None when not measured.
        floor_positions: rows the floor was measured on.
        floor_reason: one line: the floor, or why τ falls back on the largest spread.
        k: verify block size of the calibration replay.
        top_k: k of :func:`topk_spread`.
        prompts: names of the (held-out) calibration prompts.
        rows: verify rows compared.
        max_topk_spread, p50_topk_spread, p99_topk_spread: of those rows (logits).
        max_abs_diff: largest |Δ| over the full vocabulary (logits).
        trigger_rate: fraction of calibration verify rows with margin < τ (predicted trigger rate).
        tau_full_vocab: ``2 × max_abs_diff``: the bound that needs no top-k argument.
        trigger_rate_full_vocab: fraction of rows with margin < ``tau_full_vocab``.
        tau_for_10pct: the margin below which 10 % of calibration rows fall.
    """

    tau: float
    safety: float
    k: int
    top_k: int
    prompts: list[str]
    rows: int
    max_topk_spread: float
    p50_topk_spread: float
    p99_topk_spread: float
    max_abs_diff: float
    trigger_rate: float
    tau_full_vocab: float
    trigger_rate_full_vocab: float
    tau_for_10pct: float
    floor: float | None = None
    floor_positions: int = 0
    floor_reason: str = ""
    source: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def calibrate(
    pairs: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    k: int,
    safety: float = 4.0,
    top_k: int = 5,
    prompts: Sequence[str] = (),
    min_positions: int = 8,
    floor_factor: float = 4.0,
) -> Calibration:
    """Choose τ from (M=1 rows, M=K verify rows) pairs of a calibration replay.

    Args:
        pairs: per prompt, ``(reference, observed)`` ``(n, n_vocab)`` float32
            logits: the M=1 greedy rows and the M=K replay rows at the same
            positions.
        k: the verify block size the replay used (recorded).
        safety: τ = safety × the noise floor (p99 of the top-k Δ spread over
            the rows that differ and kept their argmax). Default 4, the
            verdict's ``floor_factor``: a row accepted at margin ≥ τ can flip
            only through a change outside the floor. The guarded loop's rows
            also read a KV history the calibration never saw (part M=1, part
            M=K): the factor is headroom for that too. With fewer than
            ``min_positions`` such rows (a bit-exact verify path) τ is
            safety × the largest spread (0 when every row is bit-exact).
        top_k: k of :func:`topk_spread`.
        prompts: names for the record.
        min_positions, floor_factor: the verdict's, for :func:`~logitlab.numerics.floor.measure_floor`.

    Returns:
        Calibration.

    Raises:
        InputError: no rows, or safety ≤ 0.
    """
    if not safety > 0:
        raise InputError(f"--guard-safety must be > 0, got {safety}")
    spreads, margins, comparisons, max_abs = [], [], [], 0.0
    for reference, observed in pairs:
        spreads.append(topk_spread(reference, observed, top_k))
        margins.append(row_margins(observed))
        comparisons.append(compare_logits(reference, observed, top_k=top_k))
        diff = np.abs(observed.astype(np.float64) - reference)
        max_abs = max(max_abs, float(np.nanmax(diff)) if diff.size else 0.0)
    if not spreads or not sum(len(s) for s in spreads):
        raise InputError("the guard calibration compared no rows")
    spread = np.concatenate(spreads)
    margin = np.concatenate(margins)
    floor = measure_floor(merge_comparisons(comparisons), min_positions=min_positions,
                          floor_factor=floor_factor)
    if floor.measured:
        tau, reason = safety * floor.value, floor.reason
    else:
        tau = safety * float(spread.max())
        reason = floor.reason.replace("the fixed thresholds decide", "τ = safety × the largest spread")
    full = 2.0 * max_abs
    return Calibration(
        tau=tau, safety=float(safety), k=k, top_k=top_k, prompts=list(prompts), rows=int(spread.size),
        max_topk_spread=float(spread.max()), p50_topk_spread=float(np.percentile(spread, 50)),
        p99_topk_spread=float(np.percentile(spread, 99)), max_abs_diff=max_abs,
        trigger_rate=float(np.mean(margin < tau)) if tau > 0 else 0.0,
        tau_full_vocab=full, trigger_rate_full_vocab=float(np.mean(margin < full)) if full > 0 else 0.0,
        tau_for_10pct=float(np.percentile(margin, 10)),
        floor=floor.value if floor.measured else None, floor_positions=floor.positions, floor_reason=reason,
    )


# -- evaluation -----------------------------------------------------------------
@dataclass
class GuardEvaluation:
    """A speculative run measured against the M=1 greedy run of the same prompt.

    Token identity is checked at every position; the logit statistics cover
    the positions up to and including the first differing token (after it the
    inputs differ). "Covered" rows are those the bound protects: spread below
    the row's margin.
    """

    identical: bool
    first_divergence: int | None        # generated-token index
    rows_compared: int
    bit_exact_rows: int
    max_abs_diff: float
    max_topk_spread_verify: float       # over accepted verify rows
    max_topk_spread_redecode: float     # over re-decoded rows
    verify_rows_over_tau: int | None    # accepted rows with spread ≥ τ (calibration bound broke); None: unguarded
    rows_uncovered: int                 # verify or re-decoded rows whose spread ≥ their own margin
    redecode_rows_uncovered: int        # of those, re-decoded rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate_run(run: SpeculativeRun, reference_tokens: Sequence[int], reference_rows: np.ndarray,
                 *, top_k: int = 5) -> GuardEvaluation:
    """Compare a speculative run with M=1 greedy.

    Args:
        run: from :func:`~logitlab.experiments.verify.guard.speculative_greedy` with ``keep_rows=True``.
        reference_tokens: the M=1 greedy tokens (at least ``len(run.tokens)``).
        reference_rows: ``(n, n_vocab)``: the M=1 row that decided each greedy
            token (prefill row first).

    Raises:
        InputError: the run kept no rows, or the reference is shorter than the run.
    """
    if run.rows is None:
        raise InputError("evaluate_run needs a run made with keep_rows=True")
    n = len(run.tokens)
    if len(reference_tokens) < n or len(reference_rows) < n:
        raise InputError(f"the reference has {len(reference_tokens)} tokens, the run {n}")
    diverge = next((i for i in range(n) if run.tokens[i] != int(reference_tokens[i])), None)
    upto = n if diverge is None else diverge + 1
    ref, obs = np.asarray(reference_rows[:upto]), run.rows[:upto]
    spread = topk_spread(ref, obs, top_k)
    same = np.array([np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(ref, obs)])
    sources = np.array(run.sources[:upto])
    margins = np.array(run.margins[:upto])
    verify, redo = sources == VERIFY, sources == REDECODE
    tau = run.tau or 0.0
    return GuardEvaluation(
        identical=diverge is None, first_divergence=diverge, rows_compared=upto,
        bit_exact_rows=int(same.sum()),
        max_abs_diff=float(np.nanmax(np.abs(obs.astype(np.float64) - ref))) if upto else 0.0,
        max_topk_spread_verify=float(spread[verify].max()) if verify.any() else 0.0,
        max_topk_spread_redecode=float(spread[redo].max()) if redo.any() else 0.0,
        verify_rows_over_tau=int(np.sum(spread[verify] >= tau)) if tau > 0 else None,
        rows_uncovered=int(np.sum((spread >= margins) & (verify | redo))),
        redecode_rows_uncovered=int(np.sum(spread[redo] >= margins[redo])),
    )


def fraction(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when the denominator is 0."""
    return numerator / denominator if denominator else math.nan
