"""The ``verify`` report: K sweep, per prompt, flips, in-block rows, the cause, the near-tie guard.

:func:`verify_document` turns a :class:`~logitlab.experiments.verify.results.VerifyResult`
into a :class:`~logitlab.report.document.Document`; the renderers write it.
The ``*_rows`` / ``*_lines`` functions return strings. A result read back from
JSON holds None where the run held NaN (an undefined fraction): every number
here is formatted so that both read ``n/a``, and the two reports are the same.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from logitlab.experiments.verify.results import SweepEntry, VerifyDetection, VerifyResult
from logitlab.report.detection_text import detection_lines, detection_title
from logitlab.report.document import Block, Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich
from logitlab.report.figure_blocks import verify_figures
from logitlab.report.text import INTERRUPTED, fmt_num, plural, run_header_rows, stopped_line, variant_text

__all__ = ["verify_document", "SWEEP_HEADER", "FLIP_HEADER", "INBLOCK_HEADER", "GUARD_HEADER",
           "GUARD_PROMPT_HEADER", "MAX_FLIPS", "sweep_rows", "per_prompt_rows", "flip_rows", "inblock_rows",
           "guard_tau_lines", "guard_total_rows", "guard_prompt_rows", "guard_guarantee_lines",
           "guard_target_lines", "detection_places"]

SWEEP_HEADER = ("K", "rows", "bit-exact", "flips", "first divergence", "max |Δ|", "mean |Δ|", "mean Δ",
                "min flip margin", "max flip margin", "verdict")
FLIP_HEADER = ("prompt", "K", "out", "P", "row", "M=1 argmax (logit)", "M=K argmax (logit)", "margin M=1 / M=K",
               "top-5 M=1", "top-5 M=K")
INBLOCK_HEADER = ("row", "rows", "bit-exact", "flips", "mean Δ", "sd of row means", "max |Δ|", "offset")
GUARD_HEADER = ("fallback", "identical", "unguarded identical", "triggers", "extra rows", "extra calls",
                "ms/token guarded", "unguarded", "M=1", "overhead vs unguarded")
GUARD_PROMPT_HEADER = ("prompt", "fallback", "identical", "unguarded", "triggers", "extra rows", "extra calls",
                       "fallback row = M=K row", "uncovered rows", "ms/token")
#: Flips listed in the report (all are in the JSON).
MAX_FLIPS = 40


def _value(x: float | None) -> float:
    """A measured number as a float: None (NaN written as JSON null) back to NaN."""
    return math.nan if x is None else float(x)


def _pct(x: float | None, digits: int = 1) -> str:
    x = _value(x)
    return "n/a" if math.isnan(x) else f"{100 * x:.{digits}f} %"


def _ms(seconds: float | None) -> str:
    seconds = _value(seconds)
    return "n/a" if math.isnan(seconds) else f"{1000 * seconds:.2f}"


def _fixed(x: float | None, digits: int = 4) -> str:
    x = _value(x)
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def _align(header: Sequence[str]) -> tuple[str, ...]:
    """Numbers right, words left: the first column, prompts, top-k lists, first divergences and verdicts."""
    return tuple("left" if i == 0 or name.startswith(("top", "prompt", "first", "verdict")) else "right"
                 for i, name in enumerate(header))


def _first(entry: SweepEntry, with_prompt: bool) -> str:
    f = entry.first_divergence
    if f is None:
        return "none"
    where = f"out {f['output_index']} (P={f['position']}, block {f['block_start']} row {f['row']})"
    return (f"{f['prompt']}: " + where) if with_prompt and "prompt" in f else where


def sweep_rows(entries: Sequence[SweepEntry], with_prompt: bool = True) -> list[tuple[str, ...]]:
    """One row per K: the K sweep table (columns as :data:`SWEEP_HEADER`)."""
    return [(
        str(e.k), str(e.rows), f"{e.bit_exact_rows}", str(e.flips), _first(e, with_prompt),
        fmt_num(e.max_abs_diff), fmt_num(e.mean_abs_diff), fmt_num(e.mean_diff),
        fmt_num(e.min_flip_margin), fmt_num(e.max_flip_margin), e.verdict,
    ) for e in entries]


def per_prompt_rows(result: VerifyResult) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Header and rows: one row per prompt, one cell per K (flips · bit-exact rows · first divergence)."""
    ks = [t.k for t in result.totals] or sorted({e.k for e in result.sweep})
    header = ("prompt", "tokens", *[f"K={k}: flips · exact rows · first div" for k in ks])
    rows = []
    for p in result.prompts:
        cells = []
        for k in ks:
            e = next((e for e in result.sweep if e.prompt == p.name and e.k == k), None)
            if e is None:
                cells.append("—")
                continue
            f = e.first_divergence
            first = "none" if f is None else f"out {f['output_index']} r{f['row']}"
            cells.append(f"{e.flips} · {e.bit_exact_rows}/{e.rows} · {first}")
        rows.append((p.name, f"{p.n_prompt_tokens}+{len(p.generated_ids)}", *cells))
    return header, rows


def flip_rows(result: VerifyResult, limit: int | None = None) -> list[tuple[str, ...]]:
    """One row per flip (all prompts, all K; the first ``limit``); columns as :data:`FLIP_HEADER`."""
    flips = result.flips if limit is None else result.flips[:limit]
    return [(
        f.prompt, str(f.k), str(f.output_index), str(f.position), str(f.row),
        f"{f.token_ref} {f.text_ref!r} ({_fixed(f.logit_ref_at_ref)})",
        f"{f.token_obs} {f.text_obs!r} ({_fixed(f.logit_obs_at_obs)})",
        f"{fmt_num(f.margin_ref)} / {fmt_num(f.margin_obs)}",
        " ".join(map(str, f.topk_ref)), " ".join(map(str, f.topk_obs)),
    ) for f in flips]


def inblock_rows(entry: SweepEntry) -> list[tuple[str, ...]]:
    """One row per in-block row index of one K (pooled over prompts); columns as :data:`INBLOCK_HEADER`."""
    return [(str(r.row), str(r.rows), str(r.bit_exact_rows), str(r.flips), fmt_num(r.mean_diff),
             fmt_num(r.position_sd), fmt_num(r.max_abs_diff), "OFFSET" if r.offset else "no")
            for r in entry.in_block]


def guard_tau_lines(result: VerifyResult) -> list[str]:
    """How τ was chosen (and what the full-vocabulary bound would cost)."""
    g = result.guard
    if g is None:
        return []
    if g.calibration is None:
        return [f"τ = {fmt_num(g.tau)} logits (fixed by --guard), verify blocks of K = {g.k}"]
    c = g.calibration
    if c.get("floor") is not None:
        basis = (f"the noise floor {fmt_num(c['floor'])} (p99 of the top-{c['top_k']} Δ spread over the "
                 f"{c['floor_positions']} rows that differ and kept their argmax)")
    else:
        basis = f"the largest top-{c['top_k']} Δ spread {fmt_num(c['max_topk_spread'])} ({c.get('floor_reason', '')})"
    return [
        f"τ = {fmt_num(g.tau)} logits = safety {fmt_num(c['safety'])} × {basis}, over {c['rows']} M={c['k']} "
        f"verify rows of the held-out calibration prompts ({', '.join(c['prompts'])}); spread median "
        f"{fmt_num(c['p50_topk_spread'])}, p99 {fmt_num(c['p99_topk_spread'])}, max {fmt_num(c['max_topk_spread'])}",
        f"calibration rows with margin < τ (predicted trigger rate): {_pct(c['trigger_rate'])}; "
        f"a 10 % trigger rate needs τ ≤ {fmt_num(c['tau_for_10pct'])}",
        f"full-vocabulary bound 2 × max |Δ| = 2 × {fmt_num(c['max_abs_diff'])} = {fmt_num(c['tau_full_vocab'])} "
        f"would trigger on {_pct(c['trigger_rate_full_vocab'])} of rows",
    ]


def guard_total_rows(result: VerifyResult) -> list[tuple[str, ...]]:
    """One row per fallback, summed over prompts; columns as :data:`GUARD_HEADER`."""
    g = result.guard
    if g is None:
        return []
    rows = []
    for fallback, t in g.totals.items():
        rows.append((
            fallback, f"{t['identical_prompts']}/{t['prompts']}", f"{t['unguarded_identical_prompts']}/{t['prompts']}",
            f"{t['triggers']} ({_pct(t['trigger_rate'])})", _pct(t["extra_rows"]), _pct(t["extra_calls"]),
            _ms(t["seconds_per_token"]), _ms(t["unguarded_seconds_per_token"]), _ms(t["m1_seconds_per_token"]),
            _pct(t["overhead_vs_unguarded"]),
        ))
    return rows


def guard_prompt_rows(result: VerifyResult) -> list[tuple[str, ...]]:
    """One row per prompt and fallback; columns as :data:`GUARD_PROMPT_HEADER`."""
    g = result.guard
    if g is None:
        return []
    out = []
    for r in g.results:
        ident = "yes" if r.identical else f"NO (token {r.first_divergence})"
        plain = "yes" if r.unguarded_identical else f"no (token {r.unguarded_first_divergence})"
        out.append((
            r.prompt, r.fallback, ident, plain, f"{r.triggers} ({_pct(r.trigger_rate, 0)})", _pct(r.extra_rows, 0),
            _pct(r.extra_calls, 0), f"{r.triggers_fallback_exact}/{r.triggers}",
            str(r.evaluation["rows_uncovered"]), _ms(r.seconds_per_token),
        ))
    return out


def guard_guarantee_lines(result: VerifyResult) -> list[str]:
    """What the guard guaranteed in this run: what is exact, what is bounded, with the measured numbers."""
    g = result.guard
    if g is None or not g.totals:
        return []
    lines = ["exact, by arithmetic: a row whose top-k Δ spread (vs M=1) is below its own margin cannot flip its "
             "argmax; token identity is checked at every position against M=1 greedy"]
    for fallback, t in g.totals.items():
        head = f"{fallback}: {t['identical_prompts']}/{t['prompts']} prompts token-identical to M=1 greedy; "
        bound = (f"accepted verify rows: max top-k spread {fmt_num(t['max_topk_spread_verify'])} vs τ = "
                 f"{fmt_num(g.tau)} ({t['verify_rows_over_tau']} rows over τ) — "
                 + ("bounded by the calibration only" if g.calibration is not None
                    else "bounded by the given τ only (set with --guard, not calibrated)"))
        if fallback == "redecode":
            lines.append(
                head + f"the M=1 re-decode was bit-identical to the M=K row in {t['triggers_fallback_exact']}/"
                f"{t['triggers']} triggers and changed the token in {t['triggers_token_changed']}: it reads the KV "
                "entries earlier M=K rows wrote, which are not M=1's, so it removes only in-block numerics; "
                f"{t['redecode_rows_uncovered']} re-decoded rows had a history Δ spread ≥ their margin "
                f"(not covered); {bound}")
        else:
            lines.append(
                head + f"every flagged row is the M=1 greedy row itself (M=1 replay from the last M=1-written "
                f"position), {t['corrections']} accepted tokens corrected by the replay; {bound}; cost "
                f"{_pct(t['extra_rows'])} extra forward rows")
        exact = t["bit_exact_rows"] == t["rows_compared"]
        lines.append(f"{fallback}: logits are {'' if exact else 'not '}bit-exact with M=1 greedy: "
                     f"{t['bit_exact_rows']}/{t['rows_compared']} deciding rows bit-exact, max |Δ| "
                     f"{fmt_num(t['max_abs_diff'])}")
    return lines + guard_target_lines(result)


def guard_target_lines(result: VerifyResult, target: float = 0.10) -> list[str]:
    """Whether token identity at ≤ ``target`` extra forward work was reached, and if not, why."""
    g = result.guard
    if g is None or not g.totals:
        return []
    met = [(f, t) for f, t in g.totals.items()
           if t["identical_prompts"] == t["prompts"] and _value(t["extra_rows"]) <= target]
    head = f"target — token identity on every prompt at ≤ {100 * target:.0f} % extra forward work: "
    if met:
        f, t = min(met, key=lambda ft: _value(ft[1]["extra_rows"]))
        return [head + f"met by {f} ({_pct(t['extra_rows'])} extra rows, {_pct(t['trigger_rate'])} triggers)"]
    why = []
    c = g.calibration
    if c is not None and _value(c["tau_for_10pct"]) < _value(c["max_topk_spread"]):
        why.append(f"a trigger rate ≤ {100 * target:.0f} % needs τ ≤ {fmt_num(c['tau_for_10pct'])} (the 10th "
                   f"percentile of verify margins), but M=K rows move top-k logits against each other by up to "
                   f"{fmt_num(c['max_topk_spread'])} (calibration), so a τ that low leaves flippable rows unguarded")
    rd = g.totals.get("redecode")
    if rd and rd["identical_prompts"] < rd["prompts"]:
        why.append(f"redecode cannot repair a difference that lives in the KV history: its M=1 row equalled the "
                   f"M=K row bit for bit in {rd['triggers_fallback_exact']}/{rd['triggers']} triggers")
    rs = g.totals.get("resync")
    if rs and rs["identical_prompts"] == rs["prompts"]:
        why.append(f"resync is exact, but only by replaying M=1 up to each trigger: {_pct(rs['extra_rows'])} "
                   "extra rows")
    if not why:
        known = [t for t in g.totals.values() if not math.isnan(_value(t["extra_rows"]))]
        if known:
            lo = min(known, key=lambda t: _value(t["extra_rows"]))
            why.append(f"the cheapest fallback needed {_pct(lo['extra_rows'])} extra rows")
        else:
            why.append("no fallback measured its extra rows")
    return [head + "NOT met on this engine — " + "; ".join(why)]


# -- the document ------------------------------------------------------------------------
def verify_document(result: VerifyResult, *, show_error: bool = True) -> Document:
    """The report of a ``verify`` run.

    Args:
        result: the run, complete or partial.
        show_error: include the "stopped early" line (leave it out when the
            caller prints the error itself).
    """
    c = result.classification
    doc = Document("verify", "logitlab verify")
    title = rich("logitlab verify: ", Span(c.cause, f"verdict:{c.word}") if c else Span("n/a", "strong"))
    doc.add(Heading(title), _header(result))
    if result.error == INTERRUPTED and show_error:  # before any verdict: what they rest on
        doc.add(Paragraph(_interrupted(result), tone="error"))
    if result.totals:
        doc.add(_table("K sweep — all prompts", SWEEP_HEADER, sweep_rows(result.totals)))
    if len(result.prompts) > 1:
        header, rows = per_prompt_rows(result)
        doc.add(_table("per prompt", header, rows))
        full = [(e.prompt, *row) for e in result.sweep for row in sweep_rows([e], with_prompt=False)]
        doc.add(_table("K sweep per prompt", ("prompt", *SWEEP_HEADER), full))
    if result.flips:
        more = f", first {MAX_FLIPS}; all are in the JSON" if len(result.flips) > MAX_FLIPS else ""
        doc.add(_table(f"argmax flips ({len(result.flips)}{more})", FLIP_HEADER, flip_rows(result, MAX_FLIPS)))
    multi = [t for t in result.totals if t.k > 1 and t.in_block]
    if multi:
        entry = multi[-1]
        doc.add(_table(f"in-block rows at K={entry.k} (all prompts)", INBLOCK_HEADER, inblock_rows(entry)))
    figures = verify_figures(result)
    doc.add(*[f for f in figures if f.kind != "guard-cost"])
    doc.add(*_classification(result))
    doc.add(*_detection(result))
    doc.add(*_guard(result), *[f for f in figures if f.kind == "guard-cost"])
    if result.error and show_error and result.error != INTERRUPTED:
        doc.add(Paragraph(stopped_line(result.error), tone="error"))
    return doc


def _interrupted(result: VerifyResult) -> str:
    """The Ctrl-C line: the prompts measured at every K of the planned ones (and one cut short, if any)."""
    ks = set(result.config.get("ks") or ())
    whole = [p.name for p in result.prompts if {e.k for e in result.sweep if e.prompt == p.name} >= ks]
    cut = len(result.prompts) - len(whole)
    return stopped_line(INTERRUPTED, done=len(whole), planned=len(result.config.get("prompts") or ()) or None,
                        unit="prompt", detail=f"measured at every K; {cut} more cut short" if cut else None,
                        rests_on="the K sweep, the flips and the classification")


def _table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    return Table(header, rows, title=title, align=_align(header))


def _header(result: VerifyResult) -> KeyValues:
    cfg = result.config
    rows: list[tuple[Any, ...]] = [
        ("variant", variant_text(cfg["variant"])),
        ("workload", f"{plural(len(cfg['prompts']), 'prompt')} × {cfg['n_decode']} greedy M=1 tokens, "
                     f"replayed as M=K verify blocks, K = {' '.join(map(str, cfg['ks']))}"),
        *([("positions", f"{result.positions.line()}: the decode rows of all prompts; the others are not "
                         "compared")] if result.positions else []),
        ("near-tie margin", f"{fmt_num(cfg['thresholds']['near_tie_margin'])} logits (--near-tie-margin)"),
    ]
    return KeyValues(run_header_rows(result.manifest, rows), boxed=True)


def _classification(result: VerifyResult) -> list[Block]:
    c = result.classification
    if c is None:
        return [Paragraph("no classification (the run stopped early)", tone="warning")]
    return [
        Heading(rich("classification: ", Span(c.cause, f"verdict:{c.word}"), "  (verdict ",
                     Span(c.word, f"verdict:{c.word}"),
                     f"; {result.positions.line()})" if result.positions else ")"), level=2),
        Paragraph(c.summary, tight=True),
        Bullets([*c.evidence, f"scaling: {c.scaling}"], tight=True),
    ]


def detection_places(d: VerifyDetection, with_prompt: bool = True) -> dict[str, str]:
    """Shape -> its hardest position as the report names it: ``prompt out i (P=p)``."""
    return {shape: (f"{p.prompt} " if with_prompt else "") + f"out {p.output_index} (P={p.position})"
            for shape, p in d.hardest.items()}


def _detection(result: VerifyResult) -> list[Block]:
    """Per K: the detection limit of the pooled comparison its verdict is judged on (every shape for the K
    the classification is judged on, the argmax-up shape for the others)."""
    blocks: list[Block] = []
    several = len(result.prompts) > 1
    what = "the M=K rows of every prompt" if several else "the M=K rows"
    for d in result.detection:
        lines = detection_lines(d.limits, detection_places(d, several), notes=len(d.limits.shapes) > 1)
        if not lines:
            lines = [f"not probed: the K={d.k} verdict is {d.limits.verdict} (nothing worse to detect)"]
        blocks += [Paragraph(f"K={d.k}: " + detection_title(what), tone="dim", tight=True),
                   Bullets(lines, tight=True)]
    return blocks


def _guard(result: VerifyResult) -> list[Block]:
    g = result.guard
    if g is None:
        return []
    blocks: list[Block] = [
        Heading("Near-tie guard", level=2),
        Bullets(guard_tau_lines(result), tight=True),
        _table(f"guarded speculative greedy, K = {g.k} (drafts: the M=1 greedy tokens)", GUARD_HEADER,
               guard_total_rows(result)),
    ]
    if len(result.prompts) > 1:
        blocks.append(_table("guarded speculative greedy per prompt", GUARD_PROMPT_HEADER, guard_prompt_rows(result)))
    guarantees = guard_guarantee_lines(result)
    if guarantees:
        blocks.append(Bullets(guarantees))
    return blocks
