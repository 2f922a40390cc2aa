"""The near-tie guard for speculative greedy decoding: the block decision, rollback, the guarded loop.

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
- :func:`~logitlab.experiments.verify.guard_calibration.calibrate` — the bound
  ``--guard auto`` sets τ from (:func:`~logitlab.numerics.floor.topk_spread`);
- :func:`~logitlab.experiments.verify.guard_calibration.evaluate_run` — a guarded run
  against the M=1 greedy run.

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
- Logits and KV entries are never claimed bit-exact. :func:`~logitlab.experiments.verify.guard_calibration.evaluate_run`
  measures all of it: token identity at every position, bit-exact rows,
  max |Δ|, spreads against τ, and rows the bound did not cover.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from logitlab.engines.base import Session
from logitlab.errors import EngineError, InputError

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
        keep_rows: keep the deciding row of every token (for :func:`~logitlab.experiments.verify.guard_calibration.evaluate_run`).

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
    decoder = _GuardedDecoder(session, prompt_ids, SpeculativeRun(k=k, tau=tau, fallback=fallback, tokens=[],
                                                                  sources=[], margins=[], rows=None), keep_rows)
    run = decoder.run
    decoder.start()
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
            decoder.emit(token, rows[i], VERIFY, float(decision.margins[i]))
        if not decision.redecode:
            if decision.keep < m:
                rollback(session, n0 + decision.keep)
                run.discarded_rows += m - decision.keep
                run.rejections += 1
        elif fallback == "redecode":
            decoder.redecode(inputs, rows, decision.keep, n0)
        else:
            decoder.resync(rows, decision.keep, n0)
    run.decode_seconds = time.perf_counter() - start
    run.engine_seconds = float(sum(t.seconds for t in session.timings[n_timings:]))
    return decoder.finish(n_tokens)


class _GuardedDecoder:
    """The state of one :func:`speculative_greedy` run: the tokens so far, their rows, the guard's fallbacks."""

    def __init__(self, session: Session, prompt_ids: Sequence[int], run: SpeculativeRun, keep_rows: bool):
        self.session, self.prompt_ids, self.run, self.keep_rows = session, prompt_ids, run, keep_rows
        self.kept: list[np.ndarray] = []
        self.pending: list[tuple[int, int, np.ndarray, np.ndarray]] = []  # (token index, block row, M=K, M=1)
        self.exact_upto = 0  # positions whose KV entries the M=1 path wrote (resync)

    def emit(self, token: int, row: np.ndarray, source: str, margin: float) -> None:
        run = self.run
        run.tokens.append(int(token))
        run.sources.append(source)
        run.margins.append(float(margin))
        if self.keep_rows:
            self.kept.append(row)

    def _emit_m1(self, row: np.ndarray) -> None:
        self.emit(int(np.argmax(row)), row, REDECODE, float(row_margins(row[None])[0]))

    def truncate_to(self, n_generated: int) -> None:
        run = self.run
        del run.tokens[n_generated:], run.sources[n_generated:], run.margins[n_generated:]
        del self.kept[n_generated:]

    def start(self) -> None:
        """Prefill the prompt; its last row gives the first token."""
        prefill = self.session.prefill(self.prompt_ids)[-1:]
        self.emit(int(np.argmax(prefill[0])), prefill[0], PREFILL, float(row_margins(prefill)[0]))
        self.exact_upto = self.session.n_past

    def redecode(self, inputs: Sequence[int], rows: np.ndarray, i: int, n0: int) -> None:
        """Fallback ``redecode``: roll back to the flagged row ``i`` of the block at ``n0``, decode it alone."""
        session, run = self.session, self.run
        rollback(session, n0 + i)
        run.discarded_rows += len(inputs) - i
        redone = session.decode([inputs[i]])[0]
        run.forward_calls += 1
        run.forward_rows += 1
        self.pending.append((len(run.tokens), i, rows[i], redone))
        self._emit_m1(redone)

    def resync(self, rows: np.ndarray, i: int, n0: int) -> None:
        """Fallback ``resync``: replay M=1 from the last M=1-written position up to the flagged row ``i``."""
        session, run = self.session, self.run
        target = n0 + i  # position of the flagged row's input
        run.discarded_rows += session.n_past - self.exact_upto
        rollback(session, self.exact_upto)
        sequence = list(self.prompt_ids) + run.tokens
        for pos in range(self.exact_upto, target + 1):
            redone = session.decode([sequence[pos]])[0]
            run.forward_calls += 1
            run.forward_rows += 1
            self.exact_upto = pos + 1
            decided = pos + 1 - len(self.prompt_ids)  # generated-token index this row decides
            if pos == target:
                self.pending.append((decided, i, rows[i], redone))
                self._emit_m1(redone)
            elif int(np.argmax(redone)) != run.tokens[decided]:
                run.corrections += 1  # an accepted verify token was wrong: take the M=1 one
                self.truncate_to(decided)
                self._emit_m1(redone)
                break

    def finish(self, n_tokens: int) -> SpeculativeRun:
        """Cut to ``n_tokens``; measure each fallback's effect (outside the timed loop)."""
        run = self.run
        self.truncate_to(n_tokens)
        for index, row_index, verify_row, m1_row in self.pending:
            diff = np.abs(verify_row.astype(np.float64) - m1_row)
            run.triggers.append(Trigger(
                index=index, block_row=row_index,
                margin_verify=float(row_margins(verify_row[None])[0]),
                margin_fallback=float(row_margins(m1_row[None])[0]),
                token_verify=int(np.argmax(verify_row)), token_fallback=int(np.argmax(m1_row)),
                fallback_bit_exact=bool(np.array_equal(verify_row.view(np.uint32), m1_row.view(np.uint32))),
                fallback_max_abs_diff=float(np.nanmax(diff)) if diff.size else 0.0,
            ))
        if self.keep_rows:
            run.rows = np.stack(self.kept)
        return run
