"""The ``invariance matrix`` report: one row per axis (verdict, identical rows, ULP/KLD tail, first divergence,
detection limit), the skipped axes with their reason, then every check of every probe.

:func:`matrix_document` turns an :class:`~logitlab.experiments.invariance_matrix.InvarianceMatrixResult` into a
:class:`~logitlab.report.document.Document`; the renderers write it (Markdown: a table to paste in a pull request).
"""

from __future__ import annotations

from typing import Any

from logitlab.experiments.invariance_matrix import AxisResult, InvarianceMatrixResult
from logitlab.numerics import VERDICTS
from logitlab.report.detection_text import HEADLINE_HEADER, headline_cell
from logitlab.report.document import Block, Bullets, Document, Figure, Heading, KeyValues, Paragraph, Span, Table, \
    rich
from logitlab.report.invariance import check_rows, position_label
from logitlab.report.invariance_batch_axes import batch_position_text, batch_sizes_text, batch_workload
from logitlab.report.text import INTERRUPTED, fmt_num, plural, run_header_rows, stopped_line, variant_text

__all__ = ["matrix_document", "AXIS_HEADER", "axis_rows", "compared_text", "cost_rows", "distinct_text",
           "matrix_figure_data"]

#: What a server axis compares, in words (formatted with the matrix's config).
SERVER_AXES = {"concurrent": "run 1 alone vs runs 2..{runs} each beside {background} other requests in flight",
               "prefix-cache": "run 1 a prefix-cache miss vs runs 2..{runs} hits (the generation's rows)"}
AXIS_HEADER = ("axis", "verdict", "identical rows", "max ULP", "KLD p99 / max", "first divergence", HEADLINE_HEADER)
#: The columns of :func:`~logitlab.report.invariance.check_rows` the matrix's checks table keeps (name, verdict,
#: rows differing, max |Δ|, KLD max, flips).
CHECK_COLUMNS = (0, 1, 2, 3, 6, 7)


def _setting(setting: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def distinct_text(axis: AxisResult) -> str:
    """``determinism``: ``1 unique logit array of 5 runs, 1 unique greedy text`` (per prompt where they differ)."""
    items = axis.distinct()
    texts = [f"{plural(d['logits'], 'unique logit array')} of {d['runs']} runs, "
             f"{plural(d['texts'], 'unique greedy text')}" for d in items]
    if len(set(texts)) <= 1:
        return texts[0] if texts else ""
    return "; ".join(f"{d['prompt']}: {t}" for d, t in zip(items, texts))


def compared_text(axis: AxisResult, config: dict[str, Any]) -> str:
    """What the axis compared, in words."""
    if axis.axis == "determinism":
        return distinct_text(axis) or f"{config['runs']} runs"
    if axis.axis in SERVER_AXES:
        return f"{SERVER_AXES[axis.axis].format(**config)}: " + (distinct_text(axis) or f"{config['runs']} runs")
    if axis.axis == "batch":
        return batch_sizes_text(axis, config)
    if axis.axis == "batch-position":
        return batch_position_text(axis, config)
    if axis.axis == "prefill-decode":
        return "decode steps vs one prefill"
    if axis.axis == "verify":
        ks = "/".join(str(k) for k in sorted({p.details["k"] for p in axis.probes if p.details.get("k")})) or "K"
        return f"M={ks} verify blocks vs M=1 decode calls"
    if axis.axis == "process":
        return "a warm engine process (after another prompt's run) vs a freshly started one"
    if not axis.settings:
        return ""
    return "; ".join(_setting(s) for s in axis.settings[1:]) + f" vs {_setting(axis.settings[0])}"


def _first(axis: AxisResult, several_prompts: bool) -> str:
    first = axis.first_divergence
    if first is None:
        return "none" if axis.probes else ""
    name, check = first["prompt"], first["check"]
    check_obj = next(c for n, c in axis.checks() if n == name and c.name == check)
    where = position_label(check_obj, first["position"])
    return (f"{name}, " if several_prompts else "") + f"{check}, {where}"


def axis_rows(result: InvarianceMatrixResult) -> list[tuple[Any, ...]]:
    """One row per axis that ran (columns as :data:`AXIS_HEADER`; the detection limit is that of the axis's worst
    check, for one argmax logit raised: :data:`~logitlab.report.detection_text.HEADLINE_HEADER`)."""
    several = len(result.config["prompts"]) > 1
    rows = []
    for axis in result.ran:
        identical, total = axis.rows
        word = axis.verdict_word or "n/a"
        share = f"{100 * identical / total:.1f} % ({identical}/{total})" if total else "n/a"
        rows.append((axis.axis, Span(word, f"verdict:{word}") if axis.verdict_word else word, share,
                     fmt_num(axis.max_scaled_ulp, 3), f"{fmt_num(axis.kld('p99'), 3)} / {fmt_num(axis.kld('max'), 3)}",
                     _first(axis, several), headline_cell(axis.detection)))
    return rows


def _severity(word: str | None) -> int | None:
    return None if word is None else VERDICTS.index(word)


def matrix_figure_data(result: InvarianceMatrixResult) -> dict[str, Any]:
    """What the ``invariance-matrix`` figure plots: one row per selected axis, its checks as cells.

    Returns a dict: ``verdicts`` (the scale, harmless first) and ``rows``, one per axis of the result (skipped
    and not run included), each with ``axis``, ``status``, ``skipped`` (the reason, or None), ``verdict``,
    ``severity`` (index in ``verdicts``, None without a verdict), ``identical`` and ``rows`` (bit-identical rows
    of rows compared, every check of every prompt) and ``cells``: one per setting or size the axis compared (its
    check name, in the order first run), over every prompt: ``check``, ``verdict`` (the worst over the
    prompts), ``severity``, ``identical``, ``rows``; an engine crash is one more cell, ``(the engine)``.
    """
    rows = []
    for axis in result.axes:
        cells: dict[str, dict[str, Any]] = {}
        for _, probe in zip(axis.prompts, axis.probes):
            for check in probe.checks:
                c = check.comparison
                cell = cells.setdefault(check.name, {"check": check.name, "verdict": None, "severity": None,
                                                     "identical": 0, "rows": 0})
                cell["identical"] += c.n_positions - c.differing_rows
                cell["rows"] += c.n_positions
                if cell["severity"] is None or _severity(check.word) > cell["severity"]:
                    cell["verdict"], cell["severity"] = check.word, _severity(check.word)
            if probe.crash:
                cells["(the engine)"] = {"check": "(the engine)", "verdict": "crashed",
                                         "severity": _severity("crashed"), "identical": 0, "rows": 0}
        identical, total = axis.rows
        rows.append({"axis": axis.axis, "status": axis.status, "skipped": axis.skipped, "verdict": axis.verdict_word,
                     "severity": _severity(axis.verdict_word), "identical": identical, "rows": total,
                     "cells": list(cells.values())})
    return {"verdicts": list(VERDICTS), "rows": rows}


def _matrix_figure(result: InvarianceMatrixResult) -> Figure | None:
    if not result.axes:
        return None
    return Figure("invariance-matrix", (
        "The matrix: one row per invariance axis; the first cell is the whole axis, the others each setting or "
        "size it compared (B=2, n_ubatch=4, runs 2..R), each over every prompt; colour: the worst verdict, from "
        "bit-exact (green) to divergent (red) and crashed (black), grey where the axis was skipped or not run; "
        "label: the verdict and the share of bit-identical rows. Read which way of running the same request "
        "moves the logits, and from which batch size or setting on."), matrix_figure_data(result))


def _check_table(axis: AxisResult, config: dict[str, Any]) -> Table:
    """One axis's checks, every probe's (columns: [prompt], then those of :data:`CHECK_COLUMNS`)."""
    several = len(config["prompts"]) > 1
    rows = []
    for name, probe in zip(axis.prompts, axis.probes):
        for row in check_rows(probe):
            rows.append((*((name,) if several else ()), *(row[i] for i in CHECK_COLUMNS)))
        if probe.crash:
            rows.append((*((name,) if several else ()), "(the engine)", "crashed", *[""] * (len(CHECK_COLUMNS) - 2)))
    header = (*(("prompt",) if several else ()), "check", "verdict", "rows differing", "max |Δ|", "KLD max",
              "argmax flips")
    return Table(header, rows, title=f"{axis.axis}: {compared_text(axis, config)}")


def _topk_scope(result: InvarianceMatrixResult) -> str:
    """``; determinism: on the returned top-k only`` where an axis compared a server's top-k log-probabilities."""
    axes = [a.axis for a in result.ran if any(c.comparison.scope == "top-k" for _, c in a.checks())]
    return f"; {', '.join(axes)}: on the returned top-k log-probabilities only (KLD a lower bound)" if axes else ""


def _header(result: InvarianceMatrixResult) -> KeyValues:
    cfg = result.config
    rows: list[tuple[Any, ...]] = [("variant", variant_text(cfg["variant"]))]
    lengths = {}
    for axis in result.ran:
        for name, probe in zip(axis.prompts, axis.probes):
            if probe.prompt_ids:
                lengths.setdefault(name, len(probe.prompt_ids))
    rows.append(("prompts", ", ".join(f"{p['name']}" + (f" ({lengths[p['name']]} tokens)" if p["name"] in lengths
                                                          else "") for p in cfg["prompts"])))
    ran = [a.axis for a in result.ran]
    alone = [a for a in ("batch", "batch-position") if a in ran]  # the batch axes run the prompt alone
    workload = [f"{cfg['n_decode']} greedy tokens after each prompt" + (f" ({', '.join(alone)}: the prompt alone)"
                                                                         if alone else "")]
    workload += [f"{axis} {cfg['runs']} runs" for axis in ("determinism", *SERVER_AXES) if axis in ran]
    workload += [batch_workload(result.ran, cfg)] if "batch" in ran else []
    rows.append(("workload", "; ".join(workload)))
    rows.append(("axes run", ", ".join(ran) if ran else "none"))
    return KeyValues(run_header_rows(result.manifest, rows), boxed=True)


def _verdict(result: InvarianceMatrixResult) -> list[Block]:
    axis = result.worst
    if axis is None:
        return [Paragraph("no axis was compared", tone="warning")]
    probe = axis.worst
    verdict = probe.verdict
    where = f"{axis.axis}" + (f", prompt {axis.prompts[axis.probes.index(probe)]}"
                              if len(result.config["prompts"]) > 1 else "")
    check = probe.worst
    if check is not None and not probe.crash:
        where += f", check {check.name}"
    return [Paragraph(rich(Span("verdict: ", "strong"), Span(verdict.word, f"verdict:{verdict.word}"),
                           f"  (worst of {len(result.ran)} axes: {where})")),
            Bullets(verdict.evidence, tight=True)]


def _ratio_text(ratio: float | None, low: float | None, high: float | None, confidence: float | None) -> str:
    if ratio is None:
        return "n/a"
    ci = f" [{low:.3f}, {high:.3f}] ({100 * confidence:.0f} % CI)" if low is not None and high is not None else ""
    return f"{ratio:.3f}{ci}"


def cost_rows(result: InvarianceMatrixResult) -> list[tuple[str, str]]:
    """The mode's cost apart, as measured by ``--speed``'s ``ab`` (candidate: the variant; control: without the mode):
    ``throughput`` (the decode tokens/s ratio, its interval), ``latency`` (the prefill time ratio, i.e. 1 / the prefill
    tokens/s ratio, the interval's ends inverted; a server's prefill time is its scoring requests', not a time to
    first token) and ``load time`` (each side's load seconds and their ratio: one load each, no interval). A phase
    ``ab`` did not measure, or loads it did not record, are left out."""
    ab = result.speed_result
    if ab is None:
        return []
    rows = []
    decode, prefill = ab.speed.get("decode"), ab.speed.get("prefill")
    if decode is not None:
        rows.append(("throughput", "decode tokens/s, candidate / control: "
                     + _ratio_text(decode.ratio, decode.ci_low, decode.ci_high, decode.confidence)
                     + f"; decode tokens/s: {decode.call}"))
    if prefill is not None and prefill.ratio:
        inverse = [None if v is None or v <= 0 else 1 / v for v in (prefill.ratio, prefill.ci_high, prefill.ci_low)]
        rows.append(("latency", "prefill time (≈ time to first token), candidate / control: "
                     + _ratio_text(*inverse, prefill.confidence) + f"; prefill tokens/s: {prefill.call}"))
    loads = (ab.manifest or {}).get("load_seconds") or {}
    if "control" in loads and "candidate" in loads:
        control, candidate = loads["control"], loads["candidate"]
        ratio = f"{candidate / control:.3f}" if control > 0 else "n/a"
        rows.append(("load time", f"control {control:.3g} s, candidate {candidate:.3g} s, candidate / control "
                                  f"{ratio} (one load each: no interval)"))
    return rows


def _speed(result: InvarianceMatrixResult) -> list[Block]:
    """``--speed``: the mode's cost, throughput, latency and load time apart (:func:`cost_rows`), then ``ab``'s speed
    blocks (candidate: the variant; control: without the mode)."""
    ab = result.speed_result
    if ab is None:
        return []
    from logitlab.report.ab import speed_section

    cfg = result.config
    rows = cost_rows(result)
    return [Heading("the mode's cost (--speed)", level=2),
            Paragraph(f"candidate: the variant ({variant_text(cfg['variant'])}); control: without the mode "
                      f"({variant_text(cfg['speed'])}); prompt {cfg['prompts'][0]['name']}, {ab.config['n_decode']} "
                      f"greedy tokens, {plural(ab.config['repeats'], 'ABBA/BAAB block')}; a tokens/s ratio under 1, "
                      "a time ratio over 1, is the mode's tax", tone="dim", tight=True),
            *([KeyValues(rows, header=("cost", "candidate / control"), tight=True)] if rows else []),
            *speed_section(ab)]


def matrix_document(result: InvarianceMatrixResult, *, show_error: bool = True) -> Document:
    """The report of an invariance matrix.

    Args:
        result: the matrix's result.
        show_error: include the "stopped early" line of a matrix that Ctrl-C or an error stopped (leave it out when
            the command line prints the error itself).
    """
    word = result.verdict_word or "n/a"
    title = "logitlab invariance matrix"
    doc = Document("invariance-matrix", title)
    doc.add(Heading(rich(f"{title}: ", Span(word, f"verdict:{word}" if result.verdict_word else "strong"))),
            _header(result))
    if result.error == INTERRUPTED and show_error:  # before any verdict: what they rest on
        measured = [a for a in result.axes if a.status != "not run"]
        doc.add(Paragraph(stopped_line(INTERRUPTED, done=len(measured), planned=len(result.axes), unit="axis",
                                       units="axes", detail="the last as far as it got", rests_on="the verdicts"),
                          tone="error"))
    several = len(result.config["prompts"]) > 1
    doc.add(Table(AXIS_HEADER, axis_rows(result),
                  title="axes: every position, full vocabulary, bit for bit" + (", every prompt" if several else "")
                        + " (max ULP at the row's scale; KLD in nats)" + _topk_scope(result)),
            KeyValues([(a.axis, compared_text(a, result.config)) for a in result.ran], header=("axis", "compared"),
                      tight=True),
            _matrix_figure(result))
    skipped = [a for a in result.axes if a.skipped]
    if skipped:
        doc.add(Paragraph("skipped axes", tone="dim", tight=True),
                Bullets([f"{a.axis}: {a.skipped}" for a in skipped], tight=True))
    not_run = [a.axis for a in result.axes if a.status == "not run"]
    if not_run:
        doc.add(Paragraph(f"not run (the matrix stopped first): {', '.join(not_run)}", tone="warning"))
    doc.add(*_verdict(result))
    doc.add(*_speed(result))
    doc.add(*[_check_table(axis, result.config) for axis in result.ran])
    exercised = [f"{a.axis}" + (f", {name}" if several else "") + f", {c.name}: {c.details['exercised']}"
                 + "".join(f" — {key}: {c.details[key]}" for key in ("vacuous", "limited") if c.details.get(key))
                 for a in result.ran for name, probe in zip(a.prompts, a.probes) for c in probe.checks
                 if c.details.get("exercised") and (c.details.get("vacuous") or c.details.get("limited")
                                                     or a.axis == "chunked-prefill")]
    if exercised:
        doc.add(Paragraph("exercised (forward passes, as the engine ran them)", tone="dim", tight=True),
                Bullets(exercised, tight=True))
    controls = [f"{'caught' if c.caught else 'NOT caught'}: {a.axis}" + (f", {name}" if several else "")
                + f", {c.check}, {c.planted}: {c.evidence}"
                for a in result.ran for name, probe in zip(a.prompts, a.probes) for c in probe.controls]
    if controls:
        doc.add(Paragraph("self-check: inverse controls (one planted input token each probe must see)", tone="dim",
                          tight=True), Bullets(controls, tight=True))
    statuses = [f"{a.axis}: {a.status}" for a in result.ran]
    if statuses:
        doc.add(Paragraph(rich(Span("status: ", "strong"), result.status + f" ({'; '.join(statuses)})"),
                          tone="warning" if result.status == "vacuous" else None))
    doc.add(*[Paragraph(f"note: {note}", tone="note") for note in result.notes])
    doc.add(*[Paragraph(f"{a.axis}" + (f", {name}" if several else "") + f": not invariant: {probe.generation_differs}",
                        tone="warning")
              for a in result.ran for name, probe in zip(a.prompts, a.probes) if probe.generation_differs])
    for axis in result.ran:
        for name, probe in zip(axis.prompts, axis.probes):
            doc.add(*[Paragraph(f"note: {axis.axis}" + (f", {name}" if several else "") + f": {note}", tone="note")
                      for note in probe.notes])
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    return doc
