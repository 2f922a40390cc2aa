"""Simulated sequential experiments: error rates and blocks used under optional stopping.

Three designs run on the same simulated machine model
(:func:`logitlab.perf.simulate.simulate_blocks`: true effect, per-slot noise,
per-block level, drift over the budget, first-slot penalty):

- ``'auto'``: :func:`logitlab.perf.sequential.sequential_decision` after
  every block, stop at its first call (``--repeats auto``; δ pre-registered,
  or ``margin='a/a'``: from the blocks' A/A, the rule it replaced);
- ``'fixed'``: all ``max_blocks`` blocks, then
  :func:`logitlab.perf.paired.paired_comparison`;
- ``'peek'``: the naive design: after every block from ``min_blocks`` on, a
  paired t-test of the block log ratios; stop at the first ``p < 0.05``
  (call faster / slower by the sign), else the fixed call at ``max_blocks``.

Nothing here prints or logs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from logitlab.errors import check_choice
from logitlab.perf.block_ratios import aa_margin, block_log_ratios
from logitlab.perf.equivalence import CALLS, DEFAULT_MARGIN
from logitlab.perf.paired import paired_comparison
from logitlab.perf.sequential import sequential_decision, sequential_step
from logitlab.perf.simulate import check_experiments, simulate_blocks
from logitlab.perf.spending import DEFAULT_MAX_BLOCKS, DEFAULT_MIN_BLOCKS

__all__ = ["DESIGNS", "simulate_sequential"]

#: The designs :func:`simulate_sequential` runs.
DESIGNS = ("auto", "fixed", "peek")


def simulate_sequential(
    n_experiments: int,
    *,
    design: str = "auto",
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    min_blocks: int = DEFAULT_MIN_BLOCKS,
    margin: float | str | None = None,
    alpha: float = 0.05,
    spending: str = "obrien-fleming",
    higher_is_better: bool = True,
    seed: Any = 0,
    **model: Any,
) -> dict[str, Any]:
    """Run many simulated experiments of one design; rates of each call and blocks used.

    Parameters
    ----------
    n_experiments : int
        Independent experiments (>= 1).
    design : {'auto', 'fixed', 'peek'}, optional
        See the module docstring. Defaults to ``'auto'``.
    max_blocks, min_blocks : int, optional
        Budget (the fixed design's size) and first look. Defaults 12 and 3.
    margin : float or 'a/a', optional
        Equivalence margin. None: as in a real run (``'fixed'`` and ``'peek'``:
        ``aa_margin`` of the blocks analysed; ``'auto'``: the pre-registered
        default, :data:`~logitlab.perf.prereg.DEFAULT_SEQUENTIAL_MARGIN`).
        ``'a/a'``: ``aa_margin`` of the blocks so far for ``'auto'`` too (the
        rule before issue 36, for comparison; the default below 3 blocks).
    alpha, spending : optional
        Of the ``'auto'`` design (:func:`logitlab.perf.sequential.sequential_step`).
    higher_is_better : bool, optional
    seed : int or numpy.random.Generator, optional
        One generator drives all experiments in turn.
    **model
        Passed to :func:`logitlab.perf.simulate.simulate_blocks` (``effect``,
        ``noise_sd``, ``block_sd``, ``drift``, ``first_slot_penalty``, ...);
        each experiment draws ``max_blocks`` blocks, so a drift spans the
        whole budget, and a run that stops early sees its first part.

    Returns
    -------
    dict
        The fraction of experiments with each call (``'faster'``,
        ``'slower'``, ``'equivalent'``, ``'inconclusive'``), ``'flagged'``
        (faster or slower), ``'mean_blocks'`` and ``'p90_blocks'`` (blocks run
        until the run stopped) and ``'blocks'`` (list of int, per
        experiment).

    Raises
    ------
    InputError
        On bad arguments.
    """
    check_experiments(n_experiments)
    check_choice("design", design, DESIGNS)
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(CALLS, 0)
    used: list[int] = []
    for _ in range(n_experiments):
        blocks = simulate_blocks(max_blocks, higher_is_better=higher_is_better, seed=rng, **model)
        call, n = _run_one(blocks, design=design, max_blocks=max_blocks, min_blocks=min_blocks, margin=margin,
                           alpha=alpha, spending=spending, higher_is_better=higher_is_better)
        counts[call] += 1
        used.append(n)
    out: dict[str, Any] = {call: counts[call] / n_experiments for call in CALLS}
    out["flagged"] = out["faster"] + out["slower"]
    out["mean_blocks"] = float(np.mean(used))
    out["p90_blocks"] = float(np.percentile(used, 90))
    out["blocks"] = used
    return out


def _run_one(blocks: list, *, design: str, max_blocks: int, min_blocks: int, margin: float | None, alpha: float,
             spending: str, higher_is_better: bool) -> tuple[str, int]:
    from scipy import stats
    if design == "auto":
        for n in range(1, max_blocks + 1):
            if margin == "a/a":
                delta = aa_margin(blocks[:n], confidence=1.0 - alpha) or DEFAULT_MARGIN
                decision = sequential_step(block_log_ratios(blocks[:n]), margin=delta, margin_source="a/a",
                                           higher_is_better=higher_is_better, alpha=alpha, min_blocks=min_blocks,
                                           max_blocks=max_blocks, spending=spending)
            else:
                decision = sequential_decision(blocks[:n], higher_is_better=higher_is_better, margin=margin,
                                               alpha=alpha, min_blocks=min_blocks, max_blocks=max_blocks,
                                               spending=spending)
            if decision.stop:
                return decision.call, n
        raise AssertionError("the sequential rule must stop at max_blocks")  # pragma: no cover
    if design == "peek":
        ratios = block_log_ratios(blocks)
        for n in range(min_blocks, max_blocks):
            x = ratios[:n]
            if float(np.ptp(x)) > 1e-13 and stats.ttest_1samp(x, 0.0).pvalue < 0.05:
                better = float(np.mean(x)) > 0.0 if higher_is_better else float(np.mean(x)) < 0.0
                return ("faster" if better else "slower"), n
    result = paired_comparison(blocks, higher_is_better=higher_is_better, metric="simulated", unit="",
                               margin=None if margin == "a/a" else margin, n_bootstrap=0)
    return result.call, max_blocks
