"""The sweep report's table for ``invariance-matrix`` cells: one row per cell, one column per invariance axis (its
status, worst verdict and share of bit-identical rows over the cell's prompts)."""

from __future__ import annotations

from typing import Any

from logitlab.experiments.sweep.summary import CellSummary, SweepResult
from logitlab.report.document import Span, Table

__all__ = ["invariance_matrix_what", "invariance_matrix_table", "axis_cell"]


def invariance_matrix_what(experiment: dict[str, Any]) -> str:
    """The header's ``experiment`` line: ``invariance matrix: determinism, batch; 8 greedy tokens, ...``."""
    axes = ", ".join(experiment.get("axes") or []) or "every axis the engine supports"
    return (f"invariance matrix: {axes}; {experiment['tokens']} greedy tokens, determinism {experiment['runs']} "
            f"runs, batch B = 1..{experiment['max_batch']}")


def axis_cell(summary: dict[str, Any] | None) -> str:
    """One axis of one cell: ``invariant, 100.0 %``, ``not invariant (noise), 97.5 %``, ``skipped``, or ``—``."""
    if summary is None:
        return "—"
    status = summary["status"]
    if status in ("skipped", "not run"):
        return status
    word = summary.get("verdict")
    text = status + (f" ({word})" if word and word != "bit-exact" else "")
    rows = summary.get("rows") or 0
    return text + (f", {100 * summary['rows_identical'] / rows:.1f} %" if rows else "")


def invariance_matrix_table(result: SweepResult) -> Table:
    """Per cell: the worst verdict, then each invariance axis (:func:`axis_cell`), jobs finished."""
    axes: list[str] = []
    for cell in result.cells:
        axes += [a["axis"] for a in cell.invariance_axes if a["axis"] not in axes]
    header = [*result.axes, "verdict", *axes, "jobs"]
    rows = [_row(result, cell, axes) for cell in result.cells]
    return Table(header, rows, align=["left"] * len(header),
                 title="matrix: the invariance matrix per cell, pooled over prompts (worst verdict; per axis: status, "
                       "worst verdict, bit-identical rows)")


def _row(result: SweepResult, cell: CellSummary, axes: list[str]) -> list[Any]:
    by_axis = {a["axis"]: a for a in cell.invariance_axes}
    jobs = f"{cell.ok}/{cell.jobs}" + (f" ({cell.failed} failed)" if cell.failed else "")
    return [*(cell.values.get(axis, "") for axis in result.axes),
            Span(cell.verdict, f"verdict:{cell.verdict}") if cell.verdict else "—",
            *(axis_cell(by_axis.get(axis)) for axis in axes), jobs]
