"""The comparison methods other tools use, each applied the way its tool applies it (the anchors).

- :func:`mann_whitney_anchor`: Google Benchmark's ``tools/compare.py`` runs
  an unpaired two-sided Mann-Whitney U test on the repetitions of the two
  runs (``scipy.stats.mannwhitneyu``, alpha 0.05; ``gbench/report.py``).
- :func:`student_t_anchor`: pyperf's ``compare_to`` marks a difference
  significant with a two-sample, two-tailed Student t-test with pooled
  variance at 95 % (``pyperf/_utils.py: is_significant``).
- :func:`fixed_threshold_anchor`: the CI table of the project's seed report
  flags a scenario whose mean changed by 15 % or more.

:mod:`logitlab.perf.validity_sim` scores them against logitlab's paired
design in simulated experiments with known truth.

Nothing here prints or logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from logitlab.errors import InputError

__all__ = ["AnchorResult", "mann_whitney_anchor", "student_t_anchor", "fixed_threshold_anchor"]


@dataclass(frozen=True)
class AnchorResult:
    """One anchor method's verdict on one comparison.

    Attributes
    ----------
    flagged : bool
        The method reports a change.
    direction : {'faster', 'slower'} or None
        Which way, in the metric's "better" orientation; None if not flagged.
    p_value : float or None
        The test's p-value (None for the threshold rule).
    change : float
        ``mean(candidate) / mean(control) - 1``.
    """

    flagged: bool
    direction: str | None
    p_value: float | None
    change: float


def _samples(control: Sequence[float], candidate: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(control, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or a.size < 2 or b.size < 2:
        raise InputError(f"each side needs a 1-D sequence of at least 2 values, got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and a.min() > 0 and b.min() > 0):
        raise InputError("values must be positive and finite")
    return a, b


def _direction(change: float, higher_is_better: bool) -> str:
    return "faster" if (change > 0) == higher_is_better else "slower"


def _result(a: np.ndarray, b: np.ndarray, flag: Callable[[float], bool], p: float | None,
            higher_is_better: bool) -> AnchorResult:
    """The anchor's call: ``flag(change)`` decides, change = mean ratio candidate/control - 1."""
    change = float(b.mean() / a.mean() - 1.0)
    flagged = bool(flag(change))
    return AnchorResult(flagged, _direction(change, higher_is_better) if flagged else None, p, change)


def _p_value_anchor(control: Sequence[float], candidate: Sequence[float],
                    p_value: Callable[[np.ndarray, np.ndarray], float], *, higher_is_better: bool,
                    alpha: float) -> AnchorResult:
    """A significance-test anchor: flag a change when ``p_value(control, candidate) < alpha``."""
    a, b = _samples(control, candidate)
    p = float(p_value(a, b))
    return _result(a, b, lambda _: p < alpha, p, higher_is_better)


def mann_whitney_anchor(control: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
                        alpha: float = 0.05) -> AnchorResult:
    """Google Benchmark compare.py's U test on two runs' repetitions.

    Parameters
    ----------
    control, candidate : sequence of float
        Shape ``(n,)`` and ``(m,)``, n, m >= 2, positive.
    higher_is_better : bool
    alpha : float, optional
        Defaults to 0.05 (compare.py's ``--alpha`` default).

    Returns
    -------
    AnchorResult

    Raises
    ------
    InputError
        On fewer than 2 values a side or non-positive values.

    Notes
    -----
    ``scipy.stats.mannwhitneyu(control, candidate, alternative='two-sided')``
    as in google/benchmark ``tools/gbench/report.py`` (``calc_utest``).
    """
    from scipy import stats
    return _p_value_anchor(control, candidate, lambda a, b: stats.mannwhitneyu(a, b, alternative="two-sided").pvalue,
                           higher_is_better=higher_is_better, alpha=alpha)


def student_t_anchor(control: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
                     alpha: float = 0.05) -> AnchorResult:
    """pyperf's significance test: two-sample Student t with pooled variance.

    Parameters, result and errors as for :func:`mann_whitney_anchor`; ``alpha``
    defaults to 0.05 (pyperf's 95 % table).

    Notes
    -----
    ``scipy.stats.ttest_ind(control, candidate, equal_var=True)``, the test of
    psf/pyperf ``pyperf/_utils.py`` (``is_significant``, ``tscore``).
    """
    from scipy import stats
    return _p_value_anchor(control, candidate, lambda a, b: stats.ttest_ind(a, b, equal_var=True).pvalue,
                           higher_is_better=higher_is_better, alpha=alpha)


def fixed_threshold_anchor(control: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
                           threshold: float = 0.15) -> AnchorResult:
    """The seed CI table's rule: flag a change of the mean by ``threshold`` or more.

    ``control``, ``candidate``, ``higher_is_better``, the result and errors are
    as for :func:`mann_whitney_anchor` (``p_value`` is None); ``threshold`` is
    the relative change that flags. Defaults to 0.15 (the seed's ⚠️ line).
    """
    a, b = _samples(control, candidate)
    return _result(a, b, lambda change: abs(change) >= threshold, None, higher_is_better)
