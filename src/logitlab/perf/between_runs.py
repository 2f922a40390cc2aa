"""Between-run variance of paired speed estimates: do separate runs of one design disagree by more than
their blocks do?

A run of ``ab`` estimates the log ratio of its two arms from its blocks, and its CI carries the noise
*within* the run (slot to slot, block to block). It cannot see a difference that is fixed for the run's
life and changes from one run to the next. At ``--isolation session`` each arm is one engine object in
one worker process, loaded once per run: if two objects of one spec differ in speed (memory placement,
thread pools, caches) by an amount that changes with each pair, every run's CI is too narrow and A/As
make false calls more often than the nominal rate, which ABBA/BAAB counterbalancing cannot cancel
(issue #36, "instance effects"). Many runs of one design (A/As: the truth is 0) show it as a spread of
the runs' estimates beyond what their blocks' spread allows.

The model is the one-way random-effects analysis of variance, runs as groups and blocks as
observations: block ``j`` of run ``i`` has log ratio ``y_ij = mu + a_i + e_ij`` with
``a_i ~ N(0, tau^2)`` (the run's fixed offset, the instance effect) and ``e_ij ~ N(0, sigma^2)`` (block
noise). ``F = MS_between / MS_within`` (``scipy.stats.f_oneway``) tests ``tau = 0`` exactly under
normality, with ``(k - 1, N - k)`` degrees of freedom for ``k`` runs and ``N`` blocks; the moment
(ANOVA) estimate is ``tau^2 = max(0, (MS_between - MS_within) / n0)`` with
``n0 = (N - sum(n_i^2) / N) / (k - 1)`` (the blocks per run; unequal sizes as ``--repeats auto`` gives
them); Searle, Casella & McCulloch, *Variance Components* (Wiley 1992), sections 3.5-3.6. The overall
mean is the unweighted mean of the runs' means, with a t interval over them (``k - 1`` degrees of
freedom), so that it carries ``tau`` (exact where every run has as many blocks, approximate otherwise):
a mean away from 0 in an A/A is a systematic offset between the arms (the arm loaded first, the slot
pattern), not an instance effect.

Pooling the within-run variance over every run (rather than weighting each run by its own few-block
variance, as Cochran's Q would: ``E[1 / s^2]`` is 3 times ``1 / sigma^2`` at 3 degrees of freedom)
keeps the test exact at the 2-12 blocks a run has; it assumes the runs share one block noise, which
runs of one machine state do. ``tau`` also takes in what else is fixed for a run or drifts within it
(blocks are taken as independent), and a run with an odd or unequal number of ABBA and BAAB blocks
(``--repeats auto``) keeps part of the slot-position effect in its mean. Nothing here prints or logs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from logitlab.errors import InputError
from logitlab.jsonio import PlainRecord
from logitlab.perf.design import check_count
from logitlab.perf.equivalence import DEGENERATE_SPREAD, check_confidence

__all__ = ["BetweenRuns", "between_run_variance"]


@dataclass(frozen=True)
class BetweenRuns(PlainRecord):
    """The between-run variance of per-block log ratios (see the module docstring for the model).

    Attributes
    ----------
    n_runs : int
        Runs (groups) with 2 or more blocks; runs with fewer are left out.
    n_blocks : int
        Blocks of those runs, in all.
    effective_blocks_per_run : float
        ``n0 = (N - sum(n_i^2) / N) / (k - 1)``: ``n`` where every run has ``n`` blocks, below the mean
        size otherwise.
    f_statistic : float or None
        ``MS_between / MS_within`` (None where every run's blocks are equal: ``MS_within`` is 0).
    df_between, df_within : int
        ``k - 1`` and ``N - k``.
    p_value : float or None
        ``P(F >= f_statistic)`` under ``tau = 0`` (None where ``f_statistic`` is).
    within_sd : float
        ``sigma``: the pooled within-run sd of a block's log ratio (natural-log units).
    between_sd : float
        ``tau``: the sd of the runs' offsets (natural-log units; 0 where the runs agree as well as their
        blocks do or better).
    mean_log : float
        The unweighted mean of the runs' mean log ratios (natural-log units).
    ci_low_log, ci_high_log : float
        Its t interval over the runs' means at ``confidence``.
    confidence : float
        Of the interval.
    """

    n_runs: int
    n_blocks: int
    effective_blocks_per_run: float
    f_statistic: float | None
    df_between: int
    df_within: int
    p_value: float | None
    within_sd: float
    between_sd: float
    mean_log: float
    ci_low_log: float
    ci_high_log: float
    confidence: float

    @property
    def between_share(self) -> float:
        """``tau^2 / (tau^2 + sigma^2)``: the share of one block's variance that is the run's offset
        (the intraclass correlation), 0 to 1 (0 where both are 0)."""
        total = self.between_sd ** 2 + self.within_sd ** 2
        return self.between_sd ** 2 / total if total > 0 else 0.0

    def run_sd_inflation(self, n_blocks: int) -> float:
        """How much wider than its own CI one run of ``n_blocks`` blocks should be.

        ``sqrt(1 + n_blocks * tau^2 / sigma^2)``: the sd of a run's mean, ``sqrt(tau^2 + sigma^2 / n)``,
        over the ``sigma / sqrt(n)`` its CI assumes. 1 where ``tau`` is 0; ``inf`` where ``sigma`` is 0 and
        ``tau`` is not.

        Raises
        ------
        InputError
            ``n_blocks`` is not an integer >= 1.
        """
        n = check_count(n_blocks, "n_blocks")
        if n < 1:
            raise InputError(f"n_blocks {n_blocks!r} is below 1: give the blocks of one run")
        if self.between_sd == 0:
            return 1.0
        if self.within_sd == 0:
            return math.inf
        return math.sqrt(1.0 + n * self.between_sd ** 2 / self.within_sd ** 2)

    def between_sd_upper(self, confidence: float = 0.95) -> float | None:
        """One-sided upper confidence bound of ``tau`` (natural-log units): how large the instance effect can
        be, given these runs.

        ``F / lambda`` has the F distribution with ``(k - 1, N - k)`` degrees of freedom, where
        ``lambda = 1 + n0 tau^2 / sigma^2``; so ``lambda <= F / F_{1 - confidence}`` at ``confidence``, and
        ``tau_upper = sigma_hat * sqrt(max(0, lambda_upper - 1) / n0)`` (Searle, Casella & McCulloch 1992,
        section 3.5; exact for ``tau^2 / sigma^2`` where every run has as many blocks, and it takes
        ``sigma_hat`` for ``sigma``). None where :attr:`f_statistic` is None.

        Raises
        ------
        InputError
            ``confidence`` outside (0, 1).
        """
        from scipy import stats

        check_confidence(confidence)
        if self.f_statistic is None:
            return None
        lam = self.f_statistic / float(stats.f.ppf(1.0 - confidence, self.df_between, self.df_within))
        return self.within_sd * math.sqrt(max(0.0, lam - 1.0) / self.effective_blocks_per_run)

    def false_call_rate(self, n_blocks: int, *, confidence: float = 0.95) -> float:
        """The share of runs of ``n_blocks`` blocks whose paired-t CI would exclude 0 where the truth is 0.

        Under the model a run's t statistic is ``x`` times a t variate with ``n_blocks - 1`` degrees of
        freedom, ``x`` = :meth:`run_sd_inflation` (its mean's sd is ``x`` times what its own blocks'
        sd says, and the two are independent), so the rate is ``2 * T.sf(t_crit / x)`` with ``t_crit``
        the ``(1 + confidence) / 2`` quantile: ``1 - confidence`` where ``tau`` is 0. A plug-in of the
        estimates: ``tau`` truncated at 0 makes it lean high.

        Raises
        ------
        InputError
            ``n_blocks`` is not an integer >= 2; ``confidence`` outside (0, 1).
        """
        from scipy import stats

        check_confidence(confidence)
        n = check_count(n_blocks, "n_blocks")
        if n < 2:
            raise InputError(f"n_blocks {n_blocks!r} is below 2: a run's CI needs 2 or more blocks")
        inflation = self.run_sd_inflation(n)
        if math.isinf(inflation):
            return 1.0
        return 2.0 * float(stats.t.sf(float(stats.t.ppf((1 + confidence) / 2, n - 1)) / inflation, n - 1))


def between_run_variance(runs: Sequence[Sequence[float] | np.ndarray], *,
                         confidence: float = 0.95) -> BetweenRuns:
    """The between-run and within-run sds of per-block log ratios, runs as groups (one-way random effects).

    Parameters
    ----------
    runs : sequence of array-like
        One entry per run: its blocks' log ratios, shape ``(n_i,)``, float64, natural-log units (e.g.
        ``PairedComparison.block_log_ratios`` or ``aa_log_ratios``). Runs with fewer than 2 blocks are left
        out (they carry no within-run variance).
    confidence : float, optional
        Of the interval of the mean. Defaults to 0.95.

    Returns
    -------
    BetweenRuns
        ``F`` and its p-value, ``tau`` and ``sigma``, the mean with its t interval over the runs' means.

    Raises
    ------
    InputError
        Fewer than 2 runs with 2 or more blocks; a value that is not a finite number; a run that is not
        1-D; ``confidence`` outside (0, 1).

    Notes
    -----
    With ``k`` runs, ``N`` blocks, run means ``m_i`` and the mean of all blocks ``m``:
    ``MS_between = sum(n_i (m_i - m)^2) / (k - 1)``, ``MS_within = sum((y_ij - m_i)^2) / (N - k)``,
    ``F = MS_between / MS_within`` on ``(k - 1, N - k)`` degrees of freedom (the F of
    ``scipy.stats.f_oneway``), ``tau^2 = max(0, (MS_between - MS_within) / n0)``,
    ``n0 = (N - sum(n_i^2) / N) / (k - 1)``, ``sigma^2 = MS_within`` (Searle, Casella & McCulloch,
    *Variance Components*, Wiley 1992, sections 3.5-3.6). ``MS_within`` counts as 0 where every run's
    blocks span at most ``DEGENERATE_SPREAD``.

    Examples
    --------
    >>> r = between_run_variance([[0.0, 2.0], [4.0, 6.0]])
    >>> r.f_statistic, round(r.between_sd ** 2, 9), round(r.within_sd ** 2, 9), r.effective_blocks_per_run
    (8.0, 7.0, 2.0, 2.0)
    """
    from scipy import stats

    check_confidence(confidence)
    groups = []
    for i, run in enumerate(runs):
        try:
            x = np.asarray(run, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"run {i}: its block log ratios are not numbers: pass one list of floats a run") from None
        if x.ndim != 1:
            raise InputError(f"run {i}: its block log ratios have shape {x.shape}, not one dimension: "
                             "pass one flat list of floats a run")
        if not np.isfinite(x).all():
            raise InputError(f"run {i}: a block log ratio is not finite: leave out runs with a failed block")
        if x.size >= 2:
            groups.append(x)
    k = len(groups)
    if k < 2:
        raise InputError(f"{k} run(s) with 2 or more blocks: the between-run variance needs 2 or more")
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    total = float(sizes.sum())
    means = np.array([g.mean() for g in groups])
    grand = float(np.concatenate(groups).mean())
    ms_between = float((sizes * (means - grand) ** 2).sum()) / (k - 1)
    degenerate = all(float(np.ptp(g)) <= DEGENERATE_SPREAD for g in groups)
    ms_within = 0.0 if degenerate else float(sum(((g - g.mean()) ** 2).sum() for g in groups)) / (total - k)
    n0 = (total - float((sizes ** 2).sum()) / total) / (k - 1)
    f_stat = p_value = None
    if ms_within > 0:
        f_stat = ms_between / ms_within
        p_value = float(stats.f.sf(f_stat, k - 1, total - k))
    tau2 = max(0.0, (ms_between - ms_within) / n0)
    mean = float(means.mean())
    half = float(stats.t.ppf((1 + confidence) / 2, k - 1)) * float(means.std(ddof=1)) / math.sqrt(k)
    return BetweenRuns(n_runs=k, n_blocks=int(total), effective_blocks_per_run=n0, f_statistic=f_stat,
                       df_between=k - 1, df_within=int(total) - k, p_value=p_value,
                       within_sd=math.sqrt(ms_within), between_sd=math.sqrt(tau2), mean_log=mean,
                       ci_low_log=mean - half, ci_high_log=mean + half, confidence=confidence)
