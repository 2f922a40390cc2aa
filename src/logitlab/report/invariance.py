"""Terminal and Markdown reports of an invariance probe (same verdict sections as ``ab``).

``format_invariance`` returns rich renderables, ``display_invariance`` prints
them, ``format_invariance_markdown`` returns Markdown text; none computes.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from logitlab.experiments.invariance import InvarianceResult
from logitlab.report.text import VERDICT_STYLE, comparison_lines, engine_rows, flip_rows, fmt_num

CHECK_HEADER = ("check", "verdict", "rows differing", "max |Δ|", "max ULP (row scale)", "top-1 agreement",
                "KLD max (nats)", "flips")
FLIP_HEADER = ("pos", "ref token (logit)", "obs token (logit)", "ref margin", "obs margin", "ref top-5", "obs top-5")


def position_label(check: Any, position: int) -> str:
    """A compared row as the user knows it: ``pos 33``, or ``copy 1 pos 33`` in a stacked batch check
    (row c×n+p of B copies of an n-token prompt is copy c, position p)."""
    stacked = check.details.get("stacked")
    if not stacked:
        return f"pos {position}"
    copy, pos = divmod(int(position), int(stacked["length"]))
    return f"copy {copy} pos {pos}"


_POSITION = re.compile(r"\bposition (\d+)\b")


def _rows_as_copies(check: Any, text: str) -> str:
    """``position 90`` in a stacked check's text -> ``copy 1 position 33``."""
    stacked = check.details.get("stacked")
    if not stacked:
        return text
    n = int(stacked["length"])
    return _POSITION.sub(lambda m: "copy {} position {}".format(*divmod(int(m.group(1)), n)), text)


def _flip_rows(check: Any) -> list[tuple[str, ...]]:
    rows = flip_rows(check.comparison)
    if not check.details.get("stacked"):
        return rows
    return [(position_label(check, f["position"]), *row[1:]) for f, row in zip(check.comparison.get("flips", []), rows)]


def _comparison_lines(check: Any) -> list[tuple[str, str]]:
    return [(key, _rows_as_copies(check, value)) for key, value in comparison_lines(check.comparison)]


def check_rows(result: InvarianceResult) -> list[tuple[str, ...]]:
    """One row per check: its name, verdict word and key statistics."""
    rows = []
    for check in result.checks:
        c = check.comparison
        flips = c.get("flips", [])
        rows.append((
            check.name,
            check.word,
            f"{c['differing_rows']}/{c['n_positions']}",
            fmt_num(c["max_abs_diff"]),
            fmt_num(c["max_scaled_ulp"]),
            f"{100 * c['argmax_agreement']:.2f} %",
            fmt_num(c["kld"].get("max")),
            ", ".join(f"{position_label(check, f['position'])} (margin {f['margin_ref']:.3g})" for f in flips[:4])
            + (" …" if len(flips) > 4 else "") if flips else "none",
        ))
    return rows


def summary_lines(result: InvarianceResult) -> list[tuple[str, str]]:
    """Probe-specific facts as (label, value) pairs."""
    cfg, d = result.config, result.details
    lines: list[tuple[str, str]] = []
    if result.probe == "batch":
        backend = d.get("backend", {})
        lines.append(("batch sizes", ", ".join(map(str, d.get("batch_sizes", [])))
                      + f" (fill {d.get('fill')}, padding {', '.join(d.get('paddings', []))})"))
        lines.append(("batching", backend.get("mode", "?") + "".join(
            f", {k}={v}" for k, v in backend.items() if k != "mode")))
        for check in result.checks:
            flags = check.details.get("copies_bit_exact")
            if flags:
                lines.append((f"copies, {check.name}", "bit-exact with the prompt alone: "
                               + " ".join(f"#{i}={'yes' if f else 'NO'}" for i, f in enumerate(flags))))
    elif result.probe == "prefill-decode":
        first, last = d.get("positions", [None, None])
        lines.append(("positions", f"p = {first}..{last} ({len(result.prompt_ids)} prompt tokens + "
                                   f"{cfg['n_decode']} greedy tokens)"))
        lines.append(("greedy text", repr(d.get("generated_text", ""))))
    elif result.probe == "determinism":
        lines.append(("runs", f"{d['runs']} at isolation={d['isolation']}, {cfg['n_decode']} greedy tokens each"))
        lines.append(("distinct logit arrays", f"{d['distinct_logits']} (runs grouped: "
                      + "; ".join(runs_text(g) for g in d["logit_groups"]) + ")"))
        lines.append(("distinct greedy texts", str(d["distinct_texts"])))
        for group in d["text_groups"][:5]:
            lines.append((f"  runs {runs_text(group['runs'])}", repr(group["text"][:100])))
    return lines


def runs_text(runs: Sequence[int]) -> str:
    """Run numbers as ranges: ``[1, 2, 3, 5]`` -> ``"1-3,5"``."""
    parts: list[str] = []
    for run in runs:
        if parts and run == int(parts[-1].rsplit("-", 1)[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{run}"
        else:
            parts.append(str(run))
    return ",".join(parts)


def _variant_text(variant: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in variant["options"].items()] + [f"env {k}={v}" for k, v in variant["env"].items()]
    return variant["engine"] + (": " + ", ".join(parts) if parts else ": defaults")


def _title(result: InvarianceResult) -> str:
    return f"logitlab invariance {result.probe}"


def format_invariance(result: InvarianceResult) -> list[RenderableType]:
    """All sections of the terminal report, in reading order."""
    engine = result.manifest["engine"]
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for row in engine_rows(engine):
        head.add_row(*row)
    head.add_row("variant", _variant_text(result.config["variant"]))
    head.add_row("prompt", f"{len(result.prompt_ids)} tokens")
    for label, value in summary_lines(result):
        head.add_row(label, value)
    parts: list[RenderableType] = [Panel(head, title=_title(result), expand=False)]

    table = Table(title="checks (reference → observed, every position, full vocabulary)")
    for name in CHECK_HEADER:
        table.add_column(name)
    for row in check_rows(result):
        table.add_row(*row[:1], Text(row[1], style=VERDICT_STYLE.get(row[1], "")), *row[2:])
    parts.append(table)

    worst, verdict = result.worst, result.verdict
    if worst is not None:
        title = Text.assemble(("verdict: ", "bold"), (verdict.word, VERDICT_STYLE.get(verdict.word, "bold")),
                              f"  (worst of {len(result.checks)} checks: {worst.name})")
        stats = Table.grid(padding=(0, 2))
        stats.add_column(style="bold")
        stats.add_column()
        stats.add_row("reference", worst.reference)
        stats.add_row("observed", worst.observed)
        for key, value in _comparison_lines(worst):
            stats.add_row(key, value)
        group: list[RenderableType] = [title, *[Text("  • " + _rows_as_copies(worst, e)) for e in verdict.evidence],
                                       stats]
        flips = _flip_rows(worst)
        if flips:
            flip_table = Table(title="argmax flips")
            for name in FLIP_HEADER:
                flip_table.add_column(name)
            for row in flips[:10]:
                flip_table.add_row(*row)
            group.append(flip_table)
        parts.append(Group(*group))
    for note in result.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    return parts


def display_invariance(result: InvarianceResult, console: Console | None = None) -> None:
    console = console or Console()
    for part in format_invariance(result):
        console.print(part)
        console.print()


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cells(row: Sequence[str]) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |"

    return [cells(header), "|" + "---|" * len(header)] + [cells(row) for row in rows]


def format_invariance_markdown(result: InvarianceResult) -> str:
    """The whole report as Markdown text (a pull-request comment)."""
    engine, host = result.manifest["engine"], result.manifest["host"]
    verdict = result.verdict
    word = verdict.word if verdict else "n/a"
    model = str(engine.get("model") or "default").rsplit("/", 1)[-1]
    out = [f"## {_title(result)}: **{word}**", ""]
    out += [
        f"- model: `{model}` (sha256 `{engine.get('model_sha256', '?')[:12]}`), "
        f"{engine.get('engine_version', engine['engine'])}",
        f"- variant: `{_variant_text(result.config['variant'])}`; prompt: {len(result.prompt_ids)} tokens",
    ]
    out += [f"- {label.strip()}: {value}" for label, value in summary_lines(result)]
    out += [f"- host: {host['cpu']}, {host['cores']} cores, {host['os']}, Python {host['python']}", ""]
    out += _table(CHECK_HEADER, check_rows(result))
    worst = result.worst
    if worst is not None:
        out += ["", f"**Verdict: `{word}`** (worst of {len(result.checks)} checks: {worst.name}; reference "
                    f"{worst.reference}, observed {worst.observed})", ""]
        out += [f"- {_rows_as_copies(worst, line)}" for line in verdict.evidence]
        out.append("")
        out += _table(("statistic", "value"), _comparison_lines(worst))
        flips = _flip_rows(worst)
        if flips:
            out.append("")
            out += _table(FLIP_HEADER, flips[:20])
    if result.notes:
        out.append("")
        out += [f"> note: {note}" for note in result.notes]
    return "\n".join(out) + "\n"
