"""The equivalence margin δ of a sequential run, fixed before its first look, and where it came from.

``ab --repeats auto`` and ``bench run --repeats auto`` look after every block
(:mod:`logitlab.perf.sequential`). Their δ is fixed before the first look,
never taken from the run's own A/A slots: δ from the blocks so far shrinks
like the repeated CI, so an A/A ended "equivalent" in only about half the
runs whatever the budget (the analysis is in :mod:`logitlab.perf.sequential`).
The sources, in order (:func:`preregister`):

1. ``--margin X``: source ``'option'``;
2. a calibration recorded earlier on this machine (``--noise FILE``):
   source ``'calibration'``, with the file and what it was measured on
   (:class:`PreregisteredMargin`; the readers: :mod:`logitlab.perf.run_calibration`
   for ``bench run``, :mod:`logitlab.experiments.ab_calibration` for ``ab``);
3. :data:`DEFAULT_SEQUENTIAL_MARGIN`: source ``'default'``.

Fixed-size runs keep their rule (:func:`logitlab.perf.equivalence.choose_margin`:
the option, else the A/A of the same blocks, else the default), but where a caller
fixes δ beforehand: ``paired_comparison(margin=PreregisteredMargin(...))`` (``ab``'s
interleaved decode blocks, whose own A/A misses the instance effect: the default).

Nothing here prints or logs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logitlab.errors import InputError, check_choice
from logitlab.jsonio import PlainRecord
from logitlab.perf.equivalence import DEFAULT_MARGIN, MAX_AA_MARGIN, MIN_AA_BLOCKS, MIN_AA_MARGIN, check_margin

if TYPE_CHECKING:
    from logitlab.perf.paired import PairedComparison

__all__ = ["DEFAULT_SEQUENTIAL_MARGIN", "PREREGISTERED_SOURCES", "PreregisteredMargin", "preregister",
           "calibrated_margin", "pooled_calibrated_margin", "check_between_run_sd", "calibration_paths"]

#: δ of a sequential run given neither ``--margin`` nor ``--noise``: 2 %,
#: :data:`~logitlab.perf.equivalence.DEFAULT_MARGIN`.
#:
#: Why 2 % and not the 5 % cap (:data:`~logitlab.perf.equivalence.MAX_AA_MARGIN`): δ says which change is
#: negligible, and 2 % is the resolution logitlab aims at (issue 36: a 2 % MDE for decode tokens/s) and the
#: default of every other speed call (fixed-size runs without A/A blocks), so "equivalent" means the same
#: thing in every command; a 5 % δ would call a real 3-4 % regression "equivalent" once its repeated CI fits
#: inside ±5 %. What it costs, measured (``simulate_sequential``, 400 simulated A/As a row, budget 12 blocks,
#: per-slot noise sd = block log-ratio sd; the sd measured on this project's 2-core machines is 1.2-1.6 % for
#: decode when quiet, 2-4 % for prefill, 5-8 % under load): an A/A ends "equivalent" in 99 % of runs at a 1.2 %
#: block sd (7.7 blocks on average), 93 % at 1.5 %, 66 % at 2 %, 12 % at 3 %, 0.3 % at 6 % (with δ 5 %: 100,
#: 100, 100, 99 and 36 %). A noisier workload or machine ends "inconclusive", the honest answer at that noise
#: for a 2 % question: pass ``--margin``, or ``--noise`` with an A/A of this machine, to ask a coarser one.
DEFAULT_SEQUENTIAL_MARGIN = DEFAULT_MARGIN
#: One-sided normal quantile of a calibrated δ's power (95 %): :func:`calibrated_margin`.
POWER_Z = 1.6448536269514722
#: Where a pre-registered δ came from.
PREREGISTERED_SOURCES = ("option", "calibration", "default")


@dataclass(frozen=True, slots=True)
class PreregisteredMargin(PlainRecord):
    """δ of a sequential run, fixed before its first look.

    Attributes
    ----------
    margin : float
        Relative equivalence margin (0.02 = 2 %), in (0, 1).
    source : {'option', 'calibration', 'default'}
    file : str or None
        ``'calibration'``: the calibration file's path (several files: their paths joined by ``', '``).
    basis : str or None
        ``'calibration'``: what it was measured on (kind of run, command or
        engine, workload, blocks, host), as far as the file says.
    between_run_sd : float or None
        ``'calibration'`` of two or more A/As: ``tau``, the sd of a run's own
        offset (natural-log units, >= 0), which the sequential run's repeated
        CIs then carry (:func:`~logitlab.perf.sequential.sequential_step`);
        None where it was not measured (one A/A, a profile, an option).
    """

    margin: float
    source: str
    file: str | None = None
    basis: str | None = None
    between_run_sd: float | None = None

    def __post_init__(self) -> None:
        check_margin(self.margin)
        check_choice("source", self.source, PREREGISTERED_SOURCES)
        if (self.source == "calibration") != (self.file is not None):
            raise InputError("a pre-registered margin names its file exactly when it comes from a calibration")
        if self.between_run_sd is not None:
            if self.source != "calibration":
                raise InputError("only a calibration measures a between-run sd")
            check_between_run_sd(self.between_run_sd, self.file)


def check_between_run_sd(tau: object, file: str | None = None) -> float:
    """``tau`` as a float: a finite number >= 0 (the sd of a run's own offset, natural-log units).

    Raises:
        InputError: anything else (``file`` names where it came from).
    """
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau < 0:
        raise InputError(f"{file + ': ' if file else ''}the between-run sd {tau!r} is not a finite number >= 0")
    return float(tau)


def preregister(option: float | None, calibration: PreregisteredMargin | None = None) -> PreregisteredMargin:
    """δ of a sequential run: ``option`` (``--margin``), else ``calibration`` (``--noise``), else the default.

    Args:
        option: δ given by the user, or None.
        calibration: δ read from a calibration file, or None.

    Returns:
        PreregisteredMargin with source ``'option'``, ``'calibration'`` or ``'default'``.

    Raises:
        InputError: ``option`` is not a margin in (0, 1), or ``calibration`` not a PreregisteredMargin; both
            given where the calibration measured a between-run sd (``--margin`` would drop what the repeated
            CIs must carry).
    """
    if option is not None and calibration is not None and calibration.between_run_sd is not None:
        raise InputError("--margin replaces the δ of --noise, but the A/As given to --noise also measured how much "
                         "a run's own offset varies, which the CIs must carry: give --margin or the --noise files")
    if option is not None:
        return PreregisteredMargin(check_margin(option, option="--margin"), "option")
    if calibration is not None:
        if not isinstance(calibration, PreregisteredMargin):
            raise InputError(f"calibration {calibration!r} is not a PreregisteredMargin")
        return calibration
    return PreregisteredMargin(DEFAULT_SEQUENTIAL_MARGIN, "default")


def calibrated_margin(sd_log_ratio: float, n_blocks: int, *, max_blocks: int, file: str, basis: str,
                      tau: float | None = None, alpha: float = 0.05,
                      spending: str = "obrien-fleming") -> PreregisteredMargin:
    """δ from earlier A/As' block sd: the change the run's budget resolves on that machine.

    ``delta = min(5 %, max(1 %, expm1((c_K + z_0.95) * sqrt(sd^2 / K + tau^2))))``
    with ``K = max_blocks`` (the budget), ``c_K`` the sequential design's
    boundary at its last look (:func:`~logitlab.perf.spending.spending_boundaries`,
    t statistic), ``sd`` the A/As' block log-ratio sd and ``tau`` the sd of a
    run's own offset (the instance effect: two engine objects of one spec
    differ by an amount fixed for the whole run, which more blocks do not
    shrink; measured from two or more A/As,
    :func:`~logitlab.perf.between_runs.between_run_variance`; None, taken as
    0, from one): the smallest δ that the budget can reach. An A/A's mean has
    sd ``s = sqrt(sd^2 / K + tau^2)`` at the last look, and the repeated CI
    is ``mean +- c_K s`` there (the run's CIs carry ``tau``:
    :func:`~logitlab.perf.sequential.sequential_step`), so an A/A with this
    noise ends "equivalent" when ``|mean|`` is within 1.645 ``s`` of 0
    (about 90 % of A/As), and a true change of δ is called with about 95 %
    power. At a 12-block budget δ is 1.2 block sds (2.4 % at a 2 % block sd); simulated
    (``benchmarks/bench_validity.py --part sequential --experiments 400``,
    2 % block sd): A/A "equivalent" 84 %, false calls 4.5 %; a true 2 %
    change called "faster" 81 %, "equivalent" 6 %. A δ of 1.96 block sds
    (4 %, the noise of one block) reached 99 % on the A/A but called a true
    2 % change "equivalent" in 53 % of runs. Floored at 1 % and capped at 5 % like the A/A-calibrated
    margin: above the cap the budget cannot resolve a change that is still
    negligible, and the run ends "inconclusive" more often.

    Args:
        sd_log_ratio: sd of a block's log ratio within a run, natural-log units, >= 0: one A/A's sd (ddof 1),
            or the pooled within-run sd of several.
        n_blocks: blocks of the A/As in all (at least 3; 8 or more give a steadier sd).
        max_blocks: the sequential run's budget (3-100).
        file, basis: for the record (:class:`PreregisteredMargin`).
        tau: sd of a run's offset, natural-log units, >= 0, or None (not measured: taken as 0); kept in the
            margin's ``between_run_sd``.
        alpha, spending: of the sequential design (:mod:`logitlab.perf.sequential`).

    Raises:
        InputError: fewer than 3 blocks, a bad sd, tau, budget, alpha or spending function.
    """
    from logitlab.perf.spending import DEFAULT_MIN_BLOCKS, check_budget, spending_boundaries

    if not isinstance(n_blocks, int) or n_blocks < MIN_AA_BLOCKS:
        raise InputError(f"{file}: the A/A has {n_blocks} block(s); a calibration needs at least {MIN_AA_BLOCKS}")
    if not isinstance(sd_log_ratio, (int, float)) or not sd_log_ratio >= 0.0:
        raise InputError(f"{file}: the A/A's block sd {sd_log_ratio!r} is not a number >= 0: damaged file")
    _, max_blocks = check_budget(DEFAULT_MIN_BLOCKS, max_blocks)
    c_last = float(spending_boundaries(min_blocks=DEFAULT_MIN_BLOCKS, max_blocks=max_blocks, alpha=alpha,
                                       spending=spending, statistic="t")[-1])
    tau = None if tau is None else check_between_run_sd(tau, file)
    spread = math.hypot(float(sd_log_ratio) / math.sqrt(max_blocks), tau or 0.0)
    reach = math.expm1((c_last + POWER_Z) * spread)
    return PreregisteredMargin(min(MAX_AA_MARGIN, max(MIN_AA_MARGIN, reach)), "calibration", file=file, basis=basis,
                               between_run_sd=tau)


def pooled_calibrated_margin(comparisons: Sequence[PairedComparison], *, max_blocks: int, files: Sequence[str], what: str,
                             metric: str, host: str) -> PreregisteredMargin:
    """δ from one or more saved A/As of one workload: :func:`calibrated_margin` of their block log ratios.

    One A/A: its block sd (``sd_log_ratio``), ``tau`` 0 (a run's own offset
    cannot be seen in one run). Two or more: the pooled within-run sd and the
    between-run sd ``tau`` of the one-way random-effects ANOVA of their
    block log ratios (:func:`~logitlab.perf.between_runs.between_run_variance`;
    Searle, Casella & McCulloch 1992), so that δ carries the offset by which
    a run's two engine objects (or anything else fixed for a run) differ.

    Args:
        comparisons: one :class:`~logitlab.perf.paired.PairedComparison` per A/A, of the metric the run
            decides on (``block_log_ratios``: shape ``(n_i,)``, float, natural-log units; ``n_blocks`` >= 3
            each).
        max_blocks: the sequential run's budget.
        files: the A/As' paths, in the order of ``comparisons``.
        what: what each A/A ran, for the record (``"ab A/A of llamacpp ..., 32 tokens, session isolation"``).
        metric: the metric's short name (``"decode"``).
        host: :func:`host_text` of the first A/A.

    Returns:
        PreregisteredMargin: source ``'calibration'``, ``file`` the paths joined by ``', '``, ``basis`` what
        they measured; ``between_run_sd`` tau (None from one A/A).

    Raises:
        InputError: no A/A, or ``files`` of another length; a file given twice; an A/A with fewer than 3
            blocks; what :func:`calibrated_margin` raises.
    """
    from logitlab.perf.between_runs import between_run_variance

    if not comparisons or len(files) != len(comparisons):
        raise InputError(f"a calibration needs one file per A/A, got {len(files)} for {len(comparisons)}")
    resolved = [os.path.realpath(f) for f in files]
    for i, path in enumerate(resolved):
        if path in resolved[:i]:
            raise InputError(f"--noise file {files[i]} is given twice: one A/A pooled twice would read as two runs "
                             "that agree")
    for path, comparison in zip(files, comparisons):
        if not isinstance(comparison.n_blocks, int) or comparison.n_blocks < MIN_AA_BLOCKS:
            raise InputError(f"{path}: the A/A has {comparison.n_blocks} block(s); a calibration needs at least "
                             f"{MIN_AA_BLOCKS}")
    if len(comparisons) == 1:
        (comparison,) = comparisons
        basis = (f"{what}, {comparison.n_blocks} blocks, {metric} block sd "
                 f"{100 * (comparison.sd_log_ratio or 0.0):.2f} %, {host}; a run's own offset not measured (one A/A)")
        return calibrated_margin(comparison.sd_log_ratio, comparison.n_blocks, max_blocks=max_blocks, file=files[0],
                                 basis=basis)
    pooled = between_run_variance([c.block_log_ratios for c in comparisons])
    p_text = "" if pooled.p_value is None else f" (F test p {pooled.p_value:.2g})"
    basis = (f"{len(comparisons)} A/As: {what}, {pooled.n_blocks} blocks, pooled {metric} block sd "
             f"{100 * pooled.within_sd:.2f} %, between-run sd (a run's own offset) {100 * pooled.between_sd:.2f} %"
             f"{p_text}, {host}")
    return calibrated_margin(pooled.within_sd, pooled.n_blocks, max_blocks=max_blocks, file=", ".join(files),
                             basis=basis, tau=pooled.between_sd)


def calibration_paths(paths: str | Sequence[str]) -> list[str]:
    """``--noise``'s value as a list of paths: one path, or the option repeated.

    Raises:
        InputError: no path.
    """
    listed = [paths] if isinstance(paths, str) else list(paths)
    if not listed:
        raise InputError("--noise: no file given")
    return listed


def read_calibration(path: str) -> tuple[str, dict]:
    """A ``--noise`` file's ``kind`` and data (a JSON object logitlab wrote).

    Raises:
        InputError: missing, unreadable, not JSON, or not a JSON object with a ``kind``.
    """
    from logitlab.jsonio import read_json

    data = read_json(path, what="--noise file")
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise InputError(f"--noise file {path} is not a logitlab result (no 'kind'): give a saved A/A result or a "
                         "bench calibrate profile")
    return data["kind"], data


def host_text(host: object) -> str:
    """What a calibration's host record (:func:`logitlab.manifest.host_info`) says, for a margin's basis:
    ``"on CPU (N cores), load L at the start"``; ``"on an unrecorded host"`` without one."""
    if not isinstance(host, dict) or not host.get("cpu"):
        return "on an unrecorded host"
    load = host.get("load_average_1m")
    return (f"on {host['cpu']} ({host.get('cores', '?')} cores)"
            + (f", load {load} at the start" if load is not None else ""))
