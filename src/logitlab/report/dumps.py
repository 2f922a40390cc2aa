"""Reports of dump captures and dump-diffs: terminal (rich) and Markdown.

``*_rows`` / ``format_*`` functions return plain data or text; ``display_*``
print rich renderables. Nothing here computes a statistic.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from logitlab.dumps.diff import DumpDiffResult, LayerRow, OneSideGroup, TensorDiff, compress_ranges
from logitlab.dumps.format import format_bytes
from logitlab.dumps.stats import ULP_BIN_LABELS, ULP_NAN_MISMATCH
from logitlab.report.text import plural

VERDICT_STYLE = {"bit-exact": "bold green", "incomplete": "bold yellow", "differs": "bold red",
                 "nothing-aligned": "bold red"}
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


def display_dump_diff(result: DumpDiffResult, console: Console, *, max_rows: int = 10,
                      all_tensors: bool = False) -> None:
    """Print the dump-diff report: sides, verdict, first divergence, tensors, growth table, one-side, problems."""
    console.print(Text("logitlab dump-diff", style="bold"))
    console.print(f"A: {describe_side(result.left)}", soft_wrap=True)
    console.print(f"B: {describe_side(result.right)}", soft_wrap=True)
    console.print(Text.assemble(("verdict: ", "bold"), (result.verdict, VERDICT_STYLE.get(result.verdict, "")),
                                f" — {headline(result)}"), soft_wrap=True)
    for line in first_lines(result):
        console.print(line, soft_wrap=True)
    positions = position_lines(result)
    if positions:
        console.print("where each position first differs: " + "; ".join(positions), soft_wrap=True)
    if result.n_differing:
        shown = [t for t in result.tensors if t.differs or all_tensors]
        if not all_tensors:
            shown = shown[:max_rows]
        table = Table(title=("every aligned tensor-position" if all_tensors else
                             f"first {len(shown)} differing tensor-positions (execution order)"),
                      title_justify="left")
        for i, col in enumerate(TENSOR_HEADER):
            table.add_column(col, justify="left" if i < 2 else "right")
        for t in shown:
            table.add_row(*tensor_row(t))
        console.print(table)
        growth = Table(title="growth by layer", title_justify="left")
        for i, col in enumerate(LAYER_HEADER):
            growth.add_column(col, justify="left" if i in (0, 6) else "right")
        for row in layer_rows(result):
            growth.add_row(*row)
        console.print(growth)
    for title, groups in (("only in A", result.only_left), ("only in B", result.only_right)):
        if groups:
            console.print(f"{title}: " + "; ".join(one_side_lines(groups)), soft_wrap=True)
    if result.problems:
        console.print(Text(f"{len(result.problems)} problem(s):", style="bold yellow"))
        for line in result.problems[:50]:
            console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)
        if len(result.problems) > 50:
            console.print(f"  … {len(result.problems) - 50} more (see --json)")


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def format_dump_diff_markdown(result: DumpDiffResult, *, max_rows: int = 10) -> str:
    """The dump-diff report as Markdown (for a pull-request comment or ``ab --localize``)."""
    out = [f"## logitlab dump-diff: **{result.verdict}**", "",
           f"- A: `{describe_side(result.left)}`", f"- B: `{describe_side(result.right)}`",
           f"- {headline(result)}", ""]
    lines = first_lines(result)
    if lines:
        out += [f"**{lines[0]}**", ""] + [f"- {line}" for line in lines[1:]]
        positions = position_lines(result)
        if positions:
            out.append("- where each position first differs: " + "; ".join(positions))
        out.append("")
        out += _md_table(TENSOR_HEADER, (tensor_row(t) for t in [t for t in result.tensors if t.differs][:max_rows]))
        out += ["", "**Growth by layer**", ""]
        out += _md_table(LAYER_HEADER, layer_rows(result))
        out.append("")
    for title, groups in (("Only in A", result.only_left), ("Only in B", result.only_right)):
        if groups:
            out.append(f"- {title}: " + "; ".join(one_side_lines(groups)))
    if result.problems:
        out += ["", f"**Problems ({len(result.problems)})**", ""] + [f"- {p}" for p in result.problems[:50]]
    return "\n".join(out).rstrip() + "\n"


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


__all__ = ["capture_lines", "display_dump_diff", "format_dump_diff_markdown", "layer_rows", "tensor_row"]
