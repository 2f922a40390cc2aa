"""Seeded simulations: the simulator itself, and the statistics' error rates and power.

Rates come from 400 experiments of 10 blocks each; bounds allow the simulation
error (binomial sd of a 5 % rate over 400 runs is about 1.1 %).
"""

import math

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.report.speed_text import paired_reason
from logitlab.perf import (
    block_log_ratios,
    minimum_detectable_effect,
    paired_comparison,
    simulate_blocks,
    simulate_calls,
    slot_position_effect,
)

N_EXP, N_BLOCKS = 400, 10
NOISE = 0.01
DRIFT = 0.05       # the machine measures 5 % higher by the end of the run
PENALTY = 0.03     # the first slot of every block measures 3 % worse


# --- the simulator ----------------------------------------------------------------


def test_simulator_is_seeded_and_shaped():
    a = simulate_blocks(6, effect=1.1, seed=5)
    assert a == simulate_blocks(6, effect=1.1, seed=5)
    assert a != simulate_blocks(6, effect=1.1, seed=6)
    assert [b.pattern for b in a] == ["ABBA", "BAAB"] * 3
    r = simulate_blocks(8, order="random", seed=1)
    assert sorted(b.pattern for b in r) == ["ABBA"] * 4 + ["BAAB"] * 4
    assert simulate_blocks(0) == []


def test_noiseless_simulation_model():
    # Drift cancels within each block; the first-slot penalty alternates sign
    # between ABBA and BAAB and cancels over an even number of blocks.
    blocks = simulate_blocks(8, effect=1.05, noise_sd=0, drift=0.2, seed=0)
    np.testing.assert_allclose(block_log_ratios(blocks), math.log(1.05), rtol=1e-12)
    v = blocks[0].values
    assert v[0] == pytest.approx(100.0) and v[1] == pytest.approx(105.0 * 1.2 ** (1 / 31))
    assert blocks[-1].values[3] == pytest.approx(105.0 * 1.2)  # last slot: B of a BAAB

    pen = simulate_blocks(8, effect=1.05, noise_sd=0, first_slot_penalty=0.04, seed=0)
    r = block_log_ratios(pen)
    half = -math.log(0.96) / 2
    np.testing.assert_allclose(r[0::2], math.log(1.05) + half, rtol=1e-12)  # ABBA: A penalised
    np.testing.assert_allclose(r[1::2], math.log(1.05) - half, rtol=1e-12)  # BAAB: B penalised
    assert r.mean() == pytest.approx(math.log(1.05), rel=1e-12)
    pe = slot_position_effect(pen)
    assert pe.log_estimate == pytest.approx(half, rel=1e-12)  # the variant effect is gone
    slow = simulate_blocks(2, noise_sd=0, first_slot_penalty=0.04, higher_is_better=False)
    assert slow[0].values[0] == pytest.approx(104.0)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(effect=0), "effect 0 must be > 0"),
        (dict(noise_sd=-1), "noise_sd -1"),
        (dict(drift=-1), "drift -1"),
        (dict(first_slot_penalty=1.0), "first_slot_penalty 1.0 must be below 1"),
        (dict(order="zigzag"), "order 'zigzag'"),
        (dict(base=float("nan")), "base nan is not finite"),
    ],
)
def test_simulator_input_errors(kw, match):
    with pytest.raises(InputError, match=match):
        simulate_blocks(4, **kw)
    with pytest.raises(InputError, match="n_experiments 0"):
        simulate_calls(0, 4)


# --- error rates and power ----------------------------------------------------------


@pytest.mark.parametrize("order", ["alternate", "random"])
def test_no_effect_with_drift_and_first_slot_penalty_false_positive_rate(order):
    # A tiny margin makes equivalence impossible, so faster/slower is the bare
    # two-sided t-test; drift and the slot penalty must not push it above 5 %.
    rates = simulate_calls(N_EXP, N_BLOCKS, margin=1e-9, seed=11, effect=1.0, noise_sd=NOISE,
                           drift=DRIFT, first_slot_penalty=PENALTY, order=order)
    assert rates["faster"] + rates["slower"] <= 0.05
    # Default margin (from A/A): never a false faster/slower.
    rates = simulate_calls(N_EXP, N_BLOCKS, seed=12, effect=1.0, noise_sd=NOISE,
                           drift=DRIFT, first_slot_penalty=PENALTY, order=order)
    assert rates["faster"] + rates["slower"] <= 0.05


def test_no_effect_plain_noise_is_nominal():
    rates = simulate_calls(N_EXP, N_BLOCKS, margin=1e-9, seed=13, effect=1.0, noise_sd=NOISE,
                           drift=DRIFT)
    assert 0.02 <= rates["faster"] + rates["slower"] <= 0.08
    assert abs(rates["faster"] - rates["slower"]) <= 0.04


def test_ten_percent_effect_detected_nearly_always():
    for hib in (True, False):
        effect = 1.10 if hib else 1 / 1.10  # candidate better either way
        rates = simulate_calls(N_EXP, N_BLOCKS, seed=14, effect=effect, noise_sd=NOISE,
                               drift=DRIFT, first_slot_penalty=PENALTY, higher_is_better=hib)
        assert rates["faster"] >= 0.99


def test_three_percent_effect_detected():
    rates = simulate_calls(N_EXP, N_BLOCKS, seed=15, effect=1.03, noise_sd=NOISE,
                           drift=DRIFT, first_slot_penalty=PENALTY)
    assert rates["faster"] >= 0.95 and rates["slower"] == 0.0
    # Three times the noise: still reasonably often, never the wrong way.
    rates = simulate_calls(N_EXP, N_BLOCKS, seed=16, effect=1.03, noise_sd=0.03)
    assert rates["faster"] >= 0.6 and rates["slower"] == 0.0


def test_power_at_the_mde_is_about_80_percent():
    # The MDE formula's promise: a true change of the MDE is detected ~80 % of the time.
    noise = 0.02  # block log-ratio sd = noise (2 vs 2 slots)
    mde = minimum_detectable_effect(noise, N_BLOCKS)
    rates = simulate_calls(N_EXP, N_BLOCKS, margin=1e-9, seed=17, effect=1 + mde,
                           noise_sd=noise)
    assert 0.70 <= rates["significant"] <= 0.90
    assert rates["mean_mde"] == pytest.approx(mde, rel=0.15)


def test_equivalence_for_no_effect_low_noise():
    rates = simulate_calls(N_EXP, N_BLOCKS, margin=0.05, seed=18, effect=1.0, noise_sd=0.005,
                           drift=DRIFT)
    assert rates["equivalent"] >= 0.99
    # With the A/A-calibrated margin (1 % floor here) equivalence still dominates.
    rates = simulate_calls(N_EXP, N_BLOCKS, seed=19, effect=1.0, noise_sd=0.005)
    assert rates["mean_margin"] == pytest.approx(0.01, abs=0.002)
    assert rates["equivalent"] >= 0.9 and rates["faster"] + rates["slower"] <= 0.05


def test_real_effect_is_not_called_equivalent_with_aa_margin():
    rates = simulate_calls(N_EXP, N_BLOCKS, seed=20, effect=1.03, noise_sd=NOISE,
                           drift=DRIFT, first_slot_penalty=PENALTY)
    assert rates["equivalent"] <= 0.01


def test_position_effect_detected_only_when_present():
    with_pen = simulate_calls(N_EXP, N_BLOCKS, seed=21, effect=1.05, noise_sd=NOISE,
                              first_slot_penalty=PENALTY)
    assert with_pen["position_significant"] >= 0.95
    without = simulate_calls(N_EXP, N_BLOCKS, seed=22, effect=1.05, noise_sd=NOISE)
    assert 0.02 <= without["position_significant"] <= 0.08


def test_single_experiment_reason_mentions_position_effect():
    blocks = simulate_blocks(10, effect=1.05, noise_sd=NOISE, first_slot_penalty=PENALTY, seed=3)
    res = paired_comparison(blocks, higher_is_better=True, metric="decode", unit="tokens/s",
                            n_bootstrap=999)
    assert res.call == "faster" and res.position.significant
    assert "Slot position effect" in paired_reason(res) and "(5 vs 5 here)" in paired_reason(res)
    assert res.position.ratio == pytest.approx(1 / math.sqrt(1 - PENALTY), abs=0.01)
