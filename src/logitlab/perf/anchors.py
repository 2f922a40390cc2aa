"""The comparison methods other tools use, and a simulation that scores them against logitlab's.

The anchors, each applied the way its tool applies it:

- :func:`mann_whitney_anchor`: Google Benchmark's ``tools/compare.py`` runs
  an unpaired two-sided Mann-Whitney U test on the repetitions of the two
  runs (``scipy.stats.mannwhitneyu``, alpha 0.05; ``gbench/report.py``).
- :func:`student_t_anchor`: pyperf's ``compare_to`` marks a difference
  significant with a two-sample, two-tailed Student t-test with pooled
  variance at 95 % (``pyperf/_utils.py: is_significant``).
- :func:`fixed_threshold_anchor`: the CI table of the project's seed report
  flags a scenario whose mean changed by 15 % or more.

All three see the runs in the order a CI job makes them: every control run,
then every candidate run (AAAA...BBBB). :func:`score_methods` simulates one
machine per experiment (drift, slot penalty, noise) and lets logitlab's
counterbalanced ABBA/BAAB design and the sequential design run on the *same*
machine realisation, so the methods see the same data, and counts how often
each calls a change: the false-positive rate when there is none, the power
when there is one.

Nothing here prints or logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.perf.design import Block, block_patterns
from logitlab.perf.paired import paired_comparison
from logitlab.perf.simulate import check_experiments

__all__ = [
    "METHODS",
    "AnchorResult",
    "mann_whitney_anchor",
    "student_t_anchor",
    "fixed_threshold_anchor",
    "SimScenario",
    "VALIDITY_SCENARIOS",
    "simulate_machine",
    "score_methods",
]

#: Column names of :func:`score_methods`, logitlab first.
METHODS = ("logitlab paired", "Mann-Whitney U (gbench)", "Student t (pyperf)", "15% threshold (CI table)")


@dataclass(frozen=True)
class AnchorResult:
    """One anchor method's verdict on one comparison.

    Attributes
    ----------
    flagged : bool
        The method reports a change.
    direction : {'faster', 'slower'} or None
        Which way, in the metric's "better" orientation; None if not flagged.
    p_value : float or None
        The test's p-value (None for the threshold rule).
    change : float
        ``mean(candidate) / mean(control) - 1``.
    """

    flagged: bool
    direction: str | None
    p_value: float | None
    change: float


def _samples(control: Sequence[float], candidate: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(control, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or a.size < 2 or b.size < 2:
        raise InputError(f"each side needs a 1-D sequence of at least 2 values, got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and a.min() > 0 and b.min() > 0):
        raise InputError("values must be positive and finite")
    return a, b


def _direction(change: float, higher_is_better: bool) -> str:
    return "faster" if (change > 0) == higher_is_better else "slower"


def _result(a: np.ndarray, b: np.ndarray, flag: Callable[[float], bool], p: float | None,
            higher_is_better: bool) -> AnchorResult:
    """The anchor's call: ``flag(change)`` decides, change = mean ratio candidate/control - 1."""
    change = float(b.mean() / a.mean() - 1.0)
    flagged = bool(flag(change))
    return AnchorResult(flagged, _direction(change, higher_is_better) if flagged else None, p, change)


def _p_value_anchor(control: Sequence[float], candidate: Sequence[float],
                    p_value: Callable[[np.ndarray, np.ndarray], float], *, higher_is_better: bool,
                    alpha: float) -> AnchorResult:
    """A significance-test anchor: flag a change when ``p_value(control, candidate) < alpha``."""
    a, b = _samples(control, candidate)
    p = float(p_value(a, b))
    return _result(a, b, lambda _: p < alpha, p, higher_is_better)


def mann_whitney_anchor(control: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
                        alpha: float = 0.05) -> AnchorResult:
    """Google Benchmark compare.py's U test on two runs' repetitions.

    Parameters
    ----------
    control, candidate : sequence of float
        Shape ``(n,)`` and ``(m,)``, n, m >= 2, positive.
    higher_is_better : bool
    alpha : float, optional
        Defaults to 0.05 (compare.py's ``--alpha`` default).

    Returns
    -------
    AnchorResult

    Raises
    ------
    InputError
        On fewer than 2 values a side or non-positive values.

    Notes
    -----
    ``scipy.stats.mannwhitneyu(control, candidate, alternative='two-sided')``
    as in google/benchmark ``tools/gbench/report.py`` (``calc_utest``).
    """
    from scipy import stats
    return _p_value_anchor(control, candidate, lambda a, b: stats.mannwhitneyu(a, b, alternative="two-sided").pvalue,
                           higher_is_better=higher_is_better, alpha=alpha)


def student_t_anchor(control: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
                     alpha: float = 0.05) -> AnchorResult:
    """pyperf's significance test: two-sample Student t with pooled variance.

    Parameters, result and errors as for :func:`mann_whitney_anchor`; ``alpha``
    defaults to 0.05 (pyperf's 95 % table).

    Notes
    -----
    ``scipy.stats.ttest_ind(control, candidate, equal_var=True)``, the test of
    psf/pyperf ``pyperf/_utils.py`` (``is_significant``, ``tscore``).
    """
    from scipy import stats
    return _p_value_anchor(control, candidate, lambda a, b: stats.ttest_ind(a, b, equal_var=True).pvalue,
                           higher_is_better=higher_is_better, alpha=alpha)


def fixed_threshold_anchor(control: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
                           threshold: float = 0.15) -> AnchorResult:
    """The seed CI table's rule: flag a change of the mean by ``threshold`` or more.

    ``control``, ``candidate``, ``higher_is_better``, the result and errors are
    as for :func:`mann_whitney_anchor` (``p_value`` is None); ``threshold`` is
    the relative change that flags. Defaults to 0.15 (the seed's ⚠️ line).
    """
    a, b = _samples(control, candidate)
    return _result(a, b, lambda change: abs(change) >= threshold, None, higher_is_better)


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
