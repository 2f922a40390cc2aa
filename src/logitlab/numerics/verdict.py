"""One-word divergence verdict for a :class:`~logitlab.numerics.compare.LogitComparison`.

Words, from harmless to serious (:data:`VERDICTS`):

``bit-exact``
    Every entry has identical bits.
``ulp-noise``
    The largest difference is at most ``max_ulp`` ULPs at its row's scale and
    no position changed its argmax or its top-k set: rounding noise.
``near-tie``
    Differences above ULP noise, but without a bias, and every argmax flip
    (there may be none) or top-k change happened where the reference was
    nearly tied (margin below ``near_tie_margin``): floating-point
    non-associativity deciding a coin toss, as in a batched M=K verify.
``systematic-offset``
    Differences above ULP noise whose mean is at least ``offset_ratio`` times
    their spread: the candidate shifts logits, it does not only scatter them.
``divergent``
    NaN/Inf where the other run has a number (or another non-finite), or a
    confident position changed its argmax or its top-k set: a real bug until
    shown otherwise.

The rules are checked in the order bit-exact, divergent, ulp-noise,
systematic-offset, near-tie; the first that holds decides.  Every evidence
line names the number and the threshold that decided it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logitlab.errors import InputError

if TYPE_CHECKING:  # the comparison (numpy, the fused kernel) loads when classify runs: the CLI's help stays light
    from logitlab.numerics.compare import LogitComparison

__all__ = ["VERDICTS", "Thresholds", "Verdict", "classify", "severity"]

#: Verdict words in order of severity, harmless first.
VERDICTS: tuple[str, ...] = ("bit-exact", "ulp-noise", "near-tie", "systematic-offset", "divergent")


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
        two tokens, not a confident choice.  A flip at a margin >= 0.5 is
        divergent.
    offset_ratio : float
        A difference above ULP noise is a systematic offset when
        ``|mean Δ| >= offset_ratio * std(Δ)`` over the entries of the
        differing rows.  Default 1.0: the shift is at least as large as the
        scatter.  (A constant added to rows gives std 0: an offset; the seed
        report's mean Δ -0.0376 with mean |Δ| 0.083 has std ~ 0.1 > |mean|:
        not an offset.)
    """

    max_ulp: float = 16.0
    near_tie_margin: float = 0.5
    offset_ratio: float = 1.0

    def __post_init__(self):
        for name in ("max_ulp", "near_tie_margin", "offset_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InputError(f"threshold {name} must be a number >= 0, got {value!r}")


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
    """

    word: str
    evidence: list = field(default_factory=list)
    thresholds: dict = field(default_factory=lambda: dataclasses.asdict(Thresholds()))

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
                       thresholds=dict(data.get("thresholds", dataclasses.asdict(Thresholds()))))
        except (KeyError, TypeError) as exc:
            raise InputError(f"Verdict data must have 'word' and 'evidence': {exc}") from None


def _g(x: float) -> str:
    return f"{x:.4g}"


def _pooled_offset(c: LogitComparison) -> tuple[float, float, int]:
    """Mean and std of Δ over the entries of the differing rows (rows have n_vocab entries)."""
    rows = [i for i, d in enumerate(c.row_differing) if d]
    if not rows:
        return 0.0, 0.0, 0
    means = [c.row_mean_diff[i] for i in rows]
    mean = sum(means) / len(rows)
    second = sum(c.row_std_diff[i] ** 2 + c.row_mean_diff[i] ** 2 for i in rows) / len(rows)
    var = max(second - mean * mean, 0.0)
    return mean, var ** 0.5, len(rows)


def classify(comparison: LogitComparison, thresholds: Thresholds = Thresholds()) -> Verdict:
    """Classify a comparison into one of :data:`VERDICTS`, with evidence.

    Parameters
    ----------
    comparison : LogitComparison
        From :func:`~logitlab.numerics.compare.compare_logits`.
    thresholds : Thresholds, optional
        Default ``Thresholds()`` (``max_ulp=16``, ``near_tie_margin=0.5``,
        ``offset_ratio=1.0``).

    Returns
    -------
    Verdict

    Notes
    -----
    Rules, first match wins (boundaries: "noise" is ``<= max_ulp``; a flip or
    top-k change is confident at margin/gap ``>= near_tie_margin``; an offset
    needs ``|mean| >= offset_ratio * std``):

    1. **bit-exact** — ``differing_entries == 0``.
    2. **divergent** — ``nonfinite_mismatch > 0``; or an argmax flip with
       reference margin ``>= near_tie_margin``; or a top-k set change where
       the reference k-th/(k+1)-th gap ``>= near_tie_margin``.
    3. **ulp-noise** — ``max_scaled_ulp <= max_ulp`` and no argmax flip and
       no top-k set change.
    4. **systematic-offset** — ``max_scaled_ulp > max_ulp`` and, over the
       entries of the differing rows, ``|mean Δ| >= offset_ratio * std(Δ)``.
       (Pooled over differing rows so that identical rows do not dilute a
       shift; a shift whose sign varies from row to row is scatter, not an
       offset.)
    5. **near-tie** — everything else: above ULP noise (or a flip inside ULP
       noise), unbiased, every flip and top-k change at a near-tie.

    Examples
    --------
    >>> import numpy as np
    >>> from logitlab.numerics import compare_logits
    >>> ref = np.linspace(-5, 5, 64, dtype=np.float32).reshape(2, 32)
    >>> classify(compare_logits(ref, ref + np.float32(0.25))).word
    'systematic-offset'
    """
    from logitlab.numerics.compare import LogitComparison

    if not isinstance(comparison, LogitComparison):
        raise InputError(f"classify needs a LogitComparison, got {type(comparison).__name__}")
    t = thresholds
    c = comparison
    tdict = dataclasses.asdict(t)
    n, k = c.n_positions, c.top_k

    if c.bit_exact:
        return Verdict("bit-exact", [
            f"all {n * c.n_vocab} entries ({n} positions × {c.n_vocab} vocab) have identical bits"
        ], tdict)

    scale_line = (
        f"max |Δ| = {_g(c.max_scaled_ulp)} ULP at row scale "
        f"{'≤' if c.max_scaled_ulp <= t.max_ulp else '>'} max_ulp = {_g(t.max_ulp)}"
    )
    flip_margins = [f["margin_ref"] for f in c.flips]
    topk_gaps = [c.row_kth_gap_ref[i] for i in c.topk_changes]

    # 2. divergent
    bad: list[str] = []
    if c.nonfinite_mismatch:
        bad.append(
            f"{c.nonfinite_mismatch} entries are NaN/Inf in one run but not the same in the other "
            f"(reference NaN {c.nan_ref}, Inf {c.inf_ref}; observed NaN {c.nan_obs}, Inf {c.inf_obs}) > 0"
        )
    confident_flips = [f for f in c.flips if f["margin_ref"] is None or f["margin_ref"] >= t.near_tie_margin]
    if confident_flips:
        worst = max(confident_flips, key=lambda f: float("inf") if f["margin_ref"] is None else f["margin_ref"])
        bad.append(
            f"{len(confident_flips)} argmax flip(s) at confident positions; position {worst['position']}: "
            f"token {worst['token_ref']} -> {worst['token_obs']}, reference margin "
            f"{_g(worst['margin_ref']) if worst['margin_ref'] is not None else 'n/a'} "
            f"≥ near_tie_margin = {_g(t.near_tie_margin)}"
        )
    confident_topk = [i for i in c.topk_changes
                      if c.row_kth_gap_ref[i] is None or c.row_kth_gap_ref[i] >= t.near_tie_margin]
    if confident_topk:
        i = max(confident_topk, key=lambda j: float("inf") if c.row_kth_gap_ref[j] is None else c.row_kth_gap_ref[j])
        gap = c.row_kth_gap_ref[i]
        bad.append(
            f"top-{k} set changed at {len(confident_topk)} position(s) with a clear reference boundary; "
            f"position {i}: {k}th/{k + 1}th gap {_g(gap) if gap is not None else 'n/a'} "
            f"≥ near_tie_margin = {_g(t.near_tie_margin)}"
        )
    if bad:
        return Verdict("divergent", bad, tdict)

    # 3. ulp-noise
    if c.max_scaled_ulp <= t.max_ulp and not c.flips and not topk_gaps:
        return Verdict("ulp-noise", [
            scale_line,
            f"{c.differing_entries} of {n * c.n_vocab} entries differ in {c.differing_rows} of {n} positions; "
            f"largest element-wise distance {c.max_ulp} ULP",
            f"argmax and top-{k} set agree at all {n} positions",
        ], tdict)

    mean, std, nrows = _pooled_offset(c)
    offset = c.max_scaled_ulp > t.max_ulp and abs(mean) >= t.offset_ratio * std
    offset_line = (
        f"|mean Δ| = {_g(abs(mean))} {'≥' if abs(mean) >= t.offset_ratio * std else '<'} "
        f"offset_ratio × std(Δ) = {_g(t.offset_ratio)} × {_g(std)} over the {nrows} differing positions"
    )
    if flip_margins:
        flip_line = (f"{len(flip_margins)} argmax flip(s), largest reference margin "
                     f"{_g(max(flip_margins))} < near_tie_margin = {_g(t.near_tie_margin)}")
    else:
        flip_line = f"no argmax flips (argmax agrees at all {n} positions)"
    if topk_gaps:
        topk_line = (f"top-{k} set changed at {len(topk_gaps)} position(s), largest reference "
                     f"{k}th/{k + 1}th gap {_g(max(topk_gaps))} < near_tie_margin = {_g(t.near_tie_margin)}")
    else:
        topk_line = f"top-{k} set agrees at all {n} positions"

    # 4. systematic-offset
    if offset:
        return Verdict("systematic-offset", [offset_line, scale_line, flip_line, topk_line], tdict)

    # 5. near-tie
    return Verdict("near-tie", [scale_line, offset_line, flip_line, topk_line], tdict)
