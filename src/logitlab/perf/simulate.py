"""Simulated counterbalanced experiments, for tests and benchmarks of the statistics.

The model of one slot measurement, in natural logs::

    log v = log(base)
          + log(effect)            if the slot runs the candidate (B)
          + log1p(drift) * k / (4n - 1)     k = 0 .. 4n-1, the slot's index in the run
          + u_i                    per-block level, N(0, block_sd)
          + log(1 -/+ penalty)     on the first slot of every block only
          + e                      per-slot noise, N(0, noise_sd)

so ``effect`` is the true candidate/control ratio, ``drift`` the relative
change of the machine from the first to the last slot of the run, and
``first_slot_penalty`` makes the first slot of each block worse (lower if
higher is better, higher otherwise), like a cold start.

Nothing here prints or logs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from logitlab.errors import InputError
from logitlab.perf.design import Block, block_patterns
from logitlab.perf.equivalence import CALLS
from logitlab.perf.paired import paired_comparison

__all__ = ["simulate_blocks", "simulate_calls"]


def _real(value: Any, name: str, *, low: float | None = None, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise InputError(f"{name} {value!r} is not finite")
    if low is not None and (x <= low if low_open else x < low):
        raise InputError(f"{name} {value!r} must be {'>' if low_open else '>='} {low}")
    return x


def check_experiments(n_experiments: Any) -> int:
    """``n_experiments`` of a simulation, a positive int.

    Raises:
        InputError: not an int (a bool is not one), or < 1.
    """
    if isinstance(n_experiments, bool) or not isinstance(n_experiments, int) or n_experiments < 1:
        raise InputError(f"n_experiments {n_experiments!r} is not a positive integer")
    return n_experiments


def simulate_blocks(
    n_blocks: int,
    *,
    effect: float = 1.0,
    noise_sd: float = 0.01,
    drift: float = 0.0,
    first_slot_penalty: float = 0.0,
    block_sd: float = 0.0,
    base: float = 100.0,
    higher_is_better: bool = True,
    order: str = "alternate",
    seed: Any = 0,
) -> list[Block]:
    """Generate one counterbalanced experiment.

    Parameters
    ----------
    n_blocks : int
        Number of blocks (>= 0).
    effect : float, optional
        True ratio candidate/control of the measured value (> 0); 1.10 makes
        the candidate measure 10 % higher. Defaults to 1.0 (no effect).
    noise_sd : float, optional
        Sd of the independent per-slot log noise (0.01 is about 1 %).
        Defaults to 0.01.
    drift : float, optional
        Relative change of the machine, linear in log over the run's slots,
        from the first slot to the last (0.05: the last slot measures 5 %
        higher than the first would). > -1. Defaults to 0.
    first_slot_penalty : float, optional
        Relative worsening of the first slot of every block, in [0, 1):
        the value is multiplied by ``1 - p`` if ``higher_is_better``, else by
        ``1 + p``. Defaults to 0.
    block_sd : float, optional
        Sd of a per-block log level shared by its four slots (machine state
        that changes between blocks). Defaults to 0.
    base : float, optional
        Control's value on a quiet machine (> 0). Defaults to 100.
    higher_is_better : bool, optional
        Direction of the metric, for the penalty. Defaults to True.
    order : {'alternate', 'random'}, optional
        Block pattern order, see :func:`logitlab.perf.design.block_patterns`.
    seed : int or numpy.random.Generator, optional
        Everything random comes from ``numpy.random.default_rng(seed)``.

    Returns
    -------
    list of Block

    Raises
    ------
    InputError
        On an out-of-range parameter.
    """
    effect = _real(effect, "effect", low=0.0, low_open=True)
    noise_sd = _real(noise_sd, "noise_sd", low=0.0)
    drift = _real(drift, "drift", low=-1.0, low_open=True)
    penalty = _real(first_slot_penalty, "first_slot_penalty", low=0.0)
    if penalty >= 1.0:
        raise InputError(f"first_slot_penalty {first_slot_penalty!r} must be below 1")
    block_sd = _real(block_sd, "block_sd", low=0.0)
    base = _real(base, "base", low=0.0, low_open=True)
    rng = np.random.default_rng(seed)
    patterns = block_patterns(n_blocks, order=order, seed=rng)
    n = len(patterns)
    if n == 0:
        return []
    is_b = np.array([[c == "B" for c in p] for p in patterns], dtype=bool)
    k = np.arange(4 * n, dtype=np.float64).reshape(n, 4)
    logs = np.full((n, 4), math.log(base))
    logs += np.where(is_b, math.log(effect), 0.0)
    logs += math.log1p(drift) * k / max(4 * n - 1, 1)
    logs += rng.normal(0.0, block_sd, size=(n, 1)) if block_sd else 0.0
    logs[:, 0] += math.log1p(-penalty) if higher_is_better else math.log1p(penalty)
    logs += rng.normal(0.0, noise_sd, size=(n, 4)) if noise_sd else 0.0
    values = np.exp(logs)
    return [Block(p, tuple(float(v) for v in row)) for p, row in zip(patterns, values)]


def simulate_calls(
    n_experiments: int,
    n_blocks: int,
    *,
    margin: float | None = None,
    higher_is_better: bool = True,
    confidence: float = 0.95,
    seed: Any = 0,
    **model: Any,
) -> dict[str, float]:
    """Rates of each call over many simulated experiments.

    Parameters
    ----------
    n_experiments : int
        Number of independent experiments (>= 1).
    n_blocks : int
        Blocks per experiment.
    margin, higher_is_better, confidence
        Passed to :func:`logitlab.perf.paired.paired_comparison` (no bootstrap).
    seed : int or numpy.random.Generator, optional
        One generator, from ``numpy.random.default_rng(seed)``, drives all
        experiments in turn.
    **model
        Passed to :func:`simulate_blocks` (``effect``, ``noise_sd``,
        ``drift``, ``first_slot_penalty``, ``block_sd``, ``order``, ...).

    Returns
    -------
    dict of str to float
        The fraction of experiments with each call (keys ``'faster'``,
        ``'slower'``, ``'equivalent'``, ``'inconclusive'``), with
        ``'significant'`` (the ratio's CI excludes 1: the t-test rejects no
        change, whatever the call), ``'position_significant'`` (slot position
        effect flagged),
        ``'mean_margin'`` (mean delta used) and ``'mean_mde'`` (mean MDE).

    Raises
    ------
    InputError
        On bad arguments.
    """
    check_experiments(n_experiments)
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(CALLS, 0)
    position = 0
    significant = 0
    margins = []
    mdes = []
    for _ in range(n_experiments):
        blocks = simulate_blocks(n_blocks, higher_is_better=higher_is_better, seed=rng, **model)
        result = paired_comparison(
            blocks,
            higher_is_better=higher_is_better,
            metric="simulated",
            unit="",
            margin=margin,
            confidence=confidence,
            n_bootstrap=0,
        )
        counts[result.call] += 1
        significant += bool(result.p_value is not None and result.p_value < 1.0 - confidence)
        position += bool(result.position is not None and result.position.significant)
        margins.append(result.margin)
        if result.mde is not None:
            mdes.append(result.mde)
    rates = {call: counts[call] / n_experiments for call in CALLS}
    rates["significant"] = significant / n_experiments
    rates["position_significant"] = position / n_experiments
    rates["mean_margin"] = float(np.mean(margins))
    rates["mean_mde"] = float(np.mean(mdes)) if mdes else float("nan")
    return rates
