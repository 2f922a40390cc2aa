"""``logitlab verify``: speculative-decoding verify probe (M=1 vs M=K) and the near-tie guard.

Method (the seed report's ``verify_logits_probe``): for each prompt, decode N
tokens greedily with M=1 and keep every position's full logits. Then replay
the same continuation as M=K verify blocks whose draft tokens are the greedy
tokens themselves: block b feeds ``g[bK : bK+K]``, so verify row j of block b
has exactly the causal inputs of the M=1 forward of ``g[bK+j]``, and any logit
difference is the engine's numerics. Rows are compared with the comparison
core, per K (the K sweep), per prompt and in total; flips are recorded with
both argmaxes, logits, margins and top-k lists; the whole is classified with
evidence (:func:`classify_verify`). With a guard, a speculative greedy loop
runs under the near-tie guard (:mod:`logitlab.experiments.guard`) and is
checked token by token against M=1 greedy.

Positions: ``output_index`` i is the i-th decode row (input token ``g[i]``,
predicting ``g[i+1]``); ``position`` is its absolute position in the sequence
(``n_prompt + i``); ``block_start`` = ``i - i % K``; ``row`` = ``i % K``
(the seed report's "K-block P=24 row 3").
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.engines.base import Engine, Session
from logitlab.engines.variant import Variant
from logitlab.errors import InputError, LogitlabError
from logitlab.experiments import guard as G
from logitlab.experiments.isolation import load_engine
from logitlab.experiments.prompts import Prompt, builtin_prompts, check_unique
from logitlab.manifest import build_manifest
from logitlab.numerics import VERDICTS, LogitComparison, Thresholds, Verdict, compare_logits
from logitlab.numerics.compare import KLD_STATS

#: Version of :meth:`VerifyResult.to_dict`. 1 — first version.
SCHEMA_VERSION = 1
FALLBACKS = G.FALLBACKS
DEFAULT_KS = (1, 2, 4, 8)

#: cause labels of :class:`VerifyClassification`, harmless first
CAUSES = ("bit-exact", "ulp-noise", "near-tie-noise", "verify-path", "systematic-offset", "wrong-result")

Event = Callable[[str, dict[str, Any]], None]


# -- configuration -------------------------------------------------------------
@dataclass(frozen=True)
class VerifyConfig:
    """Everything that defines a ``verify`` run.

    Attributes:
        variant: the engine, model and options (one variant: M=1 and M=K run on it).
        prompts: the prompts (default: the built-in set of 9).
        ks: verify block sizes K of the sweep, each ≥ 1.
        n_decode: greedy decode tokens N per prompt.
        top_k: k of the top-k statistics.
        thresholds: verdict thresholds; ``near_tie_margin`` is the margin τ
            below which a flip counts as a near-tie.
        guard: None (no guard run), a margin τ in logits, or ``"auto"``
            (τ from a calibration replay on ``calibration_prompts``).
        guard_k: verify block size of the guarded loop.
        guard_safety: ``auto``: τ = safety × the largest top-k Δ spread seen.
        guard_fallbacks: ``redecode`` (roll back to the flagged position and
            decode it M=1 on the current KV) and/or ``resync`` (roll back to
            the last M=1-written position and replay M=1 up to it).
        calibration_prompts: held-out prompts for ``auto``.
    """

    variant: Variant
    prompts: tuple[Prompt, ...] = field(default_factory=lambda: tuple(builtin_prompts("default")))
    ks: tuple[int, ...] = DEFAULT_KS
    n_decode: int = 64
    top_k: int = 5
    thresholds: Thresholds = field(default_factory=Thresholds)
    guard: float | str | None = None
    guard_k: int = 4
    guard_safety: float = 2.0
    guard_fallbacks: tuple[str, ...] = FALLBACKS
    calibration_prompts: tuple[Prompt, ...] = field(default_factory=lambda: tuple(builtin_prompts("calibration")))

    def validate(self) -> None:
        """Raise InputError naming the bad value."""
        if not self.ks:
            raise InputError("--k needs at least one block size")
        bad = [k for k in self.ks if isinstance(k, bool) or not isinstance(k, int) or k < 1]
        if bad:
            raise InputError(f"--k values must be integers >= 1, got {bad[0]!r}")
        if len(set(self.ks)) != len(self.ks):
            raise InputError(f"--k lists a block size twice: {list(self.ks)}")
        if self.n_decode < 1:
            raise InputError(f"--tokens must be at least 1, got {self.n_decode}")
        if self.top_k < 1:
            raise InputError(f"--top-k must be at least 1, got {self.top_k}")
        if not self.prompts:
            raise InputError("no prompts to run")
        check_unique(self.prompts)
        if self.guard is not None:
            if isinstance(self.guard, str):
                if self.guard != "auto":
                    raise InputError(
                        f"--guard must be a margin in logits (e.g. 0.5), 'auto' or 'off', got {self.guard!r}")
                if not self.calibration_prompts:
                    raise InputError("--guard auto needs calibration prompts")
            elif not (isinstance(self.guard, (int, float)) and self.guard >= 0 and math.isfinite(self.guard)):
                raise InputError(f"--guard margin must be a number >= 0 (logits), got {self.guard!r}")
            if self.guard_k < 1:
                raise InputError(f"--guard-k must be at least 1, got {self.guard_k}")
            if not self.guard_safety > 0:
                raise InputError(f"--guard-safety must be > 0, got {self.guard_safety}")
            unknown = [f for f in self.guard_fallbacks if f not in FALLBACKS]
            if unknown or not self.guard_fallbacks:
                raise InputError(f"unknown guard fallback {unknown[0] if unknown else '(none)'!r}; "
                                 f"valid: {', '.join(FALLBACKS)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant.to_dict(),
            "prompts": [p.to_dict() for p in self.prompts],
            "ks": list(self.ks),
            "n_decode": self.n_decode,
            "top_k": self.top_k,
            "thresholds": dataclasses.asdict(self.thresholds),
            "guard": self.guard,
            "guard_k": self.guard_k,
            "guard_safety": self.guard_safety,
            "guard_fallbacks": list(self.guard_fallbacks),
            "calibration_prompts": [p.to_dict() for p in self.calibration_prompts] if self.guard == "auto" else [],
        }


# -- result records --------------------------------------------------------------
@dataclass
class InBlockRow:
    """Statistics of one in-block row index j over all verify blocks.

    ``offset``: the rows differ beyond ULP noise and ``|mean Δ| ≥ offset_ratio
    × std Δ`` pooled over this row index's differing rows.
    """

    row: int
    rows: int
    bit_exact_rows: int
    flips: int
    mean_diff: float
    std_diff: float
    max_abs_diff: float
    max_scaled_ulp: float = 0.0
    offset: bool = False


@dataclass
class SweepEntry:
    """One line of the K sweep: one prompt (or ``"all"``) at one K.

    ``first_divergence``: the first row that is not bit-exact:
    ``{output_index, position, block_start, row}``; None when all are.
    Margins are the reference (M=1) top1–top2 margins at flips (logits).
    """

    prompt: str
    k: int
    rows: int
    bit_exact_rows: int
    flips: int
    first_divergence: dict | None
    max_abs_diff: float
    mean_abs_diff: float
    mean_diff: float
    min_flip_margin: float | None
    max_flip_margin: float | None
    topk_changes: int
    max_scaled_ulp: float
    verdict: str
    evidence: list
    in_block: list = field(default_factory=list)
    flips_in_row0: int = 0
    decode_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class FlipRecord:
    """One argmax flip of a verify row against M=1.

    ``logit_*``: the M=1 (ref) and M=K (obs) logits of both tokens; margins are
    each row's own top1–top2; ``topk_*`` the top-k token lists, best first.
    """

    prompt: str
    k: int
    output_index: int
    position: int
    block_start: int
    row: int
    token_ref: int
    token_obs: int
    text_ref: str
    text_obs: str
    logit_ref_at_ref: float
    logit_ref_at_obs: float
    logit_obs_at_ref: float
    logit_obs_at_obs: float
    margin_ref: float | None
    margin_obs: float | None
    topk_ref: list
    topk_obs: list

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class PromptRecord:
    """A prompt and its M=1 greedy continuation."""

    name: str
    kind: str
    n_prompt_tokens: int
    generated_ids: list
    generated_text: str
    m1_decode_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class VerifyClassification:
    """The cause of the M=K vs M=1 differences, with evidence.

    Attributes:
        word: the verdict word (one of :data:`~logitlab.numerics.VERDICTS`), worst over K.
        cause: one of :data:`CAUSES`.
        summary: one line.
        evidence: one line per fact, naming numbers and thresholds.
        scaling: how flips and non-bit-exact rows scale with K.
        tau: the margin τ (logits) below which flips count as near-ties.
    """

    word: str
    cause: str
    summary: str
    evidence: list
    scaling: str
    tau: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class GuardPromptResult:
    """The guarded loop on one prompt with one fallback, against M=1 greedy.

    Work is counted in token rows fed to the engine after the prompt and in
    decode calls; the ideal (every draft accepted, no trigger) is ``tokens - 1``
    rows in ``ceil((tokens - 1) / K)`` calls. Times are per generated token.
    """

    prompt: str
    fallback: str
    k: int
    tokens: int
    ideal_rows: int
    ideal_calls: int
    decided_by_verify: int
    triggers: int
    trigger_rate: float
    forward_rows: int
    forward_calls: int
    discarded_rows: int
    corrections: int
    extra_rows: float
    extra_calls: float
    seconds_per_token: float
    unguarded_seconds_per_token: float
    m1_seconds_per_token: float
    overhead_vs_unguarded: float
    identical: bool
    first_divergence: int | None
    unguarded_identical: bool
    unguarded_first_divergence: int | None
    triggers_fallback_exact: int
    triggers_token_changed: int
    evaluation: dict

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class GuardReport:
    """The near-tie guard measured on the prompt set.

    ``totals`` per fallback: summed work and time, trigger rate over all
    verify-decided positions, identical prompts, and the measured bound checks.
    """

    tau: float
    source: str
    k: int
    calibration: dict | None
    results: list = field(default_factory=list)
    totals: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"tau": self.tau, "source": self.source, "k": self.k, "calibration": self.calibration,
                "results": [r.to_dict() for r in self.results], "totals": self.totals}


@dataclass
class VerifyResult:
    """The whole ``verify`` run: manifest, prompts, K sweep, flips, classification, guard."""

    config: dict[str, Any]
    manifest: dict[str, Any]
    prompts: list = field(default_factory=list)
    sweep: list = field(default_factory=list)
    totals: list = field(default_factory=list)
    flips: list = field(default_factory=list)
    classification: VerifyClassification | None = None
    guard: GuardReport | None = None
    batch_invariant: bool | None = None
    error: str | None = None
    schema_version: int = SCHEMA_VERSION

    def total(self, k: int) -> SweepEntry | None:
        return next((t for t in self.totals if t.k == k), None)

    @property
    def guard_identical(self) -> bool | None:
        """True iff every guarded run (every fallback) is token-identical to M=1 greedy; None without a guard."""
        if self.guard is None or not self.guard.results:
            return None
        return all(r.identical for r in self.guard.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "manifest": self.manifest,
            "config": self.config,
            "prompts": [p.to_dict() for p in self.prompts],
            "sweep": [e.to_dict() for e in self.sweep],
            "totals": [e.to_dict() for e in self.totals],
            "flips": [f.to_dict() for f in self.flips],
            "batch_invariant": self.batch_invariant,
            "classification": None if self.classification is None else self.classification.to_dict(),
            "guard": None if self.guard is None else self.guard.to_dict(),
            "error": self.error,
        }


# -- the replay ------------------------------------------------------------------
@dataclass
class GreedyRun:
    """M=1 greedy decode of one prompt: tokens and rows.

    ``rows[0]`` is the prefill's last row (decides ``tokens[0]``); ``rows[i+1]``
    is the M=1 decode row of input ``tokens[i]``.
    """

    prompt_ids: list
    tokens: list
    rows: np.ndarray
    decode_seconds: float

    @property
    def decode_rows(self) -> np.ndarray:
        """``(N, n_vocab)``: the rows the verify replay is compared with."""
        return self.rows[1:]


def verify_call(session: Session) -> Callable[[Sequence[int]], np.ndarray]:
    """The session's M=K path: its ``verify(tokens)`` method if the adapter has a
    distinct verify kernel, else ``decode(tokens)`` of K tokens."""
    hook = getattr(session, "verify", None)
    return hook if callable(hook) else session.decode


def greedy_m1(engine: Engine, prompt_ids: Sequence[int], n_decode: int) -> GreedyRun:
    """Prefill, then ``n_decode`` greedy M=1 decode calls; keep every row."""
    with engine.open_session() as session:
        rows = [session.prefill(prompt_ids)[-1]]
        tokens: list[int] = []
        start = time.perf_counter()
        for _ in range(n_decode):
            tokens.append(int(np.argmax(rows[-1])))
            rows.append(session.decode([tokens[-1]])[0])
        seconds = time.perf_counter() - start
    return GreedyRun(list(prompt_ids), tokens, np.stack(rows), seconds)


def replay_mk(engine: Engine, prompt_ids: Sequence[int], tokens: Sequence[int], k: int) -> tuple[np.ndarray, float]:
    """Prefill, then feed ``tokens`` as M=K verify blocks; return ``(len(tokens), n_vocab)`` rows and seconds."""
    with engine.open_session() as session:
        session.prefill(prompt_ids)
        call = verify_call(session)
        start = time.perf_counter()
        blocks = [call(list(tokens[b:b + k])) for b in range(0, len(tokens), k)]
        seconds = time.perf_counter() - start
    return np.concatenate(blocks), seconds


def in_block_rows(c: LogitComparison, k: int, thresholds: Thresholds) -> list[InBlockRow]:
    """Per in-block row index j (``output_index % k``): rows, bit-exact rows, flips, pooled mean/std Δ."""
    flips_at = {f["position"] for f in c.flips}
    out = []
    for j in range(min(k, c.n_positions)):
        idx = list(range(j, c.n_positions, k))
        differing = [i for i in idx if c.row_differing[i]]
        mean = std = 0.0
        if differing:
            mean = sum(c.row_mean_diff[i] for i in differing) / len(differing)
            second = sum(c.row_std_diff[i] ** 2 + c.row_mean_diff[i] ** 2 for i in differing) / len(differing)
            std = max(second - mean * mean, 0.0) ** 0.5
        scaled = max((c.row_scaled_ulp[i] for i in differing), default=0.0)
        out.append(InBlockRow(
            row=j, rows=len(idx), bit_exact_rows=len(idx) - len(differing),
            flips=sum(1 for i in idx if i in flips_at),
            mean_diff=mean, std_diff=std,
            max_abs_diff=max((c.row_max_abs_diff[i] for i in idx), default=0.0),
            max_scaled_ulp=scaled, offset=_is_offset(bool(differing), scaled, mean, std, thresholds),
        ))
    return out


def _is_offset(differing: bool, scaled_ulp: float, mean: float, std: float, thresholds: Thresholds) -> bool:
    """The verdict's offset rule: above ULP noise and |mean Δ| ≥ offset_ratio × std Δ."""
    return differing and scaled_ulp > thresholds.max_ulp and abs(mean) >= thresholds.offset_ratio * std


def merge_comparisons(parts: Sequence[LogitComparison]) -> LogitComparison:
    """Concatenate comparisons of the same vocabulary (rows of all prompts) into one.

    Totals are recomputed from the per-row fields: sums, maxima, entry-weighted
    means, the pooled std of Δ, KLD percentiles over all rows. Positions of
    flips and of the first mismatch are offset to the concatenated rows.

    Raises:
        InputError: no parts, or vocabularies / top-k differ.
    """
    if not parts:
        raise InputError("merge_comparisons needs at least one comparison")
    first = parts[0]
    if any(p.n_vocab != first.n_vocab or p.top_k != first.top_k for p in parts):
        raise InputError("merge_comparisons: comparisons differ in n_vocab or top_k")
    if len(parts) == 1:
        return first
    n = sum(p.n_positions for p in parts)
    w = [p.n_positions / n for p in parts]
    mean = sum(wi * p.mean_diff for wi, p in zip(w, parts))
    second = sum(wi * (p.std_diff ** 2 + p.mean_diff ** 2) for wi, p in zip(w, parts))
    flips, first_mismatch, offset = [], None, 0
    for p in parts:
        flips += [{**f, "position": f["position"] + offset} for f in p.flips]
        if first_mismatch is None and p.first_mismatch is not None:
            first_mismatch = {**p.first_mismatch, "position": p.first_mismatch["position"] + offset}
        offset += p.n_positions
    rows: dict[str, list] = {}
    for f in dataclasses.fields(LogitComparison):
        if f.name.startswith("row_"):
            rows[f.name] = [x for p in parts for x in getattr(p, f.name)]
    kld = np.array([x for x in rows["row_kld"] if x is not None], dtype=np.float64)
    kld_summary = {name: (float(kld.mean()) if q is None else float(np.percentile(kld, q))) if kld.size else None
                   for name, q in KLD_STATS}
    ids = None
    if all(p.token_ids is not None for p in parts):
        ids = [t for p in parts for t in p.token_ids]
    return LogitComparison(
        n_positions=n, n_vocab=first.n_vocab, dtype=first.dtype, top_k=first.top_k,
        differing_entries=sum(p.differing_entries for p in parts),
        differing_rows=sum(p.differing_rows for p in parts),
        max_abs_diff=max(p.max_abs_diff for p in parts),
        mean_abs_diff=sum(wi * p.mean_abs_diff for wi, p in zip(w, parts)),
        mean_diff=mean, std_diff=max(second - mean * mean, 0.0) ** 0.5,
        max_ulp=max(p.max_ulp for p in parts), max_scaled_ulp=max(p.max_scaled_ulp for p in parts),
        ulp_histogram={key: sum(p.ulp_histogram[key] for p in parts) for key in first.ulp_histogram},
        argmax_agreement=sum(wi * p.argmax_agreement for wi, p in zip(w, parts)),
        topk_agreement=sum(wi * p.topk_agreement for wi, p in zip(w, parts)),
        kld=kld_summary,
        nan_ref=sum(p.nan_ref for p in parts), nan_obs=sum(p.nan_obs for p in parts),
        inf_ref=sum(p.inf_ref for p in parts), inf_obs=sum(p.inf_obs for p in parts),
        nonfinite_mismatch=sum(p.nonfinite_mismatch for p in parts),
        first_mismatch=first_mismatch, flips=flips, token_ids=ids, **rows,
    )


def verify_verdict(c: LogitComparison, thresholds: Thresholds) -> Verdict:
    """The verdict of one M=K vs M=1 comparison, judged on argmax flips.

    Greedy and speculative decoding read only the argmax, so this verdict
    judges flips; a top-k set change away from a flip (the k-th boundary
    moved) is reported in the evidence but not judged. (``ab``'s
    :func:`~logitlab.numerics.classify` also judges those; on llama.cpp's M=K
    rows, whose |Δ| reaches 2 logits in the tail, that calls a 5th/6th swap at
    a gap of 0.53 divergent.)

    Rules, first match decides (τ = ``near_tie_margin``):

    1. ``bit-exact`` — no entry differs;
    2. ``divergent`` — NaN/Inf mismatch; a flip with M=1 margin ≥ τ; or a flip
       to a token outside the other run's top-k (not a swap of near-tied tokens);
    3. ``ulp-noise`` — ``max_scaled_ulp ≤ max_ulp`` and no flips;
    4. ``systematic-offset`` — above ULP noise and ``|mean Δ| ≥ offset_ratio ×
       std Δ`` pooled over the differing rows;
    5. ``near-tie`` — everything else: flips (if any) below τ, unbiased.
    """
    t, n, k = thresholds, c.n_positions, c.top_k
    tdict = dataclasses.asdict(t)
    if c.bit_exact:
        return Verdict("bit-exact", [f"all {n} rows × {c.n_vocab} logits have identical bits"], tdict)
    flip_rows = {f["position"] for f in c.flips}
    margins = [f["margin_ref"] for f in c.flips if f["margin_ref"] is not None]
    topk_elsewhere = [i for i in c.topk_changes if i not in flip_rows]
    gaps = [c.row_kth_gap_ref[i] for i in topk_elsewhere if c.row_kth_gap_ref[i] is not None]
    topk_line = (f"top-{k} set changed at {len(topk_elsewhere)} position(s) away from flips (largest reference "
                 f"{k}th/{k + 1}th gap {_g(max(gaps) if gaps else None)}): the k-th boundary moved, the argmax did not"
                 if topk_elsewhere else f"top-{k} set unchanged away from flips")
    scale = (f"max |Δ| = {_g(c.max_scaled_ulp)} ULP at row scale "
             f"{'≤' if c.max_scaled_ulp <= t.max_ulp else '>'} max_ulp = {_g(t.max_ulp)}")
    bad = []
    if c.nonfinite_mismatch:
        bad.append(f"{c.nonfinite_mismatch} entries are NaN/Inf in one run but not in the other")
    confident = [f for f in c.flips if f["margin_ref"] is None or f["margin_ref"] >= t.near_tie_margin]
    if confident:
        f = max(confident, key=lambda f: float("inf") if f["margin_ref"] is None else f["margin_ref"])
        bad.append(f"{len(confident)} flip(s) at confident positions; row {f['position']}: token {f['token_ref']} → "
                   f"{f['token_obs']}, M=1 margin {_g(f['margin_ref'])} ≥ τ = {_g(t.near_tie_margin)}")
    outside = [f for f in c.flips if f["token_obs"] not in f["topk_ref"] or f["token_ref"] not in f["topk_obs"]]
    if outside:
        f = outside[0]
        bad.append(f"{len(outside)} flip(s) to a token outside the other run's top-{k}; row {f['position']}: "
                   f"M=1 top-{k} {f['topk_ref']} vs M=K top-{k} {f['topk_obs']}")
    if bad:
        return Verdict("divergent", bad + [topk_line], tdict)
    if c.max_scaled_ulp <= t.max_ulp and not c.flips:
        return Verdict("ulp-noise", [scale, "no argmax flips", topk_line], tdict)
    rows = [i for i, d in enumerate(c.row_differing) if d]
    mean = sum(c.row_mean_diff[i] for i in rows) / len(rows)
    second = sum(c.row_std_diff[i] ** 2 + c.row_mean_diff[i] ** 2 for i in rows) / len(rows)
    std = max(second - mean * mean, 0.0) ** 0.5
    offset = _is_offset(True, c.max_scaled_ulp, mean, std, t)
    offset_line = (f"|mean Δ| = {_g(abs(mean))} {'≥' if offset else '<'} offset_ratio × std Δ = "
                   f"{_g(t.offset_ratio)} × {_g(std)} over the {len(rows)} differing rows")
    flip_line = (f"{len(c.flips)} flip(s), all swaps within the top-{k} at M=1 margin < τ = {_g(t.near_tie_margin)} "
                 f"(largest {_g(max(margins))})" if margins else "no argmax flips")
    if offset:
        return Verdict("systematic-offset", [offset_line, scale, flip_line, topk_line], tdict)
    return Verdict("near-tie", [scale, offset_line, flip_line, topk_line], tdict)


def sweep_entry(prompt: str, k: int, c: LogitComparison, n_prompt: int | None, thresholds: Thresholds,
                seconds: float = 0.0, index_of: Callable[[int], tuple[int, int]] | None = None) -> SweepEntry:
    """Summarise one comparison of N verify rows at block size K.

    ``index_of(row) -> (output_index, position)`` maps a row of a merged
    comparison back to its prompt; default: ``(row, n_prompt + row)``.
    """
    per_prompt = index_of is None
    index_of = index_of or (lambda i: (i, (n_prompt or 0) + i))
    verdict = verify_verdict(c, thresholds)
    margins = [f["margin_ref"] for f in c.flips if f["margin_ref"] is not None]
    first = next((i for i, d in enumerate(c.row_differing) if d), None)
    first_div = None
    if first is not None:
        out, pos = index_of(first)
        first_div = {"output_index": out, "position": pos, "block_start": out - out % k, "row": out % k}
    blocks = in_block_rows(c, k, thresholds) if per_prompt else []
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
        trend += (f"; the M=K rows are bit-identical for K = {ks}: the batched path computes each row the same "
                  "way whatever K is (batch-size invariant), just not the way M=1 does")
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
    2. any K verdict ``divergent`` (:func:`verify_verdict`: a flip with M=1
       margin ≥ τ, a flip to a token outside the other run's top-k, or NaN/Inf) →
       ``wrong-result`` (indexing/masking-class bug);
    3. any K verdict ``systematic-offset``, or one in-block row index whose
       differing rows share an offset (|mean Δ| ≥ offset_ratio × std Δ) →
       ``systematic-offset``;
    4. K=1 not bit-exact → ``verify-path``: a one-row verify already differs
       from M=1, so the verify path itself (dispatch or kernel choice), not
       batching, is the cause;
    5. flips all below τ, unbiased → ``near-tie-noise``; no flips and within
       ULP noise → ``ulp-noise``.

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
        return VerifyClassification("bit-exact", "bit-exact",
                                    f"M=K verify is bit-exact with M=1 greedy at K = {ks}",
                                    [f"K={t.k}: all {t.rows} rows bit-exact" for t in totals], scaling, tau)

    for t in totals:
        state = "bit-exact" if t.bit_exact_rows == t.rows else (
            f"{t.rows - t.bit_exact_rows}/{t.rows} rows differ, {t.flips} flips, max |Δ| {_g(t.max_abs_diff)}, "
            f"mean Δ {_g(t.mean_diff)}")
        evidence.append(f"K={t.k}: {state} → {t.verdict}")
    offsets = [(t.k, r) for t in totals for r in t.in_block if r.offset]
    k1 = by_k.get(1)
    row0 = sum(t.flips_in_row0 for t in totals if t.k >= 2)
    inner = sum(t.flips - t.flips_in_row0 for t in totals if t.k >= 2)

    if word == "divergent":
        cause = "wrong-result"
        evidence += [f"K={worst.k}: {line}" for line in worst.evidence[:-1]]
        confident = [f for f in flips if f.margin_ref is None or f.margin_ref >= tau]
        if confident:
            f = max(confident, key=lambda f: f.margin_ref or 0.0)
            evidence.append(f"flip at a confident position: {f.prompt} K={f.k} output {f.output_index} (row {f.row}): "
                            f"{f.token_ref} → {f.token_obs}, M=1 margin {_g(f.margin_ref)} ≥ τ = {_g(tau)}; "
                            f"top-{len(f.topk_ref)} M=1 {f.topk_ref} vs M=K {f.topk_obs}")
        summary = ("wrong result: M=K rows flip confident tokens, or flip to tokens outside the top-k — an "
                   "indexing/masking-class bug in the verify path, not floating-point noise")
    elif word == "systematic-offset" or offsets:
        cause = "systematic-offset"
        word = "systematic-offset" if VERDICTS.index(word) < VERDICTS.index("systematic-offset") else word
        for k, r in offsets[:4]:
            evidence.append(f"K={k} in-block row {r.row}: mean Δ {_g(r.mean_diff)} vs std Δ {_g(r.std_diff)} "
                            f"(|mean| ≥ offset_ratio {_g(thresholds.offset_ratio)} × std) over "
                            f"{r.rows - r.bit_exact_rows} differing rows")
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
    elif any(t.flips for t in totals):
        cause = "near-tie-noise"
        margins = [f.margin_ref for f in flips if f.margin_ref is not None]
        evidence.append(f"all {len(flips)} flips at M=1 margin < τ = {_g(tau)} "
                        f"(largest {_g(max(margins, default=None))}, smallest {_g(min(margins, default=None))})")
        topk_same = sum(1 for f in flips if sorted(f.topk_ref) == sorted(f.topk_obs))
        evidence.append(f"top-k sets identical at {topk_same} of {len(flips)} flips; at every flip both tokens are in "
                        "both top-k lists (near-tied tokens trading places)")
        evidence.append(f"mean Δ over all compared rows {_g(worst.mean_diff)} vs mean |Δ| {_g(worst.mean_abs_diff)}: "
                        "no offset (offset_ratio test per K and per in-block row)")
        if k1 is not None:
            evidence.append(f"K=1: {k1.flips} flips, {k1.rows - k1.bit_exact_rows} rows differ: the one-row verify "
                            "is the M=1 path")
        evidence.append(f"K={worst.k}: {worst.evidence[-1]}")
        evidence.append(f"flips at in-block row 0: {row0}, at rows ≥ 1: {inner}")
        evidence.append(_where_line(sweep, row0))
        summary = f"near-tie floating-point noise: every flip sits below τ = {_g(tau)}, top-k sets kept, no offset"
    else:
        cause = "ulp-noise" if word == "ulp-noise" else "near-tie-noise"
        evidence.append(f"no argmax flips; largest difference {_g(worst.max_scaled_ulp)} ULP at row scale "
                        f"({'≤' if worst.max_scaled_ulp <= thresholds.max_ulp else '>'} max_ulp = "
                        f"{_g(thresholds.max_ulp)})")
        summary = ("rounding noise only: rows differ within ULP noise, no flips" if cause == "ulp-noise" else
                   "floating-point noise above ULP level without flips or offset")
    return VerifyClassification(word, cause, summary, evidence, scaling, tau)


# -- the experiment ----------------------------------------------------------------
class VerifyExperiment:
    """Runs a :class:`VerifyConfig`; :func:`run_verify` is the one-call form."""

    def __init__(self, config: VerifyConfig, *, on_event: Event | None = None, engine: Engine | None = None):
        config.validate()
        self.config = config
        self.on_event = on_event or (lambda kind, data: None)
        self._engine = engine

    def run(self) -> VerifyResult:
        """Run the probe (and the guard).

        Raises:
            LogitlabError: bad input or an engine failure; the exception's
                ``partial`` attribute holds the :class:`VerifyResult` so far.
        """
        cfg = self.config
        engine = self._engine or load_engine(cfg.variant)
        try:
            result = VerifyResult(config=cfg.to_dict(), manifest=build_manifest(engine.describe(), cfg.variant))
            self._result = result
            try:
                self._run(engine, result)
            except LogitlabError as exc:
                result.error = str(exc)
                exc.partial = result  # type: ignore[attr-defined]
                raise
        finally:
            if self._engine is None:
                engine.close()
        return result

    def _run(self, engine: Engine, result: VerifyResult) -> None:
        cfg = self.config
        prompt_ids = {p.name: engine.tokenize(p.text) for p in cfg.prompts}
        cal_ids = {p.name: engine.tokenize(p.text) for p in cfg.calibration_prompts} if cfg.guard == "auto" else {}
        self._check_context(engine, prompt_ids, "prompt")
        self._check_context(engine, cal_ids, "calibration prompt")
        self._check_sessions(engine)
        n_guard = len(cfg.guard_fallbacks) + (cfg.guard_k not in cfg.ks) if cfg.guard is not None else 0
        self.on_event("start", {"steps": len(cfg.prompts) * (1 + len(cfg.ks) + n_guard) + 2 * len(cal_ids)})

        guard = None
        if cfg.guard is not None:
            guard = GuardReport(tau=0.0, source="fixed", k=cfg.guard_k, calibration=None)
            if cfg.guard == "auto":
                guard.calibration = self._calibrate(engine, cal_ids).to_dict()
                guard.tau, guard.source = guard.calibration["tau"], "auto"
            else:
                guard.tau = float(cfg.guard)
            result.guard = guard

        parts: dict[int, list[tuple[LogitComparison, str, int]]] = {k: [] for k in cfg.ks}
        for prompt in cfg.prompts:
            ids = prompt_ids[prompt.name]
            replays: dict[int, tuple[float, list[int]]] = {}
            first_batched: np.ndarray | None = None  # rows of the smallest K >= 2, to test batch invariance
            self.on_event("step", {"description": f"{prompt.name}: M=1 greedy"})
            ref = greedy_m1(engine, ids, cfg.n_decode)
            result.prompts.append(PromptRecord(prompt.name, prompt.kind, len(ids), ref.tokens,
                                               engine.detokenize(ref.tokens), ref.decode_seconds))
            for k in cfg.ks:
                self.on_event("step", {"description": f"{prompt.name}: M={k} verify"})
                obs, seconds = replay_mk(engine, ids, ref.tokens, k)
                c = compare_logits(ref.decode_rows, obs, top_k=cfg.top_k, token_ids=ref.tokens)
                result.sweep.append(sweep_entry(prompt.name, k, c, len(ids), cfg.thresholds, seconds))
                result.flips += self._flips(engine, prompt.name, k, len(ids), c, ref.decode_rows, obs)
                parts[k].append((c, prompt.name, len(ids)))
                replays[k] = (seconds, [f["position"] for f in c.flips])
                if k >= 2:
                    if first_batched is None:
                        first_batched = obs
                    else:
                        same = np.array_equal(obs.view(np.uint32), first_batched.view(np.uint32))
                        result.batch_invariant = same and result.batch_invariant is not False
                del obs
            if guard is not None:
                self._guard_prompt(engine, prompt.name, ids, ref, guard, replays.get(cfg.guard_k))
            self.on_event("prompt", {"prompt": prompt.name})

        for k in cfg.ks:
            result.totals.append(self._total(k, parts[k]))
        result.classification = classify_verify(result.totals, result.flips, cfg.thresholds,
                                                batch_invariant=result.batch_invariant, sweep=result.sweep)
        if guard is not None:
            guard.totals = guard_totals(guard.results, cfg.guard_fallbacks)

    # -- pieces ---------------------------------------------------------------
    def _check_context(self, engine: Engine, ids: dict[str, list[int]], what: str) -> None:
        n_ctx = engine.n_ctx
        for name, tokens in ids.items():
            if not tokens:
                raise InputError(f"{what} {name!r} tokenizes to no tokens")
            if n_ctx is not None and len(tokens) + self.config.n_decode > n_ctx:
                raise InputError(
                    f"{what} {name!r} ({len(tokens)} tokens) + --tokens {self.config.n_decode} = "
                    f"{len(tokens) + self.config.n_decode} exceeds the context of {n_ctx}; "
                    "shorten the prompt or --tokens, or pass n_ctx=... in --options"
                )

    def _check_sessions(self, engine: Engine) -> None:
        try:
            session = engine.open_session()
        except NotImplementedError:
            raise InputError(f"engine {engine.name!r} has no session API (decode of K tokens); "
                             "verify needs an adapter that exposes Session.decode") from None
        with session:
            if self.config.guard is not None and not G.supports_rollback(session):
                G.rollback(session, 0)  # raises the InputError that names the missing hook

    def _calibrate(self, engine: Engine, cal_ids: dict[str, list[int]]) -> G.Calibration:
        cfg = self.config
        pairs = []
        for name, ids in cal_ids.items():
            self.on_event("step", {"description": f"calibration {name}: M=1 greedy"})
            ref = greedy_m1(engine, ids, cfg.n_decode)
            self.on_event("step", {"description": f"calibration {name}: M={cfg.guard_k} verify"})
            obs, _ = replay_mk(engine, ids, ref.tokens, cfg.guard_k)
            pairs.append((ref.decode_rows, obs))
        return G.calibrate(pairs, k=cfg.guard_k, safety=cfg.guard_safety, top_k=cfg.top_k, prompts=list(cal_ids))

    def _flips(self, engine: Engine, prompt: str, k: int, n_prompt: int, c: LogitComparison,
               ref: np.ndarray, obs: np.ndarray) -> list[FlipRecord]:
        out = []
        for f in c.flips:
            i, a, b = f["position"], f["token_ref"], f["token_obs"]
            out.append(FlipRecord(
                prompt=prompt, k=k, output_index=i, position=n_prompt + i, block_start=i - i % k, row=i % k,
                token_ref=a, token_obs=b, text_ref=engine.detokenize([a]), text_obs=engine.detokenize([b]),
                logit_ref_at_ref=float(ref[i, a]), logit_ref_at_obs=float(ref[i, b]),
                logit_obs_at_ref=float(obs[i, a]), logit_obs_at_obs=float(obs[i, b]),
                margin_ref=f["margin_ref"], margin_obs=f["margin_obs"],
                topk_ref=f["topk_ref"], topk_obs=f["topk_obs"],
            ))
        return out

    def _total(self, k: int, parts: list[tuple[LogitComparison, str, int]]) -> SweepEntry:
        merged = merge_comparisons([c for c, _, _ in parts])
        owners = [(i, n_prompt + i) for c, _, n_prompt in parts for i in range(c.n_positions)]
        entry = sweep_entry("all", k, merged, None, self.config.thresholds, index_of=lambda r: owners[r])
        # in-block statistics pooled over prompts (each prompt's blocks start at its output index 0)
        per_prompt = [in_block_rows(c, k, self.config.thresholds) for c, _, _ in parts]
        entry.in_block = [_pool_rows([rows[j] for rows in per_prompt if j < len(rows)], self.config.thresholds)
                          for j in range(max(map(len, per_prompt)))]
        entry.first_divergence = None
        for c, name, n_prompt in parts:
            first = next((i for i, d in enumerate(c.row_differing) if d), None)
            if first is not None and (entry.first_divergence is None
                                      or first < entry.first_divergence["output_index"]):
                entry.first_divergence = {"prompt": name, "output_index": first, "position": n_prompt + first,
                                          "block_start": first - first % k, "row": first % k}
        entry.decode_seconds = sum(e.decode_seconds for e in self._sweep_entries(k))
        return entry

    def _sweep_entries(self, k: int) -> list[SweepEntry]:
        return [e for e in self._result.sweep if e.k == k]

    def _guard_prompt(self, engine: Engine, name: str, ids: list[int], ref: GreedyRun, guard: GuardReport,
                      replay: tuple[float, list[int]] | None) -> None:
        """Guarded loops on one prompt, against M=1 greedy and unguarded speculative decoding.

        The unguarded baseline is the K sweep's replay at ``guard_k`` when there
        is one: with the greedy tokens as drafts, an unguarded speculative loop
        feeds exactly the replay's blocks up to its first flip (flip at output
        index i → first differing token i + 1), so its identity follows from
        the replay and its time is the replay's time per row. Otherwise the
        unguarded loop runs.
        """
        cfg = self.config
        n, k = cfg.n_decode, cfg.guard_k
        draft = G.oracle_draft(ref.tokens)
        if replay is not None:
            seconds, flip_rows = replay
            plain_seconds = seconds * (n - 1) / n
            first = next((i + 1 for i in sorted(flip_rows) if i + 1 < n), None)
            plain_identical, plain_first = first is None, first
        else:
            self.on_event("step", {"description": f"{name}: unguarded speculative K={k}"})
            with engine.open_session() as session:
                plain = guarded_loop(session, ids, n, k, draft, None, "redecode")
            plain_eval = G.evaluate_run(plain, ref.tokens, ref.rows, top_k=cfg.top_k)
            plain_seconds = plain.decode_seconds
            plain_identical, plain_first = plain_eval.identical, plain_eval.first_divergence
        ideal_rows = n - 1
        ideal_calls = math.ceil(ideal_rows / k)
        per = max(ideal_rows, 1)
        for fallback in cfg.guard_fallbacks:
            self.on_event("step", {"description": f"{name}: guarded ({fallback}) K={k}"})
            with engine.open_session() as session:
                run = guarded_loop(session, ids, n, k, draft, guard.tau, fallback)
            ev = G.evaluate_run(run, ref.tokens, ref.rows, top_k=cfg.top_k)
            decided = sum(1 for s in run.sources if s != G.PREFILL)
            guard.results.append(GuardPromptResult(
                prompt=name, fallback=fallback, k=k, tokens=len(run.tokens), ideal_rows=ideal_rows,
                ideal_calls=ideal_calls, decided_by_verify=decided,
                triggers=len(run.triggers), trigger_rate=G.fraction(len(run.triggers), decided),
                forward_rows=run.forward_rows, forward_calls=run.forward_calls, discarded_rows=run.discarded_rows,
                corrections=run.corrections,
                extra_rows=G.fraction(run.forward_rows - ideal_rows, ideal_rows),
                extra_calls=G.fraction(run.forward_calls - ideal_calls, ideal_calls),
                seconds_per_token=run.decode_seconds / per, unguarded_seconds_per_token=plain_seconds / per,
                m1_seconds_per_token=ref.decode_seconds / n,
                overhead_vs_unguarded=G.fraction(run.decode_seconds - plain_seconds, plain_seconds),
                identical=ev.identical, first_divergence=ev.first_divergence,
                unguarded_identical=plain_identical, unguarded_first_divergence=plain_first,
                triggers_fallback_exact=sum(t.fallback_bit_exact for t in run.triggers),
                triggers_token_changed=sum(t.token_verify != t.token_fallback for t in run.triggers),
                evaluation=ev.to_dict(),
            ))


def _pool_rows(rows: Sequence[InBlockRow], thresholds: Thresholds) -> InBlockRow:
    """One in-block row index pooled over prompts; the offset test is redone on the pooled numbers."""
    n = sum(r.rows for r in rows)
    differing = [(r.rows - r.bit_exact_rows, r) for r in rows if r.rows > r.bit_exact_rows]
    nd = sum(d for d, _ in differing)
    mean = sum(d * r.mean_diff for d, r in differing) / nd if nd else 0.0
    second = sum(d * (r.std_diff ** 2 + r.mean_diff ** 2) for d, r in differing) / nd if nd else 0.0
    std = max(second - mean * mean, 0.0) ** 0.5
    scaled = max(r.max_scaled_ulp for r in rows)
    return InBlockRow(row=rows[0].row, rows=n, bit_exact_rows=sum(r.bit_exact_rows for r in rows),
                      flips=sum(r.flips for r in rows), mean_diff=mean, std_diff=std,
                      max_abs_diff=max(r.max_abs_diff for r in rows), max_scaled_ulp=scaled,
                      offset=_is_offset(nd > 0, scaled, mean, std, thresholds))


def guarded_loop(session: Session, prompt_ids: Sequence[int], n: int, k: int, draft: G.Draft,
                 tau: float | None, fallback: str) -> G.SpeculativeRun:
    """One speculative greedy run with the guard's ``fallback`` (``redecode`` or ``resync``)."""
    return G.speculative_greedy(session, prompt_ids, n, k=k, draft=draft, tau=tau, fallback=fallback,
                                verify=verify_call(session))


def guard_totals(results: Sequence[GuardPromptResult], fallbacks: Sequence[str]) -> dict[str, Any]:
    """Per fallback: work, time, identity and the measured bound checks, summed over prompts."""
    out: dict[str, Any] = {}
    for fallback in fallbacks:
        rs = [r for r in results if r.fallback == fallback]
        if not rs:
            continue
        ideal_rows = sum(r.ideal_rows for r in rs)
        ideal_calls = sum(r.ideal_calls for r in rs)
        rows = sum(r.forward_rows for r in rs)
        calls = sum(r.forward_calls for r in rs)
        seconds = sum(r.seconds_per_token * max(r.ideal_rows, 1) for r in rs)
        plain = sum(r.unguarded_seconds_per_token * max(r.ideal_rows, 1) for r in rs)
        evs = [r.evaluation for r in rs]
        out[fallback] = {
            "prompts": len(rs),
            "identical_prompts": sum(r.identical for r in rs),
            "unguarded_identical_prompts": sum(r.unguarded_identical for r in rs),
            "triggers": sum(r.triggers for r in rs),
            "trigger_rate": G.fraction(sum(r.triggers for r in rs), sum(r.decided_by_verify for r in rs)),
            "forward_rows": rows,
            "forward_calls": calls,
            "ideal_rows": ideal_rows,
            "ideal_calls": ideal_calls,
            "extra_rows": G.fraction(rows - ideal_rows, ideal_rows),
            "extra_calls": G.fraction(calls - ideal_calls, ideal_calls),
            "seconds_per_token": G.fraction(seconds, sum(max(r.ideal_rows, 1) for r in rs)),
            "unguarded_seconds_per_token": G.fraction(plain, sum(max(r.ideal_rows, 1) for r in rs)),
            "m1_seconds_per_token": G.fraction(sum(r.m1_seconds_per_token for r in rs), len(rs)),
            "overhead_vs_unguarded": G.fraction(seconds - plain, plain),
            "triggers_fallback_exact": sum(r.triggers_fallback_exact for r in rs),
            "triggers_token_changed": sum(r.triggers_token_changed for r in rs),
            "corrections": sum(r.corrections for r in rs),
            "rows_compared": sum(e["rows_compared"] for e in evs),
            "bit_exact_rows": sum(e["bit_exact_rows"] for e in evs),
            "max_abs_diff": max(e["max_abs_diff"] for e in evs),
            "max_topk_spread_verify": max(e["max_topk_spread_verify"] for e in evs),
            "max_topk_spread_redecode": max(e["max_topk_spread_redecode"] for e in evs),
            "verify_rows_over_tau": sum(e["verify_rows_over_tau"] or 0 for e in evs),
            "rows_uncovered": sum(e["rows_uncovered"] for e in evs),
            "redecode_rows_uncovered": sum(e["redecode_rows_uncovered"] for e in evs),
        }
    return out


def run_verify(config: VerifyConfig, **kwargs: Any) -> VerifyResult:
    """Run the verify probe; see :class:`VerifyExperiment`."""
    return VerifyExperiment(config, **kwargs).run()
