"""The ``sweep`` report: the matrix table (one row per cell), failed jobs, where jobs ran, and a heatmap figure.

:func:`sweep_document` renders a :class:`~logitlab.experiments.sweep.summary.SweepResult`
(``logitlab sweep``, ``logitlab report OUT/``); :func:`sweep_job_document`
one job's result file (``logitlab report OUT/jobs/KEY.json``): its spec and
place, then the report of its ``ab``, ``verify`` or ``invariance-matrix`` result.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from logitlab.experiments.sweep.job import SweepJobResult
from logitlab.experiments.sweep.summary import CellSummary, SweepResult
from logitlab.numerics import VERDICTS
from logitlab.report.detection_text import HEADLINE_HEADER, limit_cell
from logitlab.report.document import Bullets, Document, Figure, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.sweep_invariance import invariance_matrix_table, invariance_matrix_what
from logitlab.report.text import INTERRUPTED, fmt_num, plural, stopped_line, variant_text

__all__ = ["sweep_document", "sweep_plan_document", "sweep_job_document", "heatmap_data"]

#: Failed jobs listed in the report (all are in the JSON and the job files).
MAX_FAILED = 20
#: Hex digits of a cell's logits hash in the table (the JSON has all 64).
HASH_CHARS = 10


def sweep_document(result: SweepResult, *, show_error: bool = True) -> Document:
    """The report of a sweep: header, the matrix table, failed jobs, where the jobs ran, notes.

    Args:
        result: the sweep, finished or not.
        show_error: include the "stopped early" line.
    """
    counts = result.counts()
    worst = result.worst_verdict()
    doc = Document("sweep", f"logitlab sweep {result.name}")
    title = rich("logitlab sweep ", Span(result.name, "code"), ": ",
                 Span(worst, f"verdict:{worst}") if worst else "no verdict yet",
                 f" (worst of {plural(len(result.cells), 'cell')})")
    doc.add(Heading(title), _header(result, counts))
    if result.error == INTERRUPTED and show_error:  # before any verdict: what they rest on
        doc.add(Paragraph(stopped_line(INTERRUPTED, done=counts["ok"] + counts["failed"], planned=len(result.jobs),
                                       unit="job", rests_on="the cells' verdicts"), tone="error"))
    doc.add(_matrix_table(result))
    if result.speed:
        doc.add(_speed_table(result))
    doc.add(Figure("sweep-heatmap", _heatmap_caption(result), heatmap_data(result)))
    failed = [job for job in result.jobs if job.status == "failed"]
    if failed:
        rows = [(job.key, _place(job.where), str(job.attempt), job.error or "") for job in failed[:MAX_FAILED]]
        title = f"failed jobs ({len(failed)}" + (f", first {MAX_FAILED} shown)" if len(failed) > MAX_FAILED else ")")
        doc.add(Table(("job", "where", "attempt", "error"), rows, title=title, tone="error"))
    if counts["failed"] or counts["pending"]:
        doc.add(Paragraph(rich(f"{counts['failed'] + counts['pending']} job(s) have no finished result: ",
                               Span("--resume", "code"), " runs only those"), tone="warning"))
    places = Counter(_place(job.where, lane=False) for job in result.jobs if job.where)
    if places:
        doc.add(Paragraph("where the jobs ran: " + "; ".join(f"{place}: {plural(n, 'job')}"
                                                              for place, n in sorted(places.items())), tone="dim"))
    if result.notes:
        doc.add(Bullets(result.notes, tone="note"))
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    return doc


def _header(result: SweepResult, counts: dict[str, int]) -> KeyValues:
    matrix, manifest = result.matrix, result.manifest
    exp = matrix["experiment"]
    if exp["kind"] == "invariance-matrix":
        what = invariance_matrix_what(exp)
    elif exp["kind"] == "verify":
        what = f"verify, K = {', '.join(map(str, exp['ks']))}, {exp['tokens']} greedy tokens per prompt"
    elif exp["speed"]:
        repeats = exp["repeats"]
        what = (f"ab with speed: {exp['warmup']} warmup/variant, "
                f"{'auto (sequential) ' if repeats == 'auto' else ''}"
                f"{plural(repeats, 'ABBA/BAAB block') if repeats != 'auto' else 'ABBA/BAAB blocks'}, "
                f"{exp['tokens']} greedy tokens, isolation={exp['isolation']}")
    else:
        what = (f"ab, numerics only: one ABBA block (reference, A/A, two candidate runs), {exp['tokens']} greedy "
                f"tokens, isolation={exp['isolation']}")
    axes = "; ".join(f"{a['key'] or a['kind']}: {', '.join('unset' if v is None else _short(a, v) for v in a['values'])}"
                     + (" (control and candidate)" if a["shared"] else "") for a in matrix["axes"])
    executor = manifest.get("executor") or {}
    rows: list[tuple] = [
        ("control", variant_text(matrix["control"])),
        ("axes", axes),
        ("prompts", ", ".join(p["name"] for p in matrix["prompts"])),
        ("experiment", what),
        ("jobs", f"{plural(len(result.cells), 'cell')} × {plural(len(matrix['prompts']), 'prompt')} = "
                 f"{plural(len(result.jobs), 'job')}: "
                 f"{counts['ok']} ok, {counts['failed']} failed, {counts['pending']} pending"),
    ]
    if executor:
        rows.append(("executor", _executor_text(executor)))
    if matrix.get("source"):
        rows.append(("matrix", matrix["source"]))
    if manifest.get("out"):
        rows.append(("results", f"{manifest['out']}/jobs/<cell>--<prompt>.json"))
    return KeyValues(rows, boxed=True)


def _short(axis: dict[str, Any], value: Any) -> str:
    return Path(str(value)).name if axis["kind"] == "model" else str(value)


def _executor_text(executor: dict[str, Any]) -> str:
    workers = executor.get("workers")
    text = f"{executor.get('executor')}, " + (plural(workers, "worker") if workers else "no worker started")
    if executor.get("address"):
        text += f", Ray at {executor['address']}"
    if executor.get("retries"):
        text += f", {executor['retries']} retr{'y' if executor['retries'] == 1 else 'ies'} after a worker dies"
    return text


def _place(where: dict[str, Any], *, lane: bool = True) -> str:
    if not where:
        return "n/a"
    node = where.get("node_ip") or where.get("host", "?")
    text = f"{where.get('executor', '?')} {node} {where.get('device', '?')}"
    if lane and where.get("pid") is not None:
        text += f" pid {where['pid']}"
    return text


def _matrix_table(result: SweepResult) -> Table:
    if result.kind == "invariance-matrix":
        return invariance_matrix_table(result)
    verify = result.kind == "verify"
    header = [*result.axes, "verdict"]
    header += ["cause"] if verify else ["A/A"]
    header += ["diff rows", "max |Δ|"]
    header += [] if verify else ["KLD mean", "KLD p99"]
    header += ["flips", HEADLINE_HEADER, "jobs", "logits hash"]
    rows = [_row(result, cell, verify) for cell in result.cells]
    align = ["left"] * (len(result.axes) + 2) + ["right"] * (len(header) - len(result.axes) - 2)
    if verify:
        title = "matrix: M=K verify vs M=1 per cell, pooled over prompts and K (worst verdict)"
    else:
        title = "matrix: candidate vs control per cell, pooled over prompts (worst verdict; numbers from the verdict runs)"
    return Table(header, rows, title=title, align=align)


def _row(result: SweepResult, cell: CellSummary, verify: bool) -> list[Any]:
    row: list[Any] = [cell.values.get(axis, "") for axis in result.axes]
    row.append(Span(cell.verdict, f"verdict:{cell.verdict}") if cell.verdict else "—")
    row.append(cell.cause or "—" if verify else cell.aa or "—")
    row.append(f"{cell.rows_differing}/{cell.positions}" if cell.positions else "—")
    row.append(fmt_num(cell.max_abs_diff) if cell.max_abs_diff is not None else "—")
    if not verify:
        row += [fmt_num(cell.kld_mean) if cell.kld_mean is not None else "—",
                fmt_num(cell.kld_p99) if cell.kld_p99 is not None else "—"]
    row.append(str(cell.flips) if cell.flips is not None else "—")
    row.append(limit_cell(cell.detection_limit, cell.detection_measured))
    jobs = f"{cell.ok}/{cell.jobs}" + (f" ({cell.failed} failed)" if cell.failed else "")
    row += [jobs, cell.logits_hash[:HASH_CHARS] if cell.logits_hash else "—"]
    return row


SPEED_HEADER = ("decode (95% CI)", "call", "prefill (95% CI)", "call", "δ", "MDE", "blocks")


def _speed_table(result: SweepResult) -> Table:
    """Per cell: the paired speed comparison of decode and prefill tokens/s over every prompt's blocks."""
    rows = []
    for cell in result.cells:
        row: list[Any] = [cell.values.get(axis, "") for axis in result.axes]
        for phase in ("decode", "prefill"):
            p = cell.speed.get(phase)
            if p is None or p.ratio is None:
                row += ["—", "—"]
            else:
                ci = "" if p.ci_low is None else f" ({p.ci_low:.3f}–{p.ci_high:.3f})"
                row += [f"{p.ratio:.3f}{ci}", Span(p.call, f"call:{p.call}")]
        decode = cell.speed.get("decode")
        row += ["—", "—", "—"] if decode is None else [
            f"{100 * decode.margin:.1f}% {decode.margin_source}",
            "n/a" if decode.mde is None else f"{100 * decode.mde:.1f}%", str(decode.n_blocks)]
        rows.append(row)
    return Table((*result.axes, *SPEED_HEADER), rows,
                 title="speed: candidate / control tokens/s over every prompt's ABBA/BAAB blocks (δ, MDE: decode)",
                 align=["left"] * len(result.axes) + ["right"] * len(SPEED_HEADER))


def _heatmap_caption(result: SweepResult) -> str:
    rows_axis, cols = _grid_axes(result)
    across = f"rows: {rows_axis}" + (f"; columns: {' × '.join(cols)}" if cols else "")
    what = "speed ratio and call in the label" if result.speed else "max |Δ| and flips in the label"
    return (f"Verdict per matrix cell ({across}); colour: verdict severity, from bit-exact to divergent; {what}; "
            "a hatched cell has failed or pending jobs.")


def _grid_axes(result: SweepResult) -> tuple[str, list[str]]:
    axes = result.axes or ["cell"]
    return axes[0], axes[1:]


def heatmap_data(result: SweepResult) -> dict[str, Any]:
    """What the ``sweep-heatmap`` figure plots: a grid of cells, rows the first axis, columns the others.

    Returns a dict: ``row_axis`` (name), ``column_axes`` (names), ``rows`` and
    ``columns`` (value labels in matrix order; a column label joins the values
    of every column axis with ``", "``), ``verdicts`` (the scale, harmless
    first) and ``cells``: one dict per cell with ``row``, ``column`` (indices),
    ``cell``, ``verdict``, ``severity`` (index in ``verdicts``, None without a
    verdict), ``status``, ``max_abs_diff``, ``kld_mean``, ``flips``,
    ``speed_ratio``, ``speed_ci`` ([low, high]) and ``call``.
    """
    row_axis, column_axes = _grid_axes(result)
    rows: list[str] = []
    columns: list[str] = []
    cells = []
    for cell in result.cells:
        row = cell.values.get(row_axis, cell.cell)
        column = ", ".join(cell.values.get(axis, "") for axis in column_axes) or "all"
        if row not in rows:
            rows.append(row)
        if column not in columns:
            columns.append(column)
        decode = cell.speed.get("decode")
        cells.append({
            "row": rows.index(row), "column": columns.index(column), "cell": cell.cell,
            "verdict": cell.verdict, "severity": VERDICTS.index(cell.verdict) if cell.verdict else None,
            "status": cell.status, "max_abs_diff": cell.max_abs_diff, "kld_mean": cell.kld_mean,
            "flips": cell.flips,
            "speed_ratio": None if decode is None else decode.ratio,
            "speed_ci": None if decode is None else [decode.ci_low, decode.ci_high],
            "call": None if decode is None else decode.call,
        })
    return {"row_axis": row_axis, "column_axes": column_axes, "rows": rows, "columns": columns,
            "verdicts": list(VERDICTS), "cells": cells}


def sweep_plan_document(result: SweepResult) -> Document:
    """``logitlab sweep --dry-run``: the matrix's cells, their variants and jobs; nothing has run."""
    counts = result.counts()
    doc = Document("sweep-plan", f"logitlab sweep {result.name} (dry run)")
    doc.add(Heading(rich("logitlab sweep ", Span(result.name, "code"), ": dry run, nothing runs")),
            _header(result, counts))
    shared = any(a["shared"] for a in result.matrix["axes"])
    header = [*result.axes, *(["control"] if shared else []),
              "candidate" if result.kind == "ab" else "variant", "jobs"]
    rows = []
    for cell in result.cells:
        row = [cell.values.get(axis, "") for axis in result.axes]
        if shared:
            row.append(variant_text(cell.control) + _model_suffix(cell.control))
        row.append(variant_text(cell.candidate) + _model_suffix(cell.candidate))
        row.append(f"{cell.ok}/{cell.jobs} done" if cell.ok else str(cell.jobs))
        rows.append(row)
    doc.add(Table(header, rows, title=f"{plural(len(result.cells), 'cell')} × "
                                      f"{plural(len(result.matrix['prompts']), 'prompt')}"))
    todo = counts["failed"] + counts["pending"]
    doc.add(Paragraph(f"{plural(len(result.jobs), 'job')}, {todo} to run", tone="dim"))
    return doc


def _model_suffix(variant: dict[str, Any]) -> str:
    return f" [{Path(variant['model']).name}]" if variant.get("model") else ""


# -- one job's file -----------------------------------------------------------------------------
def sweep_job_document(job: SweepJobResult, *, show_error: bool = True) -> Document:
    """One job's result file: what ran where, then its experiment's own report."""
    from logitlab.report import document as build

    spec = job.spec
    status = Span(job.status, "verdict:bit-exact" if job.ok else "verdict:divergent")
    doc = Document("sweep-job", f"logitlab sweep job {job.key}")
    doc.add(Heading(rich("logitlab sweep job ", Span(job.key, "code"), ": ", status)))
    rows: list[tuple] = [
        ("sweep", spec.sweep),
        ("cell", spec.cell),
        ("prompt", spec.prompt.name),
        ("experiment", spec.experiment.kind + (" with speed" if spec.experiment.speed else "")),
        ("where", _place(job.where) + (f", attempt {job.attempt}" if job.attempt > 1 else "")),
        ("time", f"{job.started_at}, {job.seconds:.1f} s; engines loaded {job.engines_loaded}, "
                 f"kept from earlier jobs {job.engines_kept}"),
        ("logits hash", job.logits_hash or "n/a"),
    ]
    doc.add(KeyValues(rows, boxed=True))
    if job.error and show_error:
        doc.add(Paragraph(f"failed: {job.error}", tone="error"))
    inner = job.experiment_result()
    if inner is not None:
        nested = build(inner, show_error=False)
        doc.add(*(Heading(b.text, b.level + 1) if isinstance(b, Heading) else b for b in nested.blocks))
    elif job.ok:
        doc.add(Paragraph("no experiment result stored", tone="warning"))
    return doc
