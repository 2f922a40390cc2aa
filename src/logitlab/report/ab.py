"""The ``ab`` report: header, A/A, A/B verdict with evidence, speed, and where it starts.

:func:`ab_document` turns an :class:`~logitlab.experiments.ab.AbResult` into a
:class:`~logitlab.report.document.Document`; the renderers write it.
"""

from __future__ import annotations

from logitlab.experiments.ab_results import PHASES, AbResult, InterleavedSpeed
from logitlab.perf.design import CANDIDATE
from logitlab.report.detection_text import DETECTION_TITLE, detection_lines
from logitlab.report.document import Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.server_text import retries_text, run_scoring_text, scoring_rows
from logitlab.report.figure_blocks import ab_slot_figure, comparison_figures, paired_figure
from logitlab.report.speed_text import paired_reason, sequential_reason, stopping_note
from logitlab.report.text import (
    FLIP_HEADER,
    SPEED_HEADER,
    aa_signature_rows,
    comparison_lines,
    engine_rows,
    flip_rows,
    host_rows,
    localization_lines,
    INTERRUPTED,
    plural,
    speed_rows,
    stopped_line,
    variant_text,
)

__all__ = ["ab_document", "speed_section"]

AA_HEADER = ("slot", "block", "pos", "rows differing", "max D/V per row", "max ULP", "argmax kept", "top-k kept")
#: Flips listed in the report (all are in the JSON).
MAX_FLIPS = 10


def ab_document(result: AbResult, *, show_error: bool = True) -> Document:
    """The report of an ``ab`` run.

    Args:
        result: the run, complete or partial.
        show_error: include the "stopped early" line (leave it out when the
            caller prints the error itself).
    """
    word = result.verdict.word if result.verdict else "n/a"
    doc = Document("ab", "logitlab ab")
    doc.add(Heading(rich("logitlab ab: ", Span(word, f"verdict:{word}"))), _header(result))
    if result.error == INTERRUPTED and show_error:  # before any verdict: what they rest on
        doc.add(Paragraph(_interrupted(result), tone="error"))
    doc.add(*_aa(result))
    doc.add(*_verdict(result))
    doc.add(*_speed(result))
    if result.explanation is not None:
        from logitlab.report.explain import CAUSE_HEADER, cause_rows, position_lines

        e = result.explanation
        doc.add(Heading("why (explain: controls per position)", level=2))
        if e.positions:
            doc.add(Table(CAUSE_HEADER, cause_rows(e), title="causes, one per position"))
            for evidence in e.positions:
                lines = position_lines(e, evidence)
                doc.add(Paragraph(rich(Span(lines[0], "strong"))), Bullets(lines[1:], tight=True))
        doc.add(*[Paragraph(note, tone="note") for note in e.notes])
    if result.localization:
        doc.add(Heading("where it starts (dump-diff)", level=2),
                Bullets(localization_lines(result.localization), tight=True))
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    return doc


def _interrupted(result: AbResult) -> str:
    """The Ctrl-C line: complete ABBA/BAAB blocks of the planned ones, and the runs measured."""
    measured = [r for r in result.runs if r.block is not None]
    blocks: dict[int, int] = {}
    for run in measured:
        blocks[run.block] = blocks.get(run.block, 0) + 1
    repeats = result.config.get("repeats")
    planned = f"at most {result.config.get('max_repeats')}" if repeats == "auto" else repeats
    return stopped_line(INTERRUPTED, done=sum(1 for n in blocks.values() if n == 4), planned=planned,
                        unit="ABBA/BAAB block", detail=f"{plural(len(measured), 'run')} measured",
                        rests_on="the A/A, the verdict and the speed calls")


def _header(result: AbResult) -> KeyValues:
    cfg, engine = result.config, result.manifest["engine"]
    rows: list[tuple] = list(engine_rows(engine)) + scoring_rows(engine)
    if "candidate_engine" in result.manifest:  # cross-engine ab
        candidate = result.manifest["candidate_engine"]
        rows.append(("candidate engine", candidate.get("engine_version", candidate["engine"])))
        rows += scoring_rows(candidate, "candidate scoring")
    rows += [
        ("control", variant_text(cfg["control"])),
        ("candidate", variant_text(cfg["candidate"])),
        ("workload", f"{len(result.prompt_ids)} prompt tokens + {cfg['n_decode']} greedy decode tokens, "
                     "replayed in every run"),
        *([("positions", f"{result.positions.line()}: the other rows of each run are dropped as it returns")]
          if result.positions else []),
        ("schedule", f"{cfg['warmup']} warmup/variant, " + (
            f"1 ABBA block of runs, then {cfg['repeats']} interleaved blocks (decode speed)"
            if cfg.get("speed_design") == "interleaved" else plural(cfg['repeats'], 'ABBA/BAAB block'))
         + f", isolation={cfg['isolation']}"),
        ("greedy text", repr(result.generated_text[:120])),
    ]
    rows += host_rows(result.manifest)
    retried = retries_text([r.scoring for r in result.runs])
    if retried:
        rows.append(("retries", retried, "note"))
    rows += [("note", note, "note") for note in result.notes]
    return KeyValues(rows, boxed=True)


def _aa(result: AbResult) -> list:
    controls = result.aa_runs
    if not controls:
        return [Paragraph("A/A: not measured (no control run besides the reference finished)", tone="warning")]
    if result.control_reproducible:
        exact = sum(1 for r in controls if r.bit_exact)
        return [Paragraph(f"A/A: control reproducible — {exact}/{plural(len(controls), 'control run')} bit-exact "
                          "with the reference", tone="ok")]
    blocks: list = [
        Table(AA_HEADER, aa_signature_rows(controls), title="A/A: CONTROL NOT REPRODUCIBLE — slot-order signature",
              align=("right",) * len(AA_HEADER), tone="error"),
        Paragraph(rich(Span(f"diagnosis: {result.aa_diagnosis}", "strong")), tight=True),
    ]
    blocks += [Paragraph(f"  escalated to {e.isolation} isolation: {e.bit_exact_runs}/{plural(e.runs, 'run')} "
                         "bit-exact", tight=True) for e in result.escalations]
    blocks.append(Paragraph("The A/B verdict below compares against a control that does not reproduce itself.",
                            tone="warning", tight=True))
    return blocks


def _verdict(result: AbResult) -> list:
    if result.verdict is None:
        return [Paragraph("A/B: no candidate run was compared", tone="warning")]
    run = next(r for r in result.runs if r.slot == result.verdict_slot)
    word = result.verdict.word
    judged = [r for r in result.runs if r.variant == CANDIDATE and r.verdict is not None]  # crashed warmups too
    head = Paragraph(rich(Span("A/B verdict: ", "strong"), Span(word, f"verdict:{word}"),
                          f"  (worst of {plural(len(judged), 'candidate run')}; slot {run.slot}"
                          + (f"; {result.positions.line()})" if result.positions else ")")))
    if run.crash is not None:  # nothing was compared: the crash's evidence, and how many runs crashed
        crashed = [r for r in result.runs if r.crash is not None and r.variant == CANDIDATE]
        return [head, Bullets(result.verdict.evidence, tight=True),
                Paragraph(f"{plural(len(crashed), 'candidate run')} crashed (slots "
                          f"{', '.join(str(r.slot) for r in crashed)}); every other slot ran", tone="error",
                          tight=True)]
    blocks: list = [
        head,
        Bullets(result.verdict.evidence, tight=True),
        KeyValues(comparison_lines(run.comparison) + _server_lines(result, run), tight=True,
                  header=("statistic", "value")),
    ]
    if result.controls:
        blocks += [Paragraph("self-check: inverse control (one planted input token the candidate's logits must "
                             "follow)", tone="dim", tight=True),
                   Bullets([f"{'caught' if c.caught else 'NOT caught'}: {c.check}, {c.planted}: {c.evidence}"
                            for c in result.controls], tight=True)]
        if result.vacuous:
            blocks.append(Paragraph(f"vacuous: {result.vacuous}", tone="warning", tight=True))
    if result.detection is not None and detection_lines(result.detection):
        blocks += [Paragraph(DETECTION_TITLE, tone="dim", tight=True),
                   Bullets(detection_lines(result.detection), tight=True)]
    flips = flip_rows(run.comparison)
    if flips:
        more = f" (first {MAX_FLIPS} of {len(flips)})" if len(flips) > MAX_FLIPS else ""
        blocks.append(Table(FLIP_HEADER, flips[:MAX_FLIPS], title=f"argmax flips{more}", tight=True))
    if result.candidate_reproducible is False:
        blocks.append(Paragraph("candidate runs differ among themselves (candidate not reproducible)",
                                tone="warning", tight=True))
    near_tie = result.config["thresholds"]["near_tie_margin"]
    return blocks + comparison_figures(run.comparison, near_tie_margin=near_tie, n_prompt=len(result.prompt_ids),
                                       what=f"candidate slot {run.slot} vs the reference")


def _server_lines(result: AbResult, run) -> list[tuple[str, str]]:
    """Top-k data: the per-row offsets of this run, and how the server scored it and the reference."""
    lines = [("per-row offsets", run.row_offsets.sentence())] if run.row_offsets is not None else []
    reference = next((r for r in result.runs if r.is_reference), None)
    for label, record in (("scoring, this run", run), ("scoring, reference", reference)):
        if record is not None and record.scoring:
            lines.append((label, run_scoring_text(record.scoring)))
    return lines


def speed_section(result: AbResult) -> list:
    """The speed blocks of an ``ab`` report (table, the calls' reasons, figures), for reports that embed an ``ab``
    speed run (``invariance matrix --speed``)."""
    return _speed(result)


def interleaved_sentence(speed: InterleavedSpeed) -> str:
    """How ``--speed-design interleaved`` measured decode speed, in one sentence (its blocks, clock, CPUs, loads)."""
    where = f"on CPU {','.join(map(str, speed.cpus))}" if speed.cpus else "unpinned"
    loads = sum(r.load_seconds for r in speed.blocks)
    unit = "per second of the decoding thread's CPU time" if speed.clock == "cpu" else "per second of wall time"
    plant = f"; PLANTED: the candidate's steps {100 * speed.plant:g} % slower" if speed.plant else ""
    return (f"decode speed from {plural(len(speed.blocks), 'interleaved block')} ({speed.chunk} steps a turn, "
            f"{speed.clock} clock: decode tokens {unit}; {where}; a new pair of engines loaded and warmed before "
            f"each block, {loads:.1f} s of loads in all){plant}; {speed.reason}")


def _speed(result: AbResult) -> list:
    if not result.speed:
        return [Paragraph("speed: no complete block", tone="warning")]
    blocks = {phase: result.phase_blocks(phase) for phase, _ in PHASES}
    table = Table(SPEED_HEADER, speed_rows(result, blocks),
                  title="speed (tokens/s): candidate / control; columns and ratio are geometric means over the "
                        "ABBA/BAAB blocks" + (" (decode: the interleaved blocks)" if result.interleaved else ""))
    reasons = [Paragraph(f"{phase}: " + (sequential_reason(result.sequential[phase]) if phase in result.sequential
                                         else paired_reason(p)), tone="dim", tight=True)
               for phase, p in result.speed.items()]
    interleaved = result.interleaved
    if interleaved is not None:
        reasons.insert(0, Paragraph(interleaved_sentence(interleaved), tone="note", tight=True))
    if result.config.get("repeats") == "auto":
        driving = result.sequential.get("decode") or result.sequential.get("prefill")
        blocks_run = (len(interleaved.blocks) if interleaved is not None
                      else len({r.block for r in result.runs if r.block is not None}))
        note = stopping_note(driving, blocks_run, "--repeats auto")
        if interleaved is not None:
            note += ("; interleaved: it looked after every pair of blocks (4, 6, …) with the boundaries of a look "
                     "after every block, which is conservative")
        reasons.append(Paragraph(note, tone="note", tight=True))
    figures = [paired_figure(list(result.speed.values())), ab_slot_figure(result.runs, PHASES)]
    return [table, *reasons, *(f for f in figures if f is not None)]
