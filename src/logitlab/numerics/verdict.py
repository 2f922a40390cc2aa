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
from typing import Any, Callable, Mapping

from logitlab.errors import InputError
from logitlab.numerics.comparison import Comparison  # stdlib only: the CLI's help stays light
from logitlab.numerics.verdict_rules import (LOCALIZED_FRACTION, Case, first_finding, is_offset, offset_statistics,
                                             scope_notes)

__all__ = ["VERDICTS", "LOCALIZED_FRACTION", "Thresholds", "Verdict", "check_thresholds", "classify", "severity",
           "offset_statistics", "is_offset"]

#: Verdict words in order of severity, harmless first.
VERDICTS: tuple[str, ...] = ("bit-exact", "ulp-noise", "noise", "near-tie", "lossy", "systematic-offset",
                             "divergent", "crashed")


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
    outlier_z : float
        A position whose ``row_delta_z`` (the entry that moved most, in sd of
        its own row's Δ) exceeds this is a within-row outlier: one logit moved
        far beyond the noise that moves every logit of its row. Default 20:
        measured on real pairs of the embedded model (V = 49,152: flash
        attention, q8_0 and q4_0 KV cache) the largest ``row_delta_z`` of any
        position was 6.8, and the maximum of V Gaussian draws is about
        ``sqrt(2 ln V)`` = 4.7 there (5.0 at Gemma's 262,144), so 20 leaves
        about 3× headroom. It cannot fire when ``sqrt(V − 1) <= outlier_z``
        (V <= 401 by default): a row that small cannot hold one entry that far
        from its own sd. The Hampel identifier's rule (an entry far from the
        bulk of the same sample, in units of its scale), with the sample
        being one row.
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
    outlier_z: float = 20.0
    min_positions: int = 8
    calibrate: bool = True

    def __post_init__(self):
        check_thresholds(dataclasses.asdict(self))


def check_thresholds(values: Mapping[str, Any], *, options: Mapping[str, str] | None = None) -> None:
    """Check the :class:`Thresholds` fields in ``values`` (a field absent is not checked).

    Parameters
    ----------
    values : mapping
        Field name -> value, as :class:`Thresholds` takes them.
    options : mapping, optional
        Field name -> the command-line option it came from (``{"max_ulp": "--max-ulp"}``), which the message
        then names; a field not in it (or None) is named ``threshold <field>``.

    Raises
    ------
    InputError
        ``"<name> must be a number >= 0, got <value>"`` for ``max_ulp``, ``near_tie_margin``, ``offset_ratio``,
        ``outlier_z``; a finite number >= 1 for ``floor_factor``; an integer >= 2 for ``min_positions``; true
        or false for ``calibrate``.
    """
    def named(field_name: str) -> str:
        return (options or {}).get(field_name, f"threshold {field_name}")

    def bad(field_name: str, ok: Callable[[Any], bool]) -> bool:
        return field_name in values and not ok(values[field_name])

    def number(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, (int, float))

    for name in ("max_ulp", "near_tie_margin", "offset_ratio", "outlier_z"):
        if bad(name, lambda v: number(v) and v >= 0):
            raise InputError(f"{named(name)} must be a number >= 0, got {values[name]!r}")
    if bad("floor_factor", lambda v: number(v) and v >= 1 and not math.isinf(v)):
        raise InputError(f"{named('floor_factor')} must be a finite number >= 1, got {values['floor_factor']!r}")
    if bad("min_positions", lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 2):
        raise InputError(f"{named('min_positions')} must be an integer >= 2, got {values['min_positions']!r}")
    if bad("calibrate", lambda v: isinstance(v, bool)):
        raise InputError(f"{named('calibrate')} must be true or false, got {values['calibrate']!r}")


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


# -- classify ---------------------------------------------------------------------
def classify(comparison: Comparison, thresholds: Thresholds = Thresholds(), *, judge_topk: bool = True) -> Verdict:
    """Classify a comparison into one of :data:`VERDICTS`, with evidence.

    Parameters
    ----------
    comparison : Comparison
        A :class:`~logitlab.numerics.compare.LogitComparison` (full
        vocabulary) or a :class:`~logitlab.numerics.topk.TopKComparison`
        (top-k log-probabilities: no offset and no localized-change rule,
        which need every entry; the evidence then ends with what such data
        cannot show, :func:`~logitlab.numerics.verdict_rules.scope_notes`).
    thresholds : Thresholds, optional
        Default ``Thresholds()``.
    judge_topk : bool, optional
        Judge top-k set changes like flips (default). ``verify`` judges only
        argmax flips, which is all greedy decoding reads.

    Returns
    -------
    Verdict

    Raises
    ------
    InputError
        ``comparison`` is not a :class:`~logitlab.numerics.comparison.Comparison`.

    Notes
    -----
    Rules, first match wins: the ordered table
    :data:`~logitlab.numerics.verdict_rules.RULES`, one function per word
    (a new rule is one function and one entry there). The floor F is the p99 of the top-k Δ spread over
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
    if not isinstance(comparison, Comparison):
        raise InputError(f"classify needs a comparison, got {type(comparison).__name__}")
    case = Case(comparison, thresholds, judge_topk)
    finding = first_finding(case)
    return Verdict(finding.word, finding.evidence + scope_notes(case, finding), _tdict(thresholds),
                   None if finding.word == "bit-exact" else case.floor.to_dict(), finding.outside)
