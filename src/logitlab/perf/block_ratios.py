"""Per-block log ratios of an ABBA/BAAB experiment, and the margin its A/A slots give.

Each block (:mod:`logitlab.perf.design`) yields one candidate/control log
ratio, the paired difference that :func:`logitlab.perf.paired.paired_comparison`
and the sequential rule (:mod:`logitlab.perf.sequential`) analyse, and one
control/control (A/A) log ratio, the noise one single-slot comparison sees,
from which :func:`aa_margin` calibrates the equivalence margin.

Nothing here prints or logs.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from logitlab.perf.design import Block, as_blocks, log_slots
from logitlab.perf.equivalence import aa_margin_from_logs, check_confidence

__all__ = ["block_log_ratios", "aa_log_ratios", "aa_margin"]


def block_log_ratios(blocks: Iterable[Block]) -> np.ndarray:
    """Per-block log ratio candidate/control.

    Parameters
    ----------
    blocks : sequence of Block
        The experiment, in run order.

    Returns
    -------
    numpy.ndarray
        Shape ``(n_blocks,)``, float64, natural-log units: for each block
        ``mean(log B) - mean(log A)`` over its two candidate and two control
        slots (the log of the ratio of the geometric means). Positive means
        the candidate measured higher.

    Raises
    ------
    InputError
        If ``blocks`` is not a sequence of :class:`Block`.

    Examples
    --------
    >>> block_log_ratios([Block("ABBA", (1.0, 2.0, 2.0, 1.0))]).round(4)
    array([0.6931])
    """
    items = as_blocks(blocks)
    if not items:
        return np.zeros(0, dtype=np.float64)
    logs, is_b = log_slots(items)
    return (np.where(is_b, logs, 0.0).sum(axis=1) - np.where(is_b, 0.0, logs).sum(axis=1)) / 2.0


def aa_log_ratios(blocks: Iterable[Block]) -> np.ndarray:
    """Per-block control-vs-control (A/A) log ratio: later ``A`` over earlier ``A``.

    Both ``A`` slots run the same engine, so this is the noise one
    single-slot comparison sees on this machine (plus any drift or slot
    position effect between the two slots: slots 1 and 4 in ``ABBA``, 2 and 3
    in ``BAAB``).

    Parameters
    ----------
    blocks : sequence of Block

    Returns
    -------
    numpy.ndarray
        Shape ``(n_blocks,)``, float64, natural-log units.

    Raises
    ------
    InputError
        If ``blocks`` is not a sequence of :class:`Block`.
    """
    items = as_blocks(blocks)
    if not items:
        return np.zeros(0, dtype=np.float64)
    logs = np.log(np.array([b.values for b in items], dtype=np.float64))
    idx = np.array([b.control_slots for b in items])
    rows = np.arange(len(items))
    return logs[rows, idx[:, 1]] - logs[rows, idx[:, 0]]


def aa_margin(blocks: Iterable[Block], *, confidence: float = 0.95) -> float | None:
    """Equivalence margin calibrated from the blocks' A/A ratios.

    Rule: the half-width of the ``confidence`` interval of the
    control-vs-control comparison inside the same blocks, as a relative
    change, floored at 1 % and capped at 5 %::

        delta = min(0.05, max(0.01, expm1(t_{(1+confidence)/2, n-1} * sd(aa_log) / sqrt(n))))

    ``aa_log`` are :func:`aa_log_ratios` (one per block, sd with ddof 1).
    Reading: two identical engines, compared over this many blocks on this
    machine, can differ by up to ``delta`` without the data telling them
    apart, so a candidate whose whole CI lies within ``delta`` of the control
    is as equivalent as this experiment can show. The A/A ratio compares one
    slot with one slot, the block ratio two with two, so ``delta`` is about
    ``sqrt(2)`` times the comparison's own CI half-width under pure noise:
    equivalence stays reachable. Systematic A/A offsets (drift, slot
    position) are excluded by taking the sd about the mean: the
    counterbalanced design removes them from the comparison itself, while
    their variation between ``ABBA`` and ``BAAB`` blocks, which the
    comparison does feel, is in the sd. The 1 % floor keeps the margin
    practical once many blocks make the A/A CI very narrow; the 5 % cap keeps
    "equivalent" meaning negligible on a noisy machine (seen here: an A/A
    half-width of 79 % under heavy CPU contention would otherwise call a
    candidate whose CI is [+2 %, +25 %] "equivalent"). The CI itself still
    carries all the noise.

    Parameters
    ----------
    blocks : sequence of Block
    confidence : float, optional
        In (0, 1). Defaults to 0.95.

    Returns
    -------
    float or None
        The relative margin (0.023 = 2.3 %), or None with fewer than 3 blocks.

    Raises
    ------
    InputError
        On bad blocks or a confidence outside (0, 1).
    """
    check_confidence(confidence)
    aa = aa_log_ratios(blocks)
    return aa_margin_from_logs(aa, confidence)
