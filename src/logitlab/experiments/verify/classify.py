"""How ``logitlab verify`` reads M=K vs M=1 differences: per-row statistics, the verdict, the cause.

The verify verdict judges argmax flips (greedy and speculative decoding read
only the argmax); :func:`classify_verify` names the cause over the whole K
sweep (near-tie noise, a verify-path difference, a systematic offset, a wrong
result) with evidence lines.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Sequence

from logitlab.errors import InputError
from logitlab.experiments.verify.results import FlipRecord, InBlockRow, SweepEntry, VerifyClassification
from logitlab.numerics import VERDICTS, LogitComparison, Thresholds, Verdict, classify
from logitlab.numerics.detection import Judge
from logitlab.numerics.verdict import is_offset, offset_statistics
from logitlab.numerics.verdict_rules import Case


class Part(NamedTuple):
    """One prompt's M=K vs M=1 comparison at one K: the comparison, the prompt's name and tokens, and the output
    index of each compared row (``--positions``: a selection of the decode rows; else 0 … N-1)."""

    comparison: LogitComparison
    prompt: str
    n_prompt: int
    outputs: list[int]

    def owner(self, row: int) -> tuple[int, int]:
        """``(output_index, position)`` of compared row ``row``."""
        return self.outputs[row], self.n_prompt + self.outputs[row]


def in_block_rows(c: LogitComparison, k: int, thresholds: Thresholds,
                  outputs: Sequence[int] | None = None) -> list[InBlockRow]:
    """Per in-block row index j (``output_index % k``): rows, bit-exact rows, flips, mean Δ and its spreads.

    ``mean_diff`` is the mean over the differing rows of their mean Δ, ``std_diff``
    the pooled std of Δ over their entries, ``position_sd`` the sd across those
    rows of their mean Δ (what the offset rule compares the mean with).
    ``outputs``: the output index of each compared row (``--positions``: a selection of the decode rows);
    None: row i is output index i. Only the in-block rows j that some compared row falls on are listed.
    """
    flips_at = {f["position"] for f in c.flips}
    output = list(range(c.n_positions)) if outputs is None else [int(i) for i in outputs]
    out = []
    for j in sorted({i % k for i in output}):
        idx = [i for i in range(c.n_positions) if output[i] % k == j]
        differing = [i for i in idx if c.row_differing[i]]
        mean, position_sd, n = offset_statistics([c.row_mean_diff[i] for i in differing])
        std = 0.0
        if differing:
            second = sum(c.row_std_diff[i] ** 2 + c.row_mean_diff[i] ** 2 for i in differing) / len(differing)
            std = max(second - mean * mean, 0.0) ** 0.5
        scaled = max((c.row_scaled_ulp[i] for i in differing), default=0.0)
        out.append(InBlockRow(
            row=j, rows=len(idx), bit_exact_rows=len(idx) - len(differing),
            flips=sum(1 for i in idx if i in flips_at),
            mean_diff=mean, std_diff=std,
            max_abs_diff=max((c.row_max_abs_diff[i] for i in idx), default=0.0),
            max_scaled_ulp=scaled, offset=is_offset(mean, position_sd, n, scaled, thresholds, tests=k),
            position_sd=position_sd,
        ))
    return out


def verify_verdict(c: LogitComparison, thresholds: Thresholds) -> Verdict:
    """The verdict of one M=K vs M=1 comparison, judged on argmax flips.

    The rules of :func:`~logitlab.numerics.classify` (the same words, the same
    noise floor: p99 of the top-k Δ spread over the rows that kept their
    argmax), with two differences for greedy and speculative decoding, which
    read only the argmax:

    - a top-k set change away from a flip (the k-th boundary moved) is
      reported but not judged (``judge_topk=False``); on llama.cpp's M=K rows,
      whose |Δ| reaches 2 logits in the tail, ``ab``'s rule would call a
      5th/6th swap at a gap of 0.53 a change;
    - a flip to a token outside the other run's top-k (not a swap of
      near-tied tokens) is ``divergent``.
    """
    verdict = classify(c, thresholds, judge_topk=False)
    if verdict.word in ("bit-exact", "divergent"):
        return verdict
    k = c.top_k
    outside = _outside_topk(c)
    if outside:
        f = outside[0]
        return dataclasses.replace(verdict, word="divergent", evidence=[
            f"{len(outside)} flip(s) to a token outside the other run's top-{k}; row {f['position']}: "
            f"M=1 top-{k} {f['topk_ref']} vs M=K top-{k} {f['topk_obs']}", *verdict.evidence],
            outside=[f["position"] for f in outside])
    return verdict


def _outside_topk(c: LogitComparison) -> list[dict]:
    """The flips to a token outside the other run's top-k (not a swap of near-tied tokens)."""
    return [f for f in c.flips if f["token_obs"] not in f["topk_ref"] or f["token_ref"] not in f["topk_obs"]]


def outside_topk_flips(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """:func:`verify_verdict`'s own way of being divergent, as a row check
    (:data:`~logitlab.numerics.verdict_rules.DIVERGENCE_CHECKS` form): the flips to a token outside the
    other run's top-k, and their positions."""
    flips = [f for f in _outside_topk(case.c) if f["position"] not in outside]
    if not flips:
        return [], []
    return [f"{len(flips)} flip(s) to a token outside the other run's top-{case.k}"], [f["position"] for f in flips]


#: How ``verify`` judges a comparison, for its detection limits (:mod:`logitlab.numerics.detection`).
VERIFY_JUDGE = Judge(verify_verdict, judge_topk=False, checks=(outside_topk_flips,))


def sweep_entry(prompt: str, k: int, c: LogitComparison, n_prompt: int | None, thresholds: Thresholds,
                seconds: float = 0.0, index_of: Callable[[int], tuple[int, int]] | None = None,
                outputs: Sequence[int] | None = None) -> SweepEntry:
    """Summarise one comparison of N verify rows at block size K.

    ``index_of(row) -> (output_index, position)`` maps a row of a merged
    comparison back to its prompt; default: ``(row, n_prompt + row)``, or with ``outputs`` (the output index of
    each compared row, ``--positions``) ``(outputs[row], n_prompt + outputs[row])``.
    """
    per_prompt = index_of is None
    output = (lambda i: i) if outputs is None else (lambda i: int(outputs[i]))
    index_of = index_of or (lambda i: (output(i), (n_prompt or 0) + output(i)))
    verdict = verify_verdict(c, thresholds)
    margins = [f["margin_ref"] for f in c.flips if f["margin_ref"] is not None]
    first = next((i for i, d in enumerate(c.row_differing) if d), None)
    first_div = None
    if first is not None:
        out, pos = index_of(first)
        first_div = {"output_index": out, "position": pos, "block_start": out - out % k, "row": out % k}
    blocks = in_block_rows(c, k, thresholds, outputs) if per_prompt else []
    return SweepEntry(
        prompt=prompt, k=k, rows=c.n_positions, bit_exact_rows=c.n_positions - c.differing_rows,
        flips=len(c.flips), first_divergence=first_div, max_abs_diff=c.max_abs_diff,
        mean_abs_diff=c.mean_abs_diff, mean_diff=c.mean_diff,
        min_flip_margin=min(margins) if margins else None, max_flip_margin=max(margins) if margins else None,
        topk_changes=len(c.topk_changes), max_scaled_ulp=c.max_scaled_ulp,
        verdict=verdict.word, evidence=list(verdict.evidence), in_block=blocks,
        flips_in_row0=sum(1 for f in c.flips if index_of(f["position"])[0] % k == 0),
        decode_seconds=seconds,
    )


# -- classification --------------------------------------------------------------
def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def flip_scaling(totals: Sequence[SweepEntry], batch_invariant: bool | None = None) -> str:
    """One line: flips and non-bit-exact rows per K, and how flips grow with K.

    ``batch_invariant``: True when the M=K rows were bit-identical for every
    K ≥ 2 of the sweep (on every prompt), False when not, None when untested.
    """
    parts = [f"K={t.k}: {t.flips} flips, {t.rows - t.bit_exact_rows}/{t.rows} rows differ" for t in totals]
    multi = [t for t in totals if t.k >= 2]
    trend = ""
    if len(multi) >= 2:
        lo, hi = multi[0], multi[-1]
        if lo.flips == hi.flips == 0:
            trend = "no flips at any K ≥ 2"
        elif lo.flips > 0 and hi.flips > 0:
            slope = math.log(hi.flips / lo.flips) / math.log(hi.k / lo.k)
            if slope > 0.5:
                trend = (f"flips grow with K (log-log slope {slope:.2f} from K={lo.k} to K={hi.k}): "
                         "more in-block rows, more flips — the in-block computation differs")
            else:
                trend = (f"flips do not grow with K (log-log slope {slope:.2f} from K={lo.k} to K={hi.k}): "
                         "they are set by the per-row numerics of the batched path and the KV entries it "
                         "wrote, not by the number of in-block rows")
        else:
            trend = f"flips go from {lo.flips} at K={lo.k} to {hi.flips} at K={hi.k}"
    if batch_invariant:
        ks = ", ".join(str(t.k) for t in multi)
        same_as_m1 = all(t.bit_exact_rows == t.rows for t in multi)
        trend += (f"; the M=K rows are bit-identical for K = {ks}: the batched path computes each row the same "
                  "way whatever K is (batch-size invariant)" + (", and the way M=1 does" if same_as_m1
                                                                 else ", just not the way M=1 does"))
    elif batch_invariant is False:
        trend += "; the M=K rows themselves change with K (not batch-size invariant)"
    return "; ".join(parts) + (f" — {trend.lstrip('; ')}" if trend else "")


def _where_line(sweep: Sequence[SweepEntry], row0_flips: int) -> str:
    """Where the difference starts: in-block numerics, the batched path's own rows, or the KV history."""
    multi = [e for e in sweep if e.k >= 2 and e.first_divergence is not None]
    at_row0 = [e for e in multi if e.first_divergence["row"] == 0]
    if at_row0:
        e = at_row0[0]
        return (f"the first differing row is an in-block row 0 in {len(at_row0)} of {len(multi)} (prompt, K ≥ 2) "
                f"runs (e.g. {e.prompt} K={e.k} out {e.first_divergence['output_index']}): every earlier row was "
                "bit-exact, so it read the same KV history as M=1 and still differs — the batched path's own "
                "per-row numerics differ (kernel choice for M ≥ 2), and every later row also reads the KV entries "
                "M=K rows wrote")
    if row0_flips:
        return ("rows differ first at in-block rows ≥ 1; row-0 flips read only KV entries earlier blocks wrote, so "
                "those are carried by the KV history the M=K rows wrote")
    return "flips only at in-block rows ≥ 1: the seed's signature of in-block attention/KV numerics"


def classify_verify(totals: Sequence[SweepEntry], flips: Sequence[FlipRecord],
                    thresholds: Thresholds, *, batch_invariant: bool | None = None,
                    sweep: Sequence[SweepEntry] = ()) -> VerifyClassification:
    """Classify the K sweep (totals over prompts, one entry per K) with evidence.

    Rules, following the seed report's reasoning (first match decides the cause):

    1. every row of every K bit-exact → ``bit-exact``;
    2. any K verdict ``divergent`` (:func:`verify_verdict`: a row far outside
       the pair's noise floor, a flip to a token outside the other run's
       top-k, a localized change, NaN/Inf, or without a floor a flip with M=1
       margin ≥ ``near_tie_margin``) → ``wrong-result`` (indexing/masking-class bug);
    3. any K verdict ``systematic-offset``, or one in-block row index whose
       differing rows share an offset (the offset rule over that index's
       rows) → ``systematic-offset``;
    4. K=1 not bit-exact → ``verify-path``: a one-row verify already differs
       from M=1, so the verify path itself (dispatch or kernel choice), not
       batching, is the cause;
    5. any K verdict ``lossy`` → ``lossy`` (flips at margins ≥ ``near_tie_margin``, inside the
       pair's large noise floor);
    6. flips all below ``near_tie_margin`` and inside the floor → ``near-tie-noise``; no flips:
       within ULP noise → ``ulp-noise``, above → ``noise``.

    A flip at in-block row 0 is *not* by itself taken as an offset (the seed's
    rule): on llama.cpp the batched path computes even row 0 differently from
    M=1 (measured: a prompt's first differing row is often a row 0 whose KV
    history is still bit-exact), and later rows read KV entries M=K rows
    wrote, so near-tie flips land on row 0 as readily as on any row. Where the
    difference starts is reported as evidence (``sweep``: the per-prompt
    entries).
    """
    tau = thresholds.near_tie_margin
    if not totals:
        raise InputError("classify_verify needs at least one K")
    worst = max(totals, key=lambda t: VERDICTS.index(t.verdict))
    word = worst.verdict
    scaling = flip_scaling(totals, batch_invariant)
    evidence: list[str] = []
    by_k = {t.k: t for t in totals}

    if all(t.bit_exact_rows == t.rows for t in totals):
        ks = ", ".join(str(t.k) for t in totals)
        rows = [f"K={t.k}: {'the 1 row' if t.rows == 1 else f'all {t.rows} rows'} bit-exact" for t in totals]
        return VerifyClassification("bit-exact", "bit-exact",
                                    f"M=K verify is bit-exact with M=1 greedy at K = {ks}", rows, scaling, tau)

    for t in totals:
        state = "bit-exact" if t.bit_exact_rows == t.rows else (
            f"{t.rows - t.bit_exact_rows}/{t.rows} rows differ, {t.flips} flips, max |Δ| {_g(t.max_abs_diff)}, "
            f"mean Δ {_g(t.mean_diff)}")
        evidence.append(f"K={t.k}: {state} → {t.verdict}")
    offsets = consistent_offsets(totals)
    k1 = by_k.get(1)
    row0 = sum(t.flips_in_row0 for t in totals if t.k >= 2)
    inner = sum(t.flips - t.flips_in_row0 for t in totals if t.k >= 2)

    if word == "divergent":
        cause = "wrong-result"
        evidence += [f"K={worst.k}: {line}" for line in worst.evidence]
        confident = [f for f in flips if f.margin_ref is None or f.margin_ref >= tau]
        if confident:
            f = max(confident, key=lambda f: f.margin_ref or 0.0)
            evidence.append(f"flip at a confident position: {f.prompt} K={f.k} output {f.output_index} (row {f.row}): "
                            f"{f.token_ref} → {f.token_obs}, M=1 margin {_g(f.margin_ref)} ≥ near_tie_margin = "
                            f"{_g(tau)}; top-{len(f.topk_ref)} M=1 {f.topk_ref} vs M=K {f.topk_obs}")
        summary = ("wrong result: M=K rows flip confident tokens, or flip to tokens outside the top-k — an "
                   "indexing/masking-class bug in the verify path, not floating-point noise")
    elif word == "systematic-offset" or offsets:
        cause = "systematic-offset"
        word = "systematic-offset" if VERDICTS.index(word) < VERDICTS.index("systematic-offset") else word
        for k, r in offsets[:4]:
            evidence.append(f"K={k} in-block row {r.row}: mean Δ per position averages {_g(r.mean_diff)}, its sd "
                            f"across positions {_g(r.position_sd)} (|mean| ≥ offset_ratio {_g(thresholds.offset_ratio)}"
                            f" × sd) over {r.rows - r.bit_exact_rows} differing rows")
        if not offsets:
            evidence += [f"K={worst.k}: {line}" for line in worst.evidence[:1]]
        where = sorted({r.row for _, r in offsets})
        summary = ("systematic offset: M=K rows are shifted, not scattered"
                   + (f" (in-block row {', '.join(map(str, where))})" if where else ""))
    elif k1 is not None and k1.bit_exact_rows < k1.rows:
        cause = "verify-path"
        evidence.append(f"K=1: {k1.rows - k1.bit_exact_rows}/{k1.rows} one-row verify blocks differ from M=1 "
                        f"({k1.flips} flips): a width-1 verify is not the M=1 path, so dispatch or kernel choice "
                        "differs, not batching")
        summary = "the verify path itself differs from M=1 (K=1 already differs): dispatch or kernel choice"
    elif word == "lossy":
        cause = "lossy"
        evidence += [f"K={worst.k}: {line}" for line in worst.evidence[:3]]
        summary = ("lossy: the M=K rows' noise is large everywhere, and flips at margins ≥ "
                   f"near_tie_margin = {_g(tau)} lie inside it — a lower-precision verify path, not a near-tie")
    elif any(t.flips for t in totals):
        cause = "near-tie-noise"
        margins = [f.margin_ref for f in flips if f.margin_ref is not None]
        evidence.append(f"all {len(flips)} flips at M=1 margin < near_tie_margin = {_g(tau)} "
                        f"(largest {_g(max(margins, default=None))}, smallest {_g(min(margins, default=None))})")
        evidence.append(f"K={worst.k}: {worst.evidence[0]}")
        topk_same = sum(1 for f in flips if sorted(f.topk_ref) == sorted(f.topk_obs))
        evidence.append(f"top-k sets identical at {topk_same} of {len(flips)} flips; at every flip both tokens are in "
                        "both top-k lists (near-tied tokens trading places)")
        evidence.append(f"mean Δ over all compared rows {_g(worst.mean_diff)} vs mean |Δ| {_g(worst.mean_abs_diff)}: "
                        "no offset (offset_ratio test per K and per in-block row)")
        if k1 is not None:
            evidence.append(f"K=1: {k1.flips} flips, {k1.rows - k1.bit_exact_rows} rows differ: the one-row verify "
                            "is the M=1 path")
        evidence.append(f"flips at in-block row 0: {row0}, at rows ≥ 1: {inner}")
        evidence.append(_where_line(sweep, row0))
        summary = (f"near-tie floating-point noise: every flip sits below near_tie_margin = {_g(tau)}, top-k sets "
                   "kept, no offset")
    else:
        cause = "ulp-noise" if word == "ulp-noise" else "noise"
        evidence.append(f"no argmax flips; largest difference {_g(worst.max_scaled_ulp)} ULP at row scale "
                        f"({'≤' if worst.max_scaled_ulp <= thresholds.max_ulp else '>'} max_ulp = "
                        f"{_g(thresholds.max_ulp)})")
        evidence += [f"K={worst.k}: {line}" for line in worst.evidence if "noise floor" in line][:1]
        summary = ("rounding noise only: rows differ within ULP noise, no flips" if cause == "ulp-noise" else
                   "floating-point noise above ULP level: no flips, no offset, no row outside the noise floor")
    return VerifyClassification(word, cause, summary, evidence, scaling, tau)


def consistent_offsets(totals: Sequence[SweepEntry]) -> list[tuple[int, InBlockRow]]:
    """In-block rows offset at every K ≥ 2 of the sweep that has that row index (K=1: on its own).

    A real in-block offset (the seed's suspicion: row 0 of every verify block)
    shows whatever K is; one of the many (K, row) groups passing the test by
    chance does not.
    """
    flagged = [(t.k, r) for t in totals for r in t.in_block if r.offset]

    def consistent(k: int, j: int) -> bool:
        return k == 1 or all(r.offset for t in totals if t.k >= 2 for r in t.in_block if r.row == j)

    return [(k, r) for k, r in flagged if consistent(k, r.row)]


def pool_rows(rows: Sequence[InBlockRow], thresholds: Thresholds, tests: int = 1) -> InBlockRow:
    """One in-block row index pooled over prompts; the offset test is redone on the pooled numbers.

    The mean and the sd across positions of the per-position mean Δ combine
    exactly (pooled sums of squares); the std of Δ pools the entries.
    """
    n = sum(r.rows for r in rows)
    differing = [(r.rows - r.bit_exact_rows, r) for r in rows if r.rows > r.bit_exact_rows]
    nd = sum(d for d, _ in differing)
    mean = sum(d * r.mean_diff for d, r in differing) / nd if nd else 0.0
    second = sum(d * (r.std_diff ** 2 + r.mean_diff ** 2) for d, r in differing) / nd if nd else 0.0
    std = max(second - mean * mean, 0.0) ** 0.5
    squares = sum((d - 1) * r.position_sd ** 2 + d * (r.mean_diff - mean) ** 2 for d, r in differing)
    position_sd = (squares / (nd - 1)) ** 0.5 if nd > 1 else 0.0
    scaled = max(r.max_scaled_ulp for r in rows)
    return InBlockRow(row=rows[0].row, rows=n, bit_exact_rows=sum(r.bit_exact_rows for r in rows),
                      flips=sum(r.flips for r in rows), mean_diff=mean, std_diff=std,
                      max_abs_diff=max(r.max_abs_diff for r in rows), max_scaled_ulp=scaled,
                      offset=is_offset(mean, position_sd, nd, scaled, thresholds, tests=tests),
                      position_sd=position_sd)
