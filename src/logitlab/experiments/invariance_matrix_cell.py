"""The invariance matrix as a sweep cell: a cell's matrices (one per prompt) pooled into one row of the sweep.

A cell's jobs each ran the matrix of the cell's variant on one prompt; pooled, each invariance axis is one
:class:`~logitlab.experiments.invariance_matrix.AxisResult` over every prompt's probes (the same numbers a matrix
of all the prompts at once gives: status, worst verdict, bit-identical rows), and the cell's numbers those of every
check of every axis.
"""

from __future__ import annotations

from typing import Any, Sequence

from logitlab.experiments.invariance_matrix import AxisResult, InvarianceMatrixResult
from logitlab.numerics.detection import largest_limit

__all__ = ["pooled_axes", "matrix_cell"]


def pooled_axes(results: Sequence[InvarianceMatrixResult]) -> list[AxisResult]:
    """Each axis over every result's probes, in the first result's axis order (skipped where every result
    skipped it, with the first reason)."""
    pooled: dict[str, AxisResult] = {}
    for result in results:
        for axis in result.axes:
            into = pooled.setdefault(axis.axis, AxisResult(axis.axis, axis.skipped, settings=list(axis.settings)))
            into.skipped = into.skipped if axis.skipped else None
            into.prompts += axis.prompts
            into.probes += axis.probes
    return list(pooled.values())


def matrix_cell(results: Sequence[InvarianceMatrixResult]) -> dict[str, Any]:
    """The :class:`~logitlab.experiments.sweep.summary.CellSummary` fields of a cell's matrices, by name.

    ``invariance_axes``: per axis, its summary pooled over the prompts
    (:meth:`~logitlab.experiments.invariance_matrix.AxisResult.summary`); ``verdict``: the worst axis's; over every
    check of every axis: ``positions`` (rows compared), ``rows_differing``, ``max_abs_diff`` (logits),
    ``kld_p99`` (the largest per-check p99, nats), ``flips``; ``detection_limit`` and ``detection_measured``: the
    largest ``argmax-up`` limit over the probes' worst checks and how many were measured.
    """
    axes = pooled_axes(results)
    checks = [check for axis in axes for _, check in axis.checks()]
    cell: dict[str, Any] = {"invariance_axes": [axis.summary() for axis in axes]}
    whole = InvarianceMatrixResult(config={}, manifest={}, axes=axes)
    if whole.verdict_word is not None:
        cell["verdict"] = whole.verdict_word
    if checks:
        cell["positions"] = sum(c.comparison.n_positions for c in checks)
        cell["rows_differing"] = sum(c.comparison.differing_rows for c in checks)
        cell["max_abs_diff"] = max(c.comparison.max_abs_diff or 0.0 for c in checks)
        kld = [axis.kld("p99") for axis in axes if axis.kld("p99") is not None]
        cell["kld_p99"] = max(kld) if kld else None
        cell["flips"] = sum(len(c.comparison.flips) for c in checks)
    cell["detection_limit"], cell["detection_measured"] = largest_limit(
        p.detection for axis in axes for p in axis.probes)
    return cell
