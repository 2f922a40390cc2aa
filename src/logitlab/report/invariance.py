"""The ``invariance`` report: header with the probe's facts, the checks, the worst verdict with evidence.

:func:`invariance_document` turns an :class:`~logitlab.experiments.invariance.InvarianceResult`
into a :class:`~logitlab.report.document.Document`; the renderers write it.
In a stacked batch check (B copies of an n-token prompt compared at once) the
rows are shown as the user knows them: row c×n+p is ``copy c pos p``.
"""

from __future__ import annotations

import re
from typing import Sequence

from logitlab.experiments.invariance_results import Check, InvarianceResult
from logitlab.report.detection_text import DETECTION_TITLE, detection_lines
from logitlab.report.document import Block, Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.figure_blocks import check_heatmap_figure, comparison_figures
from logitlab.report.text import (INTERRUPTED, comparison_lines, flip_rows, fmt_num, run_header_rows, stopped_line,
                                  variant_text)

__all__ = ["invariance_document", "CHECK_HEADER", "FLIP_HEADER", "MAX_FLIPS", "check_rows", "summary_lines",
           "position_label", "runs_text"]

CHECK_HEADER = ("check", "verdict", "rows differing", "max |Δ|", "max ULP (row scale)", "top-1 agreement",
                "KLD max (nats)", "flips")
FLIP_HEADER = ("pos", "ref token (logit)", "obs token (logit)", "ref margin", "obs margin", "ref top-5", "obs top-5")
#: Flips of the worst check listed in the report (all are in the JSON).
MAX_FLIPS = 10


def position_label(check: Check, position: int) -> str:
    """A compared row as the user knows it: ``pos 33``, or ``copy 1 pos 33`` in a stacked batch check
    (row c×n+p of B copies of an n-token prompt is copy c, position p), or ``decode step 4`` in a check of a
    server's generation rows (``prefix-cache``: row t chose decode step t); a check whose rows start after the
    prompt (``verify``: decode row i) adds its ``details["row_offset"]``."""
    if check.details.get("decode_steps"):
        return f"decode step {position}"
    stacked = check.details.get("stacked")
    if not stacked:
        return f"pos {position + int(check.details.get('row_offset', 0))}"
    copy, pos = divmod(int(position), int(stacked["length"]))
    return f"copy {copy} pos {pos}"


_POSITION = re.compile(r"\bposition (\d+)\b")


def _rows_as_copies(check: Check, text: str) -> str:
    """``position 90`` in a stacked check's text -> ``copy 1 position 33``."""
    stacked = check.details.get("stacked")
    if not stacked:
        return text
    n = int(stacked["length"])
    return _POSITION.sub(lambda m: "copy {} position {}".format(*divmod(int(m.group(1)), n)), text)


def _flip_rows(check: Check) -> list[tuple[str, ...]]:
    rows = flip_rows(check.comparison)
    if not check.details.get("stacked"):
        return rows
    return [(position_label(check, f["position"]), *row[1:]) for f, row in zip(check.comparison.flips, rows)]


def _comparison_lines(check: Check) -> list[tuple[str, str]]:
    return [(key, _rows_as_copies(check, value)) for key, value in comparison_lines(check.comparison)]


def check_rows(result: InvarianceResult) -> list[tuple[str, ...]]:
    """One row per check: its name, verdict word and key statistics (columns as :data:`CHECK_HEADER`)."""
    rows = []
    for check in result.checks:
        c = check.comparison
        flips = c.flips
        agreement = "n/a" if c.argmax_agreement is None else f"{100 * c.argmax_agreement:.2f} %"
        rows.append((
            check.name,
            check.word,
            f"{c.differing_rows}/{c.n_positions}",
            fmt_num(c.max_abs_diff),
            fmt_num(c.max_scaled_ulp),
            agreement,
            fmt_num(c.kld.get("max")),
            ", ".join(f"{position_label(check, f['position'])} (margin {fmt_num(f['margin_ref'], 3)})"
                      for f in flips[:4]) + (" …" if len(flips) > 4 else "") if flips else "none",
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
    elif result.probe == "determinism" and d:
        lines.append(("runs", f"{d['runs']} at isolation={d['isolation']}, {cfg['n_decode']} greedy tokens each"))
        lines.append(("distinct logit arrays", f"{d['distinct_logits']} (runs grouped: "
                      + "; ".join(runs_text(g) for g in d["logit_groups"]) + ")"))
        lines.append(("distinct greedy texts", str(d["distinct_texts"])))
        for group in d["text_groups"][:5]:
            lines.append((f"text of runs {runs_text(group['runs'])}", repr(group["text"][:100])))
    elif result.probe == "settings" and d:
        lines.append(("settings", f"{d['reference']} (the reference) vs "
                      + "; ".join(", ".join(f"{k}={v}" for k, v in setting.items()) for setting in d["settings"])))
        lines.append(("greedy text", repr(d.get("generated_text", ""))))
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


# -- the document ------------------------------------------------------------------------
def invariance_document(result: InvarianceResult, *, show_error: bool = True) -> Document:
    """The report of an invariance probe.

    Args:
        result: the probe's result.
        show_error: include the "stopped early" line of a probe that Ctrl-C or an error stopped (leave it out
            when the command line prints the error itself).
    """
    word = result.verdict.word if result.verdict else "n/a"
    title = f"logitlab invariance {result.probe}"
    doc = Document("invariance", title)
    vacuous = " (vacuous: it could not have failed)" if result.vacuous else ""
    doc.add(Heading(rich(f"{title}: ", Span(word, f"verdict:{word}" if result.verdict else "strong"), vacuous)),
            _header(result))
    if result.error == INTERRUPTED and show_error:  # before any verdict: what it rests on
        doc.add(Paragraph(stopped_line(INTERRUPTED, done=len(result.checks), unit="compared check",
                                       rests_on="the checks and the verdict"), tone="error"))
    doc.add(Table(CHECK_HEADER, check_rows(result),
                  title="checks (reference → observed, every position, full vocabulary)"),
            check_heatmap_figure(result.checks))
    doc.add(*_verdict(result))
    if result.detection is not None and detection_lines(result.detection):
        doc.add(Paragraph(DETECTION_TITLE.replace("this run", "the worst check's observed run"), tone="dim",
                          tight=True), Bullets(detection_lines(result.detection), tight=True))
    doc.add(*_sensitivity(result))
    doc.add(*[Paragraph(f"note: {note}", tone="note") for note in result.notes])
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    return doc


def _sensitivity(result: InvarianceResult) -> list[Block]:
    """What each check exercised, the inverse controls (``--self-check``), and the probe's status."""
    exercised = [f"{c.name}: {c.details['exercised']}" + "".join(
                     f" — {key}: {c.details[key]}" for key in ("vacuous", "limited") if c.details.get(key))
                 for c in result.checks if c.details.get("exercised")]
    blocks: list[Block] = []
    if exercised:
        blocks += [Paragraph("exercised (forward passes, as the engine ran them)", tone="dim", tight=True),
                   Bullets(exercised, tight=True)]
    if result.controls:
        blocks += [Paragraph("self-check: inverse controls (one planted input token the probe must see)", tone="dim",
                             tight=True),
                   Bullets([f"{'caught' if c.caught else 'NOT caught'}: {c.check}, {c.planted}: {c.evidence}"
                            for c in result.controls], tight=True)]
    if not result.crash and result.checks:
        status = result.status
        why = f": {result.vacuous or result.generation_differs}" if result.vacuous or result.generation_differs else ""
        blocks.append(Paragraph(rich(Span("status: ", "strong"), status + why),
                                tone="warning" if status == "vacuous" or result.generation_differs else None,
                                tight=True))
    return blocks


def _header(result: InvarianceResult) -> KeyValues:
    return KeyValues(run_header_rows(result.manifest, [("variant", variant_text(result.config["variant"])),
                                                       ("prompt", f"{len(result.prompt_ids)} tokens"),
                                                       *summary_lines(result)]), boxed=True)


def _verdict(result: InvarianceResult) -> list[Block]:
    worst, verdict = result.worst, result.verdict
    if result.crash:
        return [Paragraph(rich(Span("verdict: ", "strong"), Span("crashed", "verdict:crashed"),
                               f"  (the engine crashed; {len(result.checks)} check(s) compared before it)")),
                Bullets(verdict.evidence, tight=True)]
    if worst is None or verdict is None:
        return [Paragraph("no check was compared", tone="warning")]
    blocks: list[Block] = [
        Paragraph(rich(Span("verdict: ", "strong"), Span(verdict.word, f"verdict:{verdict.word}"),
                       f"  (worst of {len(result.checks)} checks: {worst.name})")),
        Bullets([_rows_as_copies(worst, line) for line in verdict.evidence], tight=True),
        KeyValues([("reference", worst.reference), ("observed", worst.observed), *_comparison_lines(worst)],
                  header=("statistic", "value"), tight=True),
    ]
    flips = _flip_rows(worst)
    if flips:
        more = f" (first {MAX_FLIPS} of {len(flips)})" if len(flips) > MAX_FLIPS else ""
        blocks.append(Table(FLIP_HEADER, flips[:MAX_FLIPS], title=f"argmax flips{more}", tight=True))
    c = worst.comparison
    labels = [position_label(worst, p) for p in range(c.n_positions)] if worst.details.get("stacked") else None
    return blocks + comparison_figures(c, near_tie_margin=verdict.thresholds["near_tie_margin"], labels=labels,
                                       what=f"{worst.name} (the worst check)")
