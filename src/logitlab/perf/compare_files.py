"""Compare two benchmark files scenario by scenario, and calibrate margins from A/A runs.

``compare_benchmarks(base, candidate)`` gives, per scenario present in both,
the candidate/base ratio of geometric means with a bootstrap CI over the
samples, a status from the CI *and* an equivalence margin δ (regressed /
improved / unchanged / inconclusive), Holm's step-down control of the
family-wise error rate over the regressed/improved flags, and the geometric
mean of the ratios over scenarios. Scenarios found on one side only are
listed, never dropped silently.

``calibrate_noise(runs)`` takes two or more runs of the *same* code (A/A) and
stores, per scenario, the spread of the run-to-run ratio; ``compare`` with that
profile sets each scenario's δ from its own noise instead of one global
threshold.

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`FileComparison` and
:class:`NoiseProfile`):

- 1: first version.
- 2: ``ScenarioComparison.reason`` left out (the report writes it); ``kind``; ``FileComparison.host``
  (the machine that compared, for the report).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
from scipy import stats

from logitlab.errors import InputError
from logitlab.jsonio import ResultRecord
from logitlab.manifest import host_info
from logitlab.perf.equivalence import (
    STATUS_OF_CALL,
    STATUSES,
    check_confidence,
    check_margin,
    choose_margin,
    noise_margin,
    three_way_call,
)
from logitlab.perf.paired import from_fields
from logitlab.perf.readers.base import BenchmarkFile, Scenario

__all__ = [
    "MIN_SAMPLES_FOR_CI",
    "SCHEMA_VERSION",
    "ScenarioComparison",
    "FileComparison",
    "ScenarioNoise",
    "NoiseProfile",
    "holm_adjust",
    "compare_benchmarks",
    "calibrate_noise",
]

#: Fewest samples per side for a bootstrap CI; fewer gives no CI.
MIN_SAMPLES_FOR_CI = 5
SCHEMA_VERSION = 2
_NOISE_KIND = "logitlab-bench-noise"


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
class ScenarioComparison:
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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

    def worst_first(self) -> list[ScenarioComparison]:
        """Scenarios by status (regressed first), then by how much worse they got."""
        def key(s: ScenarioComparison) -> tuple[int, float]:
            worse = math.log(s.ratio) * (-1.0 if s.higher_is_better else 1.0)
            return STATUSES.index(s.status), -worse
        return sorted(self.scenarios, key=key)


@dataclass(frozen=True)
class ScenarioNoise:
    """A/A noise of one scenario: how much two runs of the same code differ.

    Attributes
    ----------
    name : str
    n_runs : int
        Runs it was estimated from (>= 2).
    aa_ratios : list of float
        Each later run over the first (geometric means or summaries).
    between_sd_log : float
        Sd (ddof 1) of the runs' log values: run-to-run noise of one run.
    within_sd_log : float or None
        Sampling sd of the log ratio of two runs from the samples inside them
        (``sqrt(var1/n1 + var2/n2)`` of the log samples, averaged over run
        pairs); None without samples.
    ratio_sd_log : float
        Sd of the log ratio of two runs: ``max(sqrt(2) * between_sd_log,
        within_sd_log)``.
    margin : float
        ``max(0.01, expm1(z_{(1+c)/2} * ratio_sd_log))``: the change a
        single A/A comparison stays within with probability ``c``.
    """

    name: str
    n_runs: int
    aa_ratios: list[float]
    between_sd_log: float
    within_sd_log: float | None
    ratio_sd_log: float
    margin: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class NoiseProfile(ResultRecord):
    """Per-scenario noise from A/A runs; written by ``bench calibrate``.

    Its ``kind`` in JSON is ``'logitlab-bench-noise'`` (lets ``--noise`` reject other JSON).

    Attributes
    ----------
    runs : list of str
        The files it was estimated from.
    format : str
    confidence : float
    scenarios : dict of str to ScenarioNoise
    skipped : list of str
        Scenarios missing from some run (not calibrated).
    time : {'real', 'cpu'}
        The clock of the runs (``bench calibrate --time``).
    """

    KIND: ClassVar[str] = _NOISE_KIND
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    runs: list[str]
    format: str
    confidence: float
    scenarios: dict[str, ScenarioNoise]
    skipped: list[str] = field(default_factory=list)
    time: str = "real"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "noise file") -> "NoiseProfile":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        InputError
            If ``data`` is not a noise profile of this schema version.
        """
        if not isinstance(data, Mapping) or data.get("kind") != _NOISE_KIND:
            raise InputError(f"{source} is not a logitlab noise profile: write one with logitlab bench calibrate")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise InputError(f"{source} has schema_version {data.get('schema_version')!r}; this logitlab reads "
                             f"{SCHEMA_VERSION}: run bench calibrate again")
        try:
            scenarios = {k: from_fields(ScenarioNoise, v) for k, v in data["scenarios"].items()}
            return cls(runs=list(data["runs"]), format=str(data["format"]), confidence=float(data["confidence"]),
                       scenarios=scenarios, skipped=list(data.get("skipped", [])), time=str(data.get("time", "real")))
        except (KeyError, TypeError, AttributeError, InputError) as exc:
            raise InputError(f"{source} is a damaged noise profile ({exc}): run bench calibrate again") from None


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
        Per-scenario margins from :func:`calibrate_noise`; scenarios it lacks
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
    common = [n for n in base.scenarios if n in candidate.scenarios]
    only_base = [n for n in base.scenarios if n not in candidate.scenarios]
    only_cand = [n for n in candidate.scenarios if n not in base.scenarios]
    if not common:
        raise InputError(
            f"no scenario is in both files: {base.path} has {_names(only_base)}; {candidate.path} has "
            f"{_names(only_cand)}"
        )
    rng = np.random.default_rng(seed)
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    rows: list[dict[str, Any]] = []
    distributions: list[np.ndarray | None] = []
    for name in common:
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
        distributions.append(dist)
        rows.append(dict(name=name, b=b, c=c, sign=sign, log_ratio=log_ratio, delta=delta, source=source,
                         bound=bound, ci=ci, p_change=p_change, worse_side=worse_side, method=method))

    tested = [i for i, r in enumerate(rows) if r["p_change"] is not None]
    adjusted = holm_adjust([rows[i]["p_change"] for i in tested])
    p_holm = {i: float(p) for i, p in zip(tested, adjusted)}
    alpha = 1.0 - confidence
    results = []
    for i, r in enumerate(rows):
        b, c, sign, bound = r["b"], r["c"], r["sign"], r["bound"]
        ratio = math.exp(r["log_ratio"])
        if r["ci"] is None:
            status = "inconclusive"
        else:
            lo, hi = r["ci"]
            w_lo, w_hi = sorted((sign * lo, sign * hi))
            changed = p_holm[i] < alpha
            # "better" orientation is minus "worse"; changed beyond the margin, on the side the test found
            status = STATUS_OF_CALL[three_way_call(-w_hi, -w_lo, bound, better=changed and not r["worse_side"],
                                                   worse=changed and r["worse_side"])]
        note = "; ".join(x for x in (b.note and f"base: {b.note}", c.note and f"candidate: {c.note}") if x)
        results.append(ScenarioComparison(
            name=r["name"], unit=b.unit, higher_is_better=b.higher_is_better, base=b.summary, candidate=c.summary,
            base_n=len(b.samples), candidate_n=len(c.samples),
            statistic=b.statistic if b.statistic.split(" of ")[0] == c.statistic.split(" of ")[0]
            else f"base: {b.statistic}; candidate: {c.statistic}",
            ratio=ratio, change=ratio - 1.0,
            ci_low=None if r["ci"] is None else math.exp(r["ci"][0]),
            ci_high=None if r["ci"] is None else math.exp(r["ci"][1]),
            ci_method=r["method"], margin=r["delta"], margin_source=r["source"],
            p_change=r["p_change"], p_holm=p_holm.get(i), status=status, note=note,
        ))
    logs = np.array([r["log_ratio"] for r in rows])
    g_lo = g_hi = None
    if all(d is not None for d in distributions):
        n = min(d.size for d in distributions)  # type: ignore[union-attr]
        combined = np.mean([d[:n] for d in distributions], axis=0)  # type: ignore[index]
        g_lo, g_hi = (float(math.exp(q)) for q in np.quantile(combined, [alpha / 2, 1 - alpha / 2]))
    counts = {s: sum(x.status == s for x in results) for s in STATUSES}
    return FileComparison(
        base_path=base.path, candidate_path=candidate.path, format=base.format, confidence=confidence,
        scenarios=results, only_base=only_base, only_candidate=only_cand,
        geomean_ratio=float(math.exp(logs.mean())), geomean_ci_low=g_lo, geomean_ci_high=g_hi, counts=counts,
        noise_path=noise_path, base_context=dict(base.context), candidate_context=dict(candidate.context),
        n_bootstrap=n_bootstrap, seed=seed, host=host_info(), time=base.time,
    )


def _names(names: Sequence[str], limit: int = 5) -> str:
    if not names:
        return "none"
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ---------------------------------------------------------------------------
# Calibration


def calibrate_noise(runs: Sequence[BenchmarkFile], *, confidence: float = 0.95) -> NoiseProfile:
    """Per-scenario run-to-run noise from two or more runs of the same code (A/A).

    Parameters
    ----------
    runs : sequence of BenchmarkFile
        >= 2 runs of the same code on the same machine, same format.
    confidence : float, optional
        Coverage of the margin, in (0, 1). Defaults to 0.95.

    Returns
    -------
    NoiseProfile
        One :class:`ScenarioNoise` per scenario present in every run.

    Raises
    ------
    InputError
        With fewer than 2 runs, mixed formats, or no scenario common to all.

    Notes
    -----
    Per scenario, with ``x_j`` the log of run ``j``'s value (geometric mean
    of its samples, or its summary): ``between_sd_log = sd(x_j)`` (ddof 1);
    the log ratio of two runs then has sd ``sqrt(2) * between_sd_log``. The
    sampling sd inside the runs, ``sqrt(var1/n1 + var2/n2)`` of the log
    samples, is a floor for it (run-to-run noise can't be below sampling
    noise). ``margin = max(1 %, expm1(z * ratio_sd_log))`` with ``z`` the
    normal ``(1 + confidence)/2`` quantile: the change that one A/A comparison
    stays inside with probability ``confidence``. With two runs the spread
    rests on one ratio per scenario (1 degree of freedom): use 3-5 runs for a
    steadier margin.
    """
    confidence = check_confidence(confidence)
    if len(runs) < 2:
        raise InputError(f"calibration needs at least 2 runs of the same code, got {len(runs)}")
    if len({r.time for r in runs}) > 1:
        raise InputError("calibration runs mix wall-clock and CPU time: read them with the same --time")
    formats = {r.format for r in runs}
    if len(formats) > 1:
        raise InputError(f"mixed formats in calibration runs: {', '.join(f'{r.path} is {r.format}' for r in runs)}")
    names = [n for n in runs[0].scenarios if all(n in r.scenarios for r in runs)]
    skipped = sorted({n for r in runs for n in r.scenarios} - set(names))
    if not names:
        raise InputError("no scenario is present in every calibration run: are these runs of the same benchmarks?")
    out = {}
    for name in names:
        scen = [r.scenarios[name] for r in runs]
        x = np.log([s.summary for s in scen])
        between = float(np.std(x, ddof=1))
        within = None
        if all(len(s.samples) >= 2 for s in scen):
            var_mean = [np.var(np.log(s.samples), ddof=1) / len(s.samples) for s in scen]
            within = float(np.sqrt(2.0 * np.mean(var_mean)))
        ratio_sd = max(math.sqrt(2.0) * between, within or 0.0)
        out[name] = ScenarioNoise(
            name=name, n_runs=len(runs), aa_ratios=[float(math.exp(v - x[0])) for v in x[1:]],
            between_sd_log=between, within_sd_log=within, ratio_sd_log=ratio_sd,
            margin=noise_margin(ratio_sd, confidence),
        )
    return NoiseProfile(runs=[r.path for r in runs], format=runs[0].format, confidence=confidence,
                        scenarios=out, skipped=skipped, time=runs[0].time)
