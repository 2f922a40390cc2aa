"""Detection limits: the smallest planted fault that a comparison's verdict rules would have called ``divergent``.

A verdict of ``near-tie`` or ``noise`` says the candidate differs from the
control only as the pair's noise does. It does not say how large a bug could
hide inside that noise. :func:`detection_limits` answers it for standard
fault shapes by **injection**: each shape is planted into a copy of the
candidate run at every position, with its size s found per position by a
bisection (in log space, between :data:`S_MIN` and :data:`S_MAX` logits) on
the fused comparison, and judged by the same rules
(:data:`~logitlab.numerics.verdict_rules.DIVERGENCE_CHECKS`) against the
pair's own floors, measured once on the unplanted comparison. The limit of a
shape is the largest of the per-position limits: a fault of that size is
caught *wherever it lands*. Its worst position is then checked with the full
:func:`~logitlab.numerics.verdict.classify` (floors measured again with the
fault in), which also gives the word a fault of half the limit would have
read.

Fault shapes (:data:`SHAPES`):

``argmax-up`` / ``argmax-down``
    One logit, the reference's argmax token of the position, raised / lowered
    by s: a bug in the logit greedy decoding reads.
``tail-up``
    One logit, the reference's median-ranked token of the position, raised by
    s: a bug in a logit nobody looks at, visible only to the within-row
    outlier rule until it enters the top-k.
``row-noise``
    Every logit of the position moved by s × a seeded standard normal (the
    ``cmd`` reference engine's ``LLAMACPP_CMD_PERTURB``): a kernel branch that
    is wrong at one position.
``top2-swap``
    The reference's top-2 tokens of one confident position (margin
    ``>= near_tie_margin``) swap their candidate logits: no size; the result
    is how many such positions would have been caught.
``all-rows-shift``
    Every logit of every position raised by s: softmax-invariant, so no
    position can flip; what the rules can see is ``systematic-offset``, and
    the limit is the smallest s that reads it (full classification).

A shift of *one* row by s is invisible to every rule: the softmax, the
spreads, the row's sd and its outlier z do not move. Only ``row_mean_diff``
shows it; :data:`ROW_SHIFT_NOTE` says so in every result.

Judged as the caller judges: :class:`Judge` names the verdict function and
any extra way of being divergent (``verify`` judges argmax flips only, and a
flip to a token outside the other run's top-k is ``divergent`` there); the
default is :func:`~logitlab.numerics.verdict.classify`'s rules.

Cost: per shape, about 14 comparisons of the run (one chunk of rows at a
time: the extra memory is one chunk, ~8 MB), plus two full comparisons with
the fault planted at the worst position (the planted rows are made one block
at a time, :func:`~logitlab.numerics.compare.compare_blocks`: never a copy of
the run). On the embedded model
(121 × 49,152) the whole is about a second (measured again for issue #32 on 2
cores: 3.1 s for every shape, 0.53 s for ``argmax-up`` alone, against 0.01 s
for one comparison of the run; at load 4.7, 5–8 s and 0.8 s).

Source: the issue of measuring what a test could have caught is the
"inverse control" of mutation testing (a planted fault the check must see);
the fault sizes are found by bisection because the rules are monotone in s
for every shape here (a larger fault moves every statistic they read further).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics.compare import LogitComparison, compare_blocks, compare_logits
from logitlab.numerics.verdict import Thresholds, Verdict, classify, severity
from logitlab.numerics.verdict_rules import DIVERGENCE_CHECKS, Case, Check

__all__ = ["SHAPES", "HEADLINE", "S_MIN", "S_MAX", "ROW_SHIFT_NOTE", "ShapeLimit", "DetectionLimits", "Judge",
           "CLASSIFY", "detection_limits", "largest_limit"]

#: Fault shapes, in report order.
SHAPES: tuple[str, ...] = ("argmax-up", "argmax-down", "tail-up", "row-noise", "top2-swap", "all-rows-shift")
#: The shape a table's one column shows: one logit, the reference's argmax (the greedy token), raised.
HEADLINE = "argmax-up"
#: Search range of a fault's size, in logits.
S_MIN, S_MAX = 1e-7, 1e4
#: Bisection steps in log space: (log S_MAX − log S_MIN) / 2**14 ≈ 0.15 % of s.
STEPS = 14
#: What a shift of one row can and cannot show.
ROW_SHIFT_NOTE = ("a shift of one position's whole row (every logit + s) is softmax-invariant: no rule can see it "
                  "(only the row's mean Δ moves); shared by the positions it reads systematic-offset (all-rows-shift)")
_CHUNK = 2 ** 21  # entries per chunk, as compare_logits


@dataclass(frozen=True)
class ShapeLimit:
    """The detection limit of one fault shape.

    Attributes
    ----------
    shape : str
        One of :data:`SHAPES`.
    limit : float or None
        Smallest size (logits) that reads ``divergent`` at every position
        probed (``systematic-offset`` or worse for ``all-rows-shift``); None:
        some position is not caught up to :data:`S_MAX`, or (``top2-swap``) the
        shape has no size.
    position : int or None
        The position where the limit is largest (the hardest to catch).
    median : float or None
        Median of the per-position limits over the positions caught.
    caught : int
        Positions where the fault is caught within the search range (for
        ``top2-swap``: confident positions where the swap is caught).
    probed : int
        Positions probed (for ``top2-swap``: positions with reference margin
        ``>= near_tie_margin``).
    above : str or None
        The full verdict with the fault planted at ``position`` just above
        ``limit`` (1.02 ×): the check of the row-by-row search.
    below : str or None
        The full verdict with the fault at ``position`` at half ``limit``.
    missed_margin : float or None
        ``top2-swap``: the largest reference margin of a swap that was not
        caught (None: every swap caught).
    token : int or None
        The token moved at ``position`` (single-logit shapes): so that a
        real engine can plant the same fault there.
    """

    shape: str
    limit: float | None
    position: int | None
    median: float | None
    caught: int
    probed: int
    above: str | None = None
    below: str | None = None
    missed_margin: float | None = None
    token: int | None = None


@dataclass(frozen=True)
class DetectionLimits:
    """Detection limits of one comparison, per fault shape.

    Attributes
    ----------
    verdict : str
        The verdict of the unplanted comparison.
    shapes : list[ShapeLimit]
        One per shape of :data:`SHAPES` (in that order).
    notes : list[str]
        What the shapes cannot show (:data:`ROW_SHIFT_NOTE`).
    """

    verdict: str
    shapes: list[ShapeLimit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def shape(self, name: str) -> ShapeLimit:
        """The limit of one shape.

        Raises
        ------
        InputError
            ``name`` is not a shape of this result.
        """
        for s in self.shapes:
            if s.shape == name:
                return s
        raise InputError(f"no detection limit for shape {name!r}; have {', '.join(s.shape for s in self.shapes)}")

    def summary(self) -> str:
        """One line: each shape's limit in logits (``top2-swap``: swaps caught), for an assertion's message.

        Example: ``argmax-up 1.85, argmax-down 1.946, tail-up 3.502, row-noise 0.6134, top2-swap caught
        37/60, all-rows-shift 0.1445 (systematic-offset)``; a ``divergent`` pair: nothing was probed.
        """
        if not self.shapes:
            return f"not probed (the verdict is {self.verdict}: nothing worse to detect)"
        parts = []
        for s in self.shapes:
            if s.shape == "top2-swap":
                parts.append(f"top2-swap caught {s.caught}/{s.probed}")
            elif s.limit is None and s.shape == "all-rows-shift" and \
                    severity(self.verdict) >= severity("systematic-offset"):
                parts.append(f"{s.shape} n/a (the verdict is already as severe)")
            elif s.limit is None:
                parts.append(f"{s.shape} > {S_MAX:g}" if s.probed else f"{s.shape} n/a")
            else:
                parts.append(f"{s.shape} {s.limit:.4g}" + (" (systematic-offset)" if s.shape == "all-rows-shift"
                                                            else ""))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DetectionLimits":
        try:
            return cls(verdict=data["verdict"], shapes=[ShapeLimit(**s) for s in data["shapes"]],
                       notes=list(data.get("notes", [])))
        except (KeyError, TypeError) as exc:
            raise InputError(f"DetectionLimits data: {exc}") from None


@dataclass(frozen=True)
class Judge:
    """How the caller judges a comparison, so that the planted faults are judged the same way.

    Attributes
    ----------
    verdict : callable (LogitComparison, Thresholds) -> Verdict
        The full verdict (default :func:`~logitlab.numerics.verdict.classify`).
    judge_topk : bool
        Whether the row checks count a top-k set change like a flip (as
        ``classify``'s argument; ``verify`` judges flips only: False).
    checks : tuple of Check
        Ways of being divergent beyond
        :data:`~logitlab.numerics.verdict_rules.DIVERGENCE_CHECKS`, each
        ``(case, outside) -> (evidence lines, positions)`` as those are, that
        ``verdict`` also applies.
    """

    verdict: Callable[[LogitComparison, Thresholds], Verdict] = classify
    judge_topk: bool = True
    checks: tuple[Check, ...] = ()


#: ``classify``'s rules, as ``ab`` and ``golden check`` judge.
CLASSIFY = Judge()


def largest_limit(limits: Iterable[DetectionLimits | None], shape: str = HEADLINE) -> tuple[float | None, int]:
    """The largest limit of ``shape`` over several comparisons, and how many of them measured it.

    Parameters
    ----------
    limits : iterable of DetectionLimits or None
        One per comparison (None: not measured, e.g. ``--no-detection-limit``).
    shape : str
        One of :data:`SHAPES` with a size (default :data:`HEADLINE`).

    Returns
    -------
    (limit, measured) : (float or None, int)
        ``limit`` in logits: a fault that size reads ``divergent`` wherever it
        lands in any of them. None when none measured it (``measured`` 0:
        none given, or all ``divergent``), or when one left a position
        uncaught up to :data:`S_MAX` (``measured`` > 0).
    """
    found = [s for d in limits if d is not None for s in d.shapes if s.shape == shape]
    if not found:
        return None, 0
    if any(s.limit is None for s in found):
        return None, len(found)
    return max(s.limit for s in found), len(found)


# -- planting ---------------------------------------------------------------------
Plant = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


def _targets(ref: np.ndarray, shape: str) -> np.ndarray:
    """The token each single-logit shape moves, per row of ``ref``."""
    if shape == "tail-up":
        mid = ref.shape[1] // 2
        return np.argpartition(ref, mid, axis=1)[:, mid]
    return np.argmax(ref, axis=1)


def _planter(ref: np.ndarray, shape: str, first_row: int) -> Plant:
    """A function that plants ``shape`` of per-row size ``s`` into ``out`` (a copy of the candidate rows)."""
    rows = np.arange(ref.shape[0])
    if shape == "row-noise":
        noise = np.stack([np.random.default_rng(first_row + r).standard_normal(ref.shape[1]).astype(np.float32)
                          for r in rows])

        def plant(obs, out, s):
            np.add(obs, s[:, None].astype(np.float32) * noise, out=out)
        return plant
    tokens = _targets(ref, shape)
    sign = np.float32(-1.0 if shape == "argmax-down" else 1.0)

    def plant(obs, out, s):
        out[...] = obs
        out[rows, tokens] = obs[rows, tokens] + sign * s.astype(np.float32)
    return plant


# -- the row-by-row search --------------------------------------------------------
def _caught(sub: LogitComparison, base: Case, thresholds: Thresholds, judge: Judge) -> np.ndarray:
    """Per row of ``sub``: does a divergence check put it outside, judged against ``base``'s floors?"""
    # judged against the unplanted pair's floors, not floors measured with the fault in
    case = Case(sub, thresholds, judge.judge_topk, floors=(base.floor, base.row_floor))
    outside: list[int] = []
    for check in DIVERGENCE_CHECKS + judge.checks:
        _, positions = check(case, outside)
        outside += [p for p in positions if p not in outside]
    hit = np.zeros(sub.n_positions, bool)
    hit[outside] = True
    return hit


def _chunks(n: int, v: int) -> list[tuple[int, int]]:
    rows = max(1, _CHUNK // v)
    return [(a, min(a + rows, n)) for a in range(0, n, rows)]


def _search(reference: np.ndarray, observed: np.ndarray, shape: str, base: Case, thresholds: Thresholds,
            top_k: int, judge: Judge) -> np.ndarray:
    """Per position, the smallest s in [S_MIN, S_MAX] that is caught (NaN: not caught at S_MAX)."""
    n, v = reference.shape
    limits = np.full(n, np.nan)
    lo_log, hi_log = math.log(S_MIN), math.log(S_MAX)
    for a, b in _chunks(n, v):
        ref = np.ascontiguousarray(reference[a:b])
        obs = np.ascontiguousarray(observed[a:b])
        plant = _planter(ref, shape, a)
        out = np.empty_like(obs)

        def caught(s: np.ndarray) -> np.ndarray:
            plant(obs, out, s)
            return _caught(compare_logits(ref, out, top_k=top_k), base, thresholds, judge)

        ok = caught(np.full(b - a, S_MAX))
        lo = np.full(b - a, lo_log)
        hi = np.full(b - a, hi_log)
        for _ in range(STEPS):
            mid = 0.5 * (lo + hi)
            hit = caught(np.exp(mid))
            hi = np.where(hit, mid, hi)
            lo = np.where(hit, lo, mid)
        limits[a:b] = np.where(ok, np.exp(hi), np.nan)
    return limits


def _swaps(reference: np.ndarray, observed: np.ndarray, comparison: LogitComparison, base: Case,
           thresholds: Thresholds, judge: Judge) -> ShapeLimit:
    """The top-2 of every confident position swapped (each chunk at once: the judgement is row by row)."""
    n, v = reference.shape
    margins = np.array([np.nan if m is None else m for m in comparison.row_margin_ref], dtype=np.float64)
    confident = margins >= thresholds.near_tie_margin
    missed: list[float] = []
    caught = 0
    for a, b in _chunks(n, v):
        rows = np.flatnonzero(confident[a:b])
        if rows.size == 0:
            continue
        ref = np.ascontiguousarray(reference[a:b])
        out = np.array(observed[a:b], dtype=observed.dtype, copy=True)
        top2 = np.argpartition(ref[rows], v - 2, axis=1)[:, v - 2:]
        first, second = top2[:, 0], top2[:, 1]
        out[rows, first], out[rows, second] = out[rows, second].copy(), out[rows, first].copy()
        hit = _caught(compare_logits(ref, out, top_k=comparison.top_k), base, thresholds, judge)
        caught += int(hit[rows].sum())
        missed += [float(margins[a + r]) for r in rows[~hit[rows]]]
    return ShapeLimit("top2-swap", None, None, None, caught, int(confident.sum()),
                      missed_margin=max(missed) if missed else None)


def _full_word(reference: np.ndarray, observed: np.ndarray, shape: str, position: int, s: float, top_k: int,
               thresholds: Thresholds, judge: Judge) -> str:
    """The full verdict with ``shape`` of size s planted at one position (the planted row's block copied, not the
    run)."""
    row = slice(position, position + 1)
    planted = np.empty((1, observed.shape[1]), dtype=observed.dtype)
    plant = _planter(np.ascontiguousarray(reference[row]), shape, position)
    plant(np.ascontiguousarray(observed[row]), planted, np.array([s]))

    def rows(start: int, stop: int) -> np.ndarray:
        if not start <= position < stop:
            return observed[start:stop]
        block = np.array(observed[start:stop], copy=True)
        block[position - start] = planted[0]
        return block

    return judge.verdict(compare_blocks(reference, rows, top_k=top_k), thresholds).word


def _shift_limit(reference: np.ndarray, observed: np.ndarray, verdict: str, top_k: int,
                 thresholds: Thresholds, judge: Judge) -> ShapeLimit:
    """all-rows-shift: the smallest common shift that reads ``systematic-offset`` or worse (full classification)."""
    goal = severity("systematic-offset")

    def word(s: float) -> str:
        shift = np.asarray(s, dtype=observed.dtype)  # every row shifted, one block at a time
        return judge.verdict(compare_blocks(reference, lambda start, stop: observed[start:stop] + shift, top_k=top_k),
                             thresholds).word

    if severity(verdict) >= goal:
        return ShapeLimit("all-rows-shift", None, None, None, 0, reference.shape[0])
    lo, hi = math.log(S_MIN), math.log(S_MAX)
    if severity(word(S_MAX)) < goal:
        return ShapeLimit("all-rows-shift", None, None, None, 0, reference.shape[0])
    for _ in range(STEPS):
        mid = 0.5 * (lo + hi)
        if severity(word(math.exp(mid))) >= goal:
            hi = mid
        else:
            lo = mid
    limit = math.exp(hi)
    return ShapeLimit("all-rows-shift", limit, None, None, reference.shape[0], reference.shape[0],
                      above=word(limit * 1.02), below=word(limit / 2))


def detection_limits(reference: np.ndarray, observed: np.ndarray, comparison: LogitComparison | None = None, *,
                     thresholds: Thresholds = Thresholds(), shapes: tuple[str, ...] = SHAPES,
                     judge: Judge = CLASSIFY) -> DetectionLimits:
    """The detection limit of each fault shape for one pair of runs (see the module notes).

    Parameters
    ----------
    reference, observed : ndarray, shape (n_positions, n_vocab)
        The control's and the candidate's logits, as compared (float32,
        float16 or bfloat16). Not modified.
    comparison : LogitComparison, optional
        ``compare_logits(reference, observed)``, if already computed (its
        ``top_k`` is used; for selected rows, :meth:`~logitlab.numerics.comparison.Comparison.at_positions`
        of it: the hardest ``position`` is then a run position).
    thresholds : Thresholds, optional
        The rules' thresholds (default ``Thresholds()``).
    shapes : tuple of str, optional
        A subset of :data:`SHAPES` (default all).
    judge : Judge, optional
        How the caller judges the comparison (default :data:`CLASSIFY`).

    Returns
    -------
    DetectionLimits
        For a ``divergent`` pair there is nothing worse to detect: no shape
        is probed.

    Raises
    ------
    InputError
        An unknown shape, or the arrays differ in shape.
    """
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise InputError(f"unknown fault shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    if comparison is None:
        comparison = compare_logits(reference, observed)
    if reference.shape != observed.shape or comparison.n_positions != reference.shape[0]:
        raise InputError(f"detection limits need the compared arrays, got {reference.shape} and {observed.shape}")
    verdict = judge.verdict(comparison, thresholds).word
    result = DetectionLimits(verdict, [], [ROW_SHIFT_NOTE])
    if severity(verdict) >= severity("divergent"):
        return result
    base = Case(comparison, thresholds, judge.judge_topk)
    for shape in shapes:
        if shape == "top2-swap":
            result.shapes.append(_swaps(reference, observed, comparison, base, thresholds, judge))
            continue
        if shape == "all-rows-shift":
            result.shapes.append(_shift_limit(reference, observed, verdict, comparison.top_k, thresholds, judge))
            continue
        limits = _search(reference, observed, shape, base, thresholds, comparison.top_k, judge)
        found = limits[np.isfinite(limits)]
        if found.size == 0:
            result.shapes.append(ShapeLimit(shape, None, None, None, 0, len(limits)))
            continue
        worst = int(np.nanargmax(limits))
        complete = found.size == limits.size
        limit = float(limits[worst]) if complete else None
        above = _full_word(reference, observed, shape, worst, float(limits[worst]) * 1.02, comparison.top_k,
                           thresholds, judge)
        below = _full_word(reference, observed, shape, worst, float(limits[worst]) / 2, comparison.top_k,
                           thresholds, judge)
        token = None if shape == "row-noise" else int(_targets(reference[worst:worst + 1], shape)[0])
        result.shapes.append(ShapeLimit(shape, limit, comparison.position_of(worst), float(np.median(found)),
                                        int(found.size), len(limits),
                                        above=above, below=below, token=token))
    return result
