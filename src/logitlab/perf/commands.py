"""``bench run``: two shell commands in counterbalanced ABBA/BAAB blocks.

Each slot runs one command with :func:`logitlab.perf.process.run_command`,
which measures it from the operating system's accounting of the child (wall
time, user and system CPU time, peak resident set size, exit status) and
optionally parses a number from its output with a regular expression.

The slot order is :func:`logitlab.perf.design.ab_schedule`
(untimed warmups, then ABBA/BAAB blocks). A block in which any slot failed
(non-zero exit, signal, timeout, metric not found) is reported as failed and
left out of the comparison; it is never timed as a success. The decision on
the remaining blocks is exactly :func:`logitlab.perf.paired.paired_comparison`.

Nothing here prints or logs; progress goes to an optional callback.

JSON format history (``schema_version`` of :class:`BenchRunResult`):

- 1: first version.
- 2: ``kind``; the paired comparisons without ``reason`` (the report writes it).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from logitlab.errors import InputError, Interrupted
from logitlab.events import ignore_event
from logitlab.jsonio import ResultRecord
from logitlab.lazy import preload_statistics
from logitlab.perf.autostop import AutoStop, check_auto_budget
from logitlab.perf.design import CANDIDATE, CONTROL, Block, ab_schedule
from logitlab.perf.equivalence import check_margin
from logitlab.perf.metrics import HIGHER, LOWER, Metrics, put_metric, ratio_metric, speed_metric
from logitlab.perf.paired import PairedComparison, paired_comparison
from logitlab.perf.prereg import PreregisteredMargin
from logitlab.perf.process import compile_metric, metric_regex_fault, run_command
from logitlab.perf.sequential import SequentialDecision
from logitlab.runlog import RunLog, RunLogContents

__all__ = ["SCHEMA_VERSION", "CommandRun", "BenchRunConfig", "AaReport", "BenchRunResult", "bench_run"]

SCHEMA_VERSION = 2
#: Fixed thresholds whose single-run false-positive rate the A/A report shows.
AA_THRESHOLDS = (0.02, 0.05, 0.15)


@dataclass(frozen=True)
class CommandRun:
    """One execution of a command.

    Attributes
    ----------
    variant : {'control', 'candidate'}
    index : int
        Order of execution, warmups included.
    block, position : int or None
        Block number and slot (0-3) inside it; None for a warmup.
    pattern : str
        ``'ABBA'``, ``'BAAB'`` or ``'warmup'``.
    wall_s, user_s, sys_s : float
        Wall-clock, user CPU and system CPU seconds of the child and its
        waited-for descendants.
    max_rss_bytes : int
        Peak resident set size, bytes (the largest of the child's and its
        descendants').
    exit_status : int
        Exit code; ``-N`` if killed by signal ``N``.
    metric : float or None
        The number parsed from the output, if a metric regex was given and matched.
    error : str or None
        Why the run counts as failed (None: it succeeded).
    stdout_tail, stderr_tail : str
        The last characters of the output.
    """

    variant: str
    index: int
    block: int | None
    position: int | None
    pattern: str
    wall_s: float
    user_s: float
    sys_s: float
    max_rss_bytes: int
    exit_status: int
    metric: float | None
    error: str | None
    stdout_tail: str = ""
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def is_warmup(self) -> bool:
        return self.block is None


@dataclass(frozen=True)
class BenchRunConfig:
    """What ``bench run`` does.

    Attributes
    ----------
    control, candidate : str
        Shell commands (the same string in A/A mode).
    blocks : int
        ABBA/BAAB blocks (>= 2 for a CI), 4 timed runs each; with ``auto``, the budget.
    warmup : int
        Untimed runs per variant before the blocks.
    randomize : bool
        Seeded, balanced random order of the block patterns.
    seed : int
        Seed of that order and of the bootstrap.
    metric_regex : str or None
        Regex whose first group is the primary metric; None: wall time.
    metric_name : str
        Name of that metric in reports.
    metric_unit : str
    higher_is_better : bool
        Direction of the regex metric (wall time is always lower-is-better).
    aa : bool
        A/A mode: the control command on both sides.
    margin : float or None
        Equivalence margin δ; None: calibrated from the control's A/A slots (fixed blocks), else the
        ``calibration`` or the default (``auto``: δ fixed before the first look, :mod:`logitlab.perf.prereg`).
    timeout : float or None
        Seconds per run.
    confidence : float
    n_bootstrap : int
    auto : bool
        ``--repeats auto``: after each block the sequential rule
        (:mod:`logitlab.perf.sequential`) on the primary metric says whether to stop.
    max_time : float or None
        With ``auto``: wall-clock budget in seconds (no block starts that would end past it).
    calibration : PreregisteredMargin or None
        With ``auto``: δ read from ``--noise FILE`` (:func:`logitlab.perf.run_calibration.bench_run_calibration`),
        used when ``margin`` is None.

    Parameters
    ----------
    names : mapping of str to str, optional
        Init only (not a field, not in the JSON): the option a check's message names, by field, where the
        caller spells it otherwise than :attr:`OPTIONS` (``bench run --blocks 0``: ``{"blocks": "--blocks"}``;
        ``bisect --max-blocks``).

    Raises
    ------
    InputError
        A setting out of range; the message names its option.
    """

    #: The option of each setting, as ``bench run`` spells it, that the checks of ``__post_init__`` name (with
    #: ``auto``, ``blocks`` is the budget: ``max_blocks``'s option).
    OPTIONS: ClassVar[dict[str, str]] = {
        "control": "--control", "candidate": "--candidate", "blocks": "--repeats", "max_blocks": "--max-repeats",
        "max_time": "--max-time", "timeout": "--slot-timeout", "margin": "--margin", "calibration": "--noise"}

    control: str
    candidate: str
    blocks: int = 10
    warmup: int = 1
    randomize: bool = False
    seed: int = 0
    metric_regex: str | None = None
    metric_name: str = "metric"
    metric_unit: str = ""
    higher_is_better: bool = True
    aa: bool = False
    margin: float | None = None
    timeout: float | None = None
    confidence: float = 0.95
    n_bootstrap: int = 9999
    auto: bool = False
    max_time: float | None = None
    calibration: PreregisteredMargin | None = None
    names: InitVar[Mapping[str, str] | None] = None

    def __post_init__(self, names: Mapping[str, str] | None) -> None:
        option = {**self.OPTIONS, **(names or {})}
        if isinstance(self.calibration, dict):  # read back from a run log's header
            object.__setattr__(self, "calibration", PreregisteredMargin.from_dict(self.calibration))
        if self.calibration is not None and not self.auto:
            raise InputError(f"{option['calibration']} is the pre-registered δ of {option['blocks']} auto; with "
                             f"{option['blocks']} {self.blocks} drop it")
        for name in ("control", "candidate"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InputError(f"{option[name]} is empty: give a shell command")
        if self.aa and self.candidate != self.control:
            raise InputError("A/A mode runs the control on both sides: drop --candidate or --aa")
        if self.auto:  # --repeats auto: ``blocks`` is the budget, --max-repeats
            check_auto_budget(self.blocks, self.max_time, flag=option["max_blocks"], time_flag=option["max_time"])
        elif isinstance(self.blocks, bool) or not isinstance(self.blocks, int) or self.blocks < 1:
            raise InputError(f"{option['blocks']} must be at least 1 (2 or more for a CI), got {self.blocks!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise InputError(f"{option['timeout']} must be positive seconds, got {self.timeout!r}")
        if self.margin is not None:
            check_margin(self.margin, option=option["margin"])
        if not self.auto and self.max_time is not None:
            raise InputError(f"{option['max_time']} is the budget of {option['blocks']} auto; with a fixed number of "
                             "blocks drop it")
        compile_metric(self.metric_regex)

    @property
    def primary(self) -> str:
        return self.metric_name if self.metric_regex else "wall"


@dataclass(frozen=True)
class AaReport:
    """What an A/A run (same command on both sides) says about this machine.

    Attributes
    ----------
    false_positive : bool
        The paired call was ``faster`` or ``slower`` although both sides ran
        the same command (a 5 % event under the method's assumptions).
    suggested_margin : float or None
        The δ to pass as ``--margin`` for an A/B with as many blocks here: the
        A/A-calibrated margin of :func:`logitlab.perf.block_ratios.aa_margin`.
    single_run_fpr : dict of str to float
        For fixed thresholds (``'2%'``, ``'5%'``, ``'15%'``): the share of
        single control-run vs candidate-run pairs within a block whose ratio
        crosses it — the false-positive rate of comparing one run with one
        run against that threshold, as a fixed-threshold CI check does.
    n_pairs : int
        Pairs behind those rates.
    """

    false_positive: bool
    suggested_margin: float | None
    single_run_fpr: dict[str, float]
    n_pairs: int


@dataclass(frozen=True)
class BenchRunResult(ResultRecord):
    """The outcome of ``bench run``.

    Attributes
    ----------
    config : dict
        :class:`BenchRunConfig` as a dict.
    runs : list of CommandRun
        Every run, warmups included, in execution order.
    failed_blocks : list of int
        Blocks left out because a slot in them failed.
    comparisons : dict of str to PairedComparison
        The primary metric first (``config.primary``), then ``wall`` (if not
        primary), ``user``, ``sys``, ``max_rss`` — each over the valid blocks;
        a metric with a zero value in some slot (e.g. 0 s of system time) is
        left out and named in ``skipped_metrics``.
    skipped_metrics : dict of str to str
        Metric -> why it was not compared.
    summaries : dict of str to dict
        Per compared metric, ``{'control': g, 'candidate': g}``: geometric
        means over the valid blocks' slots, in the metric's unit.
    aa : AaReport or None
        A/A mode only.
    sequential : dict of str to SequentialDecision
        ``--repeats auto`` only: per compared metric, the sequential decision at
        the stop (the comparisons then carry its call and repeated CI).
    host : dict
        :func:`logitlab.manifest.host_info` at the start.
    error : str or None
        Why the run stopped early, if it did.
    """

    KIND: ClassVar[str] = "bench-run"
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    config: dict[str, Any]
    runs: list[CommandRun]
    failed_blocks: list[int]
    comparisons: dict[str, PairedComparison]
    skipped_metrics: dict[str, str]
    summaries: dict[str, dict[str, float]]
    aa: AaReport | None
    host: dict[str, Any]
    error: str | None = None
    sequential: dict[str, SequentialDecision] = dataclasses.field(default_factory=dict)

    @property
    def primary(self) -> PairedComparison | None:
        return self.comparisons.get(self.config["metric_name"] if self.config["metric_regex"] else "wall")

    def history_metrics(self) -> Metrics:
        """What the history keeps of a ``bench run``: variant -> metric name -> :class:`~logitlab.perf.metrics.Metric`.

        ``control`` and ``candidate``: every compared metric (``wall``,
        ``user``, ``sys``, ``max_rss``, the ``--metric``) in its unit and sense
        (value: the geometric mean, samples: per block the variant's geometric
        mean) over the valid blocks; ``ratio``: each metric's candidate/control
        ratio (samples per block). An A/A (``--aa``): only ``control``.
        """
        out: Metrics = {}
        failed = set(self.failed_blocks)
        valid = [r for r in self.runs if r.block is not None and r.ok and r.block not in failed]
        aa = bool(self.config.get("aa"))
        for name, comparison in self.comparisons.items():
            kind = HIGHER if comparison.higher_is_better else LOWER
            for variant in ((CONTROL,) if aa else (CONTROL, CANDIDATE)):
                per_block: dict[int, list[float]] = {}
                for r in valid:
                    if aa or r.variant == variant:
                        per_block.setdefault(r.block, []).append(_value(r, name))
                put_metric(out, variant, name, speed_metric(per_block, comparison.unit, kind))
            if not aa:
                put_metric(out, "ratio", name, ratio_metric(comparison))
        return out

    @classmethod
    def from_run_log(cls, log: RunLogContents) -> BenchRunResult:
        """The result a ``bench run`` log holds (:mod:`logitlab.runlog`).

        A finished log rebuilds the whole result; a log cut short by a kill is
        analysed as ``bench run`` analyses its runs at the end (the paired calls
        over the complete, successful blocks it logged), its ``error`` saying it
        was interrupted. Run lines that do not load are left out, each named in
        ``error``.

        Raises
        ------
        InputError
            Not a ``bench-run`` log, no header, or a damaged header.
        """
        import dacite

        if log.kind != cls.KIND:
            raise InputError(f"{log.path} is {'a ' + repr(log.kind) if log.kind else 'an old'} run log, not a "
                             f"{cls.KIND!r} one")
        if not isinstance(log.header.get("config"), dict) or not isinstance(log.header.get("host"), dict):
            raise InputError(f"{log.path}: the run log's header lacks config or host: damaged log")
        runs, notes = [], []
        for i, record in enumerate(log.records, start=1):
            try:
                runs.append(dacite.from_dict(CommandRun, record, config=dacite.Config(cast=[tuple], check_types=False)))
            except (dacite.DaciteError, TypeError, ValueError, KeyError) as exc:
                notes.append(f"run {i} of the log is damaged ({exc}); left out")
        if not log.interrupted:
            data = {**log.header, **log.final, "runs": [], "kind": cls.KIND, "schema_version": cls.SCHEMA_VERSION}
            result = cls.from_dict(data)
            error = log.error or result.error
        else:
            try:
                config = BenchRunConfig(**log.header["config"])
            except (TypeError, InputError) as exc:
                raise InputError(f"{log.path}: the run log's config does not load ({exc}): damaged log") from None
            result = _analyse(config, runs, log.header["host"], None)
            error = (f"interrupted: the run log {log.path} ends after {len(log.records)} run(s) without an end line "
                     "(the process was killed or lost); the calls below use the complete blocks it logged")
        extra = notes + log.notes
        error = "; ".join(([error] if error else []) + extra) or None
        return dataclasses.replace(result, runs=runs, error=error)


_UNITS = {"wall": ("s", False), "user": ("s", False), "sys": ("s", False), "max_rss": ("bytes", False)}


def _value(run: CommandRun, metric: str) -> float:
    return {"wall": run.wall_s, "user": run.user_s, "sys": run.sys_s,
            "max_rss": float(run.max_rss_bytes)}.get(metric, run.metric)  # type: ignore[return-value]


def _aa_report(blocks: list[list[CommandRun]], primary: PairedComparison, metric: str,
               fixed: PairedComparison) -> AaReport:
    """The A/A report; ``fixed``: the primary comparison before a sequential restatement (its A/A margin)."""
    log_ratios = []
    for slots in blocks:
        a = [_value(r, metric) for r in slots if r.variant == CONTROL]
        b = [_value(r, metric) for r in slots if r.variant == CANDIDATE]
        log_ratios += [math.log(y / x) for x in a for y in b]
    arr = np.abs(np.array(log_ratios))
    fpr = {f"{100 * t:g}%": float(np.mean(arr >= math.log1p(t))) if arr.size else float("nan")
           for t in AA_THRESHOLDS}
    suggested = fixed.margin if fixed.margin_source == "a/a" else None
    return AaReport(false_positive=primary.call in ("faster", "slower"), suggested_margin=suggested,
                    single_run_fpr=fpr, n_pairs=int(arr.size))


def bench_run(
    config: BenchRunConfig,
    *,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    runner: Callable[..., dict[str, Any]] = run_command,
    log_path: str | Path | None = None,
) -> BenchRunResult:
    """Run both commands in the counterbalanced schedule and compare them.

    Parameters
    ----------
    config : BenchRunConfig
    on_event : callable, optional
        ``on_event(kind, data)`` with kinds ``'start'`` (``slots``) and
        ``'run'`` (``run``: the :class:`CommandRun` just finished).
    runner : callable, optional
        Replaces :func:`~logitlab.perf.process.run_command` (tests).
    log_path : str or Path, optional
        Run log (:mod:`logitlab.runlog`): each run is appended as it finishes,
        so a killed ``bench run`` keeps them (``logitlab report`` reads it).

    Returns
    -------
    BenchRunResult

    Raises
    ------
    InputError
        If a warmup run fails, a variant fails on each of its first two
        runs, or fewer than one block succeeded (nothing can be compared);
        the message names the command, its exit status and its stderr tail.
        The exception's ``partial`` attribute holds the result so far.
    Interrupted
        Ctrl-C: its ``partial`` is the result so far (every run measured; the
        calls over the complete blocks), ``error`` ``"interrupted"``; the run
        log ends ``interrupted``.

    Notes
    -----
    Decision: :func:`logitlab.perf.paired.paired_comparison` over the valid
    blocks (geometric-mean ratio, paired-t 95 % CI, faster / slower /
    equivalent / inconclusive against δ, MDE, slot-position test).
    """
    from logitlab.manifest import host_info

    emit = on_event or ignore_event
    pattern = compile_metric(config.metric_regex)
    host = host_info()
    schedule = ab_schedule(config.blocks, warmup=config.warmup, randomize=config.randomize, seed=config.seed)
    emit("start", {"slots": len(schedule)})
    commands = {CONTROL: config.control, CANDIDATE: config.candidate}
    runs: list[CommandRun] = []
    attempts = {CONTROL: [], CANDIDATE: []}  # type: dict[str, list[bool]]
    error = None
    autostop = None
    if config.auto:
        autostop = AutoStop(max_blocks=config.blocks, max_time=config.max_time, margin=config.margin,
                            calibration=config.calibration,
                            higher_is_better=_direction(config, config.primary), metric=config.primary,
                            unit=_unit(config, config.primary), budget_flag="--max-repeats")
    preload_statistics()  # before the run log and the first slot: a Ctrl-C must not land in the analysis' import
    log = RunLog(log_path, BenchRunResult.KIND, {"config": dataclasses.asdict(config), "host": host}) \
        if log_path is not None else None
    try:
        for slot in schedule:
            measured = runner(commands[slot.variant], metric=pattern, timeout=config.timeout)
            run = CommandRun(variant=slot.variant, index=slot.index, block=slot.block, position=slot.position,
                             pattern=slot.pattern, **measured)
            runs.append(run)
            error = _log_run(log, run)
            if error:  # the run log could not be written (a full disk): stop, keep what ran
                break
            emit("run", {"run": run})
            attempts[slot.variant].append(run.ok)
            if not run.ok:
                tail = run.stderr_tail.strip().splitlines()[-1:] or [""]
                who = CONTROL if config.aa else slot.variant  # an A/A runs the control command on both sides
                what = f"{who} command {commands[slot.variant]!r} failed ({run.error})" + (
                    f": {tail[0][:200]}" if tail[0] else "")
                regex_fault = metric_regex_fault(run.error)  # the regex's, not the command's
                if regex_fault:
                    what = f"{run.error} (in the output of the {who} command)"
                if run.is_warmup:
                    error = what if regex_fault else f"{what} in a warmup run"
                elif len(attempts[slot.variant]) >= 2 and not any(attempts[slot.variant]):
                    error = what if regex_fault else f"{what} on each of its first {len(attempts[slot.variant])} runs"
                if error:
                    break
            if autostop is not None and slot.position == 3:
                decision = autostop.look(_metric_blocks(config, runs, config.primary), blocks_run=slot.block + 1)
                emit("look", {"decision": decision})
                if decision.stop:
                    break
    except KeyboardInterrupt:  # Ctrl-C: the complete blocks measured so far are analysed and kept
        result = _analyse(config, runs, host, "interrupted", autostop)
        _end_log(log, "interrupted", result, "interrupted")
        raise Interrupted("interrupted", partial=result) from None
    result = _analyse(config, runs, host, error, autostop)
    if error is not None or not result.comparisons:
        message = error or _no_blocks_message(config, result)
        _end_log(log, "error", result, message)
        raise InputError(message, partial=result)
    _end_log(log, "complete", result)
    return result


#: BenchRunResult fields a run log's header holds; ``runs`` are its lines; the end line holds the rest.
LOG_HEADER_FIELDS = ("config", "host")


def _log_run(log: RunLog | None, run: CommandRun) -> str | None:
    """Append ``run`` to the run log; the error message when the write failed, else None."""
    if log is None:
        return None
    try:
        log.run(dataclasses.asdict(run))
    except InputError as exc:
        return str(exc)
    return None


def _end_log(log: RunLog | None, how: str, result: BenchRunResult, error: str | None = None) -> None:
    """The log's end line (every field computed at the end) and close; a failing write here hides no error."""
    if log is None:
        return
    try:
        log.end(how, {k: v for k, v in result.to_dict().items()
                      if k not in LOG_HEADER_FIELDS + ("runs", "kind", "schema_version")}, error=error)
    except InputError:
        pass
    finally:
        log.close()


def _no_blocks_message(config: BenchRunConfig, result: BenchRunResult) -> str:
    failed = [r for r in result.runs if not r.ok]
    first = failed[0] if failed else None
    detail = f"; first failure: {first.variant} {first.error}" if first else ""
    return f"no block of {config.blocks} completed without a failed run: nothing to compare{detail}"


def _valid_blocks(runs: list[CommandRun]) -> tuple[list[list[CommandRun]], list[int]]:
    """Complete blocks whose four runs succeeded, in run order, and the failed block numbers."""
    by_block: dict[int, list[CommandRun]] = {}
    for run in runs:
        if run.block is not None:
            by_block.setdefault(run.block, []).append(run)
    complete = {b: s for b, s in by_block.items() if len(s) == 4}
    failed = sorted(b for b, s in complete.items() if not all(r.ok for r in s))
    return [complete[b] for b in sorted(complete) if b not in failed], failed


def _direction(config: BenchRunConfig, metric: str) -> bool:
    return config.higher_is_better if metric == config.metric_name and config.metric_regex else _UNITS[metric][1]


def _unit(config: BenchRunConfig, metric: str) -> str:
    return config.metric_unit if metric == config.metric_name and config.metric_regex else _UNITS[metric][0]


def _metric_blocks(config: BenchRunConfig, runs: list[CommandRun], metric: str) -> list[Block]:
    """The valid blocks of one metric (a block with a value <= 0 is left out)."""
    valid, _ = _valid_blocks(runs)
    out = []
    for slots in valid:
        values = [_value(r, metric) for r in slots]
        if all(v is not None and v > 0 for v in values):
            out.append(Block(slots[0].pattern, tuple(values)))
    return out


def _analyse(config: BenchRunConfig, runs: list[CommandRun], host: dict[str, Any], error: str | None,
             autostop: AutoStop | None = None) -> BenchRunResult:
    valid, failed = _valid_blocks(runs)
    metrics = ([config.metric_name] if config.metric_regex else []) + ["wall", "user", "sys", "max_rss"]
    comparisons: dict[str, PairedComparison] = {}
    skipped: dict[str, str] = {}
    summaries: dict[str, dict[str, float]] = {}
    for i, metric in enumerate(metrics):
        if not valid:
            break
        values = [[_value(r, metric) for r in slots] for slots in valid]
        if any(v <= 0 for row in values for v in row):
            skipped[metric] = "a run measured 0 (too short for the OS's accounting)"
            continue
        unit, hib = (config.metric_unit, config.higher_is_better) if metric == config.metric_name and \
            config.metric_regex else _UNITS[metric]
        comparisons[metric] = paired_comparison(
            [Block(slots[0].pattern, tuple(v)) for slots, v in zip(valid, values)],
            higher_is_better=hib, metric=metric, unit=unit, margin=config.margin, confidence=config.confidence,
            n_bootstrap=config.n_bootstrap if i == 0 else min(config.n_bootstrap, 1999), seed=config.seed,
        )
        summaries[metric] = {
            variant: float(np.exp(np.mean([math.log(v) for slots, row in zip(valid, values)
                                           for r, v in zip(slots, row) if r.variant == variant])))
            for variant in (CONTROL, CANDIDATE)}
    sequential: dict[str, SequentialDecision] = {}
    fixed_primary = comparisons.get(config.primary)
    if autostop is not None:
        for metric, comparison in list(comparisons.items()):
            comparisons[metric], sequential[metric] = autostop.restate(
                comparison, _metric_blocks(config, runs, metric))
    aa = None
    primary = comparisons.get(config.primary)
    if config.aa and primary is not None:
        aa = _aa_report(valid, primary, config.primary, fixed_primary)
    return BenchRunResult(config=dataclasses.asdict(config), runs=runs, failed_blocks=failed,
                          comparisons=comparisons, skipped_metrics=skipped, summaries=summaries, aa=aa, host=host,
                          error=error, sequential=sequential)
