"""Change points in a result history: where, across builds, did a metric move?

A *series* is one metric of one variant on one machine over builds in commit
order (oldest first), e.g. decode tokens/s of the control at every engine
commit that was measured. A *change point* is the first build of a new level:
the engine change that moved the metric lies between the previous measured
build and this one, which is the range to bisect.

Numeric series (``'higher-is-better'``: tokens/s; ``'lower-is-better'``:
seconds, KLD) go through three steps, the functions of
:mod:`logitlab.perf.changepoint_stats`:

1. **Scale and noise.** Positive series are analysed in natural logs, so a
   step is a ratio and noise is relative; a series with a zero or negative
   value stays linear. The noise sd ``sigma`` is estimated robustly from the
   first differences, ``1.4826 * MAD(diff) / sqrt(2)`` (Rousseeuw & Croux
   1993), which steps and one-off outliers barely move.
2. **Segmentation.** One-build excursions (slow runs) are found with a Hampel
   filter: a value more than ``outlier_sigmas * sigma`` from the median of
   its neighbourhood (2 builds either side) is an outlier (Hampel 1974;
   Pearson et al. 2016); ``min_size`` or more flagged builds in a row are a
   level, not outliers (the builds before a step, when they wobble more than
   the builds after it). Outliers are reported, replaced by that median for
   the segmentation, and left out of the tests and levels below; in a PELT
   segment (below) where more than a third of the builds were flagged (a
   level noisier than the pooled sigma, which the quieter levels set), the
   flags are judged again with that segment's own sigma. The cleaned
   series is segmented by PELT with the least-squares (``l2``) cost and the
   BIC/SIC penalty ``penalty * sigma**2 * ln(n)`` (Killick, Fearnhead &
   Eckley 2012), using the maintained ``ruptures`` library (Truong, Oudre &
   Vayatis 2020; its C PELT, ``KernelCPD`` with the linear kernel, which is
   the l2 cost).
3. **Significance (merge).** Each boundary is tested with a two-sided Welch
   t test (scipy's ``ttest_ind_from_stats(equal_var=False)``) of the segment
   before against the segment after it; the boundary with the largest
   p-value above ``max_pvalue`` is removed and its neighbours re-tested,
   until every boundary passes. This is the merge step of Apache Otava
   (formerly Hunter; Fleming et al. 2023, "Hunter: Using Change Point
   Detection to Hunt for Performance Regressions", ICPE), whose default
   ``max_pvalue`` 0.001 we keep; Otava's split step is E-divisive means
   (Matteson & James 2014), ours is PELT.

Chosen by measurement: ``benchmarks/bench_history.py`` runs this detector,
Apache Otava 0.8.0 itself, asv's step fit, a conbench-style lookback z-score
and a 5 % threshold on the same simulated histories of 100 builds (noise
1-3 %, 3 % slow outliers, a slow drift). Against Otava it detects more
steps of every size (2 %, 5 %, 10 %) and more compound regressions (five
1 % steps), with a fifth to a third of Otava's false change points, and
localises about as well; most of the gain is the outlier filter. It cuts a
slow drift of about twice the noise sd over the history into levels more
often than Otava does (a drift is a change of level, but without one true
build).

The p-values are conditional on the segmentation found in the same data, so
they are smaller than a pre-registered test's: the false-alarm rate is not
``max_pvalue`` but the rate that benchmark measures, :data:`FALSE_ALARM_RATE`
change points per 100 builds of stationary noise.

A change at the last ``min_size - 1`` builds cannot be told from an outlier
yet: it is reported once ``min_size`` builds show the new level.

``'fingerprint'`` series hold a hash per build (e.g. of the greedy tokens or of
the logits): every build whose hash differs from the previous build's is a
change point, without statistics, since identical bits are exact.

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`ChangePointSeries`):

- 1: first version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from logitlab.errors import InputError, check_choice
from logitlab.jsonio import PlainRecord, check_schema_version
from logitlab.perf.changepoint_defaults import (  # re-exported: the settings live in a light module (the CLI's help)
    DEFAULT_MAX_PVALUE,
    DEFAULT_MIN_SIZE,
    DEFAULT_OUTLIER_SIGMAS,
    DEFAULT_PENALTY,
)
from logitlab.perf.changepoint_stats import hampel, merge_segments, noise_sd, pelt, rejudge_noisy_segments
from logitlab.perf.metrics import SERIES_KINDS  # re-exported: the kinds of a history metric

__all__ = [
    "SERIES_KINDS",
    "DIRECTIONS",
    "DEFAULT_MAX_PVALUE",
    "DEFAULT_MIN_SIZE",
    "DEFAULT_PENALTY",
    "DEFAULT_OUTLIER_SIGMAS",
    "FALSE_ALARM_RATE",
    "SCHEMA_VERSION",
    "ChangePoint",
    "ChangePointSeries",
    "detect_change_points",
]

#: ``direction`` of a change point; ``'changed'`` for fingerprints.
DIRECTIONS = ("regression", "improvement", "changed")
#: Bound on false change points per 100 builds of stationary lognormal noise
#: (sd 1-3 %) with 3 % one-off slow builds (10-30 % slow), at the defaults.
#: ``benchmarks/bench_history.py`` measured 0.025-0.042 over 3 x 1000 series
#: of 100 builds per noise sd (Apache Otava 0.8.0 on the same: 0.3-0.4); the
#: bound leaves room for the spread of a small seeded set, which the tests
#: hold to it.
FALSE_ALARM_RATE = 0.1
#: Version of the JSON form of :class:`ChangePointSeries`.
SCHEMA_VERSION = 1
#: Noise floor (relative to the largest |value|) for series that are exact in parts.
_EXACT_FLOOR = 1e-12


@dataclass(frozen=True, slots=True)
class ChangePoint(PlainRecord):
    """One change point of a series.

    Attributes
    ----------
    index : int
        Position in the series (0-based build number) of the first build at
        the new level.
    previous : int
        Position of the last build at the old level: ``index - 1`` unless the
        builds in between had no value. The change lies in builds
        ``previous + 1 .. index`` (the range to bisect).
    label, previous_label : str or None
        The labels (e.g. commit ids) of ``index`` and ``previous``, when the
        series had labels.
    mean_before, mean_after : float or None
        Level of the segment before and after, outliers left out, in the
        metric's unit: the geometric mean for a log-scale series, else the
        arithmetic mean. None for fingerprints.
    change : float or None
        Relative change ``mean_after / mean_before - 1`` (0.05 = +5 %); None
        for fingerprints and for a linear series whose ``mean_before`` is 0.
    p_value : float or None
        Two-sided Welch t test of the adjacent segments, outliers left out
        (on logs for a log-scale series), conditional on the segmentation;
        None for fingerprints.
    direction : {'regression', 'improvement', 'changed'}
        In the metric's sense; ``'changed'`` for fingerprints.
    fingerprint_before, fingerprint_after : str or None
        The hashes either side, for fingerprints only.
    """

    index: int
    previous: int
    label: str | None
    previous_label: str | None
    mean_before: float | None
    mean_after: float | None
    change: float | None
    p_value: float | None
    direction: str
    fingerprint_before: str | None = None
    fingerprint_after: str | None = None

    def __post_init__(self) -> None:
        check_choice("direction", self.direction, DIRECTIONS)


@dataclass(frozen=True, slots=True)
class ChangePointSeries(PlainRecord):
    """Result of :func:`detect_change_points` for one series.

    Attributes
    ----------
    kind : {'higher-is-better', 'lower-is-better', 'fingerprint'}
    n_builds : int
        Length of the series, builds without a value included.
    n_values : int
        Builds with a value.
    change_points : tuple of ChangePoint
        In build order.
    outliers : tuple of int
        Positions of one-off values the Hampel filter set aside (numeric only).
    log_scale : bool
        The series was analysed in logs (all values positive).
    noise_sd : float or None
        Robust noise sd of the series (log units, about a relative sd, for a
        log-scale series; the metric's unit otherwise); None for
        fingerprints and series of fewer than 3 values.
    method : str
        ``'pelt-l2+welch'`` or ``'fingerprint'``.
    max_pvalue, penalty, outlier_sigmas : float
    min_size : int
        Settings used (see :func:`detect_change_points`).
    schema_version : int
    """

    kind: str
    n_builds: int
    n_values: int
    change_points: tuple[ChangePoint, ...]
    outliers: tuple[int, ...]
    log_scale: bool
    noise_sd: float | None
    method: str
    max_pvalue: float
    min_size: int
    penalty: float
    outlier_sigmas: float
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, SERIES_KINDS)
        check_schema_version(self.schema_version, SCHEMA_VERSION)
        cps = tuple(ChangePoint.from_dict(c) if isinstance(c, Mapping) else c for c in self.change_points)
        object.__setattr__(self, "change_points", cps)
        object.__setattr__(self, "outliers", tuple(int(i) for i in self.outliers))

    @property
    def regressions(self) -> tuple[ChangePoint, ...]:
        """The change points whose direction is ``'regression'``."""
        return tuple(c for c in self.change_points if c.direction == "regression")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (change points as a list of dicts, outliers as a list); :meth:`from_dict` reads
        it back."""
        d = PlainRecord.to_dict(self)
        d["change_points"] = [c.to_dict() for c in self.change_points]
        d["outliers"] = list(self.outliers)
        return d


# ---------------------------------------------------------------------------
# Input


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    return isinstance(v, (float, np.floating)) and math.isnan(float(v))


def _labels(labels: Sequence[Any] | None, n: int) -> list[str | None]:
    if labels is None:
        return [None] * n
    if isinstance(labels, (str, bytes)):
        raise InputError("labels must be a sequence of strings, one per build, not a single string")
    out = list(labels)
    if len(out) != n:
        raise InputError(f"labels has {len(out)} entries for a series of {n} builds: give one label per build")
    for i, lab in enumerate(out):
        if not isinstance(lab, str):
            raise InputError(f"label {i} is {lab!r}, not a string")
    return out


def _numeric(series: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Positions with a value and the float64 values there."""
    pos: list[int] = []
    vals: list[float] = []
    for i, v in enumerate(series):
        if _is_missing(v):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise InputError(f"build {i} has value {v!r}, which is not a number (use None for a build without one)")
        x = float(v)
        if not math.isfinite(x):
            raise InputError(f"build {i} has value {v!r}, which is not finite (use None for a build without one)")
        pos.append(i)
        vals.append(x)
    return np.asarray(pos, dtype=np.int64), np.asarray(vals, dtype=np.float64)


def _setting(value: Any, name: str, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x) or x <= low or (high is not None and x >= high):
        bound = f"in ({low}, {high})" if high is not None else f"> {low}"
        raise InputError(f"{name} {value!r} must be {bound}")
    return x


# ---------------------------------------------------------------------------
# Change points


def _direction(change_sign: float, higher_is_better: bool) -> str:
    worse = change_sign < 0 if higher_is_better else change_sign > 0
    return "regression" if worse else "improvement"


def _fingerprints(series: Sequence[Any], labels: list[str | None]) -> ChangePointSeries:
    pos: list[int] = []
    hashes: list[str] = []
    for i, v in enumerate(series):
        if v is None:
            continue
        if not isinstance(v, str) or not v:
            raise InputError(f"build {i} has fingerprint {v!r}: a fingerprint is a non-empty string (None: no value)")
        pos.append(i)
        hashes.append(v)
    cps = [
        ChangePoint(
            index=pos[j],
            previous=pos[j - 1],
            label=labels[pos[j]],
            previous_label=labels[pos[j - 1]],
            mean_before=None,
            mean_after=None,
            change=None,
            p_value=None,
            direction="changed",
            fingerprint_before=hashes[j - 1],
            fingerprint_after=hashes[j],
        )
        for j in range(1, len(hashes))
        if hashes[j] != hashes[j - 1]
    ]
    return ChangePointSeries(
        kind="fingerprint",
        n_builds=len(series),
        n_values=len(hashes),
        change_points=tuple(cps),
        outliers=(),
        log_scale=False,
        noise_sd=None,
        method="fingerprint",
        max_pvalue=DEFAULT_MAX_PVALUE,
        min_size=1,
        penalty=DEFAULT_PENALTY,
        outlier_sigmas=DEFAULT_OUTLIER_SIGMAS,
    )


def detect_change_points(
    series: Sequence[Any],
    *,
    kind: str,
    labels: Sequence[str] | None = None,
    max_pvalue: float = DEFAULT_MAX_PVALUE,
    min_size: int = DEFAULT_MIN_SIZE,
    penalty: float = DEFAULT_PENALTY,
    outlier_sigmas: float = DEFAULT_OUTLIER_SIGMAS,
) -> ChangePointSeries:
    """Find the builds where a series changed level (or hash).

    Parameters
    ----------
    series : sequence, length n_builds
        One value per build in commit order, oldest first: numbers (int or
        float, e.g. tokens/s, seconds, KLD in nats) for the numeric kinds,
        non-empty strings for ``'fingerprint'``. None (or NaN) marks a build
        without a value; it is skipped and its position kept.
    kind : {'higher-is-better', 'lower-is-better', 'fingerprint'}
        The metric's sense (decides regression vs improvement), or a hash.
    labels : sequence of str, optional
        One label per build (commit ids), copied into the change points.
    max_pvalue : float, optional
        Significance level of the merge step's Welch t test, in (0, 1).
        Defaults to 0.001 (Apache Otava's default).
    min_size : int, optional
        Fewest builds per segment (>= 2). Defaults to 3.
    penalty : float, optional
        PELT penalty multiplier ``beta`` in ``beta * sigma**2 * ln(n)`` (> 0).
        Defaults to 2 (BIC; Killick et al. 2012).
    outlier_sigmas : float, optional
        Hampel threshold in noise sds (> 0). Defaults to 5.

    Returns
    -------
    ChangePointSeries
        Change points in build order, with the levels either side, the
        relative change, the p-value and the direction; and the outliers.

    Raises
    ------
    InputError
        On an unknown ``kind``, a value of the wrong type or not finite,
        labels of the wrong length or type, or a setting out of range.

    Notes
    -----
    See the module docstring for the method and its sources. The false-alarm
    rate on stationary noise is :data:`FALSE_ALARM_RATE` per 100 builds.

    Examples
    --------
    >>> s = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 90.0, 91.0, 89.5, 90.5, 90.0, 89.0]
    >>> r = detect_change_points(s, kind="higher-is-better")
    >>> [(c.index, c.direction, round(c.change, 2)) for c in r.change_points]
    [(6, 'regression', -0.1)]
    """
    _check_series(series, kind)
    n_builds = len(series)
    labs = _labels(labels, n_builds)
    max_pvalue, penalty, outlier_sigmas, min_size = _check_settings(max_pvalue, penalty, outlier_sigmas, min_size)
    if kind == "fingerprint":
        return _fingerprints(series, labs)

    pos, vals = _numeric(series)
    log_scale = vals.size > 0 and bool(np.all(vals > 0.0))
    x = np.log(vals) if log_scale else vals
    sigma = noise_sd(x) if x.size >= 3 else None
    settings = dict(
        kind=kind,
        n_builds=n_builds,
        n_values=int(vals.size),
        log_scale=log_scale,
        noise_sd=sigma,
        method="pelt-l2+welch",
        max_pvalue=max_pvalue,
        min_size=min_size,
        penalty=penalty,
        outlier_sigmas=outlier_sigmas,
    )
    if sigma is None or x.size < 2 * min_size or float(np.ptp(x)) == 0.0:
        # Too short to hold two segments, or constant: no change point.
        return ChangePointSeries(change_points=(), outliers=(), **settings)
    # An exact series (no noise at all, only jumps) gets a noise floor far below
    # any jump, so every jump of min_size builds is a change point.
    scale = max(sigma, _EXACT_FLOOR * float(np.max(np.abs(x))))

    clean, bad = hampel(x, scale, outlier_sigmas, max_run=min_size - 1)  # min_size builds in a row: a level
    cuts = pelt(clean, penalty * scale * scale * math.log(x.size), min_size)
    bad = rejudge_noisy_segments(x, bad, cuts, scale, outlier_sigmas, max_run=min_size - 1)
    keep = ~bad
    cuts, ps = merge_segments(x, keep, cuts, max_pvalue)

    higher = kind == "higher-is-better"
    bounds = [0, *cuts, x.size]
    cps = [_change_point(x, keep, bounds[j], c, bounds[j + 2], pos=pos, labels=labs, p_value=p, log_scale=log_scale,
                         higher_is_better=higher) for j, (c, p) in enumerate(zip(cuts, ps))]
    return ChangePointSeries(
        change_points=tuple(cps),
        outliers=tuple(int(i) for i in pos[bad]),
        **settings,
    )


def _check_series(series: Any, kind: Any) -> None:
    """InputError unless ``kind`` is a series kind and ``series`` a 1-D sequence."""
    check_choice("kind", kind, SERIES_KINDS)
    if isinstance(series, (str, bytes)) or not isinstance(series, (Sequence, np.ndarray)):
        raise InputError(f"series must be a sequence of values, one per build, not {type(series).__name__}")
    if isinstance(series, np.ndarray) and series.ndim != 1:
        raise InputError(f"series must be 1-D (one value per build), got shape {series.shape}")


def _check_settings(max_pvalue: Any, penalty: Any, outlier_sigmas: Any,
                    min_size: Any) -> tuple[float, float, float, int]:
    """:func:`detect_change_points`'s settings checked, as floats and an int; InputError names the bad one."""
    max_pvalue = _setting(max_pvalue, "max_pvalue", 0.0, 1.0)
    penalty = _setting(penalty, "penalty", 0.0)
    outlier_sigmas = _setting(outlier_sigmas, "outlier_sigmas", 0.0)
    if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 2:
        raise InputError(f"min_size {min_size!r} must be an integer >= 2")
    min_size = int(min_size)
    return max_pvalue, penalty, outlier_sigmas, min_size


def _change_point(x: np.ndarray, keep: np.ndarray, lo: int, c: int, hi: int, *, pos: np.ndarray,
                  labels: list[str | None], p_value: float, log_scale: bool, higher_is_better: bool) -> ChangePoint:
    """The change point at ``c``: the levels of ``x[lo:c]`` and ``x[c:hi]`` where ``keep`` (outliers left out)."""
    before, after = x[lo:c][keep[lo:c]], x[c:hi][keep[c:hi]]
    if log_scale:
        m0, m1 = math.exp(float(np.mean(before))), math.exp(float(np.mean(after)))
    else:
        m0, m1 = float(np.mean(before)), float(np.mean(after))
    change = m1 / m0 - 1.0 if m0 != 0.0 else None
    return ChangePoint(
        index=int(pos[c]),
        previous=int(pos[c - 1]),
        label=labels[int(pos[c])],
        previous_label=labels[int(pos[c - 1])],
        mean_before=m0,
        mean_after=m1,
        change=change,
        p_value=p_value,
        direction=_direction(m1 - m0, higher_is_better),
    )
