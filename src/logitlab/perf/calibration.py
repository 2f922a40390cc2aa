"""A/A calibration for benchmark files: per-scenario run-to-run noise, and the margins it gives.

``calibrate_noise(runs)`` takes two or more runs of the *same* code (A/A) and
stores, per scenario, the spread of the run-to-run ratio;
:func:`logitlab.perf.compare_files.compare_benchmarks` with that profile sets
each scenario's δ from its own noise instead of one global threshold.
``bench calibrate`` writes the profile, ``bench compare --noise`` reads it.

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`NoiseProfile`):

- 1: first version.
- 2: ``kind``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.jsonio import PlainRecord, ResultRecord
from logitlab.perf.equivalence import check_confidence, noise_margin
from logitlab.perf.readers.base import BenchmarkFile

__all__ = ["SCHEMA_VERSION", "ScenarioNoise", "NoiseProfile", "calibrate_noise"]

SCHEMA_VERSION = 2
_NOISE_KIND = "logitlab-bench-noise"


@dataclass(frozen=True)
class ScenarioNoise(PlainRecord):
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
            scenarios = {k: ScenarioNoise.from_dict(v) for k, v in data["scenarios"].items()}
            return cls(runs=list(data["runs"]), format=str(data["format"]), confidence=float(data["confidence"]),
                       scenarios=scenarios, skipped=list(data.get("skipped", [])), time=str(data.get("time", "real")))
        except (KeyError, TypeError, AttributeError, InputError) as exc:
            raise InputError(f"{source} is a damaged noise profile ({exc}): run bench calibrate again") from None


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
