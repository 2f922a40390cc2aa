"""Paired, counterbalanced speed comparisons of a candidate against a control.

An experiment runs ``n`` ABBA/BAAB blocks (:mod:`logitlab.perf.design`). The
analysis works on logs: each block gives one log ratio candidate/control
(:mod:`logitlab.perf.block_ratios`), the blocks are the independent units of
a paired (one-sample) t analysis, and the result is a geometric-mean ratio with a confidence interval, a bootstrap
cross-check, a slot-position diagnostic, the MDE (:mod:`logitlab.perf.power`)
and the three-way call against an equivalence margin
(:mod:`logitlab.perf.equivalence`).

Nothing here prints or logs; ``logitlab.report`` renders the results and
writes the sentences that explain them.

JSON format history (``schema_version`` of :class:`PairedComparison`):

- 1: first version.
- 2: ``reason`` left out (the report writes it); ``margin`` below 1. Since 2026-12-07 a comparison
  restated by a sequential run (``--repeats auto``) holds the MDE of its repeated CI in ``mde``
  (:func:`~logitlab.perf.sequential.repeated_ci_mde`); the field and version are unchanged.
"""

from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from logitlab.errors import InputError, check_choice
from logitlab.jsonio import PlainRecord, check_schema_version, from_fields  # noqa: F401  (from_fields re-exported)
from logitlab.perf.block_ratios import aa_log_ratios, block_log_ratios
from logitlab.perf.design import Block, as_blocks, check_count, log_slots
from logitlab.perf.equivalence import (
    CALLS,
    DEGENERATE_SPREAD,
    MARGIN_SOURCES,
    aa_margin_from_logs,
    check_confidence,
    check_margin,
    choose_margin,
    three_way_call,
)
from logitlab.perf.power import mde_log
from logitlab.perf.prereg import PreregisteredMargin

__all__ = [
    "SCHEMA_VERSION",
    "PositionEffect",
    "PairedComparison",
    "slot_position_effect",
    "paired_comparison",
    "from_fields",
]

#: Version of the JSON form of :class:`PairedComparison`.
SCHEMA_VERSION = 2


# ---------------------------------------------------------------------------
# One-sample summaries


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
    from scipy import stats
    n = int(x.size)
    if n == 0:
        return _TSummary(0, None, None, None, None, None, False)
    mean = float(np.mean(x))
    if n == 1:
        return _TSummary(1, mean, None, None, None, None, False)
    if float(np.ptp(x)) <= DEGENERATE_SPREAD:
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


def _bootstrap_rng_kw() -> str:
    """The name of ``scipy.stats.bootstrap``'s seed argument: ``rng`` (SciPy >= 1.15), ``random_state`` before."""
    from scipy import stats

    return "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def _bootstrap_ci(
    x: np.ndarray, confidence: float, n_resamples: int, seed: Any
) -> tuple[float | None, float | None, str | None]:
    """BCa bootstrap CI of the mean (percentile if BCa is not finite)."""
    from scipy import stats
    if x.size < 2 or n_resamples == 0:
        return None, None, None
    if float(np.ptp(x)) <= DEGENERATE_SPREAD:
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
                **{_bootstrap_rng_kw(): np.random.default_rng(seed)},
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
class PositionEffect(PlainRecord):
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
    Both cancel in :func:`~logitlab.perf.block_ratios.block_log_ratios` when
    ``ABBA`` and ``BAAB`` blocks are balanced (the drift within every block).

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
    confidence = check_confidence(confidence)
    items = as_blocks(blocks)
    if items:
        logs, _ = log_slots(items)
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
# The comparison


@dataclass(frozen=True, slots=True)
class PairedComparison(PlainRecord):
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
    margin_source : {'option', 'a/a', 'default', 'calibration'}
        ``'calibration'``: restated by a sequential run whose δ came from a calibration file.
    call : {'faster', 'slower', 'equivalent', 'inconclusive'}
        "faster" means better in the metric's direction
        (:func:`logitlab.perf.equivalence.three_way_call`).
    mde : float or None
        Relative change these blocks detect with 80 % power at alpha 0.05; restated by a sequential run
        (:func:`~logitlab.perf.sequential.sequential_comparison`), that of the repeated CI at the stop.
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
    mde: float | None
    position: PositionEffect | None
    aa_log_ratios: list[float]
    aa_mean_log: float | None
    aa_sd_log: float | None
    n_bootstrap: int
    seed: int
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_choice("call", self.call, CALLS)
        check_choice("margin_source", self.margin_source, MARGIN_SOURCES)
        check_schema_version(self.schema_version, SCHEMA_VERSION)
        if isinstance(self.position, Mapping):
            object.__setattr__(self, "position", PositionEffect.from_dict(self.position))


def better_orientation(lo: float | None, hi: float | None,
                       higher_is_better: bool) -> tuple[float | None, float | None]:
    """A CI of a log ratio turned so that positive means "the candidate is better"."""
    if lo is None or hi is None:
        return None, None
    return (lo, hi) if higher_is_better else (-hi, -lo)


def paired_comparison(
    blocks: Iterable[Block],
    *,
    higher_is_better: bool,
    metric: str,
    unit: str,
    margin: float | PreregisteredMargin | None = None,
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
        Names for the result (e.g. ``'decode'``, ``'tokens/s'``).
    margin : float or PreregisteredMargin, optional
        Relative equivalence margin delta (0 < delta < 1, e.g. 0.02 for 2 %). If None,
        calibrated from the A/A ratios with 3 or more blocks (see
        :func:`~logitlab.perf.block_ratios.aa_margin`: the ``confidence`` CI
        half-width of the control-vs-control comparison in the same blocks, ``max(0.01,
        expm1(t_{(1+c)/2, n-1} * sd_AA / sqrt(n)))``), else ``DEFAULT_MARGIN``
        (0.02). A :class:`~logitlab.perf.prereg.PreregisteredMargin`: its δ, and
        its ``source`` as the result's ``margin_source`` (its ``file``, ``basis``
        and ``between_run_sd`` are for sequential runs and are not used here).
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
        On bad blocks, a margin outside (0, 1), a confidence
        outside (0, 1), or a negative ``n_bootstrap``.

    Notes
    -----
    Estimate: the block log ratios ``r_i = mean(log B) - mean(log A)`` are
    the paired differences; the geometric-mean ratio is ``exp(mean(r))`` and
    its CI is the one-sample t interval over blocks (df ``n - 1``,
    ``scipy.stats.ttest_1samp``), exponentiated. A BCa bootstrap of the mean
    (``scipy.stats.bootstrap``, seeded) is reported as a cross-check; the
    report says when it would give a different call.

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

    MDE: see :func:`logitlab.perf.power.minimum_detectable_effect` (alpha 0.05, power 0.8, the
    observed sd).

    With all block ratios identical the sd is 0 and the CI has zero width
    (the report says so).

    Examples
    --------
    >>> blocks = [Block("ABBA", (100, 110, 110, 100)), Block("BAAB", (111, 100, 101, 109))]
    >>> r = paired_comparison(blocks, higher_is_better=True, metric="decode",
    ...                       unit="tokens/s", n_bootstrap=0)
    >>> r.call, round(r.ratio, 3)
    ('faster', 1.097)
    """
    items = as_blocks(blocks)
    higher_is_better, confidence, n_bootstrap, seed = _check_arguments(higher_is_better, metric, unit,
                                                                       confidence, n_bootstrap, seed)
    ratios = block_log_ratios(items)
    aa = aa_log_ratios(items)
    n = len(items)

    if isinstance(margin, PreregisteredMargin):
        delta, source = check_margin(margin.margin), margin.source
    else:
        delta, source = choose_margin(None if margin is None else check_margin(margin),
                                      aa_margin_from_logs(aa, confidence))
    bound = math.log1p(delta)

    s = _t_summary(ratios, confidence)
    aa_s = _t_summary(aa, confidence)
    b_lo, b_hi, b_method = _bootstrap_ci(ratios, confidence, n_bootstrap, seed)
    sign = 1.0 if higher_is_better else -1.0
    position = slot_position_effect(items, confidence=confidence) if n else None
    mde = float(np.expm1(mde_log(s.sd, n, 0.05, 0.8))) if s.sd is not None else None
    sp_mean = None if s.mean is None else sign * s.mean
    sp_lo, sp_hi = better_orientation(s.lo, s.hi, higher_is_better)
    call = "inconclusive" if n < 2 else three_way_call(sp_lo, sp_hi, bound)

    return PairedComparison(
        metric=metric, unit=unit, higher_is_better=higher_is_better, n_blocks=n,
        n_abba=sum(b.pattern == "ABBA" for b in items), n_baab=sum(b.pattern == "BAAB" for b in items),
        confidence=confidence, block_log_ratios=[float(v) for v in ratios],
        mean_log_ratio=s.mean, sd_log_ratio=s.sd, ratio=_exp(s.mean), ci_low=_exp(s.lo), ci_high=_exp(s.hi),
        p_value=s.p_value, bootstrap_ci_low=_exp(b_lo), bootstrap_ci_high=_exp(b_hi), bootstrap_method=b_method,
        speedup=_exp(sp_mean), speedup_ci_low=_exp(sp_lo), speedup_ci_high=_exp(sp_hi),
        margin=delta, margin_source=source, call=call, mde=mde, position=position,
        aa_log_ratios=[float(v) for v in aa], aa_mean_log=aa_s.mean, aa_sd_log=aa_s.sd,
        n_bootstrap=n_bootstrap, seed=seed,
    )


def _check_arguments(higher_is_better: Any, metric: Any, unit: Any, confidence: Any, n_bootstrap: Any,
                     seed: Any) -> tuple[bool, float, int, int]:
    """:func:`paired_comparison`'s settings checked and normalised; InputError names the bad one."""
    if not isinstance(higher_is_better, (bool, np.bool_)):
        raise InputError(f"higher_is_better {higher_is_better!r} is not a bool")
    higher_is_better = bool(higher_is_better)
    for name, value in (("metric", metric), ("unit", unit)):
        if not isinstance(value, str):
            raise InputError(f"{name} {value!r} is not a string")
    confidence = check_confidence(confidence)
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed {seed!r} is not an integer")
    seed = int(seed)
    return higher_is_better, confidence, n_bootstrap, seed
