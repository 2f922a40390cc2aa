"""Power of the paired design: the minimum detectable effect and the blocks needed.

Both work on the standard deviation of the per-block log ratios (see
:func:`logitlab.perf.block_ratios.block_log_ratios`). Nothing here prints or logs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from logitlab.errors import InputError
from logitlab.perf.design import check_count

__all__ = ["minimum_detectable_effect", "blocks_needed", "mde_log", "detectable_log_change", "check_power"]


def check_power(power: Any) -> float:
    """``power`` as a float in (0, 1).

    Raises:
        InputError: not a number in (0, 1).
    """
    if isinstance(power, bool) or not isinstance(power, (int, float, np.floating)) or not 0.0 < power < 1.0:
        raise InputError(f"power {power!r} is not in (0, 1): use e.g. 0.8")
    return float(power)


def _check_power_args(alpha: float, power: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha {alpha!r} is not in (0, 1): use e.g. 0.05")
    check_power(power)


def _check_sd(sd: Any) -> float:
    if isinstance(sd, bool) or not isinstance(sd, (int, float, np.floating)):
        raise InputError(f"sd {sd!r} is not a number: give the sd of block log ratios")
    if not math.isfinite(float(sd)) or sd < 0:
        raise InputError(f"sd {sd!r} is not finite and >= 0: give the sd of block log ratios")
    return float(sd)


def mde_log(sd: float, n: int, alpha: float, power: float) -> float:
    """The MDE in log units: ``(t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n)`` (n >= 2, unchecked)."""
    from scipy import stats
    return detectable_log_change(float(stats.t.ppf(1.0 - alpha / 2.0, n - 1)), sd / math.sqrt(n), n - 1, power)


def detectable_log_change(critical: float, se: float, df: int, power: float) -> float:
    """``(critical + t_{power, df}) * se``, natural-log units (unchecked): the true log change at which an
    interval ``estimate +- critical * se`` excludes 0 with probability ``power`` (the relation behind
    :func:`minimum_detectable_effect`; Chow, Shao & Wang, 2008, ch. 3)."""
    from scipy import stats
    return (critical + float(stats.t.ppf(power, df))) * se


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
    n = check_count(n_blocks, "n_blocks")
    if n < 2:
        raise InputError(f"n_blocks {n_blocks!r} is below 2: a t-based MDE needs 2 or more blocks")
    _check_power_args(alpha, power)
    return float(np.expm1(mde_log(sd, n, alpha, power)))


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
    from scipy import stats
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
    while mde_log(sd, n, alpha, power) > target:
        n += 1
    return n
