"""Sequential ABBA/BAAB experiments: look after every block, stop as soon as the data allow.

A fixed-size experiment runs ``n`` blocks and then calls faster / slower /
equivalent / inconclusive (:func:`logitlab.perf.paired.paired_comparison`).
Looking after every block and stopping at the first ``p < 0.05`` inflates
the false-positive rate (17 % over the 10 looks of blocks 3-12 in
``benchmarks/bench_validity.py``). This module gives the same three-way call
after every block, with error rates that hold however early the run stops.

Design: a group-sequential design with an alpha-spending function, read
through repeated confidence intervals (RCIs).

- The budget is ``max_blocks`` blocks; the looks are after every block from
  ``min_blocks`` on, at information fractions ``n / max_blocks``.
- The two-sided critical values ``c_1 .. c_K`` of the one-sample t
  statistic spend ``alpha`` by the Lan-DeMets O'Brien-Fleming-type function
  ``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` (default) or the
  Pocock-type ``alpha(t) = alpha ln(1 + (e - 1) t)`` (Lan & DeMets, 1983,
  *Biometrika* 70(3):659-663; O'Brien & Fleming, 1979, *Biometrics*
  35:549-556; Pocock, 1977, *Biometrika* 64:191-199): at each look,
  ``P(no earlier crossing, |T_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})``
  under no effect (Jennison & Turnbull, 2000, *Group Sequential Methods with
  Applications to Clinical Trials*, ch. 7).
- The variance is unknown and the number of blocks small (df 2 at the first
  look), so the boundaries are those of the t statistic itself, whose joint
  law under no effect is free of the sd: Jennison & Turnbull (1991,
  *Biometrika* 78(1):133-141) integrate it numerically, we simulate it once
  (1,000,000 seeded paths, cached;
  :func:`logitlab.perf.spending.spending_boundaries`). The common
  shortcut, known-variance boundaries turned into t quantiles of the same
  nominal level, lets a 5 % design reach 5.5-5.9 % here.
- At look ``k`` the RCI of the mean block log ratio is
  ``mean +- c_k * sd / sqrt(n)``; with ``between_run_sd`` ``tau`` (the sd of
  an offset fixed for the whole run, e.g. two engine objects that differ,
  measured by a calibration of several A/As: :mod:`logitlab.perf.prereg`)
  ``mean +- c_k * sqrt(sd^2 / n + tau^2)``, so that the RCIs cover the
  ratio of the variants rather than of this run's two objects. The looks
  then share the offset and are more correlated than the boundaries
  assume, which keeps them conservative when tau is the true one
  (simulated in ``tests/perf/test_sequential.py``); the error of a tau
  estimated from a few A/As is not carried. The RCIs cover the true ratio at *all*
  looks at once with probability ``1 - alpha`` (Jennison & Turnbull, 1989,
  *J. R. Stat. Soc. B* 51(3):305-361; 2000, ch. 9), so any stopping rule
  keeps the claims valid, and the CI reported at the stop is the one valid
  then. The call is the rule of ``paired_comparison`` applied to the RCI
  (equivalent if inside ``+-log(1 + delta)``, else faster / slower if it
  excludes 1): sequential equivalence testing by RCIs, Jennison & Turnbull
  (1993, *Biometrics* 49(1):31-43). A wrong direction or an "equivalent"
  while the truth lies outside ``delta`` both need the true ratio outside an
  RCI, so each has probability at most ``alpha``.
- Stop at the first look with a call; else continue to ``max_blocks``
  ("inconclusive", stopping reason ``max-blocks``), or until the caller's
  time budget ends (``max-time``: the RCI then is valid, and conservative,
  since the unspent alpha is never used).
- ``delta`` is fixed before the first look (:mod:`logitlab.perf.prereg`):
  ``--margin``, else a calibration recorded earlier on the machine
  (``--noise FILE``: a saved A/A, or a ``bench calibrate`` profile), else
  :data:`~logitlab.perf.prereg.DEFAULT_SEQUENTIAL_MARGIN` (2 %); the decision
  records which (``margin_source``, and the file and what it was measured
  on). It is never taken from the run's own A/A slots, for the reason below.

Why not an always-valid confidence sequence (Howard, Ramdas, McAuliffe &
Sekhon, 2021, *Ann. Stat.* 49(2):1055-1080)? It needs no budget, but pays
for that: the two-sided normal-mixture boundary tuned for 12 observations
is about 3.0 standard errors against 2.14 at this design's last look (both
with the variance known: 1.4x wider, about twice the blocks for the same
precision), and wider still with an estimated variance. Our runs have a budget (``--max-repeats``), which the
spending function uses. Libraries checked: ``confseq`` 0.0.11 (Howard's,
last release 2023-01) builds from C++ source, pulls pandas, matplotlib and
pytest at run time, and its bounds need a known variance proxy or bounded
observations, not small-n log ratios of unknown variance; ``expectation``
0.6 requires Python >= 3.12; ``gsdesign`` 0.1.5 (numpy only; gsDesign's
numerical integration) gives known-variance boundaries, which are not
exact for the t statistic at these sample sizes (see above). So the
boundaries are simulated here with numpy, the spending functions and the
RCI are a few lines.

Tuning (``benchmarks/bench_validity.py``, 1000 simulated runs a row, 2 %
noise per slot and per block): O'Brien-Fleming-type spending over blocks
3-12 keeps the A/A false-positive rate at 0.2-4.1 % under drift and slot
penalty (peeking at p < 0.05: 16-19 % without the penalty), has the power of 10 fixed blocks at
their MDE of 2 % (75 % vs 77 %) and needs 6.5 blocks on average at 4 %
(35 % fewer than 10). The Pocock type stops sooner on large effects but
loses power at the MDE. With delta from the A/A slots of the blocks so far (the
rule before issue 36) an A/A ended "equivalent" in 54 % of runs, as with 10
fixed blocks: delta from the A/A shrinks like the CI, so more blocks do not
help; with a fixed ``--margin 0.03`` it is 97 %. Scaling delta by the
sequential critical value instead (the A/A's own repeated CI) raised that to
82 %, but called a third of true 2 % changes "equivalent" within the 5 % cap
after 5-7 blocks. Why about half, whatever the
budget: delta is about ``sqrt(2) * t_{n-1}`` (3.1 at 12 blocks) standard errors
of the A/B mean (the A/A compares one slot with one, the A/B two with two),
the repeated CI at the last look is +-2.5 of them, so an A/A is "equivalent"
only when its estimate falls within the 0.6 standard errors between; both
shrink as ``1/sqrt(n)``, so more blocks help only once delta reaches its 1 %
floor. Equivalence testing on (1 - 2 alpha) repeated CIs (Jennison & Turnbull
1993's construction; the 95 % one here is conservative) raised it to 69 % in
the same simulation, at 73 % power at the MDE against the fixed design's 77 %;
not adopted. A margin fixed before the looks is the way to make "equivalent"
reachable, so that is the rule (issue 36): with the 2 % default an A/A reaches
"equivalent" in 93 % of runs at the 1.5 % block sd of a quiet decode run (66 %
at 2 %; :data:`~logitlab.perf.prereg.DEFAULT_SEQUENTIAL_MARGIN` has the
measurements), and where the noise is too high for 2 % within the budget the run
says "inconclusive" and names where its delta came from. Pre-registration costs
no validity: delta is not a function of the data, so the RCI argument above
holds as it stands (an "equivalent" while the truth is outside delta needs the
truth outside an RCI).

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`SequentialDecision`):

- 1: first version.
- 2: (the version these notes start from).
- 3: ``margin_file``, ``margin_basis`` (the calibration a pre-registered
  delta came from); ``margin_source`` may be ``'calibration'``. Version 2 still
  loads (as 3, the two fields None).
- 4: ``between_run_sd``, the sd of a run's own offset that the repeated CIs
  carry (from a calibration of several A/As). Versions 2 and 3 still load (the
  field 0: their CIs carried none).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from logitlab.errors import InputError, check_choice
from logitlab.jsonio import PlainRecord, check_schema_version
from logitlab.perf.block_ratios import block_log_ratios
from logitlab.perf.design import Block
from logitlab.perf.equivalence import CALLS, DEGENERATE_SPREAD, check_margin, three_way_call
from logitlab.perf.paired import PairedComparison, better_orientation
from logitlab.perf.power import check_power, detectable_log_change
from logitlab.perf.prereg import PreregisteredMargin, check_between_run_sd, preregister
from logitlab.perf.spending import (
    DEFAULT_MAX_BLOCKS,
    DEFAULT_MIN_BLOCKS,
    check_alpha,
    check_budget,
    check_spending,
    spending_boundaries,
    spent_alpha,
)

__all__ = [
    "SEQUENTIAL_CALLS",
    "STOP_REASONS",
    "SCHEMA_VERSION",
    "SEQUENTIAL_MARGIN_SOURCES",
    "SequentialDecision",
    "sequential_step",
    "sequential_decision",
    "sequential_comparison",
    "repeated_ci_mde",
    "offset_floor",
]

#: The calls of a :class:`SequentialDecision`: those of ``paired_comparison`` and "continue".
SEQUENTIAL_CALLS = CALLS + ("continue",)
#: Why a sequential run stopped.
STOP_REASONS = ("decided", "max-blocks", "max-time")
#: Version of the JSON form of :class:`SequentialDecision`.
SCHEMA_VERSION = 4
#: Where a sequential decision's delta came from: pre-registered (:data:`~logitlab.perf.prereg.PREREGISTERED_SOURCES`),
#: or ``'a/a'`` (the blocks' own A/A: decisions saved before version 3, and the simulations that compare the rules).
SEQUENTIAL_MARGIN_SOURCES = ("option", "calibration", "default", "a/a")


@dataclass(frozen=True, slots=True)
class SequentialDecision(PlainRecord):
    """What the sequential rule says after the blocks run so far; plain JSON types only.

    Ratios are candidate/control of the metric itself; ``speedup*`` are in
    "better" orientation (> 1: the candidate is better). CI fields are the
    repeated CI, valid at this look whatever the stopping rule; None before
    ``min_blocks`` (or when this look spends no alpha).

    Attributes
    ----------
    call : {'faster', 'slower', 'equivalent', 'inconclusive', 'continue'}
        ``'continue'``: no call yet and budget left.
    stop : bool
        The run should stop now.
    stop_reason : {'decided', 'max-blocks', 'max-time'} or None
        None while continuing.
    n_blocks, min_blocks, max_blocks : int
        Blocks analysed, first look, budget.
    look, n_looks : int or None, int
        1-based number of this look (None before ``min_blocks``) out of
        ``max_blocks - min_blocks + 1``.
    alpha : float
        Two-sided level of the whole sequence of repeated CIs.
    spending : str
    alpha_spent : float or None
        Cumulative alpha at this look, :func:`~logitlab.perf.spending.spent_alpha` of ``n / max_blocks``.
    critical_t : float or None
        The look's boundary for the t statistic (:func:`~logitlab.perf.spending.spending_boundaries`):
        the repeated CI is ``mean +- critical_t * sqrt(sd^2 / n + between_run_sd^2)``.
    nominal_confidence : float or None
        The level of a fixed-size t interval (df ``n - 1``) with ``critical_t`` as its quantile (this wide
        when ``between_run_sd`` is 0).
    higher_is_better : bool
    metric, unit : str
    mean_log_ratio, sd_log_ratio : float or None
        Mean and sd (ddof 1) of the block log ratios (natural logs).
    ratio, ci_low, ci_high : float or None
        Geometric-mean ratio and its repeated CI.
    speedup, speedup_ci_low, speedup_ci_high : float or None
    margin : float
        Equivalence margin delta (0.02 = 2 %).
    margin_source : {'option', 'calibration', 'default', 'a/a'}
        Where delta came from (:mod:`logitlab.perf.prereg`); ``'a/a'`` only in
        decisions saved before version 3 and in simulations.
    margin_file, margin_basis : str or None
        ``'calibration'``: the calibration file, and what it was measured on.
    between_run_sd : float
        The sd of a run's own offset the repeated CI carries (natural-log units; 0: none).
    schema_version : int
    """

    call: str
    stop: bool
    stop_reason: str | None
    n_blocks: int
    min_blocks: int
    max_blocks: int
    look: int | None
    n_looks: int
    alpha: float
    spending: str
    alpha_spent: float | None
    critical_t: float | None
    nominal_confidence: float | None
    higher_is_better: bool
    metric: str
    unit: str
    mean_log_ratio: float | None
    sd_log_ratio: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    speedup: float | None
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    margin: float
    margin_source: str
    margin_file: str | None = None
    margin_basis: str | None = None
    between_run_sd: float = 0.0
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version in (2, 3):  # 2 lacks margin_file and margin_basis (None), 2-3 between_run_sd (0)
            object.__setattr__(self, "schema_version", SCHEMA_VERSION)
        check_choice("call", self.call, SEQUENTIAL_CALLS)
        if self.stop_reason is not None:
            check_choice("stop_reason", self.stop_reason, STOP_REASONS)
        if self.stop != (self.stop_reason is not None):
            raise InputError("stop and stop_reason disagree: a stopped decision has a reason, a running one none")
        check_schema_version(self.schema_version, SCHEMA_VERSION)


def _check_log_ratios(log_ratios: Any, max_blocks: int) -> np.ndarray:
    if isinstance(log_ratios, (str, bytes)):
        raise InputError(f"log_ratios {log_ratios!r} is not a sequence of numbers")
    try:
        x = np.asarray(log_ratios, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"log_ratios {log_ratios!r} is not a sequence of numbers: give one block log ratio "
                         f"per block") from None
    if x.ndim != 1:
        raise InputError(f"log_ratios has shape {x.shape}: give a 1-D sequence, one log ratio per block")
    if not np.all(np.isfinite(x)):
        raise InputError("log_ratios holds a NaN or infinite value: every block log ratio must be finite")
    if x.size > max_blocks:
        raise InputError(f"{x.size} blocks exceed the budget max_blocks {max_blocks}: the design has no look "
                         f"after block {max_blocks}")
    return x


def sequential_step(
    log_ratios: Iterable[float],
    *,
    margin: float,
    margin_source: str = "option",
    margin_file: str | None = None,
    margin_basis: str | None = None,
    higher_is_better: bool = True,
    alpha: float = 0.05,
    min_blocks: int = DEFAULT_MIN_BLOCKS,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    spending: str = "obrien-fleming",
    time_up: bool = False,
    metric: str = "",
    unit: str = "",
    between_run_sd: float = 0.0,
) -> SequentialDecision:
    """Stop now, and with which call? The sequential rule after the blocks run so far.

    Parameters
    ----------
    log_ratios : sequence of float
        Shape ``(n,)``, natural logs: per block ``mean(log B) - mean(log A)``
        (:func:`logitlab.perf.block_ratios.block_log_ratios`), in run order,
        ``n <= max_blocks``.
    margin : float
        Equivalence margin delta (> 0, relative: 0.02 = 2 %).
    margin_source : {'option', 'calibration', 'default', 'a/a'}, optional
        Where ``margin`` came from, for the record. Defaults to ``'option'``.
    margin_file, margin_basis : str, optional
        ``'calibration'``: the file and what it was measured on, for the record.
    higher_is_better : bool, optional
        Direction of the metric. Defaults to True (tokens/s).
    alpha : float, optional
        Two-sided level of the repeated CIs (and of each error rate).
        Defaults to 0.05.
    min_blocks, max_blocks : int, optional
        First look and budget. Defaults 3 and 12.
    spending : {'obrien-fleming', 'pocock'}, optional
        Alpha-spending function. Defaults to ``'obrien-fleming'``.
    time_up : bool, optional
        The caller's time budget is spent: stop now (``'max-time'``) unless a
        call is reached at this look.
    metric, unit : str, optional
        Names for the ``reason``.
    between_run_sd : float, optional
        ``tau``, the sd of an offset fixed for the whole run (natural-log
        units, >= 0), which the repeated CIs carry. Defaults to 0.

    Returns
    -------
    SequentialDecision

    Raises
    ------
    InputError
        On non-finite or too many log ratios, a bad margin, budget, alpha or
        spending function.

    Notes
    -----
    Look ``k`` (``n = min_blocks + k - 1`` blocks): repeated CI
    ``mean +- c_k sqrt(sd^2 / n + tau^2)`` with ``c_k`` the boundary of the t
    statistic at that look (``critical_t``, from
    :func:`logitlab.perf.spending.spending_boundaries` with ``statistic="t"``); call as
    :func:`logitlab.perf.paired.paired_comparison` on that interval, with
    ``b = log(1 + margin)``. See the module docstring for the sources.

    Examples
    --------
    >>> d = sequential_step([0.05, 0.06, 0.04, 0.05, 0.055, 0.045], margin=0.02)
    >>> d.call, d.stop, d.stop_reason, d.n_blocks
    ('faster', True, 'decided', 6)
    """
    from scipy import stats
    min_blocks, max_blocks = check_budget(min_blocks, max_blocks)
    alpha = check_alpha(alpha)
    spending = check_spending(spending)
    x = _check_log_ratios(log_ratios, max_blocks)
    delta = check_margin(margin)
    higher_is_better, time_up = _check_step_flags(margin_source, higher_is_better, time_up, metric, unit)
    for name, value in (("margin_file", margin_file), ("margin_basis", margin_basis)):
        if value is not None and not isinstance(value, str):
            raise InputError(f"{name} {value!r} is neither a string nor None")
    tau = check_between_run_sd(between_run_sd)

    n = int(x.size)
    sign = 1.0 if higher_is_better else -1.0
    bound = math.log1p(delta)
    n_looks = max_blocks - min_blocks + 1
    mean = float(np.mean(x)) if n else None
    sd = None
    if n >= 2:
        sd = 0.0 if float(np.ptp(x)) <= DEGENERATE_SPREAD else float(np.std(x, ddof=1))
    look = n - min_blocks + 1 if n >= min_blocks else None
    crit_t = nominal = spent = lo = hi = None
    if look is not None:
        c = spending_boundaries(min_blocks=min_blocks, max_blocks=max_blocks, alpha=alpha, spending=spending,
                                statistic="t")[look - 1]
        spent = spent_alpha(n / max_blocks, alpha=alpha, spending=spending)
        if math.isfinite(c):
            crit_t = float(c)
            nominal = 1.0 - float(2.0 * stats.t.sf(crit_t, n - 1))
            half = crit_t * math.hypot(sd / math.sqrt(n), tau)
            lo, hi = mean - half, mean + half

    call = "continue" if lo is None else three_way_call(*better_orientation(lo, hi, higher_is_better), bound)
    call, stop_reason = _stop(call, n=n, max_blocks=max_blocks, time_up=time_up)
    sp_lo, sp_hi = better_orientation(lo, hi, higher_is_better)
    return SequentialDecision(
        call=call, stop=stop_reason is not None, stop_reason=stop_reason, n_blocks=n, min_blocks=min_blocks,
        max_blocks=max_blocks, look=look, n_looks=n_looks, alpha=alpha, spending=spending, alpha_spent=spent,
        critical_t=crit_t, nominal_confidence=nominal, higher_is_better=higher_is_better,
        metric=metric, unit=unit, mean_log_ratio=mean, sd_log_ratio=sd, ratio=_exp(mean), ci_low=_exp(lo),
        ci_high=_exp(hi), speedup=_exp(None if mean is None else sign * mean), speedup_ci_low=_exp(sp_lo),
        speedup_ci_high=_exp(sp_hi), margin=delta, margin_source=margin_source, margin_file=margin_file,
        margin_basis=margin_basis, between_run_sd=tau,
    )


def _check_step_flags(margin_source: Any, higher_is_better: Any, time_up: Any, metric: Any,
                      unit: Any) -> tuple[bool, bool]:
    """:func:`sequential_step`'s labels and flags checked; ``(higher_is_better, time_up)`` as bools."""
    check_choice("margin_source", margin_source, SEQUENTIAL_MARGIN_SOURCES)
    if not isinstance(higher_is_better, (bool, np.bool_)) or not isinstance(time_up, (bool, np.bool_)):
        raise InputError("higher_is_better and time_up must be bools")
    higher_is_better, time_up = bool(higher_is_better), bool(time_up)
    for name, value in (("metric", metric), ("unit", unit)):
        if not isinstance(value, str):
            raise InputError(f"{name} {value!r} is not a string")
    return higher_is_better, time_up


def _stop(call: str, *, n: int, max_blocks: int, time_up: bool) -> tuple[str, str | None]:
    """The call and the stopping reason at a look, from the interval's call there (``'continue'``: no interval)."""
    if call in ("faster", "slower", "equivalent"):
        stop_reason = "decided"
    elif n >= max_blocks:
        stop_reason = "max-blocks"
    elif time_up:
        stop_reason = "max-time"
    else:
        stop_reason = None
    if stop_reason is not None and call in ("continue", "inconclusive"):
        call = "inconclusive"
    elif stop_reason is None:
        call = "continue"
    return call, stop_reason


def _exp(x: float | None) -> float | None:
    return None if x is None else float(math.exp(x))


def sequential_decision(blocks: Iterable[Block], *, higher_is_better: bool,
                        margin: float | PreregisteredMargin | None = None, **options: Any) -> SequentialDecision:
    """:func:`sequential_step` on counterbalanced blocks, with delta fixed before the first look.

    Parameters
    ----------
    blocks : sequence of Block
        The blocks run so far, in run order (at most ``max_blocks``).
    higher_is_better : bool
    margin : float or PreregisteredMargin, optional
        Equivalence margin delta: a number (source ``'option'``), a
        :class:`~logitlab.perf.prereg.PreregisteredMargin` (its source, file and
        basis; its ``between_run_sd``, which the repeated CIs then carry), or None:
        :data:`~logitlab.perf.prereg.DEFAULT_SEQUENTIAL_MARGIN` (2 %, source ``'default'``). Never from these
        blocks' A/A slots (the module docstring says why; fixed-size ``paired_comparison`` still does that).
    **options
        ``alpha``, ``min_blocks``, ``max_blocks``, ``spending``, ``time_up``,
        ``metric``, ``unit``: as for :func:`sequential_step` (with its defaults).

    Returns
    -------
    SequentialDecision
        :func:`sequential_step`'s, on the blocks' log ratios
        (:func:`~logitlab.perf.block_ratios.block_log_ratios`), with the margin's source, file and basis.

    Raises
    ------
    InputError
        On bad blocks or any error of :func:`sequential_step`.
    """
    items = list(blocks) if not isinstance(blocks, (str, bytes, Block)) and isinstance(blocks, Iterable) else blocks
    ratios = block_log_ratios(items)  # validates the blocks
    prereg = margin if isinstance(margin, PreregisteredMargin) else preregister(margin)
    return sequential_step(ratios, margin=prereg.margin, margin_source=prereg.source, margin_file=prereg.file,
                           margin_basis=prereg.basis, higher_is_better=higher_is_better,
                           between_run_sd=prereg.between_run_sd or 0.0, **options)


def repeated_ci_mde(decision: SequentialDecision, power: float = 0.8) -> float | None:
    """Smallest true relative change that this look's repeated CI excludes from 1 with probability ``power``.

    Parameters
    ----------
    decision : SequentialDecision
        A look of :func:`sequential_step` (its ``critical_t``, block sd, blocks and ``between_run_sd``).
    power : float, optional
        In (0, 1). Defaults to 0.8.

    Returns
    -------
    float or None
        Relative change (0.03 = 3 %); None before the first look with a CI (no ``critical_t``), with fewer than
        2 blocks, or without a block sd.

    Raises
    ------
    InputError
        ``power`` outside (0, 1).

    Notes
    -----
    ``expm1((c_k + t_{power, n-1}) * sqrt(sd^2 / n + tau^2))``, with ``c_k`` the look's boundary and ``tau``
    the ``between_run_sd`` the repeated CI carries: the fixed-size MDE of
    :func:`~logitlab.perf.power.minimum_detectable_effect` (Chow, Shao & Wang, 2008, ch. 3) with
    ``t_{1-alpha/2}`` replaced by the repeated CI's boundary (Jennison & Turnbull, 2000, ch. 9) and the
    standard error by the repeated CI's. It is the power of this look's CI alone; the chance that the design
    crossed at some look up to this one is at least that. With ``tau`` 0 it equals
    ``minimum_detectable_effect(sd, n, alpha=1 - nominal_confidence)``.
    """
    power = check_power(power)
    n, sd, c = decision.n_blocks, decision.sd_log_ratio, decision.critical_t
    if c is None or sd is None or n < 2:
        return None
    se = math.hypot(sd / math.sqrt(n), decision.between_run_sd)
    return float(math.expm1(detectable_log_change(c, se, n - 1, power)))


def offset_floor(decision: SequentialDecision, power: float = 0.8) -> float | None:
    """The change that no number of blocks detects, given a run offset the decision carries.

    Parameters
    ----------
    decision : SequentialDecision
        Its ``alpha`` and ``between_run_sd`` ``tau`` (natural-log units) are used.
    power : float, optional
        In (0, 1). Defaults to 0.8.

    Returns
    -------
    float or None
        Relative change (0.03 = 3 %); None when the decision carries no offset (``between_run_sd`` 0).

    Raises
    ------
    InputError
        ``power`` outside (0, 1).

    Notes
    -----
    ``expm1((z_{1-alpha/2} + z_power) * tau)``: an offset fixed for the whole run leaves ``tau`` in the
    standard error of the mean however many blocks run, and no two-sided level-``alpha`` test does better
    than the known-variance one (a boundary of at least ``z_{1-alpha/2}``; the sequential design's is
    larger, so its own reach within a budget is :func:`repeated_ci_mde` at the last look). The usual
    sample-size relation (Chow, Shao & Wang, 2008, ch. 3) in the limit of infinitely many blocks.
    """
    from scipy import stats
    power = check_power(power)
    if not decision.between_run_sd:
        return None
    z = float(stats.norm.ppf(1.0 - decision.alpha / 2.0)) + float(stats.norm.ppf(power))
    return float(math.expm1(z * decision.between_run_sd))


def sequential_comparison(comparison: PairedComparison, decision: SequentialDecision) -> PairedComparison:
    """A fixed-size comparison restated with the sequential call and the CI valid at the stop.

    After optional stopping the fixed-size paired-t CI, p-value and bootstrap
    CI of ``comparison`` are not valid; this keeps its descriptive fields
    (ratio, sd, slot-position test, A/A spread) and replaces the call,
    the CI (by the repeated CI), the margin and the MDE (by that of the
    repeated CI, :func:`repeated_ci_mde`: the look's boundary and the run's own
    offset widen it), and clears the p-value and the bootstrap CI.

    Parameters
    ----------
    comparison : PairedComparison
        ``paired_comparison`` over the same blocks as ``decision``.
    decision : SequentialDecision

    Returns
    -------
    PairedComparison
        A copy of ``comparison`` with ``decision``'s call (``'continue'``
        becomes ``'inconclusive'``), repeated CI, margin and MDE (the
        fixed-size MDE is kept when the decision has no CI yet).

    Raises
    ------
    InputError
        If the two cover a different number of blocks or metric direction.
    """
    if not isinstance(comparison, PairedComparison) or not isinstance(decision, SequentialDecision):
        raise InputError("sequential_comparison takes a PairedComparison and a SequentialDecision")
    if comparison.n_blocks != decision.n_blocks or comparison.higher_is_better != decision.higher_is_better:
        raise InputError(f"the comparison covers {comparison.n_blocks} blocks, the sequential decision "
                         f"{decision.n_blocks}: analyse the same blocks")
    call = "inconclusive" if decision.call == "continue" else decision.call
    mde = repeated_ci_mde(decision)
    return dataclasses.replace(
        comparison, call=call, mde=comparison.mde if mde is None else mde, ci_low=decision.ci_low,
        ci_high=decision.ci_high,
        speedup_ci_low=decision.speedup_ci_low, speedup_ci_high=decision.speedup_ci_high,
        margin=decision.margin, margin_source=decision.margin_source, p_value=None, bootstrap_ci_low=None,
        bootstrap_ci_high=None, bootstrap_method=None,
    )
