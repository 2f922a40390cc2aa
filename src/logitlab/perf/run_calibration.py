"""``bench run --repeats auto --noise FILE [--noise FILE ...]``: δ pre-registered from a calibration recorded earlier.

Two kinds of file calibrate a ``bench run`` (:mod:`logitlab.perf.prereg` has the rule and the default):

- saved ``bench run --aa --json`` results (kind ``'bench-run'``, the control
  command on both sides, 3 or more blocks; one, or several of one command):
  δ from the block log ratios of the metric this run decides on
  (:func:`~logitlab.perf.prereg.pooled_calibrated_margin`: the change this
  run's budget resolves at that noise, 1 %-5 %; several runs also give how
  much a run's own offset varies); the metric must be in each file;
- a ``bench calibrate`` profile (kind ``'logitlab-bench-noise'``): the margin of
  the scenario named exactly as the control command (hyperfine names its
  scenarios by command), or of its only scenario, capped at 5 %; only for the
  wall time (its clock must be ``real``: benchmark files hold times, not a
  ``--metric`` of the output); one profile, alone.

Any other file is refused with one line. Nothing here prints or logs.
"""

from __future__ import annotations

from collections.abc import Sequence

from logitlab.errors import InputError
from logitlab.perf.calibration import NoiseProfile
from logitlab.perf.commands import BenchRunConfig, BenchRunResult
from logitlab.perf.equivalence import MAX_AA_MARGIN
from logitlab.perf.paired import PairedComparison
from logitlab.perf.prereg import (PreregisteredMargin, calibration_paths, host_text, pooled_calibrated_margin,
                                  read_calibration)

__all__ = ["bench_run_calibration"]


def bench_run_calibration(paths: str | Sequence[str], config: BenchRunConfig) -> PreregisteredMargin:
    """δ for ``config`` (a ``bench run --repeats auto``) from the calibration file(s) ``paths``.

    Parameters
    ----------
    paths : str or sequence of str
        ``bench run --aa --json`` results (one, or several of the same control command), or one ``bench
        calibrate`` profile.
    config : BenchRunConfig
        The run to calibrate: its primary metric (``config.primary``), control command and budget (``blocks``).

    Returns
    -------
    PreregisteredMargin
        Source ``'calibration'``, the file(s) and what they measured.

    Raises
    ------
    InputError
        No file; a file that is missing or not JSON; of another kind (an ``ab``
        result, a ``bench run`` of two different commands); without the metric
        this run decides on; of another direction or clock; with fewer than 3
        blocks; A/As of different commands; a profile with other files.
    """
    paths = calibration_paths(paths)
    read = [(path, *read_calibration(path)) for path in paths]
    for path, kind, _ in read:
        if kind not in (BenchRunResult.KIND, NoiseProfile.KIND):
            raise InputError(f"--noise file {path} holds a result of kind {kind!r}: bench run is calibrated by a "
                             "saved A/A of bench run (bench run --aa --json FILE) or a bench calibrate profile")
    if any(kind == NoiseProfile.KIND for _, kind, _ in read):
        if len(read) > 1:
            raise InputError("--noise: a bench calibrate profile already pools its runs; give it alone, or give "
                             "saved bench run --aa results")
        path, _, data = read[0]
        return _from_profile(path, NoiseProfile.from_dict(data, source=f"--noise file {path}"), config)
    runs = [_aa_comparison(path, BenchRunResult.from_dict(data), config) for path, _, data in read]
    for path, (aa, _) in zip(paths[1:], runs[1:]):
        if aa.config.get("control") != runs[0][0].config.get("control"):
            raise InputError(f"--noise files {paths[0]} and {path} are A/As of different commands "
                             f"({runs[0][0].config.get('control')!r} vs {aa.config.get('control')!r}): pool A/As of "
                             "one command")
    first = runs[0][0]
    return pooled_calibrated_margin([comparison for _, comparison in runs], max_blocks=config.blocks, files=paths,
                                    what=f"bench run --aa of {first.config.get('control')!r}", metric=config.primary,
                                    host=host_text(first.host))


def _aa_comparison(path: str, aa: BenchRunResult,
                   config: BenchRunConfig) -> tuple[BenchRunResult, PairedComparison]:
    """The saved A/A ``aa`` and its comparison of ``config``'s metric, checked."""
    if aa.config.get("control") != aa.config.get("candidate"):
        raise InputError(f"--noise file {path} is a bench run of two different commands, not an A/A: calibrate with "
                         "bench run --aa --json FILE")
    metric = config.primary
    comparison = aa.comparisons.get(metric)
    if comparison is None:
        raise InputError(f"--noise file {path} has no A/A of the metric {metric!r} (it has "
                         f"{', '.join(aa.comparisons) or 'none'}): calibrate the metric this run decides on")
    if comparison.higher_is_better != (config.higher_is_better if config.metric_regex else False):
        raise InputError(f"--noise file {path} measured {metric!r} in the other direction: calibrate with the same "
                         "--higher-is-better/--lower-is-better")
    return aa, comparison


def _from_profile(path: str, profile: NoiseProfile, config: BenchRunConfig) -> PreregisteredMargin:
    if config.metric_regex:
        raise InputError(f"--noise file {path} is a bench calibrate profile of benchmark times; this run decides on "
                         f"{config.primary!r} from its output: calibrate with bench run --aa --metric ... --json FILE")
    if profile.time != "real":
        raise InputError(f"--noise file {path} was calibrated on {profile.time} time; bench run decides on wall "
                         "time: calibrate with bench calibrate --time real")
    names = list(profile.scenarios)
    name = config.control if config.control in profile.scenarios else (names[0] if len(names) == 1 else None)
    if name is None:
        raise InputError(f"--noise file {path} has {len(names)} scenarios and none is named {config.control!r}: "
                         "calibrate runs of this control command (hyperfine names a scenario by its command)")
    scenario = profile.scenarios[name]
    basis = (f"bench calibrate profile, scenario {name!r} over {scenario.n_runs} {profile.format} runs, "
             f"{profile.time} time")
    return PreregisteredMargin(min(MAX_AA_MARGIN, scenario.margin), "calibration", file=path, basis=basis)
