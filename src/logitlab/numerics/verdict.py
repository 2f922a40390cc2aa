"""One-word divergence verdict for a comparison, judged against the pair's own noise floor.

Words, from harmless to serious (:data:`VERDICTS`; every command uses these):

``bit-exact``
    Every entry has identical bits.
``ulp-noise``
    The largest difference is at most ``max_ulp`` ULPs at its row's scale and
    no position changed its argmax or its top-k set: rounding noise.
``noise``
    Differences above ULP noise, without a systematic offset, and not one
    argmax flip or top-k change: a reordered reduction or another kernel that
    moves rows but decides nothing differently.
``near-tie``
    Argmax flips (or top-k changes), every one where the reference was nearly
    tied (margin below ``near_tie_margin``) and inside the pair's noise floor:
    floating-point non-associativity deciding a coin toss.
``lossy``
    The pair's noise is large everywhere (a 4-bit KV cache, a lower-precision
    path): it flips tokens at margins at or above ``near_tie_margin``, yet
    every flip lies inside the pair's own noise floor. A lossy-by-design
    change, reported with its KL divergence and top-1 agreement.
``systematic-offset``
    A shift shared by the positions: the mean over positions of their mean Δ
    is at least ``offset_ratio`` times its scatter across positions, over at
    least ``min_positions`` positions.
``divergent``
    NaN/Inf where the other run has a number (or another non-finite); a
    position that moved far outside the pair's noise floor; a change confined
    to a few entries of a row; or (when no floor can be measured) a flip or
    top-k change at a confident position, or a position that moved more than
    ``floor_factor × near_tie_margin``: a real bug until shown otherwise.
``crashed``
    The engine died (a signal, an abort, a non-zero exit, an out-of-memory
    kill, a hang past its timeout) instead of returning logits: the worst
    outcome there is. Never given by :func:`classify` (there is nothing to
    compare); experiments that run engines supervised give it, with the
    crash's evidence (:class:`logitlab.engines.supervised.CrashEvidence`).

How the floor decides (:mod:`logitlab.numerics.floor`): the floor is the p99
of the top-k Δ spread over the positions that differ but kept their argmax.
A position whose spread exceeds ``floor_factor`` × the floor is outside it.
Because a flip needs a spread at least its margin, a flip inside the floor
also has its margin inside the floor. With fewer than ``min_positions`` such
positions (or ``calibrate=False``) the fixed thresholds decide alone.

Every evidence line names the number, the statistic and the threshold or
factor that decided it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from logitlab.errors import InputError
from logitlab.numerics.comparison import Comparison  # stdlib only: the CLI's help stays light

__all__ = ["VERDICTS", "LOCALIZED_FRACTION", "Thresholds", "Verdict", "classify", "severity",
           "offset_statistics", "is_offset"]

#: Verdict words in order of severity, harmless first.
VERDICTS: tuple[str, ...] = ("bit-exact", "ulp-noise", "noise", "near-tie", "lossy", "systematic-offset",
                             "divergent", "crashed")

#: A row beyond ULP noise in which fewer than this fraction of entries differ is a localized change.
LOCALIZED_FRACTION = 0.10


def severity(word: str) -> int:
    """Index of a verdict word in :data:`VERDICTS` (0 = bit-exact).

    Raises
    ------
    InputError
        If ``word`` is not a verdict word; the message lists the valid ones.
    """
    try:
        return VERDICTS.index(word)
    except ValueError:
        raise InputError(f"unknown verdict {word!r}; valid: {', '.join(VERDICTS)}") from None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Thresholds of :func:`classify`, with their defaults and why.

    Attributes
    ----------
    max_ulp : float
        Largest ``max_scaled_ulp`` (max |Δ| of a row in ULPs of that row's
        largest |reference logit|) still called rounding noise.  Default 16:
        reordered float32 sums of a few thousand terms typically move results
        by 1-4 ULPs (the seed report saw ±1-4); 16 leaves room for a couple of
        reordered reductions in series while staying far below a real change
        (a 0.01 logit change at |logit| ~ 20 is ~5000 ULPs).
    near_tie_margin : float
        Reference top-1 minus top-2 logit (for argmax flips) or k-th minus
        (k+1)-th (for top-k changes) below which a change is a near-tie,
        in logits.  Default 0.5: the seed M=K verify report saw flips only
        at margins <= 0.17, the design notes at < 0.07, with |Δ| up to ~0.5;
        a margin of 0.5 is a probability ratio of e**0.5 ~ 1.65 between the
        two tokens, not a confident choice.  With a measured floor, a flip at
        a margin >= 0.5 inside the floor is ``lossy``; without one, it is
        ``divergent``.
    offset_ratio : float
        A systematic offset needs ``|mean m| >= offset_ratio * sd(m)``,
        where ``m`` is the mean Δ of each differing position: a shift shared
        by the positions, not each row's own shift (reassociation moves a
        row's logits together, by a different amount and sign at every
        position).  Default 1.0 (an effect size, Cohen's d, of 1): with
        ``min_positions`` = 8 positions that is a one-sample t of at least
        2.83 (p < 0.03, two-sided); measured on 10 real pairs, d <= 0.70.
    floor_factor : float
        A position is outside the pair's noise floor when its top-k Δ
        spread exceeds this many times the floor (the p99 of the spread over
        the positions that kept their argmax).  Default 4: on 12 real pairs
        the largest spread was <= 1.6x the p99 and the spread at a flip
        <= 1.53x, so 4 leaves 2.5x headroom while a one-position bug
        (1e4x in the issue that motivated this) stands far outside.
    min_positions : int
        Fewest positions for a noise floor and for a systematic offset.
        Default 8: fewer is the largest of a handful of values, and two rows
        that happen to share a sign are no evidence of a shift.
    calibrate : bool
        Judge against the measured floor (default True); False: the fixed
        thresholds alone (``--fixed-thresholds``).
    """

    max_ulp: float = 16.0
    near_tie_margin: float = 0.5
    offset_ratio: float = 1.0
    floor_factor: float = 4.0
    min_positions: int = 8
    calibrate: bool = True

    def __post_init__(self):
        for name in ("max_ulp", "near_tie_margin", "offset_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InputError(f"threshold {name} must be a number >= 0, got {value!r}")
        if isinstance(self.floor_factor, bool) or not isinstance(self.floor_factor, (int, float)) \
                or not self.floor_factor >= 1 or math.isinf(self.floor_factor):
            raise InputError(f"threshold floor_factor must be a finite number >= 1, got {self.floor_factor!r}")
        if isinstance(self.min_positions, bool) or not isinstance(self.min_positions, int) or self.min_positions < 2:
            raise InputError(f"threshold min_positions must be an integer >= 2, got {self.min_positions!r}")
        if not isinstance(self.calibrate, bool):
            raise InputError(f"threshold calibrate must be true or false, got {self.calibrate!r}")


def _tdict(t: Thresholds) -> dict[str, Any]:
    return dataclasses.asdict(t)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verdict word with the evidence that decided it.

    Attributes
    ----------
    word : str
        One of :data:`VERDICTS`.
    evidence : list[str]
        One line per fact, each naming the number and the threshold.
    thresholds : dict
        The :class:`Thresholds` used, as a dict.
    floor : dict or None
        The :class:`~logitlab.numerics.floor.NoiseFloor` measured, as a dict
        (None: verdicts made without one, e.g. saved by an older logitlab).
    outside : list[int]
        Positions outside the floor (or localized changes) that made the
        verdict ``divergent``.
    """

    word: str
    evidence: list = field(default_factory=list)
    thresholds: dict = field(default_factory=lambda: _tdict(Thresholds()))
    floor: dict | None = None
    outside: list = field(default_factory=list)

    def __post_init__(self):
        severity(self.word)  # validates

    @property
    def severity(self) -> int:
        """Index of :attr:`word` in :data:`VERDICTS` (0 = bit-exact)."""
        return severity(self.word)

    def worse_than(self, other: "str | Verdict") -> bool:
        """True if this verdict is more severe than ``other`` (a word or a Verdict)."""
        other_word = other.word if isinstance(other, Verdict) else other
        return self.severity > severity(other_word)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        try:
            return cls(word=data["word"], evidence=list(data["evidence"]),
                       thresholds=dict(data.get("thresholds", _tdict(Thresholds()))),
                       floor=data.get("floor"), outside=list(data.get("outside", [])))
        except (KeyError, TypeError) as exc:
            raise InputError(f"Verdict data must have 'word' and 'evidence': {exc}") from None


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _positions(items: Sequence[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f", … ({len(items)} in all)" if len(items) > limit else "")


# -- the offset test ------------------------------------------------------------
def offset_statistics(means: Sequence[float]) -> tuple[float, float, int]:
    """Mean and sample standard deviation (ddof 1) of per-position mean Δ values, and their count.

    The sd is 0 for a single position (and the offset test then never holds:
    see :func:`is_offset`, which needs ``min_positions`` >= 2).
    """
    values = [float(m) for m in means if m is not None and math.isfinite(m)]
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd, n


def is_offset(mean: float, sd: float, n: int, max_scaled_ulp: float, thresholds: Thresholds, *,
              tests: int = 1) -> bool:
    """The offset rule: above ULP noise, ``n >= min_positions``, ``|mean| >= offset_ratio × sd``.

    ``tests`` > 1 (several row groups tested at once, as ``verify``'s in-block
    rows): the one-sample t-test of the per-position means must also reject 0
    at ``0.05 / tests`` (two-sided; Bonferroni), so that one of many groups is
    not called offset by chance. With ``tests`` = 1 the effect size rule
    alone decides (with 8 positions and d >= 1, t >= 2.83: p < 0.03).
    """
    if not (n >= thresholds.min_positions and max_scaled_ulp > thresholds.max_ulp
            and abs(mean) >= thresholds.offset_ratio * sd and mean != 0.0):
        return False
    if tests <= 1 or sd == 0.0:
        return True
    from scipy import stats

    t_stat = abs(mean) / (sd / math.sqrt(n))
    return 2.0 * float(stats.t.sf(t_stat, n - 1)) <= 0.05 / tests


def _offset_line(mean: float, sd: float, n: int, t: Thresholds) -> str:
    if n < t.min_positions:
        return (f"systematic offset: not testable on {n} differing position(s) < min_positions = {t.min_positions} "
                f"(their mean Δ averages {_g(mean)})")
    return (f"|mean Δ per position| averages {_g(abs(mean))} {'≥' if abs(mean) >= t.offset_ratio * sd else '<'} "
            f"offset_ratio × its sd across positions = {_g(t.offset_ratio)} × {_g(sd)} over {n} differing positions")


# -- classify ---------------------------------------------------------------------
def classify(comparison: Comparison, thresholds: Thresholds = Thresholds(), *, judge_topk: bool = True) -> Verdict:
    """Classify a comparison into one of :data:`VERDICTS`, with evidence.

    Parameters
    ----------
    comparison : Comparison
        A :class:`~logitlab.numerics.compare.LogitComparison` (full
        vocabulary) or a :class:`~logitlab.numerics.topk.TopKComparison`
        (top-k log-probabilities: no offset and no localized-change rule,
        which need every entry; :func:`~logitlab.numerics.topk.classify_topk`
        adds what such data cannot show).
    thresholds : Thresholds, optional
        Default ``Thresholds()``.
    judge_topk : bool, optional
        Judge top-k set changes like flips (default). ``verify`` judges only
        argmax flips, which is all greedy decoding reads.

    Returns
    -------
    Verdict

    Notes
    -----
    Rules, first match wins. The floor F is the p99 of the top-k Δ spread over
    the positions that differ and kept their argmax
    (:func:`~logitlab.numerics.floor.measure_floor`); it is *measured* when
    there are at least ``min_positions`` of them and ``calibrate`` is on.

    1. **bit-exact** — ``differing_entries == 0``.
    2. **divergent** — any of: a NaN/Inf mismatch; a row beyond ULP noise in
       which fewer than :data:`LOCALIZED_FRACTION` of the entries differ (an
       arithmetic change upstream moves every logit of a row, since every
       logit reads the same hidden state; measured on 12 real pairs: >= 85 %
       of the entries of every differing row, >= 94 % beyond 16 ULP); with F
       measured, a position whose spread exceeds ``floor_factor × F`` (and
       ``floor_factor × max_ulp`` ULPs at its row's scale, so that rounding
       noise is never "outside"); without F, ``near_tie_margin``
       stands in for it: a position whose spread exceeds ``floor_factor ×
       near_tie_margin`` (2 logits by default), or a flip (or judged top-k
       change) at reference margin (gap) ``>= near_tie_margin``.
    3. **ulp-noise** — ``max_scaled_ulp <= max_ulp``, no flip, no judged top-k change.
    4. **systematic-offset** — full data, above ULP noise, at least
       ``min_positions`` differing positions, and the mean of their per-
       position mean Δ is at least ``offset_ratio`` × its sd across positions.
    5. **lossy** — F measured, and a flip or judged top-k change at margin
       ``>= near_tie_margin`` (every one inside the floor, or rule 2 fired).
    6. **near-tie** — flips or judged top-k changes, all at margins
       ``< near_tie_margin`` (and inside the floor when F is measured).
    7. **noise** — everything else: above ULP noise, no flips, no offset.

    Examples
    --------
    >>> import numpy as np
    >>> from logitlab.numerics import compare_logits
    >>> ref = np.linspace(-5, 5, 640, dtype=np.float32).reshape(10, 64)
    >>> classify(compare_logits(ref, ref + np.float32(0.25))).word
    'systematic-offset'
    """
    from logitlab.numerics.floor import measure_floor, spread_ulps  # numpy: loads when classify runs

    if not isinstance(comparison, Comparison):
        raise InputError(f"classify needs a comparison, got {type(comparison).__name__}")
    t, c = thresholds, comparison
    tdict = _tdict(t)
    n, k = c.n_positions, c.top_k
    full = c.scope == "full"

    if c.bit_exact:
        return Verdict("bit-exact", [
            f"all {n * c.n_vocab} entries ({n} positions × {c.n_vocab} vocab) have identical bits"
        ], tdict)

    floor = measure_floor(c, min_positions=t.min_positions, floor_factor=t.floor_factor)
    if not t.calibrate:
        floor = dataclasses.replace(floor, measured=False, reason=(
            "noise floor not used (fixed thresholds only)" + (f"; measured p99 {_g(floor.value)} over "
                                                              f"{floor.positions} positions" if floor.value else "")))
    fd = floor.to_dict()
    spreads = c.row_topk_spread or [None] * n
    limit = t.floor_factor * floor.value if floor.measured else None

    def factor(x: float | None) -> str:
        if x is None or not floor.value:
            return "n/a"
        ratio = x / floor.value
        return f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.3g}×"

    scale_line = (f"max |Δ| = {_g(c.max_scaled_ulp)} ULP at row scale "
                  f"{'≤' if c.max_scaled_ulp <= t.max_ulp else '>'} max_ulp = {_g(t.max_ulp)}")
    flips = list(c.flips)
    flip_rows = {f["position"] for f in flips}
    changes = [i for i in c.topk_changes if i not in flip_rows] if judge_topk else []
    # every judged change: (position, kind, reference margin or gap)
    judged = [(f["position"], "flip", f["margin_ref"]) for f in flips] + \
             [(i, f"top-{k} change", c.row_kth_gap_ref[i]) for i in changes]

    # 2. divergent ---------------------------------------------------------------
    bad: list[str] = []
    outside: list[int] = []
    if c.nonfinite_mismatch:
        bad.append(
            f"{c.nonfinite_mismatch} entries are NaN/Inf in one run but not the same in the other "
            f"(reference NaN {c.nan_ref}, Inf {c.inf_ref}; observed NaN {c.nan_obs}, Inf {c.inf_obs}) > 0")
    if full:
        local = [i for i in range(n) if c.row_differing[i] and c.row_scaled_ulp[i] > t.max_ulp
                 and c.row_differing[i] < LOCALIZED_FRACTION * c.n_vocab]
        if local:
            i = max(local, key=lambda j: c.row_max_abs_diff[j])
            outside += local
            bad.append(
                f"a change confined to a few entries at {len(local)} position(s) ({_positions(local)}); position "
                f"{i}: {c.row_differing[i]} of {c.n_vocab} entries differ ({100 * c.row_differing[i] / c.n_vocab:.2g} % "
                f"< {100 * LOCALIZED_FRACTION:g} %), by up to {_g(c.row_max_abs_diff[i])} "
                f"({_g(c.row_scaled_ulp[i])} ULP at row scale > max_ulp = {_g(t.max_ulp)}): reassociation moves "
                "every logit of a row, not a few")
    if floor.measured:
        far = [i for i in range(n) if c.row_differing[i] and spreads[i] is not None and spreads[i] > limit
               and spread_ulps(c, i) > t.floor_factor * t.max_ulp]
        if far:
            outside += [i for i in far if i not in outside]
            i = max(far, key=lambda j: spreads[j])
            at = next((f for f in flips if f["position"] == i), None)
            what = (f" (an argmax flip {at['token_ref']!r} → {at['token_obs']!r} at reference margin "
                    f"{_g(at['margin_ref'])})" if at else "")
            bad.append(
                f"{len(far)} position(s) outside the noise floor ({_positions(far)}); position {i}{what} moved "
                f"{_g(spreads[i])} ({floor.statistic}), {factor(spreads[i])} the pair's p99 {_g(floor.value)} "
                f"> floor_factor = {_g(t.floor_factor)}")
    else:
        big = t.floor_factor * t.near_tie_margin
        far = [i for i in range(n) if c.row_differing[i] and spreads[i] is not None and spreads[i] > big
               and spread_ulps(c, i) > t.floor_factor * t.max_ulp and i not in outside]
        if far:
            outside += far
            i = max(far, key=lambda j: spreads[j])
            bad.append(
                f"{len(far)} position(s) moved far without a noise floor to judge them by ({_positions(far)}); "
                f"position {i} moved {_g(spreads[i])} ({floor.statistic}) > floor_factor × near_tie_margin = "
                f"{_g(t.floor_factor)} × {_g(t.near_tie_margin)} (the fixed stand-in for the floor)")
        confident = [(p, kind, m) for p, kind, m in judged if m is None or m >= t.near_tie_margin]
        flips_bad = [x for x in confident if x[1] == "flip"]
        tk_bad = [x for x in confident if x[1] != "flip"]
        if flips_bad:
            p, _, m = max(flips_bad, key=lambda x: math.inf if x[2] is None else x[2])
            f = next(f for f in flips if f["position"] == p)
            outside += [x[0] for x in flips_bad]
            bad.append(
                f"{len(flips_bad)} argmax flip(s) at confident positions; position {p}: token {f['token_ref']!r} -> "
                f"{f['token_obs']!r}, reference margin {_g(m)} ≥ near_tie_margin = {_g(t.near_tie_margin)} "
                f"(fixed threshold: {floor.reason.split(':', 1)[-1].strip()})")
        if tk_bad:
            unknown = [x for x in tk_bad if x[2] is None]
            clear = [x for x in tk_bad if x[2] is not None]
            outside += [x[0] for x in tk_bad]
            if clear:
                p, _, gap = max(clear, key=lambda x: x[2])
                bad.append(f"top-{k} set changed at {len(clear)} position(s) with a clear reference boundary; "
                           f"position {p}: {k}th/{k + 1}th gap {_g(gap)} ≥ near_tie_margin = {_g(t.near_tie_margin)}")
            if unknown:
                bad.append(f"top-{k} set changed at {len(unknown)} position(s) where the {k + 1}th entry was not "
                           "returned, so the boundary gap is unknown" + (
                               " (ask for more log-probabilities than --top-k)" if not full else ""))
    if floor.measured and judge_topk:  # top-k data: a change whose boundary cannot be seen stays divergent
        unknown = [p for p, kind, m in judged if kind != "flip" and m is None and p not in outside]
        if unknown and not full:
            outside += unknown
            bad.append(f"top-{k} set changed at {len(unknown)} position(s) where the {k + 1}th entry was not returned, "
                       "so the boundary gap is unknown (ask for more log-probabilities than --top-k)")
    if bad:
        return Verdict("divergent", bad + [floor.reason], tdict, fd, sorted(set(outside)))

    # 3. ulp-noise ----------------------------------------------------------------
    if c.max_scaled_ulp <= t.max_ulp and not judged:
        return Verdict("ulp-noise", [
            scale_line,
            f"{c.differing_entries} of {n * c.n_vocab} entries differ in {c.differing_rows} of {n} positions; "
            f"largest element-wise distance {c.max_ulp} ULP",
            f"argmax and top-{k} set agree at all {n} positions" if judge_topk else f"argmax agrees at all {n} positions",
        ], tdict, fd)

    differing = [i for i in range(n) if c.row_differing[i]]
    mean, sd, npos = offset_statistics([c.row_mean_diff[i] for i in differing])
    offset_line = _offset_line(mean, sd, npos, t) if full else \
        "systematic offset: not decidable from log-probabilities (a constant logit shift cancels in the softmax)"
    margins = [m for _, kind, m in judged if kind == "flip" and m is not None]
    gaps = [m for _, kind, m in judged if kind != "flip" and m is not None]
    within = ""
    if floor.measured and judged:
        worst = max((spreads[p] for p, _, _ in judged if spreads[p] is not None), default=None)
        within = (f"; their {floor.statistic} ≤ {_g(worst)} = {factor(worst)} the pair's p99 {_g(floor.value)} "
                  f"(inside floor_factor = {_g(t.floor_factor)})")
    flip_line = (f"{len(margins)} argmax flip(s), largest reference margin {_g(max(margins))}"
                 if margins else f"no argmax flips (argmax agrees at all {n} positions)")
    topk_line = (f"top-{k} set changed at {len(gaps)} position(s) away from flips, largest reference "
                 f"{k}th/{k + 1}th gap {_g(max(gaps))}" if gaps else
                 (f"top-{k} set agrees away from flips" if judge_topk else
                  f"top-{k} changes away from flips not judged ({len(c.topk_changes)} position(s))"))

    # 4. systematic-offset ------------------------------------------------------------
    if full and is_offset(mean, sd, npos, c.max_scaled_ulp, t):
        return Verdict("systematic-offset", [offset_line, scale_line, flip_line + within, topk_line, floor.reason],
                       tdict, fd)

    confident = [m for _, _, m in judged if m is not None and m >= t.near_tie_margin]
    # 5. lossy -----------------------------------------------------------------------
    if confident:  # only reachable with a measured floor (else rule 2 fired)
        kld = c.kld or {}
        return Verdict("lossy", [
            f"{len(confident)} flip(s) or top-{k} change(s) at reference margins ≥ near_tie_margin = "
            f"{_g(t.near_tie_margin)} (largest {_g(max(confident))}), every one inside the pair's noise floor"
            f"{within}: flips consistent with its noise",
            floor.reason + ": the change moves competing tokens this much everywhere",
            f"KLD (nats) mean {_g(kld.get('mean'))}, p99 {_g(kld.get('p99'))}, max {_g(kld.get('max'))}; "
            f"top-1 agreement {_pct(c.argmax_agreement)}; top-{k} set agreement {_pct(c.topk_agreement)}",
            offset_line, scale_line,
        ], tdict, fd)

    # 6. near-tie -------------------------------------------------------------------
    if judged:
        tie = (f"every flip and top-{k} change at a reference margin < near_tie_margin = {_g(t.near_tie_margin)}"
               + within)
        return Verdict("near-tie", [tie, flip_line, topk_line, floor.reason, offset_line, scale_line], tdict, fd)

    # 7. noise --------------------------------------------------------------------------
    return Verdict("noise", [
        scale_line,
        flip_line + (f"; top-{k} set agrees at all {n} positions" if judge_topk else ""),
        offset_line,
        floor.reason + (f"; no position beyond floor_factor = {_g(t.floor_factor)} × it" if floor.measured else ""),
    ], tdict, fd)
