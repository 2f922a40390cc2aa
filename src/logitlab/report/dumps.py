"""The dump-diff report as a document, and the summary lines of a dump capture.

:func:`dump_diff_document` turns a :class:`~logitlab.dumps.diff_results.DumpDiffResult`
into a :class:`~logitlab.report.document.Document`; the renderers write it.
``*_rows`` / ``*_lines`` return strings. Nothing here computes a statistic.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from logitlab.dumps.diff_results import DumpDiffResult, LayerRow, OneSideGroup, TensorDiff, compress_ranges
from logitlab.dumps.sizes import format_bytes
from logitlab.dumps.stats import ULP_BIN_LABELS, ULP_NAN_MISMATCH
from logitlab.report.document import Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.figure_blocks import dump_figures
from logitlab.report.text import plural

#: Problem lines listed (all are in the JSON).
MAX_PROBLEMS = 50
TENSOR_HEADER = ("tensor", "kind", "differing", "max |Δ|", "max ULP", "ULP " + "/".join(ULP_BIN_LABELS),
                 "NMSE", "cosine")
LAYER_HEADER = ("layer", "differing/compared", "max |Δ|", "max ULP", "max NMSE", "min cosine", "first differing")


def fmt_float(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if value == 0:
        return "0"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}e}"


def fmt_ulp(value: int) -> str:
    if value >= ULP_NAN_MISMATCH:
        return "NaN≠"
    return f"{value:.2e}" if value >= 1_000_000 else str(value)


def fmt_cos(value: float) -> str:
    """Cosine similarity; within 1e-9 of 1 as ``1-2.1e-14`` so tiny differences stay visible."""
    if value is None or math.isnan(value):
        return "n/a"
    if 1 - 1e-9 < value < 1:
        return f"1-{1 - value:.1e}"
    return f"{value:.9f}" if value > 0.999 else f"{value:.6f}"


def describe_side(info: dict[str, Any]) -> str:
    """One line for a dump: path, kind and, for logitlab dumps, engine, options and inputs."""
    text = f"{info['path']} ({info['kind']}, {info['n_tensors']} tensor-positions"
    if info.get("engine"):
        opts = info.get("options") or {}
        env = (info.get("variant") or {}).get("env") or {}
        parts = [f"{k}={v}" for k, v in opts.items()] + [f"env {k}={v}" for k, v in env.items()]
        text += f"; {info['engine']} {', '.join(parts) if parts else 'defaults'}; "
        text += f"{info.get('n_prompt', 0)} prompt + {info.get('n_generated', 0)} decode tokens"
        if info.get("model_sha256"):
            text += f"; model sha256 {info['model_sha256'][:12]}"
        if info.get("complete") is False:
            text += "; INCOMPLETE"
    return text + ")"


def tensor_row(t: TensorDiff) -> list[str]:
    s = t.stats
    if s is None:
        return [t.label, t.kind, "not compared", "", "", "", "", ""]
    return [t.label, t.kind, f"{s.differing}/{s.n}", fmt_float(s.max_abs_diff), fmt_ulp(s.max_ulp),
            "/".join(str(c) for c in s.ulp_hist), fmt_float(s.nmse), fmt_cos(s.cosine)]


def layer_rows(result: DumpDiffResult) -> list[list[str]]:
    """Rows of the growth table: bit-exact layers before the first differing one collapse into one row;
    a layer where nothing could be compared says so."""
    rows: list[list[str]] = []
    exact: list[LayerRow] = []
    started = False
    for row in result.layers:
        if not started and row.compared and not row.differing:
            exact.append(row)
            continue
        rows += _exact_rows(exact)
        exact = []
        started = started or row.differing > 0
        rows.append(_layer_row(row))
    return rows + _exact_rows(exact)


def _exact_rows(rows: list[LayerRow]) -> list[list[str]]:
    """One row for a run of bit-exact layers (none for an empty run)."""
    if not rows:
        return []
    label = rows[0].label if len(rows) == 1 else f"{rows[0].label}…{rows[-1].label}"
    return [[label, f"0/{sum(r.compared for r in rows)}", "0", "0", "0", "1", "(bit-exact)"]]


def _layer_row(row: LayerRow) -> list[str]:
    if not row.compared:
        return [row.label, "0/0", "", "", "", "", f"not compared ({plural(row.not_compared, 'tensor-position')})"]
    return [row.label, f"{row.differing}/{row.compared}", fmt_float(row.max_abs_diff), fmt_ulp(row.max_ulp),
            fmt_float(row.max_nmse), fmt_cos(row.min_cosine), row.first or ""]


def one_side_lines(groups: Sequence[OneSideGroup]) -> list[str]:
    out = []
    for g in groups:
        d = g.to_dict()
        where = []
        if d["layers"]:
            where.append(f"layers {d['layers']}")
        if d["positions"]:
            where.append(f"positions {d['positions']}")
        out.append(f"{g.label} ({', '.join(where) or 'whole'}): {g.count}")
    return out


def position_lines(result: DumpDiffResult) -> list[str]:
    """``pos 1-15: kqv_out-0`` — where each position first differs, runs of equal tensors merged."""
    runs: list[tuple[int, int, str]] = []
    for pos, label in result.first_by_position().items():
        name = label.rsplit("@", 1)[0]
        if runs and runs[-1][2] == name and runs[-1][1] == pos - 1:
            runs[-1] = (runs[-1][0], pos, name)
        else:
            runs.append((pos, pos, name))
    return [f"pos {a}: {n}" if a == b else f"pos {a}-{b}: {n}" for a, b, n in runs]


def headline(result: DumpDiffResult) -> str:
    v = result.verdict
    if v == "nothing-aligned":
        return "nothing could be aligned or compared"
    text = (f"{result.n_aligned} aligned tensor-positions: {result.n_compared - result.n_differing} bit-exact, "
            f"{result.n_differing} differ")
    if result.n_unresolved:
        text += f", {result.n_unresolved} not compared"
    positions = {t.position for t in result.tensors if t.position is not None}
    layers = {t.layer for t in result.tensors if t.layer is not None}
    names = {t.name for t in result.tensors}
    text += f" ({plural(len(names), 'name')}, {plural(len(layers), 'layer')}, {plural(len(positions), 'position')})"
    return text


def scale_lines(result: DumpDiffResult, limit: int = 5) -> list[str]:
    """One line per name that differs by a factor only (at most ``limit``, then a count)."""
    out = []
    groups = result.scale_only
    for g in groups[:limit]:
        lo, hi = f"{g.min_scale:.4g}", f"{g.max_scale:.4g}"
        where = f" (positions {compress_ranges(g.positions)})" if g.positions else ""
        out.append(f"{g.label}{where}: B = {lo if lo == hi else f'{lo}…{hi}'} × A: a scale, most likely a naming or "
                   f"convention mismatch (cosine {fmt_cos(g.min_cosine)}); not taken as the first divergence")
    if len(groups) > limit:
        out.append(f"… and {plural(len(groups) - limit, 'other name')} that differ by a scale only (see --json)")
    return out


def first_lines(result: DumpDiffResult) -> list[str]:
    """The first-divergence paragraph (plain text lines), with the scale-only pairs before it."""
    first = result.first_divergence
    if first is None:
        return scale_lines(result)
    s = first.stats
    layer = f"layer {first.layer}" if first.layer is not None else "outside the layers"
    out = [f"first divergence: {first.label} ({layer}, {first.kind}, {first.dtype} {list(first.shape or [])}): "
           f"{s.differing}/{s.n} differ, max |Δ| {fmt_float(s.max_abs_diff)}, max {fmt_ulp(s.max_ulp)} ULP, "
           f"NMSE {fmt_float(s.nmse)}, cosine {fmt_cos(s.cosine)}"]
    before = sum(1 for t in result.tensors[: result.first_index] if t.stats is not None and not t.differs)
    out.append(f"{before} tensor-positions before it in execution order are bit-exact")
    out += scale_lines(result)
    hidden = result.unresolved_before_first
    if hidden:
        labels = ", ".join(t.label for t in hidden[:5]) + (" …" if len(hidden) > 5 else "")
        out.append(f"caution: {len(hidden)} earlier tensor-positions could not be compared ({labels}); "
                   "the divergence may start there")
    earlier_only = [g for g in result.only_left if g.layers and first.layer is not None
                    and min(g.layers) <= first.layer]
    lacking = [g for g in earlier_only if not g.other_side_has_name]
    if lacking:
        names = ", ".join(g.label for g in lacking)
        out.append(f"only in A at or before layer {first.layer}: {names} — B lacks these (not computed, not "
                   "dumped, or named otherwise, e.g. fused into flash attention); the first divergence is the first "
                   "tensor both sides have")
    gaps = [g for g in earlier_only if g.other_side_has_name]
    if gaps:
        out.append(f"missing positions in B at or before layer {first.layer}: {'; '.join(one_side_lines(gaps))} — "
                   "B has these names at other positions or layers (a missing or truncated step file?); what B "
                   "misses is not compared")
    return out


def _differing_table(result: DumpDiffResult, max_rows: int, all_tensors: bool) -> Table:
    shown = [t for t in result.tensors if t.differs or all_tensors]
    if not all_tensors:
        shown = shown[:max_rows]
    title = ("every aligned tensor-position" if all_tensors else
             f"first {len(shown)} differing tensor-positions (execution order)")
    return Table(TENSOR_HEADER, (tensor_row(t) for t in shown), title=title,
                 align=("left", "left") + ("right",) * (len(TENSOR_HEADER) - 2))


def dump_diff_document(result: DumpDiffResult, *, show_error: bool = True, max_rows: int = 10,
                       all_tensors: bool = False) -> Document:
    """The dump-diff report: sides, verdict, first divergence, tensors, growth by layer, one-side tensors, problems.

    Args:
        result: the diff.
        show_error: accepted for every builder's signature; a diff has no error of its own (problems
            are part of the result and always shown).
        max_rows: differing tensor-positions listed (``dump-diff --rows``).
        all_tensors: list every aligned tensor-position instead (``dump-diff --all``).
    """
    verdict = result.verdict
    doc = Document("dump-diff", "logitlab dump-diff")
    doc.add(Heading(rich("logitlab dump-diff: ", Span(verdict, f"verdict:{verdict}"))),
            KeyValues([("A", Span(describe_side(result.left), "code")),
                       ("B", Span(describe_side(result.right), "code"))], boxed=True),
            Paragraph(rich(Span("verdict: ", "strong"), Span(verdict, f"verdict:{verdict}"), f" — {headline(result)}")))
    lines = first_lines(result)
    if lines:
        positions = position_lines(result)
        more = lines[1:] + (["where each position first differs: " + "; ".join(positions)] if positions else [])
        doc.add(Paragraph(rich(Span(lines[0], "strong"))), Bullets(more, tight=True) if more else None)
    if result.n_differing:
        doc.add(_differing_table(result, max_rows, all_tensors),
                Table(LAYER_HEADER, layer_rows(result), title="growth by layer",
                      align=("left",) + ("right",) * 5 + ("left",)),
                *dump_figures(result))
    one_side = [f"{title}: " + "; ".join(one_side_lines(groups))
                for title, groups in (("only in A", result.only_left), ("only in B", result.only_right)) if groups]
    if one_side:
        doc.add(Bullets(one_side, tone="note"))
    if result.problems:
        shown = list(result.problems[:MAX_PROBLEMS])
        if len(result.problems) > MAX_PROBLEMS:
            shown.append(f"… {len(result.problems) - MAX_PROBLEMS} more (see --json)")
        doc.add(Paragraph(rich(Span(f"{len(result.problems)} problem(s):", "strong")), tone="warning"),
                Bullets(shown, tight=True))
    return doc


def capture_lines(label: str, result: Any) -> list[str]:
    """Summary lines of one finished capture (a CaptureResult)."""
    m = result.manifest
    lines = [f"{label}: {result.path}: {plural(len(m.tensors), 'tensor')} in {plural(len(m.steps), 'step file')}, "
             f"{format_bytes(m.bytes_written)} (estimate {format_bytes(m.estimate_bytes or 0)}); "
             f"{len(m.prompt_ids)} prompt + {len(m.generated)} decode tokens"]
    if m.stopped:
        lines.append(f"{label}: stopped early: {m.stopped}")
    for note in m.engine.get("capture_notes", [])[:5]:
        lines.append(f"{label}: note: {note}")
    return lines


__all__ = ["capture_lines", "dump_diff_document", "layer_rows", "tensor_row"]
