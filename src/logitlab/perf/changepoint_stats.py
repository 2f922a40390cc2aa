"""The statistical steps of change-point detection: noise scale, outliers, segmentation, merge.

:func:`logitlab.perf.changepoint.detect_change_points` runs them in order on a
numeric series (in logs if every value is positive): :func:`noise_sd`, the
robust noise sd from the first differences (Rousseeuw & Croux 1993);
:func:`hampel`, the Hampel filter that sets one-build excursions aside
(Hampel 1974; Pearson et al. 2016); :func:`pelt`, PELT segmentation under the
l2 cost (Killick, Fearnhead & Eckley 2012) in the ``ruptures`` library
(Truong, Oudre & Vayatis 2020); :func:`merge_segments`, Apache Otava's merge
step, which drops boundaries whose two-sided Welch t test (:func:`welch_p`)
does not pass. The module docstring of :mod:`logitlab.perf.changepoint` says
why these steps, and what they were measured against.

Nothing here prints or logs.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np

__all__ = ["MAX_OUTLIER_SHARE", "noise_sd", "hampel", "rejudge_noisy_segments", "welch_p", "pelt", "merge_segments"]

#: Hampel filter half-width, in builds.
_HAMPEL_HALF = 2
#: Normal-consistency factor of the median absolute deviation.
_MAD_SCALE = 1.4826
#: Largest share of a segment's builds that can be one-off outliers. One-off slow builds are rare (3 % of
#: builds in ``benchmarks/bench_history.py``'s histories); a segment with more flagged is noisier than the
#: pooled noise sd says (a quieter level set it), and its flags are judged again with its own noise sd.
MAX_OUTLIER_SHARE = 1.0 / 3.0


def noise_sd(x: Sequence[float] | np.ndarray) -> float:
    """Robust sd of the noise of a piecewise-constant series.

    Parameters
    ----------
    x : array_like of float, shape (n,)
        The series (already in logs if it is analysed in logs).

    Returns
    -------
    float
        ``1.4826 * MAD(diff(x)) / sqrt(2)``: the normal-consistent median
        absolute deviation of the first differences (Rousseeuw & Croux 1993),
        divided by sqrt(2) since a difference carries two noise terms. A few
        steps or outliers change few differences, so they barely move it.
        Differences of exactly 0 (exact repeats: bit-exact builds, quantised
        values) are left out, so a series that is exact in parts is judged by
        the noise where it has noise. If the MAD of the rest is 0, their sd
        over sqrt(2) is used; 0.0 for a constant series or one of fewer than
        3 values.
    """
    a = np.asarray(x, dtype=np.float64)
    if a.size < 3:
        return 0.0
    d = np.diff(a)
    d = d[d != 0.0]
    if d.size == 0:
        return 0.0
    mad = float(np.median(np.abs(d - np.median(d))))
    if mad > 0.0:
        return _MAD_SCALE * mad / math.sqrt(2.0)
    return float(np.std(d)) / math.sqrt(2.0)


def hampel(x: np.ndarray, sigma: float, k: float, max_run: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cleaned series and outlier mask of the Hampel identifier (half-width 2 builds).

    Parameters
    ----------
    x : numpy.ndarray
        Shape ``(n,)``, float64: the series.
    sigma : float
        Noise sd of ``x`` (e.g. :func:`noise_sd`), in the unit of ``x``.
    k : float
        Threshold in noise sds.
    max_run : int, optional
        Longest run of consecutive flagged builds that is still a one-off excursion; a longer run is a level
        (the builds before or after a step), not outliers, and is kept. None: no limit. Without it a step
        after a few builds that wobble more than the builds after it (whose tight differences set ``sigma``)
        has every build before the step flagged, which leaves that segment empty and the step undetected.

    Returns
    -------
    cleaned : numpy.ndarray
        Shape ``(n,)``, float64: ``x`` with each outlier replaced by the
        median of its window.
    outliers : numpy.ndarray
        Shape ``(n,)``, bool: ``|x - median| > k * sigma``, the median over
        the 2 builds either side (windows truncated at the ends).

    Notes
    -----
    Hampel (1974), *J. Amer. Statist. Assoc.* 69:383-393; Pearson et al.
    (2016), *EURASIP J. Adv. Signal Process.* 2016:87.
    """
    n = x.size
    h = _HAMPEL_HALF
    med = np.empty(n)
    if n > 2 * h:
        med[h : n - h] = np.median(np.lib.stride_tricks.sliding_window_view(x, 2 * h + 1), axis=1)
    for i in [*range(min(h, n)), *range(max(n - h, h), n)]:  # truncated windows at the ends
        med[i] = np.median(x[max(0, i - h) : i + h + 1])
    bad = np.abs(x - med) > k * sigma
    if max_run is not None and bad.any():
        edges = np.flatnonzero(np.diff(np.concatenate(([0], bad.astype(np.int8), [0]))))
        for start, stop in zip(edges[::2], edges[1::2]):  # runs of flagged builds, [start, stop)
            if stop - start > max_run:
                bad[start:stop] = False
    return np.where(bad, med, x), bad


def rejudge_noisy_segments(x: np.ndarray, bad: np.ndarray, cuts: Sequence[int], sigma: float, k: float,
                           max_run: int | None = None) -> np.ndarray:
    """Outlier mask with the flags of noisier segments judged again by each one's own noise sd.

    Parameters
    ----------
    x : numpy.ndarray
        Shape ``(n,)``, float64: the series.
    bad : numpy.ndarray
        Shape ``(n,)``, bool: the :func:`hampel` mask at the pooled noise sd ``sigma``.
    cuts : sequence of int
        Segment starts (e.g. from :func:`pelt`), ascending in ``1 .. n - 1``.
    sigma : float
        The pooled noise sd the mask was made with, in the unit of ``x``.
    k, max_run
        As for :func:`hampel`.

    Returns
    -------
    numpy.ndarray
        Shape ``(n,)``, bool: ``bad``, except in each segment where more than
        :data:`MAX_OUTLIER_SHARE` of the builds are flagged; there, the
        :func:`hampel` mask of the segment alone at ``max(sigma, noise_sd(segment))``.

    Notes
    -----
    The pooled :func:`noise_sd` is the median noise of the series, so a level
    that wobbles more than the rest (a short benchmark before a step to a long
    one: the same absolute jitter is a larger share) gets many of its builds
    flagged, scattered so that :func:`hampel`'s ``max_run`` does not see a
    level; with few builds left on its side, the step's t test fails. Measured
    by ``tests/report/test_round_trip_history.py`` (sleep 0.01 then sleep 0.3,
    5 builds each): builds 1, 3 and 4 of the first 5 flagged, no change point.

    The segments stay as :func:`pelt` found them (on the series cleaned with
    the first mask); only which builds the t tests and levels leave out
    changes. The second pass's windows end at the segment's ends, so a build
    there is judged against its own level alone.
    """
    out = np.array(bad, dtype=bool, copy=True)
    bounds = [0, *cuts, x.size]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi - lo >= 3 and out[lo:hi].sum() > MAX_OUTLIER_SHARE * (hi - lo):
            _, out[lo:hi] = hampel(x[lo:hi], max(sigma, noise_sd(x[lo:hi])), k, max_run)
    return out


def welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Welch t test p-value of two samples; exact answers where both sides are constant.

    Parameters
    ----------
    a, b : numpy.ndarray
        Shapes ``(n_a,)`` and ``(n_b,)``, float64.

    Returns
    -------
    float
        scipy's ``ttest_ind_from_stats(equal_var=False)`` p-value; 1.0 with
        fewer than 2 values on a side or a non-finite result; 0.0 or 1.0
        when both sides are constant (different or equal means).
    """
    from scipy import stats
    if a.size < 2 or b.size < 2:
        return 1.0
    ma, mb = float(np.mean(a)), float(np.mean(b))
    sa, sb = float(np.std(a, ddof=1)), float(np.std(b, ddof=1))
    scale = max(abs(ma), abs(mb), 1e-300)
    if sa + sb <= 1e-13 * scale:
        return 0.0 if abs(ma - mb) > 1e-12 * scale else 1.0
    # the summary-statistics form of scipy's Welch test: the same p-value as
    # ttest_ind(a, b, equal_var=False), without its array-API overhead
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind_from_stats(ma, sa, a.size, mb, sb, b.size, equal_var=False).pvalue)
    return p if math.isfinite(p) else 1.0


def pelt(x: np.ndarray, pen: float, min_size: int) -> list[int]:
    """Exact PELT segmentation under the l2 cost: positions where a new segment starts.

    Parameters
    ----------
    x : numpy.ndarray
        Shape ``(n,)``, float64: the (cleaned) series.
    pen : float
        Penalty per change point, in squared units of ``x``.
    min_size : int
        Fewest values per segment.

    Returns
    -------
    list of int
        Ascending, in ``1 .. n - 1``.

    Notes
    -----
    Killick, Fearnhead & Eckley (2012), *J. Amer. Statist. Assoc.*
    107(500):1590-1598, in ``ruptures`` (Truong, Oudre & Vayatis 2020,
    *Signal Process.* 167:107299).
    """
    import ruptures  # lazy: only the numeric history analysis needs it

    # KernelCPD with the linear kernel is PELT with the l2 cost in ruptures'
    # C code: the same breakpoints as ``Pelt(model="l2", jump=1)`` (checked on
    # random series), ~1000x faster (n = 1000: 1.3 ms against 17 s).
    algo = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(x)
    return [int(b) for b in algo.predict(pen=pen) if b < x.size]


def merge_segments(x: np.ndarray, keep: np.ndarray, cuts: list[int],
                   max_pvalue: float) -> tuple[list[int], list[float]]:
    """Otava's merge step: drop the least significant boundary until all pass.

    Parameters
    ----------
    x : numpy.ndarray
        Shape ``(n,)``, float64: the series.
    keep : numpy.ndarray
        Shape ``(n,)``, bool: the values the t tests see (outliers left out).
    cuts : list of int
        Segment starts (e.g. from :func:`pelt`).
    max_pvalue : float
        A boundary whose :func:`welch_p` of the segments either side is
        above it is removed (the largest first) and its neighbours re-tested.

    Returns
    -------
    cuts : list of int
        The boundaries left.
    p_values : list of float
        Their p-values, one per boundary.

    Notes
    -----
    Fleming et al. (2023), "Hunter: Using Change Point Detection to Hunt for
    Performance Regressions", ICPE (Apache Otava).
    """
    cuts = list(cuts)
    n = x.size

    def p_at(i: int) -> float:
        lo = cuts[i - 1] if i > 0 else 0
        hi = cuts[i + 1] if i + 1 < len(cuts) else n
        c = cuts[i]
        return welch_p(x[lo:c][keep[lo:c]], x[c:hi][keep[c:hi]])

    ps = [p_at(i) for i in range(len(cuts))]
    while cuts:
        j = int(np.argmax(ps))
        if ps[j] <= max_pvalue:
            break
        del cuts[j], ps[j]
        for i in (j - 1, j):
            if 0 <= i < len(cuts):
                ps[i] = p_at(i)
    return cuts, ps

