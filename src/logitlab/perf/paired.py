"""Paired, counterbalanced speed comparisons of a candidate against a control.

An experiment runs ``n`` blocks. Each block has four slots in the pattern
``ABBA`` or ``BAAB`` (``A`` = control, ``B`` = candidate), and each slot yields
one positive measurement (decode tokens/s, wall seconds, ...). Within a block
both variants occupy the same mean slot position, so a linear drift of the
machine cancels; alternating ``ABBA``/``BAAB`` balances a fixed penalty on one
slot position (e.g. a cold first slot) across blocks.

The analysis works on logs: each block gives one log ratio candidate/control,
the blocks are the independent units of a paired (one-sample) t analysis, and
the result is a geometric-mean ratio with a confidence interval, a bootstrap
cross-check, and a three-way call against an equivalence margin.

Nothing here prints or logs; ``logitlab.report`` renders the results.

JSON format history (``schema_version`` of :class:`PairedComparison`):

- 1: first version.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats

from logitlab.errors import InputError

__all__ = [
    "PATTERNS",
    "CALLS",
    "MARGIN_SOURCES",
    "DEFAULT_MARGIN",
    "MAX_AA_MARGIN",
    "MIN_AA_MARGIN",
    "SCHEMA_VERSION",
    "Block",
    "PositionEffect",
    "PairedComparison",
    "block_patterns",
    "block_log_ratios",
    "aa_log_ratios",
    "aa_margin",
    "slot_position_effect",
    "minimum_detectable_effect",
    "blocks_needed",
    "paired_comparison",
]

#: The two counterbalanced slot patterns (A = control, B = candidate).
PATTERNS = ("ABBA", "BAAB")
#: The possible calls of :func:`paired_comparison`.
CALLS = ("faster", "slower", "equivalent", "inconclusive")
#: Where the equivalence margin came from.
MARGIN_SOURCES = ("option", "a/a", "default")
#: Relative equivalence margin used when neither an option nor A/A data give one.
DEFAULT_MARGIN = 0.02
#: Floor of the A/A-calibrated margin (a relative change of 1 %).
MIN_AA_MARGIN = 0.01
#: Cap of the A/A-derived margin: above it, "equivalent" would no longer mean negligible.
MAX_AA_MARGIN = 0.05
#: Version of the JSON form of :class:`PairedComparison`.
SCHEMA_VERSION = 1
#: Minimum number of blocks whose A/A ratios calibrate the margin.
_MIN_AA_BLOCKS = 3
#: Spread (in log units) at or below which a set of log ratios counts as identical:
#: float64 rounding of logs of identical values is far below this.
_DEGENERATE_SPREAD = 1e-13


# ---------------------------------------------------------------------------
# Input


@dataclass(frozen=True, slots=True)
class Block:
    """One counterbalanced block: four measurements in slot order.

    Parameters
    ----------
    pattern : str
        ``'ABBA'`` or ``'BAAB'``; letter ``i`` says which variant ran in slot
        ``i`` (``A`` = control, ``B`` = candidate).
    values : tuple of 4 float
        The measurement of each slot, in slot (time) order, in the metric's
        unit (e.g. tokens/s or seconds). Each must be positive and finite.
        Any sequence of four real numbers is accepted and stored as a tuple of
        Python floats.

    Raises
    ------
    InputError
        If the pattern is unknown, there are not exactly four values, or a
        value is not a positive finite real number (the message names it).

    Examples
    --------
    >>> Block("ABBA", (100.0, 110.0, 110.0, 100.0)).candidate_slots
    (1, 2)
    """

    pattern: str
    values: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or self.pattern not in PATTERNS:
            raise InputError(
                f"Block pattern {self.pattern!r} is not valid: use one of "
                f"{', '.join(repr(p) for p in PATTERNS)}"
            )
        values = self.values
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise InputError(
                f"Block values {values!r} is not a sequence: give 4 slot measurements"
            )
        if len(values) != 4:
            raise InputError(
                f"Block values {tuple(values)!r} has {len(values)} slots: a "
                f"{self.pattern} block needs exactly 4, one per slot"
            )
        clean = []
        for slot, value in enumerate(values, start=1):
            is_real = isinstance(value, (int, float, np.integer, np.floating))
            if isinstance(value, (bool, np.bool_)) or not is_real:
                raise InputError(
                    f"Block slot {slot} value {value!r} is not a number: give a "
                    f"positive finite measurement"
                )
            number = float(value)
            if not math.isfinite(number) or number <= 0.0:
                raise InputError(
                    f"Block slot {slot} value {value!r} is not positive and finite: "
                    f"measurements must be > 0 (e.g. tokens/s or seconds)"
                )
            clean.append(number)
        object.__setattr__(self, "values", tuple(clean))

    @property
    def control_slots(self) -> tuple[int, int]:
        """0-based slot indices of the control (``A``), in time order."""
        return tuple(i for i, c in enumerate(self.pattern) if c == "A")  # type: ignore[return-value]

    @property
    def candidate_slots(self) -> tuple[int, int]:
        """0-based slot indices of the candidate (``B``), in time order."""
        return tuple(i for i, c in enumerate(self.pattern) if c == "B")  # type: ignore[return-value]


def block_patterns(
    n_blocks: int, *, order: str = "alternate", first: str = "ABBA", seed: Any = 0
) -> list[str]:
    """The slot patterns to run, one per block.

    Parameters
    ----------
    n_blocks : int
        Number of blocks (>= 0).
    order : {'alternate', 'random'}, optional
        ``'alternate'``: ``first``, then the other pattern, and so on.
        ``'random'``: a seeded random permutation of equally many ``ABBA`` and
        ``BAAB`` blocks (the odd one out, if ``n_blocks`` is odd, drawn at
        random). Defaults to ``'alternate'``.
    first : {'ABBA', 'BAAB'}, optional
        Pattern of the first block for ``'alternate'``. Defaults to ``'ABBA'``.
    seed : int or numpy.random.Generator, optional
        Seed for ``'random'``. Defaults to 0.

    Returns
    -------
    list of str
        ``n_blocks`` patterns.

    Raises
    ------
    InputError
        On a negative ``n_blocks`` or an unknown ``order`` or ``first``.
    """
    n = _check_count(n_blocks, "n_blocks")
    if first not in PATTERNS:
        raise InputError(f"first pattern {first!r} is not valid: use 'ABBA' or 'BAAB'")
    other = PATTERNS[1] if first == PATTERNS[0] else PATTERNS[0]
    if order == "alternate":
        return [first if i % 2 == 0 else other for i in range(n)]
    if order == "random":
        rng = np.random.default_rng(seed)
        half = n // 2
        pool = [PATTERNS[0]] * half + [PATTERNS[1]] * half
        if n % 2:
            pool.append(PATTERNS[int(rng.integers(2))])
        return [pool[i] for i in rng.permutation(n)]
    raise InputError(f"order {order!r} is not valid: use 'alternate' or 'random'")


def _check_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"{name} {value!r} is not a non-negative integer")
    return int(value)


def _as_blocks(blocks: Iterable[Block]) -> list[Block]:
    if isinstance(blocks, (str, bytes, Block)) or not isinstance(blocks, Iterable):
        raise InputError(
            f"blocks {blocks!r} is not a sequence of Block: pass e.g. [Block('ABBA', (...)), ...]"
        )
    out = list(blocks)
    for i, block in enumerate(out):
        if not isinstance(block, Block):
            raise InputError(
                f"blocks[{i}] {block!r} is a {type(block).__name__}, not a Block: "
                f"wrap it as Block(pattern, values)"
            )
    return out


def _log_slots(blocks: Sequence[Block]) -> tuple[np.ndarray, np.ndarray]:
    """Log of the slot values, shape (n, 4), and the candidate mask, shape (n, 4)."""
    n = len(blocks)
    logs = np.log(np.array([b.values for b in blocks], dtype=np.float64).reshape(n, 4))
    is_candidate = np.array([[c == "B" for c in b.pattern] for b in blocks], dtype=bool)
    return logs, is_candidate.reshape(n, 4)


# ---------------------------------------------------------------------------
# Per-block quantities


def block_log_ratios(blocks: Iterable[Block]) -> np.ndarray:
    """Per-block log ratio candidate/control.

    Parameters
    ----------
    blocks : sequence of Block
        The experiment, in run order.

    Returns
    -------
    numpy.ndarray
        Shape ``(n_blocks,)``, float64, natural-log units: for each block
        ``mean(log B) - mean(log A)`` over its two candidate and two control
        slots (the log of the ratio of the geometric means). Positive means
        the candidate measured higher.

    Raises
    ------
    InputError
        If ``blocks`` is not a sequence of :class:`Block`.

    Examples
    --------
    >>> block_log_ratios([Block("ABBA", (1.0, 2.0, 2.0, 1.0))]).round(4)
    array([0.6931])
    """
    items = _as_blocks(blocks)
    if not items:
        return np.zeros(0, dtype=np.float64)
    logs, is_b = _log_slots(items)
    return (np.where(is_b, logs, 0.0).sum(axis=1) - np.where(is_b, 0.0, logs).sum(axis=1)) / 2.0


def aa_log_ratios(blocks: Iterable[Block]) -> np.ndarray:
    """Per-block control-vs-control (A/A) log ratio: later ``A`` over earlier ``A``.

    Both ``A`` slots run the same engine, so this is the noise one
    single-slot comparison sees on this machine (plus any drift or slot
    position effect between the two slots: slots 1 and 4 in ``ABBA``, 2 and 3
    in ``BAAB``).

    Parameters
    ----------
    blocks : sequence of Block

    Returns
    -------
    numpy.ndarray
        Shape ``(n_blocks,)``, float64, natural-log units.

    Raises
    ------
    InputError
        If ``blocks`` is not a sequence of :class:`Block`.
    """
    items = _as_blocks(blocks)
    if not items:
        return np.zeros(0, dtype=np.float64)
    logs = np.log(np.array([b.values for b in items], dtype=np.float64))
    idx = np.array([b.control_slots for b in items])
    rows = np.arange(len(items))
    return logs[rows, idx[:, 1]] - logs[rows, idx[:, 0]]


def aa_margin(blocks: Iterable[Block], *, confidence: float = 0.95) -> float | None:
    """Equivalence margin calibrated from the blocks' A/A ratios.

    Rule: the half-width of the ``confidence`` interval of the
    control-vs-control comparison inside the same blocks, as a relative
    change, floored at 1 % and capped at 5 %::

        delta = min(0.05, max(0.01, expm1(t_{(1+confidence)/2, n-1} * sd(aa_log) / sqrt(n))))

    ``aa_log`` are :func:`aa_log_ratios` (one per block, sd with ddof 1).
    Reading: two identical engines, compared over this many blocks on this
    machine, can differ by up to ``delta`` without the data telling them
    apart, so a candidate whose whole CI lies within ``delta`` of the control
    is as equivalent as this experiment can show. The A/A ratio compares one
    slot with one slot, the block ratio two with two, so ``delta`` is about
    ``sqrt(2)`` times the comparison's own CI half-width under pure noise:
    equivalence stays reachable. Systematic A/A offsets (drift, slot
    position) are excluded by taking the sd about the mean: the
    counterbalanced design removes them from the comparison itself, while
    their variation between ``ABBA`` and ``BAAB`` blocks, which the
    comparison does feel, is in the sd. The 1 % floor keeps the margin
    practical once many blocks make the A/A CI very narrow; the 5 % cap keeps
    "equivalent" meaning negligible on a noisy machine (seen here: an A/A
    half-width of 79 % under heavy CPU contention would otherwise call a
    candidate whose CI is [+2 %, +25 %] "equivalent"). The CI itself still
    carries all the noise.

    Parameters
    ----------
    blocks : sequence of Block
    confidence : float, optional
        In (0, 1). Defaults to 0.95.

    Returns
    -------
    float or None
        The relative margin (0.023 = 2.3 %), or None with fewer than 3 blocks.

    Raises
    ------
    InputError
        On bad blocks or a confidence outside (0, 1).
    """
    _check_confidence(confidence)
    aa = aa_log_ratios(blocks)
    return _aa_margin_from_logs(aa, confidence)


def _aa_margin_from_logs(aa: np.ndarray, confidence: float) -> float | None:
    n = aa.size
    if n < _MIN_AA_BLOCKS:
        return None
    sd = 0.0 if float(np.ptp(aa)) <= _DEGENERATE_SPREAD else float(np.std(aa, ddof=1))
    q = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1))
    return min(MAX_AA_MARGIN, max(MIN_AA_MARGIN, float(np.expm1(q * sd / math.sqrt(n)))))


# ---------------------------------------------------------------------------
# One-sample summaries


def _check_confidence(confidence: Any) -> float:
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float, np.floating))
        or not 0.0 < float(confidence) < 1.0
    ):
        raise InputError(f"confidence {confidence!r} is not in (0, 1): use e.g. 0.95")
    return float(confidence)


@dataclass(frozen=True)
class _TSummary:
    n: int
    mean: float | None
    sd: float | None
    lo: float | None
    hi: float | None
    p_value: float | None
    degenerate: bool


def _t_summary(x: np.ndarray, confidence: float) -> _TSummary:
    """Mean, sd (ddof 1), two-sided t CI (df n-1) and p-value of H0: mean = 0."""
    n = int(x.size)
    if n == 0:
        return _TSummary(0, None, None, None, None, None, False)
    mean = float(np.mean(x))
    if n == 1:
        return _TSummary(1, mean, None, None, None, None, False)
    if float(np.ptp(x)) <= _DEGENERATE_SPREAD:
        # Identical values: zero spread, zero-width CI; t is undefined, so the
        # p-value is the limit (0 if the common value is non-zero, 1 if zero).
        mean = float(x[0])
        return _TSummary(n, mean, 0.0, mean, mean, 0.0 if mean != 0.0 else 1.0, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_1samp(x, 0.0)
        ci = res.confidence_interval(confidence_level=confidence)
    return _TSummary(
        n,
        mean,
        float(np.std(x, ddof=1)),
        float(ci.low),
        float(ci.high),
        float(res.pvalue),
        False,
    )


_BOOTSTRAP_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def _bootstrap_ci(
    x: np.ndarray, confidence: float, n_resamples: int, seed: Any
) -> tuple[float | None, float | None, str | None]:
    """BCa bootstrap CI of the mean (percentile if BCa is not finite)."""
    if x.size < 2 or n_resamples == 0:
        return None, None, None
    if float(np.ptp(x)) <= _DEGENERATE_SPREAD:
        return float(x[0]), float(x[0]), "degenerate"
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.bootstrap(
                (x,),
                np.mean,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method=method,
                vectorized=True,
                **{_BOOTSTRAP_RNG_KW: np.random.default_rng(seed)},
            )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi, method
    return None, None, None


def _exp(x: float | None) -> float | None:
    return None if x is None else float(math.exp(x))


# ---------------------------------------------------------------------------
# Slot position effect


@dataclass(frozen=True, slots=True)
class PositionEffect:
    """Second-slot-vs-first-slot position effect, the variant effect removed.

    Attributes
    ----------
    n_blocks : int
    block_log_effects : list of float
        Per block, ``(log(t2/t1) + log(t4/t3)) / 2`` in natural-log units.
    log_estimate : float or None
        Mean of ``block_log_effects``; None without blocks.
    ratio : float or None
        ``exp(log_estimate)``: how the second slot of a pair measures relative
        to the first (1.015 = 1.5 % higher).
    log_ci_low, log_ci_high, ci_low, ci_high : float or None
        The ``confidence`` t interval (df ``n - 1``) in log and ratio units;
        None with fewer than 2 blocks.
    p_value : float or None
        Two-sided one-sample t-test of ``log_estimate = 0`` over blocks
        (``scipy.stats.ttest_1samp``); None with fewer than 2 blocks.
    significant : bool
        ``p_value < 1 - confidence``.
    confidence : float
    """

    n_blocks: int
    block_log_effects: list[float]
    log_estimate: float | None
    ratio: float | None
    log_ci_low: float | None
    log_ci_high: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    significant: bool
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of all fields."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PositionEffect":
        """Inverse of :meth:`to_dict`; raises InputError on unknown or missing keys."""
        return _from_fields(cls, data)


def slot_position_effect(blocks: Iterable[Block], *, confidence: float = 0.95) -> PositionEffect:
    """Estimate the slot-position effect of a counterbalanced experiment.

    Each block's four slots form two pairs, (1, 2) and (3, 4). In ``ABBA``,
    ``log(t2/t1) = effect + position`` and ``log(t4/t3) = -effect + position``
    (``BAAB``: the signs of ``effect`` swap), so their average is the
    position effect (second slot of a pair vs first) with the variant effect
    cancelled exactly. The blocks are tested with a one-sample t-test.

    What a position effect looks like here: a penalty ``p`` on the first slot
    of every block (cold start) shows up as about ``p / 2``; a linear drift of
    ``g`` per slot shows up as ``g`` (slot 2 comes one slot after slot 1).
    Both cancel in :func:`block_log_ratios` when ``ABBA`` and ``BAAB`` blocks
    are balanced (the drift within every block).

    Parameters
    ----------
    blocks : sequence of Block
    confidence : float, optional
        In (0, 1); also sets the significance level ``1 - confidence``.
        Defaults to 0.95.

    Returns
    -------
    PositionEffect

    Raises
    ------
    InputError
        On bad blocks or a confidence outside (0, 1).
    """
    confidence = _check_confidence(confidence)
    items = _as_blocks(blocks)
    if items:
        logs, _ = _log_slots(items)
        per_block = ((logs[:, 1] - logs[:, 0]) + (logs[:, 3] - logs[:, 2])) / 2.0
    else:
        per_block = np.zeros(0, dtype=np.float64)
    s = _t_summary(per_block, confidence)
    return PositionEffect(
        n_blocks=len(items),
        block_log_effects=[float(v) for v in per_block],
        log_estimate=s.mean,
        ratio=_exp(s.mean),
        log_ci_low=s.lo,
        log_ci_high=s.hi,
        ci_low=_exp(s.lo),
        ci_high=_exp(s.hi),
        p_value=s.p_value,
        significant=bool(s.p_value is not None and s.p_value < 1.0 - confidence),
        confidence=confidence,
    )


# ---------------------------------------------------------------------------
# Power


def _check_power_args(alpha: float, power: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha {alpha!r} is not in (0, 1): use e.g. 0.05")
    if not 0.0 < power < 1.0:
        raise InputError(f"power {power!r} is not in (0, 1): use e.g. 0.8")


def _check_sd(sd: Any) -> float:
    if isinstance(sd, bool) or not isinstance(sd, (int, float, np.floating)):
        raise InputError(f"sd {sd!r} is not a number: give the sd of block log ratios")
    if not math.isfinite(float(sd)) or sd < 0:
        raise InputError(f"sd {sd!r} is not finite and >= 0: give the sd of block log ratios")
    return float(sd)


def _mde_log(sd: float, n: int, alpha: float, power: float) -> float:
    df = n - 1
    return (float(stats.t.ppf(1.0 - alpha / 2.0, df)) + float(stats.t.ppf(power, df))) * sd / math.sqrt(n)


def minimum_detectable_effect(
    sd: float, n_blocks: int, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Smallest true relative change that ``n_blocks`` blocks detect.

    ``mde = expm1((t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n))``:
    the usual sample-size relation for a two-sided one-sample (paired) t-test
    with the normal quantiles replaced by t quantiles (e.g. Chow, Shao & Wang,
    *Sample Size Calculations in Clinical Research*, 2nd ed., 2008, ch. 3).

    Parameters
    ----------
    sd : float
        Standard deviation of the block log ratios (natural-log units, >= 0).
    n_blocks : int
        Number of blocks, >= 2.
    alpha : float, optional
        Two-sided significance level. Defaults to 0.05.
    power : float, optional
        Defaults to 0.8.

    Returns
    -------
    float
        Relative change (0.03 = 3 %) of the geometric-mean ratio.

    Raises
    ------
    InputError
        On ``n_blocks < 2``, a negative or non-finite ``sd``, or ``alpha`` or
        ``power`` outside (0, 1).
    """
    sd = _check_sd(sd)
    n = _check_count(n_blocks, "n_blocks")
    if n < 2:
        raise InputError(f"n_blocks {n_blocks!r} is below 2: a t-based MDE needs 2 or more blocks")
    _check_power_args(alpha, power)
    return float(np.expm1(_mde_log(sd, n, alpha, power)))


def blocks_needed(sd: float, effect: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Number of blocks needed to detect a relative change ``effect``.

    The smallest ``n >= 2`` with ``(t_{1-alpha/2, n-1} + t_{power, n-1}) *
    sd / sqrt(n) <= |log(1 + effect)|`` (see :func:`minimum_detectable_effect`).

    Parameters
    ----------
    sd : float
        Standard deviation of the block log ratios (natural-log units, >= 0),
        e.g. ``PairedComparison.sd_log_ratio`` of a pilot run.
    effect : float
        Target relative change, > -1 and non-zero (0.03 = 3 % higher,
        -0.03 = 3 % lower).
    alpha, power : float, optional
        Defaults 0.05 (two-sided) and 0.8.

    Returns
    -------
    int

    Raises
    ------
    InputError
        On a bad ``sd``, ``effect`` zero, non-finite or <= -1, or ``alpha`` or
        ``power`` outside (0, 1).
    """
    sd = _check_sd(sd)
    _check_power_args(alpha, power)
    if (
        isinstance(effect, bool)
        or not isinstance(effect, (int, float, np.floating))
        or not math.isfinite(float(effect))
        or effect <= -1.0
        or effect == 0.0
    ):
        raise InputError(
            f"effect {effect!r} is not a non-zero relative change > -1: use e.g. 0.03 for 3 %"
        )
    target = abs(math.log1p(float(effect)))
    if sd == 0.0:
        return 2
    z = float(stats.norm.ppf(1.0 - alpha / 2.0) + stats.norm.ppf(power))
    n = max(2, math.floor((z * sd / target) ** 2))  # t quantiles > z: never above the answer
    while _mde_log(sd, n, alpha, power) > target:
        n += 1
    return n


# ---------------------------------------------------------------------------
# The comparison


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """Result of :func:`paired_comparison`; all fields are plain JSON types.

    Ratios are candidate/control of the metric itself (for seconds, 0.9 means
    the candidate takes 10 % less time); ``speedup*`` fields are in "better"
    orientation (> 1 means the candidate is better, whatever the metric's
    direction). Log values are natural logs. Fields are None where fewer than
    one (means) or two (spreads, CIs, p-values) blocks make them undefined.

    Attributes
    ----------
    metric, unit : str
        What was measured, e.g. ``'decode'`` in ``'tokens/s'``.
    higher_is_better : bool
    n_blocks, n_abba, n_baab : int
        Blocks in total and per pattern.
    confidence : float
    block_log_ratios : list of float
        Per block ``mean(log B) - mean(log A)``.
    mean_log_ratio, sd_log_ratio : float or None
        Mean and sd (ddof 1) of ``block_log_ratios``.
    ratio, ci_low, ci_high : float or None
        Geometric-mean ratio ``exp(mean_log_ratio)`` and its paired-t CI
        (df ``n - 1``).
    p_value : float or None
        Two-sided one-sample t-test of ``mean_log_ratio = 0``.
    bootstrap_ci_low, bootstrap_ci_high : float or None
        Cross-check CI of the ratio from ``scipy.stats.bootstrap``.
    bootstrap_method : str or None
        ``'BCa'``, ``'percentile'`` (BCa not finite), ``'degenerate'`` (all
        block ratios identical) or None (not run).
    speedup, speedup_ci_low, speedup_ci_high : float or None
        ``ratio`` and its CI in better orientation (``1/ratio`` for
        lower-is-better metrics).
    margin : float
        Relative equivalence margin delta (0.02 = 2 %).
    margin_source : {'option', 'a/a', 'default'}
    call : {'faster', 'slower', 'equivalent', 'inconclusive'}
        "faster" means better in the metric's direction.
    reason : str
        One paragraph explaining the call with the numbers.
    mde : float or None
        Relative change these blocks detect with 80 % power at alpha 0.05.
    position : PositionEffect or None
        See :func:`slot_position_effect`.
    aa_log_ratios : list of float
        Per block control-vs-control log ratio.
    aa_mean_log, aa_sd_log : float or None
        Mean and sd (ddof 1) of ``aa_log_ratios`` (the A/A offset and spread).
    n_bootstrap, seed : int
        Bootstrap settings used.
    schema_version : int
    """

    metric: str
    unit: str
    higher_is_better: bool
    n_blocks: int
    n_abba: int
    n_baab: int
    confidence: float
    block_log_ratios: list[float]
    mean_log_ratio: float | None
    sd_log_ratio: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    bootstrap_ci_low: float | None
    bootstrap_ci_high: float | None
    bootstrap_method: str | None
    speedup: float | None
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    margin: float
    margin_source: str
    call: str
    reason: str
    mde: float | None
    position: PositionEffect | None
    aa_log_ratios: list[float]
    aa_mean_log: float | None
    aa_sd_log: float | None
    n_bootstrap: int
    seed: int
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.call not in CALLS:
            raise InputError(f"call {self.call!r} is not valid: use one of {', '.join(CALLS)}")
        if self.margin_source not in MARGIN_SOURCES:
            raise InputError(
                f"margin_source {self.margin_source!r} is not valid: use one of "
                f"{', '.join(MARGIN_SOURCES)}"
            )
        if self.schema_version != SCHEMA_VERSION:
            raise InputError(
                f"schema_version {self.schema_version!r} is not supported: this logitlab "
                f"reads version {SCHEMA_VERSION}"
            )
        if isinstance(self.position, Mapping):
            object.__setattr__(self, "position", PositionEffect.from_dict(self.position))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of all fields (``position`` as a nested dict)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedComparison":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        InputError
            On unknown or missing keys, an unsupported ``schema_version`` or an
            invalid ``call`` / ``margin_source``.
        """
        return _from_fields(cls, data)


def _from_fields(cls: type, data: Mapping[str, Any]) -> Any:
    if not isinstance(data, Mapping):
        raise InputError(f"{cls.__name__} data {data!r} is not a mapping: pass the dict from to_dict()")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InputError(
            f"{cls.__name__} data has unknown keys {unknown}: valid keys are {', '.join(names)}"
        )
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in data]
    if missing:
        raise InputError(f"{cls.__name__} data lacks keys {missing}: pass the dict from to_dict()")
    return cls(**dict(data))


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _call_from_ci(lo_better: float, hi_better: float, bound: float) -> str:
    if -bound < lo_better and hi_better < bound:
        return "equivalent"
    if lo_better > 0.0:
        return "faster"
    if hi_better < 0.0:
        return "slower"
    return "inconclusive"


def paired_comparison(
    blocks: Iterable[Block],
    *,
    higher_is_better: bool,
    metric: str,
    unit: str,
    margin: float | None = None,
    confidence: float = 0.95,
    n_bootstrap: int = 9999,
    seed: int = 0,
) -> PairedComparison:
    """Is the candidate faster than the control, by how much, and how sure?

    Parameters
    ----------
    blocks : sequence of Block
        The counterbalanced experiment, in run order (see :class:`Block`).
    higher_is_better : bool
        True for throughput (tokens/s), False for times (seconds).
    metric, unit : str
        Names for the result and its ``reason`` (e.g. ``'decode'``,
        ``'tokens/s'``).
    margin : float, optional
        Relative equivalence margin delta (> 0, e.g. 0.02 for 2 %). If None,
        calibrated from the A/A ratios with 3 or more blocks (see
        :func:`aa_margin`: the ``confidence`` CI half-width of the
        control-vs-control comparison in the same blocks, ``max(0.01,
        expm1(t_{(1+c)/2, n-1} * sd_AA / sqrt(n)))``), else ``DEFAULT_MARGIN``
        (0.02).
    confidence : float, optional
        Level of the CIs, in (0, 1). Defaults to 0.95.
    n_bootstrap : int, optional
        Bootstrap resamples of the cross-check CI; 0 skips it. Defaults to
        9999.
    seed : int, optional
        Seed of the bootstrap. Defaults to 0.

    Returns
    -------
    PairedComparison

    Raises
    ------
    InputError
        On bad blocks, a non-positive or non-finite margin, a confidence
        outside (0, 1), or a negative ``n_bootstrap``.

    Notes
    -----
    Estimate: the block log ratios ``r_i = mean(log B) - mean(log A)`` are
    the paired differences; the geometric-mean ratio is ``exp(mean(r))`` and
    its CI is the one-sample t interval over blocks (df ``n - 1``,
    ``scipy.stats.ttest_1samp``), exponentiated. A BCa bootstrap of the mean
    (``scipy.stats.bootstrap``, seeded) is reported as a cross-check; the
    ``reason`` says when it would give a different call.

    Call: with the CI ``[lo, hi]`` of the log ratio in better orientation
    (negated for lower-is-better metrics) and ``b = log(1 + delta)``:
    ``'equivalent'`` if ``-b < lo`` and ``hi < b``; else ``'faster'`` if
    ``lo > 0``; ``'slower'`` if ``hi < 0``; else ``'inconclusive'``; always
    ``'inconclusive'`` with fewer than 2 blocks. This is the region of
    practical equivalence rule (Kruschke, 2018, *Adv. Methods Pract. Psychol.
    Sci.* 1(2):270-280) applied to a frequentist CI; the equivalence part is
    the two one-sided tests of Schuirmann (1987, *J. Pharmacokinet.
    Biopharm.* 15:657-680), at level ``(1 - confidence)/2`` per side
    (conservative: TOST at 5 % uses a 90 % CI).

    MDE: see :func:`minimum_detectable_effect` (alpha 0.05, power 0.8, the
    observed sd).

    With all block ratios identical the sd is 0 and the CI has zero width;
    the ``reason`` says so.

    Examples
    --------
    >>> blocks = [Block("ABBA", (100, 110, 110, 100)), Block("BAAB", (111, 100, 101, 109))]
    >>> r = paired_comparison(blocks, higher_is_better=True, metric="decode",
    ...                       unit="tokens/s", n_bootstrap=0)
    >>> r.call, round(r.ratio, 3)
    ('faster', 1.097)
    """
    items = _as_blocks(blocks)
    if not isinstance(higher_is_better, (bool, np.bool_)):
        raise InputError(f"higher_is_better {higher_is_better!r} is not a bool")
    higher_is_better = bool(higher_is_better)
    for name, value in (("metric", metric), ("unit", unit)):
        if not isinstance(value, str):
            raise InputError(f"{name} {value!r} is not a string")
    confidence = _check_confidence(confidence)
    n_bootstrap = _check_count(n_bootstrap, "n_bootstrap")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed {seed!r} is not an integer")
    seed = int(seed)

    ratios = block_log_ratios(items)
    aa = aa_log_ratios(items)
    n = len(items)

    if margin is not None:
        if (
            isinstance(margin, bool)
            or not isinstance(margin, (int, float, np.floating))
            or not math.isfinite(float(margin))
            or margin <= 0.0
        ):
            raise InputError(f"margin {margin!r} is not a positive relative change: use e.g. 0.02 for 2 %")
        delta, source = float(margin), "option"
    else:
        calibrated = _aa_margin_from_logs(aa, confidence)
        if calibrated is not None:
            delta, source = calibrated, "a/a"
        else:
            delta, source = DEFAULT_MARGIN, "default"
    bound = math.log1p(delta)

    s = _t_summary(ratios, confidence)
    aa_s = _t_summary(aa, confidence)
    b_lo, b_hi, b_method = _bootstrap_ci(ratios, confidence, n_bootstrap, seed)
    sign = 1.0 if higher_is_better else -1.0
    position = slot_position_effect(items, confidence=confidence) if n else None
    mde = float(np.expm1(_mde_log(s.sd, n, 0.05, 0.8))) if s.sd is not None else None

    def better(lo: float | None, hi: float | None) -> tuple[float | None, float | None]:
        if lo is None or hi is None:
            return None, None
        return (lo, hi) if sign > 0 else (-hi, -lo)

    sp_mean = None if s.mean is None else sign * s.mean
    sp_lo, sp_hi = better(s.lo, s.hi)

    # Reason text.
    ci_pct = f"{100 * confidence:g}%"
    m_label = f"{metric} ({unit})" if metric and unit else (metric or unit or "metric")
    side = "above" if higher_is_better else "below"
    margin_text = f"delta {_pct(delta)}, from {source}"
    if n < 2:
        call = "inconclusive"
        reason = (
            f"inconclusive: {n} block{'s' if n != 1 else ''} of {m_label}; a paired CI needs at "
            f"least 2 blocks"
        )
        if s.mean is not None:
            reason += f" (the single block's candidate/control ratio is {math.exp(s.mean):.4g})"
        reason += "."
    else:
        call = _call_from_ci(sp_lo, sp_hi, bound)
        head = (
            f"candidate/control geometric-mean {m_label} ratio {math.exp(s.mean):.4g}, "
            f"{ci_pct} CI {math.exp(s.lo):.4g}-{math.exp(s.hi):.4g} (paired t over {n} blocks, "
            f"df {n - 1})"
        )
        region = f"equivalence region {1 / (1 + delta):.4g}-{1 + delta:.4g} ({margin_text})"
        if call == "equivalent":
            body = f"the CI lies inside the {region}"
        elif call == "faster":
            body = (
                f"the whole CI is on the better side of 1 ({side} 1 for this metric) and not "
                f"inside the {region}"
            )
        elif call == "slower":
            body = (
                f"the whole CI is on the worse side of 1 ({'below' if higher_is_better else 'above'}"
                f" 1 for this metric) and not inside the {region}"
            )
        else:
            body = f"the CI includes 1 and reaches beyond the {region}"
        reason = f"{call}: {head}; {body}."
        if s.degenerate:
            reason += (
                f" All {n} block log ratios are identical (sd 0), so the CI has zero width: "
                f"this is only meaningful if the measurements are truly noiseless."
            )
        else:
            reason += (
                f" Block log-ratio sd {s.sd:.3g}: {n} blocks detect a {_pct(mde)} change "
                f"(80% power, alpha 0.05)"
            )
            if call == "inconclusive":
                reason += (
                    f"; about {blocks_needed(s.sd, delta)} blocks would detect a "
                    f"{_pct(delta)} change"
                )
            reason += "."
        if b_method in ("BCa", "percentile"):
            b_call = _call_from_ci(*better(b_lo, b_hi), bound)  # type: ignore[arg-type]
            agree = "agrees" if b_call == call else f"would call it {b_call}: treat the call with care"
            reason += (
                f" Bootstrap ({b_method}) CI {math.exp(b_lo):.4g}-{math.exp(b_hi):.4g} {agree}."
            )
        if position is not None and position.significant:
            n_abba = sum(b.pattern == "ABBA" for b in items)
            reason += (
                f" Slot position effect: the second slot of a pair measures "
                f"{position.ratio:.4g}x the first (p {position.p_value:.2g}); it cancels only "
                f"when ABBA and BAAB blocks are balanced ({n_abba} vs {n - n_abba} here)."
            )

    return PairedComparison(
        metric=metric,
        unit=unit,
        higher_is_better=higher_is_better,
        n_blocks=n,
        n_abba=sum(b.pattern == "ABBA" for b in items),
        n_baab=sum(b.pattern == "BAAB" for b in items),
        confidence=confidence,
        block_log_ratios=[float(v) for v in ratios],
        mean_log_ratio=s.mean,
        sd_log_ratio=s.sd,
        ratio=_exp(s.mean),
        ci_low=_exp(s.lo),
        ci_high=_exp(s.hi),
        p_value=s.p_value,
        bootstrap_ci_low=_exp(b_lo),
        bootstrap_ci_high=_exp(b_hi),
        bootstrap_method=b_method,
        speedup=_exp(sp_mean),
        speedup_ci_low=_exp(sp_lo),
        speedup_ci_high=_exp(sp_hi),
        margin=delta,
        margin_source=source,
        call=call,
        reason=reason,
        mde=mde,
        position=position,
        aa_log_ratios=[float(v) for v in aa],
        aa_mean_log=aa_s.mean,
        aa_sd_log=aa_s.sd,
        n_bootstrap=n_bootstrap,
        seed=seed,
    )
