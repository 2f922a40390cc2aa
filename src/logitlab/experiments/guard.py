"""The near-tie guard for speculative greedy decoding, and its calibration.

A speculative decoder feeds the last accepted token plus K-1 draft tokens in
one M=K *verify* forward and accepts each row's argmax while it matches the
next draft. The verify rows are not bit-exact with the M=1 greedy decode, so an
argmax can flip where the top1–top2 margin is tiny. The guard (the seed
report's proposal): accept a verify row's argmax only when its margin is at
least τ; otherwise decide that position through the M=1 path and continue from
there. Two fallbacks decide a flagged position:

``redecode``
    roll the KV cache back to that position and decode it alone (M=1) on the
    KV cache as it is. Cheap; removes the verify forward's in-block numerics.
``resync``
    roll back to the last position whose KV entries the M=1 path wrote and
    replay M=1 from there: the flagged row is then M=1 greedy's own row.
    Exact, and pays an M=1 decode of every position up to the last trigger.

Pieces (usable from any Python engine loop):

- :func:`row_margins`, :func:`check_block` — the decision for one verify block;
- :func:`rollback` — drop a session's positions from ``n_past`` on;
- :func:`speculative_greedy` — a complete speculative greedy loop with the
  guard (``tau=None``: unguarded), counting forward work;
- :func:`topk_spread`, :func:`calibrate` — the bound ``--guard auto`` sets τ from;
- :func:`evaluate_run` — a guarded run against the M=1 greedy run.

What the guard guarantees
-------------------------
Let ``a`` be the M=1 argmax of a row, ``b`` the argmax of the row the guarded
loop used, and Δ = used − M=1 (logits). If ``b != a`` then
``used[b] - used[a] >= margin(used)`` and ``M1[a] >= M1[b]``, so
``Δ_b - Δ_a >= margin(used)``. Both tokens lie in the union of the two rows'
top-k sets, hence::

    flip  ⇒  topk_spread(row) = max Δ − min Δ over top-k(M=1) ∪ top-k(used) ≥ margin(used)

- **Exact** (arithmetic, no assumption): a row whose top-k Δ spread is below
  its margin cannot flip. With ``resync``, a flagged row *is* the M=1 greedy
  row (bit for bit, as long as the tokens so far are M=1's), and each
  replayed row re-checks an accepted token.
- **Bounded only by the calibration**: an accepted verify row has margin ≥ τ,
  so it is safe while its spread stays < τ. The spread is not known at run
  time; ``--guard auto`` sets τ = safety × the pair's noise floor (the p99 of
  the spread over held-out verify rows that kept their argmax: the floor the
  verdicts use, :mod:`logitlab.numerics.floor`), with safety = the verdict's
  ``floor_factor`` by default. An accepted row can then flip only through a
  change the verdict would call divergent (outside the floor).
- **Neither**: a ``redecode`` row reads KV entries that earlier M=K rows wrote,
  and those are not bit-identical to the entries M=1 greedy wrote. Its logits
  keep that *history* difference, and its margin is < τ by construction, so
  nothing bounds it. On llama.cpp the re-decode mostly reproduces the M=K row
  bit for bit: the difference lives in the KV history, not in the verify
  forward.
- Logits and KV entries are never claimed bit-exact. :func:`evaluate_run`
  measures all of it: token identity at every position, bit-exact rows,
  max |Δ|, spreads against τ, and rows the bound did not cover.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from logitlab.engines.base import Session
from logitlab.errors import EngineError, InputError
from logitlab.numerics.compare import compare_logits, merge_comparisons
from logitlab.numerics.floor import measure_floor, topk_spread

#: source of a decided token
PREFILL, VERIFY, REDECODE = "prefill", "verify", "redecode"

Draft = Callable[[Sequence[int], int], Sequence[int]]


# -- one block ---------------------------------------------------------------
def row_margins(rows: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit of every row.

    Args:
        rows: ``(M, n_vocab)`` logits, n_vocab ≥ 2.

    Returns:
        ``(M,)`` float64 margins (logits, ≥ 0; NaN where a row holds NaN).
    """
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] < 2:
        raise InputError(f"row_margins needs (M, n_vocab >= 2) logits, got shape {rows.shape}")
    top2 = np.partition(rows, rows.shape[1] - 2, axis=1)[:, -2:].astype(np.float64)
    return top2[:, 1] - top2[:, 0]


@dataclass(frozen=True)
class BlockDecision:
    """What to do with one verify block (see :func:`check_block`).

    Attributes:
        tokens: tokens accepted from verify rows, in order.
        keep: how many of the block's M positions stay in the KV cache; the
            caller rolls back to ``n_past_before_block + keep`` when ``keep < M``.
        redecode: True when row ``keep`` was below τ: re-decode input ``keep``
            alone (M=1) after the rollback and take that row's argmax.
        margins: ``(M,)`` top1–top2 margins of the block's rows (logits).
    """

    tokens: list[int]
    keep: int
    redecode: bool
    margins: np.ndarray

    @property
    def trigger_row(self) -> int | None:
        """In-block row that tripped the guard, or None."""
        return self.keep if self.redecode else None


def check_block(rows: np.ndarray, inputs: Sequence[int], tau: float | None) -> BlockDecision:
    """Decide a verify block under the near-tie guard.

    Args:
        rows: ``(M, n_vocab)`` logits of the M=K verify forward; row i
            predicts the token after ``inputs[i]``.
        inputs: the M tokens fed: the last accepted token, then M-1 drafts.
        tau: margin threshold (logits). None or 0: unguarded (plain greedy
            speculative acceptance).

    Returns:
        BlockDecision. Walking the rows in order: a row whose margin is below
        τ (or NaN) stops the block for an M=1 re-decode of that position; else
        its argmax is accepted, and the block stops when it differs from the
        next draft (a rejected draft). Row M-1's argmax is the bonus token.

    Raises:
        InputError: shapes disagree, or τ < 0.
    """
    rows = np.asarray(rows)
    m = len(inputs)
    if rows.ndim != 2 or rows.shape[0] != m:
        raise InputError(f"check_block: {m} inputs but logits of shape {rows.shape}")
    if tau is not None and not tau >= 0:
        raise InputError(f"guard margin τ must be >= 0, got {tau}")
    margins = row_margins(rows)
    tokens: list[int] = []
    for i in range(m):
        if tau and not margins[i] >= tau:
            return BlockDecision(tokens, i, True, margins)
        token = int(np.argmax(rows[i]))
        tokens.append(token)
        if i + 1 < m and token != int(inputs[i + 1]):
            return BlockDecision(tokens, i + 1, False, margins)
    return BlockDecision(tokens, m, False, margins)


# -- rollback ----------------------------------------------------------------
def supports_rollback(session: Session) -> bool:
    """True if :func:`rollback` can shorten this session (its engine declares ``rollback``)."""
    return session.engine.supports("rollback") and session.can_truncate


def rollback(session: Session, n_past: int) -> None:
    """Drop every position ``>= n_past`` from the session (its KV cache): :meth:`Session.truncate`.

    Raises:
        InputError: ``n_past`` outside ``[0, session.n_past]``, or the engine
            cannot roll back.
    """
    session.truncate(n_past)


# -- the loop ----------------------------------------------------------------
def oracle_draft(reference: Sequence[int]) -> Draft:
    """A draft source that proposes the M=1 greedy continuation ``reference``.

    ``draft(generated, n)`` returns the ``n`` reference tokens that follow
    ``len(generated)`` generated tokens (padded with the last reference token
    past its end). With the M=1 greedy tokens as drafts, every deviation of a
    speculative loop from M=1 greedy is caused by the verify numerics.
    """
    ref = [int(t) for t in reference]

    def draft(generated: Sequence[int], n: int) -> list[int]:
        start = len(generated)
        out = ref[start:start + n]
        return out + [ref[-1] if ref else 0] * (n - len(out))

    return draft


@dataclass
class Trigger:
    """One guard trigger: a verify row below τ, decided again by the fallback.

    ``fallback_*`` compare the M=K row with the fallback's M=1 row. For
    ``redecode`` both read the same KV cache, so a difference there is the
    verify forward's own (in-block) numerics; for ``resync`` the M=1 row reads
    an M=1-written history, so the difference is the whole M=K effect.
    """

    index: int                   # generated-token index the row decides
    block_row: int               # in-block row
    margin_verify: float         # margin of the M=K row (logits)
    margin_fallback: float       # margin of the fallback's M=1 row
    token_verify: int
    token_fallback: int
    fallback_bit_exact: bool
    fallback_max_abs_diff: float


@dataclass
class SpeculativeRun:
    """A speculative greedy run.

    Attributes:
        k, tau, fallback: as passed to :func:`speculative_greedy`.
        tokens: generated token ids (``n_tokens`` of them).
        sources: per token: ``prefill``, ``verify`` or ``redecode`` (an M=1
            row of the fallback decided it).
        margins: per token, the margin of the row that decided it (logits).
        rows: ``(n_tokens, n_vocab)`` float32: the row that decided each token
            (None when not kept).
        triggers: the guard's triggers.
        corrections: ``resync`` only: accepted tokens that the M=1 replay
            found wrong and replaced (the calibrated bound failed there).
        forward_rows: token rows fed to the engine after the prompt.
        forward_calls: decode calls after the prompt.
        discarded_rows: fed rows thrown away by rollbacks (trigger or rejected draft).
        rejections: blocks cut short by a rejected draft.
        decode_seconds: wall time of the decode loop (s), guard work included.
        engine_seconds: time inside engine decode calls (s).
    """

    k: int
    tau: float | None
    fallback: str
    tokens: list[int]
    sources: list[str]
    margins: list[float]
    rows: np.ndarray | None
    triggers: list[Trigger] = field(default_factory=list)
    corrections: int = 0
    forward_rows: int = 0
    forward_calls: int = 0
    discarded_rows: int = 0
    rejections: int = 0
    decode_seconds: float = 0.0
    engine_seconds: float = 0.0


FALLBACKS = ("redecode", "resync")


def speculative_greedy(
    session: Session,
    prompt_ids: Sequence[int],
    n_tokens: int,
    *,
    k: int,
    draft: Draft,
    tau: float | None = None,
    fallback: str = "redecode",
    verify: Callable[[Sequence[int]], np.ndarray] | None = None,
    keep_rows: bool = True,
) -> SpeculativeRun:
    """Greedy speculative decoding with K-token verify blocks and the near-tie guard.

    Args:
        session: a fresh session (empty KV cache) that supports :func:`rollback`.
        prompt_ids: prompt tokens (prefilled in one call).
        n_tokens: tokens to generate (the first comes from the prefill row).
        k: verify block size K ≥ 1 (the last block may be shorter).
        draft: ``draft(generated, n) -> n tokens`` (e.g. :func:`oracle_draft`).
        tau: guard margin (logits); None or 0: unguarded.
        fallback: what decides a row below τ:

            ``redecode`` — roll back to that position and decode it alone
            (M=1) on the current KV cache. Removes the verify forward's
            in-block numerics; the KV entries earlier M=K rows wrote stay.
            Cheap: the rows after it in the block, plus one row.

            ``resync`` — roll back to the last position whose KV entries the
            M=1 path wrote and replay M=1 up to the flagged position. That row
            is then the M=1 greedy row itself (given identical tokens so far),
            and every replayed row re-checks an accepted token (a mismatch is
            corrected and counted). Costs an M=1 decode of every position up to
            the last trigger.
        verify: the M=K call (default ``session.decode``).
        keep_rows: keep the deciding row of every token (for :func:`evaluate_run`).

    Returns:
        SpeculativeRun.

    Raises:
        InputError: k or n_tokens < 1, an unknown fallback, or the session cannot roll back.
        EngineError: the draft source returned the wrong number of tokens.
    """
    if k < 1 or n_tokens < 1:
        raise InputError(f"speculative_greedy needs k >= 1 and n_tokens >= 1, got k={k}, n_tokens={n_tokens}")
    if fallback not in FALLBACKS:
        raise InputError(f"unknown guard fallback {fallback!r}; valid: {', '.join(FALLBACKS)}")
    if not supports_rollback(session):
        rollback(session, session.n_past)  # raises the explanatory InputError
    verify = verify or session.decode
    run = SpeculativeRun(k=k, tau=tau, fallback=fallback, tokens=[], sources=[], margins=[], rows=None)
    kept: list[np.ndarray] = []

    def emit(token: int, row: np.ndarray, source: str, margin: float) -> None:
        run.tokens.append(int(token))
        run.sources.append(source)
        run.margins.append(float(margin))
        if keep_rows:
            kept.append(row)

    def truncate_to(n_generated: int) -> None:
        del run.tokens[n_generated:], run.sources[n_generated:], run.margins[n_generated:]
        del kept[n_generated:]

    n_prompt = len(prompt_ids)
    prefill = session.prefill(prompt_ids)[-1:]
    emit(int(np.argmax(prefill[0])), prefill[0], PREFILL, float(row_margins(prefill)[0]))
    exact_upto = session.n_past  # positions whose KV entries the M=1 path wrote (resync)
    pending: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    n_timings = len(session.timings)
    start = time.perf_counter()
    while len(run.tokens) < n_tokens:
        m = min(k, n_tokens - len(run.tokens))
        drafts = [int(t) for t in draft(run.tokens, m - 1)] if m > 1 else []
        if len(drafts) != m - 1:
            raise EngineError(f"the draft source returned {len(drafts)} tokens, {m - 1} asked for")
        inputs = [run.tokens[-1], *drafts]
        n0 = session.n_past
        rows = verify(inputs)
        run.forward_calls += 1
        run.forward_rows += m
        decision = check_block(rows, inputs, tau)
        for i, token in enumerate(decision.tokens):
            emit(token, rows[i], VERIFY, float(decision.margins[i]))
        if not decision.redecode:
            if decision.keep < m:
                rollback(session, n0 + decision.keep)
                run.discarded_rows += m - decision.keep
                run.rejections += 1
            continue
        i = decision.keep
        target = n0 + i  # position of the flagged row's input
        if fallback == "redecode":
            rollback(session, target)
            run.discarded_rows += m - i
            redone = session.decode([inputs[i]])[0]
            run.forward_calls += 1
            run.forward_rows += 1
            pending.append((len(run.tokens), i, rows[i], redone))
            emit(int(np.argmax(redone)), redone, REDECODE, float(row_margins(redone[None])[0]))
            continue
        # resync: replay M=1 from the last M=1-written position up to the flagged one
        run.discarded_rows += session.n_past - exact_upto
        rollback(session, exact_upto)
        sequence = list(prompt_ids) + run.tokens
        for pos in range(exact_upto, target + 1):
            redone = session.decode([sequence[pos]])[0]
            run.forward_calls += 1
            run.forward_rows += 1
            exact_upto = pos + 1
            decided = pos + 1 - n_prompt  # generated-token index this row decides
            token = int(np.argmax(redone))
            if pos == target:
                pending.append((decided, i, rows[i], redone))
                emit(token, redone, REDECODE, float(row_margins(redone[None])[0]))
            elif token != run.tokens[decided]:
                run.corrections += 1  # an accepted verify token was wrong: take the M=1 one
                truncate_to(decided)
                emit(token, redone, REDECODE, float(row_margins(redone[None])[0]))
                break
    run.decode_seconds = time.perf_counter() - start
    run.engine_seconds = float(sum(t.seconds for t in session.timings[n_timings:]))
    del run.tokens[n_tokens:], run.sources[n_tokens:], run.margins[n_tokens:], kept[n_tokens:]
    # Measurements of the fallback's effect, outside the timed loop.
    for index, row_index, verify_row, m1_row in pending:
        diff = np.abs(verify_row.astype(np.float64) - m1_row)
        run.triggers.append(Trigger(
            index=index, block_row=row_index,
            margin_verify=float(row_margins(verify_row[None])[0]),
            margin_fallback=float(row_margins(m1_row[None])[0]),
            token_verify=int(np.argmax(verify_row)), token_fallback=int(np.argmax(m1_row)),
            fallback_bit_exact=bool(np.array_equal(verify_row.view(np.uint32), m1_row.view(np.uint32))),
            fallback_max_abs_diff=float(np.nanmax(diff)) if diff.size else 0.0,
        ))
    if keep_rows:
        run.rows = np.stack(kept)
    return run


# -- calibration ---------------------------------------------------------------
@dataclass
class Calibration:
    """How ``--guard auto`` chose τ, and what other choices would cost.

    Attributes:
        tau: the chosen margin, ``safety × floor`` (logits); ``safety ×
            max_topk_spread`` when the floor could not be measured.
        safety: the safety factor.
        floor: the noise floor: p99 of the top-k Δ spread over the calibration rows
            that differ and kept their argmax (logits); None when not measured.
        floor_positions: rows the floor was measured on.
        floor_reason: one line: the floor, or why τ falls back on the largest spread.
        k: verify block size of the calibration replay.
        top_k: k of :func:`topk_spread`.
        prompts: names of the (held-out) calibration prompts.
        rows: verify rows compared.
        max_topk_spread, p50_topk_spread, p99_topk_spread: of those rows (logits).
        max_abs_diff: largest |Δ| over the full vocabulary (logits).
        trigger_rate: fraction of calibration verify rows with margin < τ (predicted trigger rate).
        tau_full_vocab: ``2 × max_abs_diff``: the bound that needs no top-k argument.
        trigger_rate_full_vocab: fraction of rows with margin < ``tau_full_vocab``.
        tau_for_10pct: the margin below which 10 % of calibration rows fall.
    """

    tau: float
    safety: float
    k: int
    top_k: int
    prompts: list[str]
    rows: int
    max_topk_spread: float
    p50_topk_spread: float
    p99_topk_spread: float
    max_abs_diff: float
    trigger_rate: float
    tau_full_vocab: float
    trigger_rate_full_vocab: float
    tau_for_10pct: float
    floor: float | None = None
    floor_positions: int = 0
    floor_reason: str = ""
    source: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def calibrate(
    pairs: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    k: int,
    safety: float = 4.0,
    top_k: int = 5,
    prompts: Sequence[str] = (),
    min_positions: int = 8,
    floor_factor: float = 4.0,
) -> Calibration:
    """Choose τ from (M=1 rows, M=K verify rows) pairs of a calibration replay.

    Args:
        pairs: per prompt, ``(reference, observed)`` ``(n, n_vocab)`` float32
            logits: the M=1 greedy rows and the M=K replay rows at the same
            positions.
        k: the verify block size the replay used (recorded).
        safety: τ = safety × the noise floor (p99 of the top-k Δ spread over
            the rows that differ and kept their argmax). Default 4, the
            verdict's ``floor_factor``: a row accepted at margin ≥ τ can flip
            only through a change outside the floor. The guarded loop's rows
            also read a KV history the calibration never saw (part M=1, part
            M=K): the factor is headroom for that too. With fewer than
            ``min_positions`` such rows (a bit-exact verify path) τ is
            safety × the largest spread (0 when every row is bit-exact).
        top_k: k of :func:`topk_spread`.
        prompts: names for the record.
        min_positions, floor_factor: the verdict's, for :func:`~logitlab.numerics.floor.measure_floor`.

    Returns:
        Calibration.

    Raises:
        InputError: no rows, or safety ≤ 0.
    """
    if not safety > 0:
        raise InputError(f"--guard-safety must be > 0, got {safety}")
    spreads, margins, comparisons, max_abs = [], [], [], 0.0
    for reference, observed in pairs:
        spreads.append(topk_spread(reference, observed, top_k))
        margins.append(row_margins(observed))
        comparisons.append(compare_logits(reference, observed, top_k=top_k))
        diff = np.abs(observed.astype(np.float64) - reference)
        max_abs = max(max_abs, float(np.nanmax(diff)) if diff.size else 0.0)
    if not spreads or not sum(len(s) for s in spreads):
        raise InputError("the guard calibration compared no rows")
    spread = np.concatenate(spreads)
    margin = np.concatenate(margins)
    floor = measure_floor(merge_comparisons(comparisons), min_positions=min_positions,
                          floor_factor=floor_factor)
    if floor.measured:
        tau, reason = safety * floor.value, floor.reason
    else:
        tau = safety * float(spread.max())
        reason = floor.reason.replace("the fixed thresholds decide", "τ = safety × the largest spread")
    full = 2.0 * max_abs
    return Calibration(
        tau=tau, safety=float(safety), k=k, top_k=top_k, prompts=list(prompts), rows=int(spread.size),
        max_topk_spread=float(spread.max()), p50_topk_spread=float(np.percentile(spread, 50)),
        p99_topk_spread=float(np.percentile(spread, 99)), max_abs_diff=max_abs,
        trigger_rate=float(np.mean(margin < tau)) if tau > 0 else 0.0,
        tau_full_vocab=full, trigger_rate_full_vocab=float(np.mean(margin < full)) if full > 0 else 0.0,
        tau_for_10pct=float(np.percentile(margin, 10)),
        floor=floor.value if floor.measured else None, floor_positions=floor.positions, floor_reason=reason,
    )


# -- evaluation -----------------------------------------------------------------
@dataclass
class GuardEvaluation:
    """A speculative run measured against the M=1 greedy run of the same prompt.

    Token identity is checked at every position; the logit statistics cover
    the positions up to and including the first differing token (after it the
    inputs differ). "Covered" rows are those the bound protects: spread below
    the row's margin.
    """

    identical: bool
    first_divergence: int | None        # generated-token index
    rows_compared: int
    bit_exact_rows: int
    max_abs_diff: float
    max_topk_spread_verify: float       # over accepted verify rows
    max_topk_spread_redecode: float     # over re-decoded rows
    verify_rows_over_tau: int | None    # accepted rows with spread ≥ τ (calibration bound broke); None: unguarded
    rows_uncovered: int                 # verify or re-decoded rows whose spread ≥ their own margin
    redecode_rows_uncovered: int        # of those, re-decoded rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate_run(run: SpeculativeRun, reference_tokens: Sequence[int], reference_rows: np.ndarray,
                 *, top_k: int = 5) -> GuardEvaluation:
    """Compare a speculative run with M=1 greedy.

    Args:
        run: from :func:`speculative_greedy` with ``keep_rows=True``.
        reference_tokens: the M=1 greedy tokens (at least ``len(run.tokens)``).
        reference_rows: ``(n, n_vocab)``: the M=1 row that decided each greedy
            token (prefill row first).

    Raises:
        InputError: the run kept no rows, or the reference is shorter than the run.
    """
    if run.rows is None:
        raise InputError("evaluate_run needs a run made with keep_rows=True")
    n = len(run.tokens)
    if len(reference_tokens) < n or len(reference_rows) < n:
        raise InputError(f"the reference has {len(reference_tokens)} tokens, the run {n}")
    diverge = next((i for i in range(n) if run.tokens[i] != int(reference_tokens[i])), None)
    upto = n if diverge is None else diverge + 1
    ref, obs = np.asarray(reference_rows[:upto]), run.rows[:upto]
    spread = topk_spread(ref, obs, top_k)
    same = np.array([np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(ref, obs)])
    sources = np.array(run.sources[:upto])
    margins = np.array(run.margins[:upto])
    verify, redo = sources == VERIFY, sources == REDECODE
    tau = run.tau or 0.0
    return GuardEvaluation(
        identical=diverge is None, first_divergence=diverge, rows_compared=upto,
        bit_exact_rows=int(same.sum()),
        max_abs_diff=float(np.nanmax(np.abs(obs.astype(np.float64) - ref))) if upto else 0.0,
        max_topk_spread_verify=float(spread[verify].max()) if verify.any() else 0.0,
        max_topk_spread_redecode=float(spread[redo].max()) if redo.any() else 0.0,
        verify_rows_over_tau=int(np.sum(spread[verify] >= tau)) if tau > 0 else None,
        rows_uncovered=int(np.sum((spread >= margins) & (verify | redo))),
        redecode_rows_uncovered=int(np.sum(spread[redo] >= margins[redo])),
    )


def fraction(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when the denominator is 0."""
    return numerator / denominator if denominator else math.nan
