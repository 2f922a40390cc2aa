"""``bench run --repeats auto --noise FILE``: δ pre-registered from a calibration recorded earlier.

Two kinds of file calibrate a ``bench run`` (:mod:`logitlab.perf.prereg` has the rule and the default):

- a saved ``bench run --aa --json`` result (kind ``'bench-run'``, the control
  command on both sides, 3 or more blocks): δ from the block log-ratio sd of the
  metric this run decides on (:func:`~logitlab.perf.prereg.calibrated_margin`:
  the change this run's budget resolves at that noise, 1 %-5 %); the metric
  must be in the file;
- a ``bench calibrate`` profile (kind ``'logitlab-bench-noise'``): the margin of
  the scenario named exactly as the control command (hyperfine names its
  scenarios by command), or of its only scenario, capped at 5 %; only for the
  wall time (its clock must be ``real``: benchmark files hold times, not a
  ``--metric`` of the output).

Any other file is refused with one line. Nothing here prints or logs.
"""

from __future__ import annotations

from logitlab.errors import InputError
from logitlab.perf.calibration import NoiseProfile
from logitlab.perf.commands import BenchRunConfig, BenchRunResult
from logitlab.perf.equivalence import MAX_AA_MARGIN
from logitlab.perf.prereg import PreregisteredMargin, calibrated_margin, host_text, read_calibration

__all__ = ["bench_run_calibration"]


def bench_run_calibration(path: str, config: BenchRunConfig) -> PreregisteredMargin:
    """δ for ``config`` (a ``bench run --repeats auto``) from the calibration file ``path``.

    Parameters
    ----------
    path : str
        A ``bench run --aa --json`` result or a ``bench calibrate`` profile.
    config : BenchRunConfig
        The run to calibrate: its primary metric (``config.primary``), control command and budget (``blocks``).

    Returns
    -------
    PreregisteredMargin
        Source ``'calibration'``, the file and what it was measured on.

    Raises
    ------
    InputError
        A file that is missing or not JSON; of another kind (an ``ab`` result, a
        ``bench run`` of two different commands); without the metric this run
        decides on; of another direction or clock; or with fewer than 3 blocks.
    """
    kind, data = read_calibration(path)
    if kind == BenchRunResult.KIND:
        return _from_aa_run(path, BenchRunResult.from_dict(data), config)
    if kind == NoiseProfile.KIND:
        return _from_profile(path, NoiseProfile.from_dict(data, source=f"--noise file {path}"), config)
    raise InputError(f"--noise file {path} holds a result of kind {kind!r}: bench run is calibrated by a saved A/A "
                     "of bench run (bench run --aa --json FILE) or a bench calibrate profile")


def _from_aa_run(path: str, aa: BenchRunResult, config: BenchRunConfig) -> PreregisteredMargin:
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
    basis = (f"bench run --aa of {aa.config.get('control')!r}, {comparison.n_blocks} blocks, "
             f"{metric} block sd {100 * (comparison.sd_log_ratio or 0.0):.2f} %, {host_text(aa.host)}")
    return calibrated_margin(comparison.sd_log_ratio, comparison.n_blocks, max_blocks=config.blocks, file=path,
                             basis=basis)


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
