"""The between-run variance of block log ratios (perf/between_runs.py): the one-way random-effects ANOVA, on
crafted groups (worked by hand) and on simulated runs of known tau (the maths; the real runs are
benchmarks/bench_real_validity.py's)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from logitlab.errors import InputError
from logitlab.perf.between_runs import BetweenRuns, between_run_variance


def test_two_runs_of_two_blocks_worked_by_hand():
    # means 1 and 5, grand 3: MS_between = 2 * (4 + 4) / 1 = 16; MS_within = (1 + 1 + 1 + 1) / 2 = 2;
    # n0 = (4 - 8 / 4) / 1 = 2; tau^2 = (16 - 2) / 2 = 7; F = 8 on (1, 2) degrees of freedom
    r = between_run_variance([[0.0, 2.0], [4.0, 6.0]])
    assert (r.n_runs, r.n_blocks, r.df_between, r.df_within) == (2, 4, 1, 2)
    assert r.effective_blocks_per_run == pytest.approx(2.0)
    assert r.f_statistic == pytest.approx(8.0)
    assert r.p_value == pytest.approx(float(stats.f.sf(8.0, 1, 2)))
    assert r.within_sd == pytest.approx(math.sqrt(2.0))
    assert r.between_sd == pytest.approx(math.sqrt(7.0))
    assert r.mean_log == pytest.approx(3.0)
    half = float(stats.t.ppf(0.975, 1)) * float(np.std([1.0, 5.0], ddof=1)) / math.sqrt(2)
    assert (r.ci_low_log, r.ci_high_log) == pytest.approx((3.0 - half, 3.0 + half))
    assert r.between_share == pytest.approx(7.0 / 9.0)
    assert r.run_sd_inflation(2) == pytest.approx(math.sqrt(1 + 2 * 7.0 / 2.0))


def test_unequal_runs_use_n0_and_runs_of_one_block_are_left_out():
    # sizes 2 and 4: N = 6, sum n^2 = 20, n0 = (6 - 20 / 6) / 1 = 8 / 3
    runs = [[0.0, 0.2], [1.0, 1.1, 0.9, 1.0], [7.0]]
    r = between_run_variance(runs)
    assert (r.n_runs, r.n_blocks) == (2, 6)
    assert r.effective_blocks_per_run == pytest.approx(8.0 / 3.0)
    ms_between = (2 * (0.1 - 4.2 / 6) ** 2 + 4 * (1.0 - 4.2 / 6) ** 2) / 1
    ms_within = (0.01 + 0.01 + 0.0 + 0.01 + 0.01 + 0.0) / 4
    assert r.f_statistic == pytest.approx(ms_between / ms_within)
    assert r.between_sd == pytest.approx(math.sqrt((ms_between - ms_within) / (8.0 / 3.0)))
    assert r.mean_log == pytest.approx(0.55)  # the runs' means, unweighted (all blocks: 0.7)


@pytest.mark.parametrize("sizes", [[4] * 30, [2, 3, 4, 6, 12] * 6])
def test_f_and_p_are_scipys_one_way_anova(sizes):
    # the oracle: scipy.stats.f_oneway (this module computes its own mean squares, for tau)
    rng = np.random.default_rng(len(sizes) + sum(sizes))
    runs = [rng.normal(rng.normal(0.0, 0.01), 0.02, n) for n in sizes]
    r, oracle = between_run_variance(runs), stats.f_oneway(*runs)
    assert r.f_statistic == pytest.approx(float(oracle.statistic), rel=1e-9)
    assert r.p_value == pytest.approx(float(oracle.pvalue), rel=1e-9, abs=1e-15)


def test_runs_that_agree_better_than_their_blocks_have_tau_zero():
    r = between_run_variance([[-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0]])
    assert r.between_sd == 0.0 and r.f_statistic == pytest.approx(0.0) and r.p_value == pytest.approx(1.0)
    assert r.run_sd_inflation(12) == 1.0 and r.between_share == 0.0


@pytest.mark.parametrize("runs", [[[1.0, 1.0], [2.0, 2.0]], [[0.1] * 3, [0.2] * 3]])
def test_no_spread_within_runs_has_no_f(runs):
    # [0.1] * 3 has a mean that rounds: MS_within would be ~1e-34, not 0, without the spread check
    r = between_run_variance(runs)
    assert r.f_statistic is None and r.p_value is None and r.within_sd == 0.0
    assert r.between_sd == pytest.approx(abs(runs[1][0] - runs[0][0]) / math.sqrt(2))
    assert r.between_share == 1.0 and r.run_sd_inflation(4) == math.inf and r.false_call_rate(4) == 1.0


def _simulate(rng: np.random.Generator, tau: float, sigma: float, runs: int, blocks: int) -> list[np.ndarray]:
    return [rng.normal(rng.normal(0.0, tau), sigma, blocks) for _ in range(runs)]


def test_unequal_runs_estimate_tau_without_bias():
    # sizes 2-12 as --repeats auto leaves them: a wrong n0 (e.g. the mean size, 5.4) would bias tau^2 by ~20 %
    rng = np.random.default_rng(11)
    sizes = [2, 3, 4, 6, 12] * 8
    tau2 = [between_run_variance([rng.normal(rng.normal(0.0, 0.02), 0.02, n) for n in sizes]).between_sd ** 2
            for _ in range(600)]
    assert float(np.mean(tau2)) == pytest.approx(0.02 ** 2, rel=0.1)


def test_the_predicted_false_call_rate_is_what_runs_of_that_model_make():
    # runs of 4 blocks, tau = sigma / 2: x = sqrt(1 + 4 / 4) = sqrt(2); the rate their paired-t CIs exclude 0
    rng = np.random.default_rng(5)
    r = between_run_variance([[-0.01, 0.01], [0.0, 0.02]])
    model = dataclasses.replace(r, within_sd=0.02, between_sd=0.01)
    assert model.run_sd_inflation(4) == pytest.approx(math.sqrt(2.0))
    predicted = model.false_call_rate(4)
    runs = _simulate(rng, 0.01, 0.02, 20000, 4)
    t = np.array([x.mean() / (x.std(ddof=1) / 2.0) for x in runs])
    seen = float((np.abs(t) > stats.t.ppf(0.975, 3)).mean())
    assert predicted == pytest.approx(seen, abs=0.006)  # 20000 runs: the binomial sd is 0.0017
    assert dataclasses.replace(model, between_sd=0.0).false_call_rate(4) == pytest.approx(0.05)
    assert dataclasses.replace(model, between_sd=0.0).false_call_rate(4, confidence=0.9) == pytest.approx(0.1)


def test_a_planted_instance_effect_is_found_and_sized():
    rng = np.random.default_rng(7)
    results = [between_run_variance(_simulate(rng, 0.01, 0.02, 60, 4)) for _ in range(400)]
    assert float(np.mean([r.p_value < 0.05 for r in results])) > 0.9
    # the moment estimate of tau^2 is unbiased (truncation at 0 aside, rare here)
    assert float(np.mean([r.between_sd ** 2 for r in results])) == pytest.approx(0.01 ** 2, rel=0.1)
    assert float(np.mean([r.within_sd for r in results])) == pytest.approx(0.02, rel=0.02)
    # the interval of the mean carries tau: it covers the true 0 at about its nominal rate
    covered = np.mean([r.ci_low_log <= 0.0 <= r.ci_high_log for r in results])
    assert 0.92 <= float(covered) <= 0.98


def test_the_upper_bound_of_tau_covers_it_at_its_confidence():
    rng = np.random.default_rng(3)
    for tau in (0.0, 0.01):
        bounds = [between_run_variance(_simulate(rng, tau, 0.02, 40, 4)).between_sd_upper() for _ in range(1000)]
        covered = float(np.mean([tau <= b for b in bounds]))
        # exact for tau^2 / sigma^2; sigma_hat for sigma (129 degrees of freedom) moves it little
        assert 0.93 <= covered <= 0.97 if tau > 0 else covered == 1.0
    r = between_run_variance([[0.0, 2.0], [4.0, 6.0]])
    lam = 8.0 / float(stats.f.ppf(0.05, 1, 2))
    assert r.between_sd_upper() == pytest.approx(math.sqrt(2.0) * math.sqrt((lam - 1.0) / 2.0))
    assert between_run_variance([[1.0, 1.0], [2.0, 2.0]]).between_sd_upper() is None


def test_the_record_round_trips_through_its_dict():
    r = between_run_variance([[0.0, 2.0], [4.0, 6.0], [1.0, 1.5]])
    assert BetweenRuns.from_dict(r.to_dict()) == r


@pytest.mark.parametrize(("runs", "message"), [
    ([[0.0, 1.0]], "1 run(s) with 2 or more blocks"),
    ([[0.0, 1.0], [2.0]], "1 run(s) with 2 or more blocks"),
    ([[0.0, 1.0], [2.0, float("nan")]], "run 1: a block log ratio is not finite"),
    ([[0.0, 1.0], [[2.0, 3.0]]], "run 1: its block log ratios have shape (1, 2)"),
    ([[0.0, 1.0], ["a", "b"]], "run 1: its block log ratios are not numbers"),
    ([], "0 run(s) with 2 or more blocks"),
])
def test_bad_input_is_one_input_error(runs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        between_run_variance(runs)


def test_bad_confidence_and_block_count():
    r = between_run_variance([[0.0, 1.0], [2.0, 3.0]])
    with pytest.raises(InputError, match="confidence"):
        between_run_variance([[0.0, 1.0], [2.0, 3.0]], confidence=1.5)
    with pytest.raises(InputError, match="below 1"):
        r.run_sd_inflation(0)
    with pytest.raises(InputError, match="not a non-negative integer"):
        r.run_sd_inflation(True)
    with pytest.raises(InputError, match="not a non-negative integer"):
        r.run_sd_inflation(2.0)
    with pytest.raises(InputError, match="below 2"):
        r.false_call_rate(1)
    assert r.run_sd_inflation(np.int64(4)) == r.run_sd_inflation(4)


def test_another_confidence_gives_its_interval():
    runs = [[0.0, 0.1], [0.3, 0.2], [0.1, 0.1], [0.4, 0.5]]
    wide, narrow = between_run_variance(runs, confidence=0.99), between_run_variance(runs, confidence=0.8)
    means = np.array([0.05, 0.25, 0.1, 0.45])
    half = float(stats.t.ppf(0.9, 3)) * float(means.std(ddof=1)) / 2.0
    assert (narrow.ci_low_log, narrow.ci_high_log) == pytest.approx((0.2125 - half, 0.2125 + half))
    assert wide.ci_low_log < narrow.ci_low_log and wide.ci_high_log > narrow.ci_high_log
