"""``ab --repeats auto`` / ``bench run --repeats auto``: ask the sequential rule after each block whether to stop.

The statistics are :mod:`logitlab.perf.sequential` (group-sequential design,
repeated CIs valid at any stopping time). This module adds what a run loop
needs around it: the budget of blocks, a wall-clock budget, and, when the
run is over, the fixed-size comparisons restated with the sequential call
and the CI valid at the stop (:func:`~logitlab.perf.sequential.sequential_comparison`). Its
equivalence margin δ is fixed when it is built (:func:`~logitlab.perf.prereg.preregister`:
``--margin``, else ``--noise``'s calibration, else the default), before the first look. Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from logitlab.errors import InputError
from logitlab.perf.paired import Block, PairedComparison
from logitlab.perf.prereg import PreregisteredMargin, preregister
from logitlab.perf.sequential import SequentialDecision, sequential_comparison, sequential_decision
from logitlab.perf.spending import DEFAULT_MAX_BLOCKS, DEFAULT_MIN_BLOCKS, MAX_BUDGET

__all__ = ["AutoStop", "check_auto_budget"]


def check_auto_budget(max_blocks: int, max_time: float | None, *, flag: str = "--max-repeats",
                      time_flag: str = "--max-time") -> None:
    """Validate a sequential budget.

    Raises:
        InputError: ``max_blocks`` not an integer in [3, 100], or ``max_time`` not positive (the message names
            them ``flag`` and ``time_flag``).
    """
    if isinstance(max_blocks, bool) or not isinstance(max_blocks, int) or not \
            DEFAULT_MIN_BLOCKS <= max_blocks <= MAX_BUDGET:
        raise InputError(f"{flag} must be an integer from {DEFAULT_MIN_BLOCKS} (the first look) to {MAX_BUDGET}, "
                         f"got {max_blocks!r}")
    if max_time is not None and not (isinstance(max_time, (int, float)) and math.isfinite(max_time) and max_time > 0):
        raise InputError(f"{time_flag} must be a positive duration, got {max_time!r}")


@dataclass
class AutoStop:
    """The sequential stopping rule of one run.

    Attributes:
        max_blocks: budget of blocks (the design's last look).
        max_time: wall-clock budget in seconds from construction, or None. The
            run stops at a look when ``look_every`` more blocks (at the mean block
            time so far) would end past it.
        margin: equivalence margin δ (``--margin``), or None.
        calibration: δ read from a calibration file (``--noise``), used when ``margin`` is None.
        prereg: the δ of every look, fixed at construction (:func:`~logitlab.perf.prereg.preregister` of
            ``margin`` and ``calibration``; the default when both are None); never from the blocks' A/A.
        higher_is_better: direction of the metric that drives the stop.
        metric, unit: its names, for the reasons.
        clock: seconds, monotonic (tests replace it).
        budget_flag: the option that sets ``max_blocks``, for messages: ``--max-repeats`` (ab, bench run,
            bisect).
        look_every: blocks from one look to the next (``ab --speed-design interleaved``: 2, a pair of ABBA and
            BAAB); the time budget stops a run at a look when that many more blocks would end past it.
    """

    max_blocks: int = DEFAULT_MAX_BLOCKS
    max_time: float | None = None
    margin: float | None = None
    higher_is_better: bool = True
    metric: str = ""
    unit: str = ""
    clock: Callable[[], float] = time.monotonic
    budget_flag: str = "--max-repeats"
    look_every: int = 1
    calibration: PreregisteredMargin | None = None
    prereg: PreregisteredMargin = field(init=False)
    decision: SequentialDecision | None = field(default=None, init=False)
    time_up: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        check_auto_budget(self.max_blocks, self.max_time, flag=self.budget_flag)
        self.prereg = preregister(self.margin, self.calibration)
        self._started = self.clock()

    def look(self, blocks: Sequence[Block], *, blocks_run: int) -> SequentialDecision:
        """The decision after a block ends.

        Args:
            blocks: the complete, valid blocks of the driving metric so far, in run order.
            blocks_run: blocks run so far, failed ones included (for the time estimate).
        """
        elapsed = self.clock() - self._started
        per_block = elapsed / max(blocks_run, 1)
        self.time_up = self.max_time is not None and elapsed + self.look_every * per_block > self.max_time
        self.decision = sequential_decision(blocks, higher_is_better=self.higher_is_better, margin=self.prereg,
                                            max_blocks=self.max_blocks, time_up=self.time_up, metric=self.metric,
                                            unit=self.unit)
        return self.decision

    def restate(self, comparison: PairedComparison, blocks: Sequence[Block]) -> tuple[PairedComparison,
                                                                                        SequentialDecision]:
        """A metric's fixed-size comparison at the end of the run, with the sequential call and repeated CI.

        The same rule over the same blocks: for the driving metric this is the
        decision that stopped the run; another metric gets its own repeated CI,
        valid at this stop too (the repeated CIs hold under any stopping rule).
        A calibration's between-run sd was measured on the driving metric: only
        its CI carries it.
        """
        prereg = (self.prereg if comparison.metric == self.metric
                  else dataclasses.replace(self.prereg, between_run_sd=None))
        decision = sequential_decision(blocks, higher_is_better=comparison.higher_is_better, margin=prereg,
                                       max_blocks=self.max_blocks, time_up=self.time_up, metric=comparison.metric,
                                       unit=comparison.unit)
        return sequential_comparison(comparison, decision), decision
