"""The verdict rules of :func:`logitlab.numerics.verdict.classify`, as an ordered table.

:data:`RULES` lists one small function per verdict word in the order they are
tried: ``bit-exact``, then ``divergent`` (a bug is never explained away as
noise), ``ulp-noise``, then the rest from the most severe down
(``systematic-offset``, ``lossy``, ``near-tie``) to ``noise``, which always finds. Each rule reads a :class:`Case` (the facts of one
comparison, derived once) and returns a :class:`Finding` (its word, the
evidence lines that decided it, the positions that made it) or None; the first
rule that returns a finding decides. The ``divergent`` rule is itself a table,
:data:`DIVERGENCE_CHECKS`: each check returns its evidence lines and the
positions it puts outside, and any line makes the verdict ``divergent``.

The scope of the data is folded in here: a top-k comparison (the runs
returned only their top-k log-probabilities) has no offset and no
localized-change rule, its bit-exact means bit-exact on the returned entries,
and :func:`scope_notes` adds what such data cannot show. No caller tests the
comparison's type.

A new rule is one function here and one entry in :data:`RULES` (or, for a new
way of being divergent, in :data:`DIVERGENCE_CHECKS`); its docstring names the
threshold it reads and where the threshold's default comes from
(:class:`~logitlab.numerics.verdict.Thresholds`).

This module imports no other logitlab module at import time but the comparison
fields (numpy, through :mod:`logitlab.numerics.floor`, loads when a case first
measures its floor).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Sequence

from logitlab.numerics.comparison import Comparison

if TYPE_CHECKING:  # pragma: no cover - types only
    from logitlab.numerics.floor import NoiseFloor
    from logitlab.numerics.verdict import Thresholds

__all__ = ["LOCALIZED_FRACTION", "Case", "Finding", "RULES", "DIVERGENCE_CHECKS", "first_finding", "scope_notes",
           "offset_statistics", "is_offset"]

#: A row beyond ULP noise in which fewer than this fraction of entries differ is a localized change.
LOCALIZED_FRACTION = 0.10


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


def is_offset(mean: float, sd: float, n: int, max_scaled_ulp: float, thresholds: "Thresholds", *,
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


def _offset_line(mean: float, sd: float, n: int, t: "Thresholds") -> str:
    if n < t.min_positions:
        return (f"systematic offset: not testable on {n} differing position(s) < min_positions = {t.min_positions} "
                f"(their mean Δ averages {_g(mean)})")
    return (f"|mean Δ per position| averages {_g(abs(mean))} {'≥' if abs(mean) >= t.offset_ratio * sd else '<'} "
            f"offset_ratio × its sd across positions = {_g(t.offset_ratio)} × {_g(sd)} over {n} differing positions")


# -- the case ---------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """What a rule found: a verdict word, its evidence lines, the run positions that made it (``divergent``)."""

    word: str
    evidence: list[str]
    outside: list[int] = field(default_factory=list)


@dataclass
class Case:
    """The facts of one comparison that the rules read, each derived once, when a rule first asks.

    Attributes
    ----------
    c : Comparison
        Full-vocabulary or top-k (``c.scope``).
    t : Thresholds
    judge_topk : bool
        Judge top-k set changes like argmax flips (``verify`` judges flips only).
    floors : tuple of NoiseFloor, optional
        The (spread, row sd) floors to judge against instead of measuring them on
        ``c``: :mod:`~logitlab.numerics.detection` judges a planted copy of a run
        against the unplanted pair's floors.
    """

    c: Comparison
    t: "Thresholds"
    judge_topk: bool = True
    floors: "tuple[NoiseFloor, NoiseFloor] | None" = None

    @property
    def full(self) -> bool:
        return self.c.scope == "full"

    @property
    def n(self) -> int:
        return self.c.n_positions

    @property
    def k(self) -> int:
        return self.c.top_k

    @cached_property
    def floor(self) -> "NoiseFloor":
        """The pair's noise floor (:func:`~logitlab.numerics.floor.measure_floor`); unmeasured if not ``calibrate``."""
        if self.floors is not None:
            return self.floors[0]
        from logitlab.numerics.floor import measure_floor  # numpy: loads when a floor is first needed

        floor = measure_floor(self.c, min_positions=self.t.min_positions, floor_factor=self.t.floor_factor)
        if self.t.calibrate:
            return floor
        return dataclasses.replace(floor, measured=False, reason=(
            "noise floor not used (fixed thresholds only)" + (f"; measured p99 {_g(floor.value)} over "
                                                              f"{floor.positions} positions" if floor.value else "")))

    @cached_property
    def row_floor(self) -> "NoiseFloor":
        """The floor of the rows' Δ sd (:func:`~logitlab.numerics.floor.measure_floor` with ``of="sd"``)."""
        if self.floors is not None:
            return self.floors[1]
        from logitlab.numerics.floor import measure_floor

        floor = measure_floor(self.c, min_positions=self.t.min_positions, floor_factor=self.t.floor_factor, of="sd")
        return floor if self.t.calibrate else dataclasses.replace(floor, measured=False)

    @cached_property
    def spreads(self) -> list:
        return self.c.row_topk_spread or [None] * self.n

    @cached_property
    def flips(self) -> list[dict]:
        """The flips, each ``position`` the compared row (as every ``row_*`` list is indexed)."""
        c = self.c
        return list(c.flips) if c.positions is None else [{**f, "position": c.row_of(f["position"])}
                                                           for f in c.flips]

    def at(self, row: int) -> int:
        """The run position of compared row ``row``, as evidence names it."""
        return self.c.position_of(row)

    def where(self, rows: Sequence[int]) -> str:
        """Compared rows as evidence lists them: by run position, the first few."""
        return _positions([self.at(i) for i in rows])

    @cached_property
    def judged(self) -> list[tuple[int, str, float | None]]:
        """Every judged change: (position, ``"flip"`` or ``"top-k change"``, reference margin or k-th gap)."""
        flip_rows = {f["position"] for f in self.flips}
        changes = [i for i in self.c.topk_changes if i not in flip_rows] if self.judge_topk else []
        return [(f["position"], "flip", f["margin_ref"]) for f in self.flips] + \
               [(i, f"top-{self.k} change", self.c.row_kth_gap_ref[i]) for i in changes]

    def factor(self, x: float | None) -> str:
        """``x`` as a multiple of the floor, as evidence prints it."""
        if x is None or not self.floor.value:
            return "n/a"
        ratio = x / self.floor.value
        return f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.3g}×"

    @cached_property
    def scale_line(self) -> str:
        c, t = self.c, self.t
        return (f"max |Δ| = {_g(c.max_scaled_ulp)} ULP at row scale "
                f"{'≤' if c.max_scaled_ulp <= t.max_ulp else '>'} max_ulp = {_g(t.max_ulp)}")

    @cached_property
    def offset(self) -> tuple[float, float, int]:
        """:func:`offset_statistics` of the differing positions' mean Δ."""
        c = self.c
        return offset_statistics([c.row_mean_diff[i] for i in range(self.n) if c.row_differing[i]])

    @cached_property
    def offset_line(self) -> str:
        if not self.full:
            return ("systematic offset: not decidable from log-probabilities (a constant logit shift cancels in the "
                    "softmax)")
        return _offset_line(*self.offset, self.t)

    @cached_property
    def within(self) -> str:
        """How far the judged changes moved, against the floor ("" without a measured floor or changes)."""
        floor, t = self.floor, self.t
        if not (floor.measured and self.judged):
            return ""
        worst = max((self.spreads[p] for p, _, _ in self.judged if self.spreads[p] is not None), default=None)
        return (f"; their {floor.statistic} ≤ {_g(worst)} = {self.factor(worst)} the pair's p99 {_g(floor.value)} "
                f"(inside floor_factor = {_g(t.floor_factor)})")

    @cached_property
    def flip_line(self) -> str:
        margins = [m for _, kind, m in self.judged if kind == "flip" and m is not None]
        return (f"{len(margins)} argmax flip(s), largest reference margin {_g(max(margins))}"
                if margins else f"no argmax flips (argmax agrees at {_all_positions(self.n)})")

    @cached_property
    def topk_line(self) -> str:
        k = self.k
        gaps = [m for _, kind, m in self.judged if kind != "flip" and m is not None]
        if gaps:
            return (f"top-{k} set changed at {len(gaps)} position(s) away from flips, largest reference "
                    f"{k}th/{k + 1}th gap {_g(max(gaps))}")
        return (f"top-{k} set agrees away from flips" if self.judge_topk else
                f"top-{k} changes away from flips not judged ({len(self.c.topk_changes)} position(s))")

    @cached_property
    def confident(self) -> list[float]:
        """Reference margins (or gaps) of the judged changes at or above ``near_tie_margin``."""
        return [m for _, _, m in self.judged if m is not None and m >= self.t.near_tie_margin]


# -- the ways of being divergent ---------------------------------------------------
Check = Callable[[Case, list], "tuple[list[str], list[int]]"]


def _worst(found: list[int], score: Callable[[int], float],
           evidence: Callable[[int], str]) -> tuple[list[str], list[int]]:
    """A check's answer: one evidence line on the position of ``found`` with the largest ``score``, and ``found``
    itself; ``([], [])`` when ``found`` is empty."""
    if not found:
        return [], []
    return [evidence(max(found, key=score))], found


def nonfinite_mismatch(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """NaN/Inf in one run where the other has a number (or another non-finite)."""
    c = case.c
    if not c.nonfinite_mismatch:
        return [], []
    return [f"{c.nonfinite_mismatch} entries are NaN/Inf in one run but not the same in the other "
            f"(reference NaN {c.nan_ref}, Inf {c.inf_ref}; observed NaN {c.nan_obs}, Inf {c.inf_obs}) > 0"], []


def localized_change(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """A row beyond ULP noise in which fewer than :data:`LOCALIZED_FRACTION` of the entries differ (full data only).

    An arithmetic change upstream moves every logit of a row, since every
    logit reads the same hidden state: measured on 12 real pairs, >= 85 % of
    the entries of every differing row differ (>= 94 % beyond 16 ULP).
    """
    c, t = case.c, case.t
    if not case.full:
        return [], []
    local = [i for i in range(case.n) if c.row_differing[i] and c.row_scaled_ulp[i] > t.max_ulp
             and c.row_differing[i] < LOCALIZED_FRACTION * c.n_vocab]
    return _worst(local, lambda j: c.row_max_abs_diff[j], lambda i: (
        f"a change confined to a few entries at {len(local)} position(s) ({case.where(local)}); position "
        f"{case.at(i)}: {c.row_differing[i]} of {c.n_vocab} entries differ "
        f"({100 * c.row_differing[i] / c.n_vocab:.2g} % < {100 * LOCALIZED_FRACTION:g} %), by up to "
        f"{_g(c.row_max_abs_diff[i])} ({_g(c.row_scaled_ulp[i])} ULP at row scale > max_ulp = {_g(t.max_ulp)}): "
        "reassociation moves every logit of a row, not a few"))


def outside_floor(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """With a measured floor F: a position whose spread exceeds ``floor_factor × F``.

    It must also exceed ``floor_factor × max_ulp`` ULPs at its row's scale, so
    that rounding noise is never "outside".
    """
    from logitlab.numerics.floor import spread_ulps

    c, t, floor, spreads = case.c, case.t, case.floor, case.spreads
    if not floor.measured:
        return [], []
    limit = t.floor_factor * floor.value
    far = [i for i in range(case.n) if c.row_differing[i] and spreads[i] is not None and spreads[i] > limit
           and spread_ulps(c, i) > t.floor_factor * t.max_ulp]

    def evidence(i: int) -> str:
        at = next((f for f in case.flips if f["position"] == i), None)
        what = (f" (an argmax flip {at['token_ref']!r} → {at['token_obs']!r} at reference margin "
                f"{_g(at['margin_ref'])})" if at else "")
        return (f"{len(far)} position(s) outside the noise floor ({case.where(far)}); position {case.at(i)}{what} "
                f"moved {_g(spreads[i])} ({floor.statistic}), {case.factor(spreads[i])} the pair's p99 "
                f"{_g(floor.value)} > floor_factor = {_g(t.floor_factor)}")

    return _worst(far, lambda j: spreads[j], evidence)


def outside_row_floor(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """With a measured floor of the rows' Δ sd: a position whose sd exceeds ``floor_factor ×`` that floor.

    The whole row moved more than the pair moves any other (a wrong kernel
    branch at one position). The sd rests on every entry of the row, the
    spread on about 2k, so this sees such a row at a fraction of the size the
    spread needs (:func:`~logitlab.numerics.floor.measure_floor`). As for the
    spread, the row's sd must also exceed ``floor_factor × max_ulp`` ULPs at
    its scale, so that rounding noise is never "outside". Measured on real pairs
    of the embedded model (flash attention, q8_0 and q4_0 KV cache): the
    largest sd of a pair is at most 1.44× its p99.
    """
    from logitlab.numerics.floor import row_ulps

    c, t, floor = case.c, case.t, case.row_floor
    if not (case.full and floor.measured):
        return [], []
    limit = t.floor_factor * floor.value
    far = [i for i in range(case.n) if c.row_differing[i] and c.row_std_diff[i] is not None
           and c.row_std_diff[i] > limit and row_ulps(c, i, c.row_std_diff[i]) > t.floor_factor * t.max_ulp
           and i not in outside]
    return _worst(far, lambda j: c.row_std_diff[j], lambda i: (
        f"{len(far)} position(s) whose whole row moved outside the noise floor ({case.where(far)}); position "
        f"{case.at(i)}: Δ sd {_g(c.row_std_diff[i])}, {c.row_std_diff[i] / floor.value:.3g}× the pair's p99 "
        f"{_g(floor.value)} of the Δ sd of a row > floor_factor = {_g(t.floor_factor)}"))


def row_outlier(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """A within-row outlier: ``row_delta_z`` above ``outlier_z`` in a row that is not a localized change.

    Where every logit of a row moves by the change's noise, one entry far
    beyond that row's own Δ sd is a fault at that position, whatever the
    floor across positions says. The entry must also stand more than
    ``floor_factor × max_ulp`` ULPs (at the row's scale) from the row's mean
    Δ, so that rounding of a shifted row is never an outlier. Rows where fewer than
    :data:`LOCALIZED_FRACTION` of the entries differ are
    :func:`localized_change`'s.
    """
    from logitlab.numerics.floor import row_ulps

    c, t = case.c, case.t
    zs = c.row_delta_z
    if not case.full or zs is None:
        return [], []
    far = [i for i in range(case.n) if c.row_differing[i] >= LOCALIZED_FRACTION * c.n_vocab and zs[i] is not None
           and zs[i] > t.outlier_z and row_ulps(c, i, zs[i] * c.row_std_diff[i]) > t.floor_factor * t.max_ulp
           and i not in outside]
    return _worst(far, lambda j: zs[j], lambda i: (
        f"{len(far)} position(s) with one logit far outside its own row's noise ({case.where(far)}); position "
        f"{case.at(i)}: an entry {_g(zs[i])} sd of the row's Δ from its mean (sd {_g(c.row_std_diff[i])}, "
        f"max |Δ| {_g(c.row_max_abs_diff[i])}) > outlier_z = {_g(t.outlier_z)}"))


def far_without_floor(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """Without a floor: a position whose spread exceeds ``floor_factor × near_tie_margin`` (2 logits by default)."""
    from logitlab.numerics.floor import spread_ulps

    c, t, floor, spreads = case.c, case.t, case.floor, case.spreads
    if floor.measured:
        return [], []
    big = t.floor_factor * t.near_tie_margin
    far = [i for i in range(case.n) if c.row_differing[i] and spreads[i] is not None and spreads[i] > big
           and spread_ulps(c, i) > t.floor_factor * t.max_ulp and i not in outside]
    return _worst(far, lambda j: spreads[j], lambda i: (
        f"{len(far)} position(s) moved far without a noise floor to judge them by ({case.where(far)}); "
        f"position {case.at(i)} moved {_g(spreads[i])} ({floor.statistic}) > floor_factor × near_tie_margin = "
        f"{_g(t.floor_factor)} × {_g(t.near_tie_margin)} (the fixed stand-in for the floor)"))


def confident_flips(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """Without a floor: an argmax flip at reference margin ``>= near_tie_margin``."""
    t, floor = case.t, case.floor
    if floor.measured:
        return [], []
    bad = [x for x in case.judged if x[1] == "flip" and (x[2] is None or x[2] >= t.near_tie_margin)]
    if not bad:
        return [], []
    p, _, m = max(bad, key=lambda x: math.inf if x[2] is None else x[2])
    f = next(f for f in case.flips if f["position"] == p)
    return [f"{len(bad)} argmax flip(s) at confident positions; position {case.at(p)}: token "
            f"{f['token_ref']!r} -> {f['token_obs']!r}, reference margin {_g(m)} ≥ near_tie_margin = "
            f"{_g(t.near_tie_margin)} (fixed threshold: {floor.reason.split(':', 1)[-1].strip()})"], [x[0] for x in bad]


def _unseen_boundary(case: Case, count: int) -> str:
    k = case.k
    return f"top-{k} set changed at {count} position(s) where the {k + 1}th entry was not returned, so the " \
           "boundary gap is unknown"


def confident_topk_changes(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """Without a floor: a judged top-k change at a k-th/(k+1)-th gap ``>= near_tie_margin`` or at an unseen gap."""
    t, k = case.t, case.k
    if case.floor.measured:
        return [], []
    bad = [x for x in case.judged if x[1] != "flip" and (x[2] is None or x[2] >= t.near_tie_margin)]
    lines = []
    clear = [x for x in bad if x[2] is not None]
    if clear:
        p, _, gap = max(clear, key=lambda x: x[2])
        lines.append(f"top-{k} set changed at {len(clear)} position(s) with a clear reference boundary; "
                     f"position {case.at(p)}: {k}th/{k + 1}th gap {_g(gap)} ≥ near_tie_margin = "
                     f"{_g(t.near_tie_margin)}")
    unknown = [x for x in bad if x[2] is None]
    if unknown:
        lines.append(_unseen_boundary(case, len(unknown))
                     + (" (ask for more log-probabilities than --top-k)" if not case.full else ""))
    return lines, [x[0] for x in bad]


def unseen_topk_boundary(case: Case, outside: list[int]) -> tuple[list[str], list[int]]:
    """Top-k data with a measured floor: a top-k change whose k-th/(k+1)-th gap cannot be seen stays divergent."""
    if case.full or not case.floor.measured or not case.judge_topk:
        return [], []
    unknown = [p for p, kind, m in case.judged if kind != "flip" and m is None and p not in outside]
    if not unknown:
        return [], []
    return [_unseen_boundary(case, len(unknown)) + " (ask for more log-probabilities than --top-k)"], unknown


#: The ways of being divergent, in the order their evidence is printed.
DIVERGENCE_CHECKS: tuple[Check, ...] = (nonfinite_mismatch, localized_change, outside_floor, outside_row_floor,
                                        row_outlier, far_without_floor, confident_flips, confident_topk_changes,
                                        unseen_topk_boundary)


# -- the rules ----------------------------------------------------------------------
def _count_positions(n: int) -> str:
    """``"1 position"``, ``"5 positions"``."""
    return f"{n} position" if n == 1 else f"{n} positions"


def _all_positions(n: int) -> str:
    """``"the 1 position"``, ``"all 5 positions"`` (a ``--positions last`` comparison has one)."""
    return "the 1 position" if n == 1 else f"all {n} positions"


def bit_exact(case: Case) -> Finding | None:
    """1. **bit-exact** — ``differing_entries == 0`` (for top-k data: over the returned entries)."""
    c, n = case.c, case.n
    if not c.bit_exact:
        return None
    if case.full:
        return Finding("bit-exact", [f"all {n * c.n_vocab} entries ({_count_positions(n)} × {c.n_vocab} vocab) "
                                     "have identical bits"])
    return Finding("bit-exact", [f"bit-exact on the returned top-k: all {len(c.positions_compared)} compared "
                                 "positions return the same tokens in the same order with identical bits"])


def divergent(case: Case) -> Finding | None:
    """2. **divergent** — any check of :data:`DIVERGENCE_CHECKS` finds something."""
    lines: list[str] = []
    outside: list[int] = []
    for check in DIVERGENCE_CHECKS:
        found, positions = check(case, outside)
        lines += found
        outside += [p for p in positions if p not in outside]
    if not lines:
        return None
    return Finding("divergent", lines + [case.floor.reason], sorted({case.at(p) for p in outside}))


def ulp_noise(case: Case) -> Finding | None:
    """3. **ulp-noise** — ``max_scaled_ulp <= max_ulp``, no flip, no judged top-k change."""
    c, n, k = case.c, case.n, case.k
    if not (c.max_scaled_ulp <= case.t.max_ulp and not case.judged):
        return None
    return Finding("ulp-noise", [
        case.scale_line,
        f"{c.differing_entries} of {n * c.n_vocab} entries differ in {c.differing_rows} of {_count_positions(n)}; "
        f"largest element-wise distance {c.max_ulp} ULP",
        (f"argmax and top-{k} set agree at {_all_positions(n)}" if case.judge_topk
         else f"argmax agrees at {_all_positions(n)}"),
    ])


def systematic_offset(case: Case) -> Finding | None:
    """4. **systematic-offset** — full data, :func:`is_offset` over the differing positions' mean Δ."""
    if not (case.full and is_offset(*case.offset, case.c.max_scaled_ulp, case.t)):
        return None
    return Finding("systematic-offset", [case.offset_line, case.scale_line, case.flip_line + case.within,
                                         case.topk_line, case.floor.reason])


def lossy(case: Case) -> Finding | None:
    """5. **lossy** — a judged change at margin ``>= near_tie_margin``, every one inside the measured floor.

    Only reachable with a measured floor: without one, :func:`confident_flips` made it divergent.
    """
    if not case.confident:
        return None
    c, t, k = case.c, case.t, case.k
    kld = c.kld or {}
    return Finding("lossy", [
        f"{len(case.confident)} flip(s) or top-{k} change(s) at reference margins ≥ near_tie_margin = "
        f"{_g(t.near_tie_margin)} (largest {_g(max(case.confident))}), every one inside the pair's noise floor"
        f"{case.within}: flips consistent with its noise",
        case.floor.reason + ": the change moves competing tokens this much everywhere",
        f"KLD (nats) mean {_g(kld.get('mean'))}, p99 {_g(kld.get('p99'))}, max {_g(kld.get('max'))}; "
        f"top-1 agreement {_pct(c.argmax_agreement)}; top-{k} set agreement {_pct(c.topk_agreement)}",
        case.offset_line, case.scale_line,
    ])


def near_tie(case: Case) -> Finding | None:
    """6. **near-tie** — judged changes, all at margins ``< near_tie_margin`` (inside the floor when measured)."""
    if not case.judged:
        return None
    tie = (f"every flip and top-{case.k} change at a reference margin < near_tie_margin = "
           f"{_g(case.t.near_tie_margin)}" + case.within)
    return Finding("near-tie", [tie, case.flip_line, case.topk_line, case.floor.reason, case.offset_line,
                                case.scale_line])


def noise(case: Case) -> Finding:
    """7. **noise** — everything else: above ULP noise, no flips, no offset."""
    floor = case.floor
    return Finding("noise", [
        case.scale_line,
        case.flip_line + (f"; top-{case.k} set agrees at {_all_positions(case.n)}" if case.judge_topk else ""),
        case.offset_line,
        floor.reason + (f"; no position beyond floor_factor = {_g(case.t.floor_factor)} × it"
                        if floor.measured else ""),
    ])


#: The rules in the order they are tried; the first finding decides. The last one always finds.
RULES: tuple[Callable[[Case], "Finding | None"], ...] = (bit_exact, divergent, ulp_noise, systematic_offset, lossy,
                                                        near_tie, noise)


def scope_notes(case: Case, finding: Finding) -> list[str]:
    """Evidence lines that say what the data's scope could not show: none for full data.

    For top-k data: which positions were compared, that max |Δ|, ULPs,
    spreads and KLD are lower bounds, and (for bit-exact and ulp-noise) that
    the entries outside the returned top-k were not checked.
    """
    if case.full:
        return []
    c = case.c
    scope = (f"compared the returned top-{c.n_vocab} log-probabilities at {len(c.positions_compared)} of "
             f"{c.n_positions} positions" + (f" (positions {_positions(c.positions_missing)} not returned by the "
                                             "source)" if c.positions_missing else ""))
    blind = "entries outside the returned top-k were not returned and are not checked"
    if finding.word == "bit-exact":
        return [scope, blind]
    worst = c.kld.get("max")
    kld_line = (f"KL divergence ≥ {_g(worst)} nats at the worst position (a lower bound from top-k data)"
                if worst is not None else "KL divergence: no position compared")
    bounds = (f"max |Δ log-probability| {_g(c.max_abs_diff)}, {_g(c.max_scaled_ulp)} ULP at row scale, and the "
              "top-k spreads are over the tokens both runs returned (lower bounds of the full-vocabulary values)")
    return [bounds, kld_line, scope] + ([blind] if finding.word == "ulp-noise" else [])


def first_finding(case: Case) -> Finding:
    """The finding of the first rule of :data:`RULES` that finds one."""
    for rule in RULES:
        finding = rule(case)
        if finding is not None:
            return finding
    raise AssertionError("the last rule, noise, always finds")  # pragma: no cover
