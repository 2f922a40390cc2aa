"""The validity benchmark's simulation: logitlab's paired design and the anchors on the same simulated machine.

:func:`score_methods` simulates one machine per experiment
(:func:`simulate_machine`: drift, slot penalty, noise) and lets logitlab's
counterbalanced ABBA/BAAB design run on it, while the anchors
(:mod:`logitlab.perf.anchors`) see the same runs in the order a CI job makes
them: every control run, then every candidate run (AAAA...BBBB). It counts
how often each method calls a change: the false-positive rate when there is
none, the power when there is one. ``benchmarks/bench_validity.py`` prints
it for :data:`VALIDITY_SCENARIOS`.

Nothing here prints or logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from logitlab.errors import InputError
from logitlab.perf.anchors import fixed_threshold_anchor, mann_whitney_anchor, student_t_anchor
from logitlab.perf.design import Block, block_patterns
from logitlab.perf.paired import paired_comparison
from logitlab.perf.simulate import check_experiments

__all__ = ["METHODS", "SimScenario", "VALIDITY_SCENARIOS", "simulate_machine", "score_methods"]

#: Column names of :func:`score_methods`, logitlab first.
METHODS = ("logitlab paired", "Mann-Whitney U (gbench)", "Student t (pyperf)", "15% threshold (CI table)")


@dataclass(frozen=True)
class SimScenario:
    """One row of the validity benchmark: a machine and a true effect.

    Attributes
    ----------
    label : str
    effect : float
        True candidate/control ratio of the measured value (1.0: none).
    drift : float
        Relative change of the machine from the first to the last run.
    first_slot_penalty : float
        Relative worsening of every 4th run (the first slot of each block of
        four consecutive runs: a cold start after a pause).
    block_sd : float or None
        Sd of the machine state shared by each group of four consecutive
        runs; None: the ``block_sd`` given to :func:`score_methods`. 0 makes
        every run independent (the assumption of the unpaired tests).
    """

    label: str
    effect: float = 1.0
    drift: float = 0.0
    first_slot_penalty: float = 0.0
    block_sd: float | None = None

    @property
    def is_null(self) -> bool:
        return self.effect == 1.0


#: The scenarios of ``benchmarks/bench_validity.py``.
VALIDITY_SCENARIOS = (
    SimScenario("A/A, iid runs (no shared state)", block_sd=0.0),
    SimScenario("A/A, no drift"),
    SimScenario("A/A, linear drift +10%", drift=0.10),
    SimScenario("A/A, linear drift +30%", drift=0.30),
    SimScenario("A/A, first-slot penalty 5%", first_slot_penalty=0.05),
    SimScenario("real effect 1%", effect=1.01),
    SimScenario("real effect 3%", effect=1.03),
    SimScenario("real effect 10%", effect=1.10),
)


def simulate_machine(n_blocks: int, rng: np.random.Generator, *, drift: float = 0.0, first_slot_penalty: float = 0.0,
                     noise_sd: float = 0.02, block_sd: float = 0.02, higher_is_better: bool = True) -> np.ndarray:
    """Log multipliers of one machine over ``4 * n_blocks`` consecutive runs.

    The model of :mod:`logitlab.perf.simulate`, per run ``k``::

        log1p(drift) * k / (4n - 1)  +  u[k // 4]  +  e[k]  +  log(1 -/+ p) if k % 4 == 0

    with ``u ~ N(0, block_sd)`` shared by each group of four consecutive
    runs, ``e ~ N(0, noise_sd)`` per run, and the penalty making the value
    worse in the metric's direction.

    Returns
    -------
    numpy.ndarray
        Shape ``(4 * n_blocks,)``, float64, natural-log units.
    """
    n = 4 * n_blocks
    k = np.arange(n, dtype=np.float64)
    logs = math.log1p(drift) * k / max(n - 1, 1)
    logs = logs + np.repeat(rng.normal(0.0, block_sd, n_blocks), 4) + rng.normal(0.0, noise_sd, n)
    pen = math.log1p(-first_slot_penalty) if higher_is_better else math.log1p(first_slot_penalty)
    logs[::4] += pen
    return logs


def score_methods(
    scenario: SimScenario,
    *,
    n_experiments: int = 1000,
    n_blocks: int = 10,
    noise_sd: float = 0.02,
    block_sd: float = 0.02,
    base: float = 100.0,
    higher_is_better: bool = True,
    threshold: float = 0.15,
    seed: Any = 0,
) -> dict[str, dict[str, float]]:
    """How often each method calls a change in simulated experiments with known truth.

    Parameters
    ----------
    scenario : SimScenario
    n_experiments : int, optional
        Simulated experiments (>= 1). Defaults to 1000 (simulation standard
        error of a 5 % rate: 0.7 points).
    n_blocks : int, optional
        Blocks of 4 runs per experiment: logitlab runs them as alternating
        ABBA/BAAB; the anchors see the same ``4 * n_blocks`` runs as
        ``2 * n_blocks`` control runs followed by ``2 * n_blocks`` candidate
        runs. Defaults to 10.
    noise_sd, block_sd : float, optional
        Per-run and per-group-of-four log noise (see :func:`simulate_machine`).
    base : float, optional
        Control's value (e.g. tokens/s).
    higher_is_better : bool, optional
        Direction of the metric. Defaults to True (tokens/s).
    threshold : float, optional
        Of the fixed-threshold anchor. Defaults to 0.15.
    seed : int or numpy.random.Generator, optional

    Returns
    -------
    dict of str to dict
        Keyed by :data:`METHODS`; each has ``'flag_rate'`` (share of
        experiments with a change called, either way), ``'correct_rate'``
        (share calling the true direction; 0 under no effect) and
        ``'wrong_way_rate'``. Under no effect ``flag_rate`` is the
        false-positive rate, under an effect ``correct_rate`` is the power.

    Raises
    ------
    InputError
        On ``n_experiments`` < 1 or ``n_blocks`` < 2.
    """
    check_experiments(n_experiments)
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, int) or n_blocks < 2:
        raise InputError(f"n_blocks {n_blocks!r} must be an integer >= 2")
    rng = np.random.default_rng(seed)
    patterns = block_patterns(n_blocks)
    is_b_paired = np.array([[c == "B" for c in p] for p in patterns]).ravel()
    is_b_seq = np.arange(4 * n_blocks) >= 2 * n_blocks
    truth = None if scenario.is_null else ("faster" if (scenario.effect > 1.0) == higher_is_better else "slower")
    counts = {m: {"flag": 0, "correct": 0, "wrong": 0} for m in METHODS}
    log_effect = math.log(scenario.effect)

    def tally(method: str, direction: str | None) -> None:
        if direction is None:
            return
        counts[method]["flag"] += 1
        if truth is not None:
            counts[method]["correct" if direction == truth else "wrong"] += 1

    for _ in range(n_experiments):
        machine = simulate_machine(n_blocks, rng, drift=scenario.drift, first_slot_penalty=scenario.first_slot_penalty,
                                   noise_sd=noise_sd, higher_is_better=higher_is_better,
                                   block_sd=block_sd if scenario.block_sd is None else scenario.block_sd)
        paired_values = base * np.exp(machine + log_effect * is_b_paired)
        blocks = [Block(p, tuple(row)) for p, row in zip(patterns, paired_values.reshape(n_blocks, 4))]
        call = paired_comparison(blocks, higher_is_better=higher_is_better, metric="simulated", unit="",
                                 n_bootstrap=0).call
        tally(METHODS[0], call if call in ("faster", "slower") else None)
        seq = base * np.exp(machine + log_effect * is_b_seq)
        a, b = seq[~is_b_seq], seq[is_b_seq]
        tally(METHODS[1], mann_whitney_anchor(a, b, higher_is_better=higher_is_better).direction)
        tally(METHODS[2], student_t_anchor(a, b, higher_is_better=higher_is_better).direction)
        tally(METHODS[3], fixed_threshold_anchor(a, b, higher_is_better=higher_is_better,
                                                 threshold=threshold).direction)
    return {m: {"flag_rate": c["flag"] / n_experiments, "correct_rate": c["correct"] / n_experiments,
                "wrong_way_rate": c["wrong"] / n_experiments} for m, c in counts.items()}
