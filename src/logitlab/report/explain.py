"""The ``explain`` report: the pair, its verdict, and one evidence bundle (at most 20 lines) per position.

:func:`explain_document` turns an :class:`~logitlab.experiments.explain.ExplainResult`
into a :class:`~logitlab.report.document.Document`; :func:`position_lines`
gives the text of one bundle.
"""

from __future__ import annotations

from typing import Any

from logitlab.experiments.explain_results import TIE_BREAK, ExplainResult, PositionEvidence
from logitlab.report.document import Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.text import INTERRUPTED, engine_rows, fmt_num, stopped_line, variant_text

__all__ = ["explain_document", "position_lines", "cause_rows", "CAUSE_HEADER"]

CAUSE_HEADER = ("pos", "kind", "tokens (ref → obs)", "margin ref", "spread", "× floor", "cause")


def explain_document(result: ExplainResult, *, show_error: bool = True) -> Document:
    """The report of an ``explain`` run (complete or partial)."""
    word = result.verdict.word if result.verdict else "n/a"
    doc = Document("explain", "logitlab explain")
    doc.add(Heading(rich("logitlab explain: ", Span(word, f"verdict:{word}"))), _header(result))
    if result.error == INTERRUPTED and show_error:  # before any cause: what they rest on
        doc.add(Paragraph(stopped_line(INTERRUPTED, done=len(result.positions), planned=result.candidates or None,
                                       unit="position", detail="explained", rests_on="the causes"), tone="error"))
    if result.verdict is not None:
        doc.add(Paragraph(rich(Span("verdict of the pair: ", "strong"), Span(word, f"verdict:{word}"))),
                Bullets(result.verdict.evidence, tight=True))
    if result.positions:
        shown = len(result.positions)
        more = f" (the first {shown} of {result.candidates})" if result.candidates > shown else ""
        doc.add(Table(CAUSE_HEADER, cause_rows(result), title=f"causes, one per position{more}"))
        for evidence in result.positions:
            lines = position_lines(result, evidence)
            doc.add(Paragraph(rich(Span(lines[0], "strong"))), Bullets(lines[1:], tight=True))
    doc.add(*[Paragraph(note, tone="note") for note in result.notes])
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    return doc


def _header(result: ExplainResult) -> KeyValues:
    cfg = result.config
    rows: list[tuple] = list(engine_rows(result.manifest["engine"]))
    if result.mode == "ab":
        rows += [("control", variant_text(cfg["control"])), ("candidate", variant_text(cfg["candidate"]))]
    else:
        rows += [("variant", variant_text(cfg["control"])),
                 ("pair", f"M=1 greedy decode vs the same tokens as M={cfg['k']} verify blocks")]
    rows += [
        ("workload", f"{len(result.prompt_ids)} prompt tokens + {cfg['n_decode']} greedy decode tokens"),
        ("greedy text", repr(result.generated_text[:120])),
        ("controls", f"rerun with identical inputs; prefill vs decode; alone vs in a batch of {cfg['batch']}; "
                     f"M=1 vs M={cfg['width_k']}; exact tie; margin vs the noise floor"
                     + ("; first divergent tensor" if result.mode == "ab" and cfg.get("dump") else "")),
    ]
    if result.causes():
        rows.append(("causes", ", ".join(f"{cause} {n}" for cause, n in result.causes().items())))
    return KeyValues(rows, boxed=True)


def _tok(result_or_texts: Any, token: int) -> str:
    texts = result_or_texts
    return f"{token} {texts.get(token, texts.get(str(token), '?'))!r}"


def cause_rows(result: ExplainResult) -> list[tuple[str, ...]]:
    """One row per explained position; columns as :data:`CAUSE_HEADER`."""
    return [(
        str(e.position), e.kind, f"{e.token_ref} → {e.token_obs}" if e.token_ref != e.token_obs else str(e.token_ref),
        fmt_num(e.margin_ref), fmt_num(e.spread), fmt_num(e.floor_factor, 3), e.cause,
    ) for e in result.positions]


def _top(texts: dict, top: list) -> str:
    return " · ".join(f"{_tok(texts, int(t))} {v:.4f}" for t, v in top)


def _control_text(checks: list, names: dict[str, str]) -> str:
    parts = []
    for c in checks:
        side = names.get(c.side, c.side)
        if not c.available:
            parts.append(f"{side}: n/a ({c.note})")
        elif c.bit_exact:
            parts.append(f"{side}: bit-exact")
        else:
            moved = f"spread {fmt_num(c.spread)}"
            parts.append(f"{side}: {'argmax kept' if c.argmax_kept else f'ARGMAX → {c.argmax_other}'}, {moved}")
    return "; ".join(parts)


def position_lines(result: ExplainResult, e: PositionEvidence) -> list[str]:
    """The evidence bundle of one position as at most 20 lines (the first is its title)."""
    ref_name, obs_name = ("control", "candidate") if result.mode == "ab" else ("M=1", f"M={result.config['k']}")
    step = e.position - len(result.prompt_ids)
    where = f"decode step {step}" if step >= 0 else "a prompt position"
    what = (f"flip {_tok(e.texts, e.token_ref)} → {_tok(e.texts, e.token_obs)}" if e.token_ref != e.token_obs
            else f"argmax {_tok(e.texts, e.token_ref)} kept")
    lines = [f"position {e.position} ({where}, input {_tok(e.texts, e.input_token)}): {what} — cause: {e.cause}"]
    lines.append(f"{ref_name} top-{len(e.top_ref)}: {_top(e.texts, e.top_ref)}")
    lines.append(f"{obs_name} top-{len(e.top_obs)}: {_top(e.texts, e.top_obs)}")
    floor = (f"{fmt_num(e.floor_factor, 3)}× the pair's noise floor {fmt_num(e.floor)} (p99 over the positions that "
             f"kept their argmax; outside beyond {fmt_num(result.config['thresholds']['floor_factor'])}×)"
             if e.floor else "no noise floor measured (too few positions): the fixed thresholds judge")
    lines.append(f"margin: {ref_name} {fmt_num(e.margin_ref)}, {obs_name} {fmt_num(e.margin_obs)}; top-{len(e.top_ref)} "
                 f"Δ spread {fmt_num(e.spread)} ({fmt_num(e.spread_ulps, 3)} ULP at row scale) = {floor}")
    tie = []
    for side, tied, top in ((ref_name, e.exact_tie_ref, e.top_ref), (obs_name, e.exact_tie_obs, e.top_obs)):
        if tied:
            tie.append(f"{side}: top-2 {top[0][0]} and {top[1][0]} EXACTLY tied at {top[0][1]:.6g}")
        else:
            tie.append(f"{side}: no (top-2 differ by {fmt_num(top[0][1] - top[1][1])})")
    lines.append(f"exact tie: {'; '.join(tie)}; convention: {TIE_BREAK}")
    if e.localized or e.nonfinite_mismatch:
        lines.append(f"entries differing: {e.differing_entries:,}; NaN/Inf on one side: {e.nonfinite_mismatch}")
    families: dict[str, list] = {}
    for c in e.controls:
        families.setdefault(c.control, []).append(c)
    for name, checks in families.items():
        lines.append(f"{name}: {_control_text(checks, {'reference': ref_name, 'observed': obs_name})}")
    if result.mode == "ab" and result.config.get("dump"):
        lines.append("first divergent tensor: " + (e.first_divergent_tensor or
                                                   ("not located" if result.dump is None else "none (bit-exact)")))
    reason = e.reason.replace("the reference side", f"the {ref_name} side").replace(
        "the observed side", f"the {obs_name} side").replace("the reference row", f"the {ref_name} row").replace(
        "the observed row", f"the {obs_name} row")
    lines.append(f"cause: {e.cause} — {reason}")
    return lines[:20]
