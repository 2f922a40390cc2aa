"""The equivalence call: faster / slower / equivalent / inconclusive against a margin δ.

One rule for every speed decision in logitlab (``ab``, ``bench run``,
``bench compare``): with the confidence interval ``[lo, hi]`` of the log
ratio in "better" orientation (positive = the candidate is better) and
``b = log(1 + δ)``:

- ``equivalent`` when the CI lies inside ``(-b, b)``;
- ``faster`` when the test of "better" rejects (by default: ``lo > 0``, the
  whole CI above 1);
- ``slower`` when the test of "worse" rejects (by default: ``hi < 0``);
- else ``inconclusive``.

This is the region-of-practical-equivalence rule (Kruschke, 2018, *Adv.
Methods Pract. Psychol. Sci.* 1(2):270-280) applied to a frequentist CI; the
equivalence part is the two one-sided tests of Schuirmann (1987,
*J. Pharmacokinet. Biopharm.* 15:657-680). ``bench compare`` names the same
calls as a benchmark dashboard does (:data:`STATUS_OF_CALL`: improved /
regressed / unchanged / inconclusive) and decides "changed" by a
Holm-adjusted test of "beyond the margin" instead of "beyond 1".

The margin δ has one home too: an option, else calibrated from A/A data of
the same experiment (:func:`aa_margin_from_logs`, :func:`noise_margin`), else
:data:`DEFAULT_MARGIN` (:func:`choose_margin`).

Nothing here prints or logs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from logitlab.errors import InputError

__all__ = [
    "CALLS",
    "STATUSES",
    "STATUS_OF_CALL",
    "MARGIN_SOURCES",
    "DEFAULT_MARGIN",
    "MIN_AA_MARGIN",
    "MAX_AA_MARGIN",
    "MIN_AA_BLOCKS",
    "DEGENERATE_SPREAD",
    "check_confidence",
    "check_margin",
    "choose_margin",
    "aa_margin_from_logs",
    "noise_margin",
    "three_way_call",
]

#: The calls of a paired speed decision ("faster" = better in the metric's direction).
CALLS = ("faster", "slower", "equivalent", "inconclusive")
#: The same calls as ``bench compare`` names them, worst first (its tables sort by this).
STATUSES = ("regressed", "inconclusive", "unchanged", "improved")
#: call -> status.
STATUS_OF_CALL = {"faster": "improved", "slower": "regressed", "equivalent": "unchanged",
                  "inconclusive": "inconclusive"}
#: Where an equivalence margin came from: ``option``; ``a/a`` (the A/A blocks of the same
#: experiment); ``noise`` (a ``bench calibrate`` profile); ``calibration`` (a sequential run's δ
#: pre-registered from a calibration file, :mod:`logitlab.perf.prereg`); ``default``.
MARGIN_SOURCES = ("option", "a/a", "noise", "calibration", "default")
#: Relative equivalence margin used when neither an option nor A/A data give one.
DEFAULT_MARGIN = 0.02
#: Floor of a calibrated margin (a relative change of 1 %).
MIN_AA_MARGIN = 0.01
#: Cap of the A/A-derived margin: above it, "equivalent" would no longer mean negligible.
MAX_AA_MARGIN = 0.05
#: Fewest A/A blocks that calibrate a margin.
MIN_AA_BLOCKS = 3
#: Spread (in log units) at or below which a set of log ratios counts as identical:
#: float64 rounding of logs of identical values is far below this.
DEGENERATE_SPREAD = 1e-13


def check_confidence(confidence: Any) -> float:
    """``confidence`` as a float in (0, 1).

    Raises:
        InputError: not a real number strictly between 0 and 1.
    """
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float, np.floating))
        or not 0.0 < float(confidence) < 1.0
    ):
        raise InputError(f"confidence {confidence!r} is not in (0, 1): use e.g. 0.95")
    return float(confidence)


def check_margin(margin: Any, *, option: str | None = None) -> float:
    """An equivalence margin δ: a relative change strictly between 0 and 1 (0.02 = 2 %).

    Args:
        margin: the value to check.
        option: the command-line flag it came from (``"--margin"``), which the
            message then names; None for an API argument.

    Raises:
        InputError: anything else (``--margin 5`` would mean ±500 %).
    """
    is_number = isinstance(margin, (int, float, np.floating)) and not isinstance(margin, bool)
    if is_number and math.isfinite(float(margin)) and 0.0 < float(margin) < 1.0:
        return float(margin)
    if option is not None:
        shown = f"{margin:g}" if is_number else repr(margin)
        raise InputError(f"{option} must be a fraction between 0 and 1 (0.02 = 2 %), got {shown}")
    raise InputError(f"margin {margin!r} is not a positive relative change below 1: use e.g. 0.02 for 2 %")


def choose_margin(option: float | None, calibrated: float | None, source: str = "a/a") -> tuple[float, str]:
    """The margin δ to use and where it came from: the option, else ``calibrated``, else the default.

    Args:
        option: δ given by the user (already checked), or None.
        calibrated: δ calibrated from A/A data (``a/a`` or ``noise``), or None.
        source: the :data:`MARGIN_SOURCES` name of ``calibrated``.

    Returns:
        ``(delta, source)``.
    """
    if option is not None:
        return float(option), "option"
    if calibrated is not None:
        return float(calibrated), source
    return DEFAULT_MARGIN, "default"


def aa_margin_from_logs(aa: np.ndarray, confidence: float) -> float | None:
    """δ from the per-block A/A log ratios of the same experiment; None with fewer than 3 blocks.

    ``delta = min(0.05, max(0.01, expm1(t_{(1+c)/2, n-1} * sd(aa) / sqrt(n))))``:
    the half-width of the ``confidence`` CI of the control-vs-control
    comparison in the same blocks, floored at 1 % and capped at 5 % (see
    :func:`logitlab.perf.block_ratios.aa_margin` for the reasoning).

    Args:
        aa: shape ``(n_blocks,)``, float64, natural-log units.
        confidence: in (0, 1).
    """
    from scipy import stats
    n = aa.size
    if n < MIN_AA_BLOCKS:
        return None
    sd = 0.0 if float(np.ptp(aa)) <= DEGENERATE_SPREAD else float(np.std(aa, ddof=1))
    q = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1))
    return min(MAX_AA_MARGIN, max(MIN_AA_MARGIN, float(np.expm1(q * sd / math.sqrt(n)))))


def noise_margin(ratio_sd_log: float, confidence: float) -> float:
    """δ of one scenario from a ``bench calibrate`` profile: ``max(0.01, expm1(z_{(1+c)/2} * sd))``.

    The change that a single A/A comparison of two benchmark runs stays
    inside with probability ``confidence`` (normal quantile ``z``).

    Args:
        ratio_sd_log: sd of the log ratio of two runs (natural-log units, >= 0).
        confidence: in (0, 1).
    """
    from scipy import stats
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    return max(MIN_AA_MARGIN, float(np.expm1(z * ratio_sd_log)))


def three_way_call(lo: float, hi: float, bound: float, *, better: bool | None = None,
                   worse: bool | None = None) -> str:
    """The call from a CI ``[lo, hi]`` of the log ratio in better orientation and ``bound = log(1 + δ)``.

    Args:
        lo, hi: CI of the log ratio, oriented so that positive means the
            candidate is better (negate and swap for lower-is-better metrics).
        bound: ``log1p(delta)`` (> 0).
        better, worse: the outcome of the test of a change in each
            direction; None (default): ``lo > 0`` and ``hi < 0`` (the whole CI
            on one side of 1). ``bench compare`` passes Holm-adjusted tests of
            "beyond the margin".

    Returns:
        One of :data:`CALLS`: ``equivalent`` if ``-bound < lo`` and
        ``hi < bound``; else ``faster`` if ``better``; ``slower`` if
        ``worse``; else ``inconclusive``.
    """
    if -bound < lo and hi < bound:
        return "equivalent"
    if (lo > 0.0) if better is None else better:
        return "faster"
    if (hi < 0.0) if worse is None else worse:
        return "slower"
    return "inconclusive"
