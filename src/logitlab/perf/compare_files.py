"""Compare two benchmark files scenario by scenario.

``compare_benchmarks(base, candidate)`` gives, per scenario present in both,
the candidate/base ratio of geometric means with a bootstrap CI over the
samples, a status from the CI *and* an equivalence margin δ (regressed /
improved / unchanged / inconclusive), Holm's step-down control of the
family-wise error rate over the regressed/improved flags, and the geometric
mean of the ratios over scenarios. Scenarios found on one side only are
listed, never dropped silently. The per-scenario margins can come from an
A/A calibration (:mod:`logitlab.perf.calibration`).

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`FileComparison`):

- 1: first version.
- 2: ``ScenarioComparison.reason`` left out (the report writes it); ``kind``; ``FileComparison.host``
  (the machine that compared, for the report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.jsonio import PlainRecord, ResultRecord
from logitlab.manifest import host_info
from logitlab.perf.calibration import NoiseProfile
from logitlab.perf.equivalence import (
    STATUS_OF_CALL,
    STATUSES,
    check_confidence,
    check_margin,
    choose_margin,
    three_way_call,
)
from logitlab.perf.metrics import HIGHER, LOWER, Metric, Metrics, put_metric
from logitlab.perf.readers.base import BenchmarkFile, Scenario

__all__ = [
    "MIN_SAMPLES_FOR_CI",
    "SCHEMA_VERSION",
    "ScenarioComparison",
    "FileComparison",
    "holm_adjust",
    "compare_benchmarks",
]

#: Fewest samples per side for a bootstrap CI; fewer gives no CI.
MIN_SAMPLES_FOR_CI = 5
SCHEMA_VERSION = 2


# ---------------------------------------------------------------------------
# Multiple comparisons


def holm_adjust(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values.

    Parameters
    ----------
    p_values : sequence of float
        ``m`` raw p-values in [0, 1].

    Returns
    -------
    numpy.ndarray
        Shape ``(m,)``, float64: ``p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j))``
        over the p-values sorted ascending, returned in input order. Rejecting
        where ``p_adj < alpha`` controls the family-wise error rate at
        ``alpha`` under any dependence.

    Notes
    -----
    Holm, S. (1979). A simple sequentially rejective multiple test procedure.
    *Scand. J. Statist.* 6(2):65-70.

    Examples
    --------
    >>> holm_adjust([0.01, 0.04, 0.03]).round(2)
    array([0.03, 0.06, 0.06])
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.maximum.accumulate(scaled)
    out = np.empty(m)
    out[order] = adjusted
    return out


# ---------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class ScenarioComparison(PlainRecord):
    """One scenario of a :class:`FileComparison`.

    Attributes
    ----------
    name, unit : str
    higher_is_better : bool
    base, candidate : float
        The values shown (geometric mean of the samples, or the tool's
        summary statistic), in ``unit``.
    base_n, candidate_n : int
        Samples per side (0: summary only).
    statistic : str
        How ``base``/``candidate`` were obtained.
    ratio : float
        ``candidate / base`` of the metric (for times, 1.05 = 5 % slower).
    change : float
        ``ratio - 1``.
    ci_low, ci_high : float or None
        CI of ``ratio`` at ``confidence``; None when it cannot be given.
    ci_method : str
        ``'bootstrap (independent)'``, ``'bootstrap (paired by run)'``,
        ``'A/A noise'`` (summary only, CI from the calibrated run-to-run
        spread) or ``'none'``.
    margin : float
        Relative equivalence margin δ used (0.05 = 5 %).
    margin_source : {'noise', 'option', 'default'}
    p_change : float or None
        Two-sided p-value of "the change lies beyond the margin" (bootstrap or
        normal); None without a CI.
    p_holm : float or None
        ``p_change`` after Holm's adjustment across the scenarios with one.
    status : {'regressed', 'inconclusive', 'unchanged', 'improved'}
        :data:`~logitlab.perf.equivalence.STATUS_OF_CALL` of the three-way call.
    note : str
        What the readers dropped or assumed.
    """

    name: str
    unit: str
    higher_is_better: bool
    base: float
    candidate: float
    base_n: int
    candidate_n: int
    statistic: str
    ratio: float
    change: float
    ci_low: float | None
    ci_high: float | None
    ci_method: str
    margin: float
    margin_source: str
    p_change: float | None
    p_holm: float | None
    status: str
    note: str = ""


@dataclass(frozen=True)
class FileComparison(ResultRecord):
    """All scenarios of a base file against a candidate file.

    Attributes
    ----------
    base_path, candidate_path, format : str
    confidence : float
        Level of the per-scenario CIs; ``1 - confidence`` is the family-wise
        error rate Holm's procedure holds for the regressed/improved flags.
    scenarios : list of ScenarioComparison
        In base-file order.
    only_base, only_candidate : list of str
        Scenarios found in one file only (not compared).
    geomean_ratio : float or None
        Geometric mean of the scenarios' ratios (candidate/base).
    geomean_ci_low, geomean_ci_high : float or None
        Bootstrap CI of ``geomean_ratio`` when every scenario has a bootstrap
        (it reflects sampling noise inside the two runs only).
    counts : dict of str to int
        Scenarios per status.
    noise_path : str or None
        The calibration file used for the margins, if any.
    base_context, candidate_context : dict
        Host/run information the files carry.
    n_bootstrap, seed : int
    host : dict
        :func:`logitlab.manifest.host_info` of the machine that compared them.
    """

    KIND: ClassVar[str] = "bench-compare"
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    base_path: str
    candidate_path: str
    format: str
    confidence: float
    scenarios: list[ScenarioComparison]
    only_base: list[str]
    only_candidate: list[str]
    geomean_ratio: float | None
    geomean_ci_low: float | None
    geomean_ci_high: float | None
    counts: dict[str, int]
    noise_path: str | None
    base_context: dict[str, Any] = field(default_factory=dict)
    candidate_context: dict[str, Any] = field(default_factory=dict)
    n_bootstrap: int = 9999
    seed: int = 0
    host: dict[str, Any] = field(default_factory=dict)
    time: str = "real"

    def history_metrics(self) -> Metrics:
        """What the history keeps of a ``bench compare``: variant -> metric name ->
        :class:`~logitlab.perf.metrics.Metric`.

        ``candidate``: each scenario's summary in its unit and sense (the files
        carry no samples a comparison keeps); ``ratio``: each scenario's
        candidate/base ratio. The base file is another build, so its values are
        not recorded under this commit.
        """
        out: Metrics = {}
        for s in self.scenarios:
            kind = HIGHER if s.higher_is_better else LOWER
            if s.candidate > 0 and math.isfinite(s.candidate):
                put_metric(out, "candidate", s.name, Metric(kind, float(s.candidate), s.unit))
            if math.isfinite(s.ratio):
                put_metric(out, "ratio", s.name, Metric(kind, float(s.ratio), "ratio"))
        return out

    def worst_first(self) -> list[ScenarioComparison]:
        """Scenarios by status (regressed first), then by how much worse they got."""
        def key(s: ScenarioComparison) -> tuple[int, float]:
            worse = math.log(s.ratio) * (-1.0 if s.higher_is_better else 1.0)
            return STATUSES.index(s.status), -worse
        return sorted(self.scenarios, key=key)


# ---------------------------------------------------------------------------
# Comparison


def _interleaved(base: Scenario, cand: Scenario) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per-run (base logs, candidate logs) pairs if the two files' runs alternate in time, else None."""
    if base.groups is None or cand.groups is None:
        return None
    b_runs = sorted(set(base.groups))
    c_runs = sorted(set(cand.groups))
    if len(b_runs) != len(c_runs) or len(b_runs) < 2:
        return None
    merged = sorted([(t, 0) for t in b_runs] + [(t, 1) for t in c_runs])
    if any({merged[2 * i][1], merged[2 * i + 1][1]} != {0, 1} for i in range(len(b_runs))):
        return None
    b_log, c_log = np.log(base.samples), np.log(cand.samples)
    b_g, c_g = np.asarray(base.groups), np.asarray(cand.groups)
    return [(b_log[b_g == tb], c_log[c_g == tc]) for tb, tc in zip(b_runs, c_runs)]


def _bootstrap_log_ratio(base: Scenario, cand: Scenario, confidence: float, n_resamples: int,
                         rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Bootstrap distribution of mean(log cand) - mean(log base), shape (n_resamples,)."""
    from scipy import stats
    pairs = _interleaved(base, cand)
    if pairs is not None:
        diffs = np.array([c.mean() - b.mean() for b, c in pairs])
        res = stats.bootstrap((diffs,), np.mean, n_resamples=n_resamples, method="percentile",
                              confidence_level=confidence, rng=rng, vectorized=True)
        return np.asarray(res.bootstrap_distribution), "bootstrap (paired by run)"
    b, c = np.log(base.samples), np.log(cand.samples)

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(y, axis=axis) - np.mean(x, axis=axis)

    res = stats.bootstrap((b, c), stat, n_resamples=n_resamples, method="percentile", confidence_level=confidence,
                          rng=rng, vectorized=True, batch=max(1, 2_000_000 // max(b.size, c.size)))
    return np.asarray(res.bootstrap_distribution), "bootstrap (independent)"


def compare_benchmarks(
    base: BenchmarkFile,
    candidate: BenchmarkFile,
    *,
    margin: float | None = None,
    noise: NoiseProfile | None = None,
    noise_path: str | None = None,
    confidence: float = 0.95,
    n_bootstrap: int = 9999,
    seed: int = 0,
) -> FileComparison:
    """Compare every scenario of ``candidate`` with the same scenario of ``base``.

    Parameters
    ----------
    base, candidate : BenchmarkFile
        Same format (see :func:`logitlab.perf.readers.read_benchmark_file`).
    margin : float, optional
        Relative equivalence margin δ (0 < δ < 1) for every scenario. Overrides
        ``noise``.
    noise : NoiseProfile, optional
        Per-scenario margins from :func:`~logitlab.perf.calibration.calibrate_noise`; scenarios it lacks
        get ``margin`` or :data:`~logitlab.perf.equivalence.DEFAULT_MARGIN` (2 %).
    noise_path : str, optional
        Where ``noise`` came from, for the report.
    confidence : float, optional
        CI level, in (0, 1). Defaults to 0.95.
    n_bootstrap : int, optional
        Bootstrap resamples (>= 100). Defaults to 9999.
    seed : int, optional
        Seed of the bootstrap. Defaults to 0.

    Returns
    -------
    FileComparison

    Raises
    ------
    InputError
        If the formats differ, no scenario is in both files (both lists are
        named), or an option is out of range.

    Notes
    -----
    Ratio: ``exp(mean(log c) - mean(log b))``, the ratio of geometric means.
    CI: percentile bootstrap (``scipy.stats.bootstrap``) resampling each
    side's samples independently; when the tool recorded run start times and
    the base and candidate runs alternate (pyperf ``--append`` done in turn),
    the per-run log differences are resampled as pairs instead. With fewer
    than :data:`MIN_SAMPLES_FOR_CI` samples on a side, or only a summary, no
    bootstrap CI is given; if ``noise`` has the scenario, the CI is
    ``ratio * exp(±z * ratio_sd_log)`` from the A/A spread instead.

    Status, with ``w`` the log ratio in "worse" orientation (negated for
    higher-is-better metrics), ``b = log(1 + δ)`` and the CI ``[lo, hi]`` of
    ``w``: a scenario is *regressed* (*improved*) when the test that ``w``
    lies beyond ``+b`` (``-b``) rejects after Holm's adjustment over all
    scenarios with a CI — without adjustment exactly "the whole CI is beyond
    the margin"; *unchanged* when the CI lies inside ``(-b, b)``; else
    *inconclusive*. This is the region-of-practical-equivalence rule
    (Kruschke, 2018, *Adv. Methods Pract. Psychol. Sci.* 1(2):270-280): a
    change inside the machine's noise margin is never flagged, however
    narrow its CI. The bootstrap p-value of "beyond ``+b``" is
    ``(1 + #{w* <= b}) / (B + 1)``, and ``p_change`` twice the smaller side.
    Multiple comparisons: Holm (1979), see :func:`holm_adjust`.

    Unlike Google Benchmark's compare.py (Mann-Whitney U on the two files'
    repetitions) and pyperf (Student t-test), a tiny but significant change
    is not a regression unless it clears the margin.
    """
    from scipy import stats
    confidence, margin = _check_options(base, candidate, margin=margin, confidence=confidence,
                                        n_bootstrap=n_bootstrap)
    common, only_base, only_cand = _match_scenarios(base, candidate)
    rng = np.random.default_rng(seed)
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    rows = [_scenario_row(base, candidate, name, margin=margin, noise=noise, confidence=confidence,
                          n_bootstrap=n_bootstrap, rng=rng, z=z) for name in common]
    tested = [i for i, r in enumerate(rows) if r["p_change"] is not None]
    adjusted = holm_adjust([rows[i]["p_change"] for i in tested])
    p_holm = {i: float(p) for i, p in zip(tested, adjusted)}
    alpha = 1.0 - confidence
    results = [_scenario_comparison(r, p_holm.get(i), alpha) for i, r in enumerate(rows)]
    logs = np.array([r["log_ratio"] for r in rows])
    g_lo, g_hi = _geomean_ci([r["dist"] for r in rows], alpha)
    counts = {s: sum(x.status == s for x in results) for s in STATUSES}
    return FileComparison(
        base_path=base.path, candidate_path=candidate.path, format=base.format, confidence=confidence,
        scenarios=results, only_base=only_base, only_candidate=only_cand,
        geomean_ratio=float(math.exp(logs.mean())), geomean_ci_low=g_lo, geomean_ci_high=g_hi, counts=counts,
        noise_path=noise_path, base_context=dict(base.context), candidate_context=dict(candidate.context),
        n_bootstrap=n_bootstrap, seed=seed, host=host_info(), time=base.time,
    )


def _check_options(base: BenchmarkFile, candidate: BenchmarkFile, *, margin: float | None, confidence: float,
                   n_bootstrap: int) -> tuple[float, float | None]:
    """The checked confidence and margin; InputError on an option out of range or files of another clock or tool."""
    confidence = check_confidence(confidence)
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int) or n_bootstrap < 100:
        raise InputError(f"n_bootstrap {n_bootstrap!r} must be an integer >= 100")
    if margin is not None:
        margin = check_margin(margin, option="--margin")
    if base.time != candidate.time:
        raise InputError(f"{base.path} holds {base.time} time but {candidate.path} {candidate.time} time: "
                         "compare the same clock")
    if base.format != candidate.format:
        raise InputError(f"mixed formats: {base.path} is {base.format} output but {candidate.path} is "
                         f"{candidate.format}: compare files from the same tool")
    return confidence, margin


def _match_scenarios(base: BenchmarkFile, candidate: BenchmarkFile) -> tuple[list[str], list[str], list[str]]:
    """Scenario names in both files (base-file order), in the base only, in the candidate only."""
    common = [n for n in base.scenarios if n in candidate.scenarios]
    only_base = [n for n in base.scenarios if n not in candidate.scenarios]
    only_cand = [n for n in candidate.scenarios if n not in base.scenarios]
    if not common:
        raise InputError(
            f"no scenario is in both files: {base.path} has {_names(only_base)}; {candidate.path} has "
            f"{_names(only_cand)}"
        )
    return common, only_base, only_cand


def _scenario_row(base: BenchmarkFile, candidate: BenchmarkFile, name: str, *, margin: float | None,
                  noise: NoiseProfile | None, confidence: float, n_bootstrap: int, rng: np.random.Generator,
                  z: float) -> dict[str, Any]:
    """One scenario's log ratio, margin, CI and p-value of "beyond the margin", before Holm's adjustment."""
    from scipy import stats
    b, c = base.scenarios[name], candidate.scenarios[name]
    if b.unit != c.unit or b.higher_is_better != c.higher_is_better:
        raise InputError(f"scenario {name!r} is in {b.unit} in {base.path} but {c.unit} in {candidate.path}")
    sign = -1.0 if b.higher_is_better else 1.0  # log ratio -> "worse" orientation
    log_ratio = math.log(c.summary) - math.log(b.summary)
    calibrated = noise.scenarios[name].margin if noise is not None and name in noise.scenarios else None
    delta, source = choose_margin(margin, calibrated, "noise")
    bound = math.log1p(delta)
    ci = p_change = None
    worse_side = sign * log_ratio > 0
    dist = None
    if len(b.samples) >= MIN_SAMPLES_FOR_CI and len(c.samples) >= MIN_SAMPLES_FOR_CI:
        dist, method = _bootstrap_log_ratio(b, c, confidence, n_bootstrap, rng)
        alpha = 1.0 - confidence
        lo, hi = np.quantile(dist, [alpha / 2.0, 1.0 - alpha / 2.0])
        ci = (float(lo), float(hi))
        w = sign * dist
        p_worse = (1.0 + np.count_nonzero(w <= bound)) / (w.size + 1.0)
        p_better = (1.0 + np.count_nonzero(w >= -bound)) / (w.size + 1.0)
        p_change = min(1.0, 2.0 * min(p_worse, p_better))
        worse_side = p_worse < p_better
    elif noise is not None and name in noise.scenarios:
        sd = noise.scenarios[name].ratio_sd_log
        method = "A/A noise"
        if sd > 0:
            ci = (log_ratio - z * sd, log_ratio + z * sd)
            w = sign * log_ratio
            p_worse = float(stats.norm.sf((w - bound) / sd))
            p_better = float(stats.norm.cdf((w + bound) / sd))
            p_change = min(1.0, 2.0 * min(p_worse, p_better))
            worse_side = p_worse < p_better
    else:
        method = "none"
    return dict(name=name, b=b, c=c, sign=sign, log_ratio=log_ratio, delta=delta, source=source, bound=bound,
                ci=ci, p_change=p_change, worse_side=worse_side, method=method, dist=dist)


def _scenario_comparison(r: dict[str, Any], p_holm: float | None, alpha: float) -> ScenarioComparison:
    """The :class:`ScenarioComparison` of one row of :func:`_scenario_row`, its status after Holm's adjustment."""
    b, c, sign, bound = r["b"], r["c"], r["sign"], r["bound"]
    ratio = math.exp(r["log_ratio"])
    if r["ci"] is None:
        status = "inconclusive"
    else:
        lo, hi = r["ci"]
        w_lo, w_hi = sorted((sign * lo, sign * hi))
        changed = p_holm < alpha
        # "better" orientation is minus "worse"; changed beyond the margin, on the side the test found
        status = STATUS_OF_CALL[three_way_call(-w_hi, -w_lo, bound, better=changed and not r["worse_side"],
                                               worse=changed and r["worse_side"])]
    note = "; ".join(x for x in (b.note and f"base: {b.note}", c.note and f"candidate: {c.note}") if x)
    return ScenarioComparison(
        name=r["name"], unit=b.unit, higher_is_better=b.higher_is_better, base=b.summary, candidate=c.summary,
        base_n=len(b.samples), candidate_n=len(c.samples),
        statistic=b.statistic if b.statistic.split(" of ")[0] == c.statistic.split(" of ")[0]
        else f"base: {b.statistic}; candidate: {c.statistic}",
        ratio=ratio, change=ratio - 1.0,
        ci_low=None if r["ci"] is None else math.exp(r["ci"][0]),
        ci_high=None if r["ci"] is None else math.exp(r["ci"][1]),
        ci_method=r["method"], margin=r["delta"], margin_source=r["source"],
        p_change=r["p_change"], p_holm=p_holm, status=status, note=note,
    )


def _geomean_ci(distributions: list[np.ndarray | None], alpha: float) -> tuple[float | None, float | None]:
    """Bootstrap CI of the geometric-mean ratio over scenarios; None, None unless every scenario has a bootstrap."""
    if not all(d is not None for d in distributions):
        return None, None
    n = min(d.size for d in distributions)  # type: ignore[union-attr]
    combined = np.mean([d[:n] for d in distributions], axis=0)  # type: ignore[index]
    g_lo, g_hi = (float(math.exp(q)) for q in np.quantile(combined, [alpha / 2, 1 - alpha / 2]))
    return g_lo, g_hi


def _names(names: Sequence[str], limit: int = 5) -> str:
    if not names:
        return "none"
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
