"""Crafted-data tests of logitlab.perf.paired: exact numbers, calls, errors, JSON."""

import inspect
import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from logitlab.errors import InputError
from logitlab.report.speed_text import paired_reason
from logitlab.perf import (
    MAX_AA_MARGIN,
    Block,
    PairedComparison,
    PositionEffect,
    aa_log_ratios,
    aa_margin,
    block_log_ratios,
    block_patterns,
    blocks_needed,
    minimum_detectable_effect,
    paired_comparison,
    slot_position_effect,
)


def blocks_with_ratios(log_ratios, *, base=100.0):
    """Alternating blocks whose block log ratio (B over A) is exactly each given value."""
    out = []
    for i, r in enumerate(log_ratios):
        a, b = base, base * math.exp(r)
        if i % 2 == 0:
            out.append(Block("ABBA", (a, b, b, a)))
        else:
            out.append(Block("BAAB", (b, a, a, b)))
    return out


def compare(blocks, **kw):
    kw.setdefault("higher_is_better", True)
    kw.setdefault("metric", "decode")
    kw.setdefault("unit", "tokens/s")
    return paired_comparison(blocks, **kw)


# --- Block -------------------------------------------------------------------


def test_block_normalises_values_to_float_tuple():
    b = Block("BAAB", [1, np.float32(2.5), 3, np.int64(4)])
    assert b.values == (1.0, 2.5, 3.0, 4.0)
    assert all(type(v) is float for v in b.values)
    assert b.control_slots == (1, 2) and b.candidate_slots == (0, 3)


@pytest.mark.parametrize(
    "pattern, values, match",
    [
        ("ABAB", (1, 1, 1, 1), r"pattern 'ABAB' is not valid"),
        ("abba", (1, 1, 1, 1), r"pattern 'abba'"),
        ("ABBA", (1, 1, 1), r"has 3 slots"),
        ("ABBA", (1, 1, 1, 1, 1), r"has 5 slots"),
        ("ABBA", (1, 0.0, 1, 1), r"slot 2 value 0.0 is not positive"),
        ("ABBA", (1, 1, -3.0, 1), r"slot 3 value -3.0"),
        ("ABBA", (1, 1, 1, float("nan")), r"slot 4 value nan"),
        ("ABBA", (float("inf"), 1, 1, 1), r"slot 1 value inf"),
        ("ABBA", (1, "2", 1, 1), r"slot 2 value '2' is not a number"),
        ("ABBA", (1, True, 1, 1), r"slot 2 value True is not a number"),
        ("ABBA", 5.0, r"not a sequence"),
    ],
)
def test_block_rejects_bad_input(pattern, values, match):
    with pytest.raises(InputError, match=match):
        Block(pattern, values)


def test_functions_reject_non_blocks():
    with pytest.raises(InputError, match=r"blocks\[1\] .* is a tuple, not a Block"):
        block_log_ratios([Block("ABBA", (1, 1, 1, 1)), ("ABBA", (1, 1, 1, 1))])
    with pytest.raises(InputError, match="not a sequence of Block"):
        compare(Block("ABBA", (1, 1, 1, 1)))


def test_block_patterns():
    assert block_patterns(4) == ["ABBA", "BAAB", "ABBA", "BAAB"]
    assert block_patterns(3, first="BAAB") == ["BAAB", "ABBA", "BAAB"]
    r = block_patterns(10, order="random", seed=3)
    assert r.count("ABBA") == 5 and r == block_patterns(10, order="random", seed=3)
    assert r != block_patterns(10)  # seed 3 happens not to give the alternation
    with pytest.raises(InputError, match="order 'zigzag'"):
        block_patterns(4, order="zigzag")
    with pytest.raises(InputError, match="n_blocks -1"):
        block_patterns(-1)


# --- per-block quantities ----------------------------------------------------


def test_block_log_ratios_exact():
    blocks = [
        Block("ABBA", (100.0, 110.0, 120.0, 90.0)),
        Block("BAAB", (50.0, 40.0, 45.0, 55.0)),
    ]
    expected = [
        (math.log(110) + math.log(120)) / 2 - (math.log(100) + math.log(90)) / 2,
        (math.log(50) + math.log(55)) / 2 - (math.log(40) + math.log(45)) / 2,
    ]
    got = block_log_ratios(blocks)
    assert got.shape == (2,) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(
        aa_log_ratios(blocks), [math.log(90 / 100), math.log(45 / 40)], rtol=0, atol=1e-15
    )
    assert block_log_ratios([]).shape == (0,)


def test_position_effect_cancels_variant_effect_exactly():
    # Noiseless: candidate 10 % higher, no slot effect -> position exactly 0.
    blocks = blocks_with_ratios([math.log(1.1)] * 6)
    pe = slot_position_effect(blocks)
    assert pe.block_log_effects == [0.0] * 6
    assert pe.log_estimate == 0.0 and pe.p_value == 1.0 and not pe.significant
    assert pe.ci_low == pe.ci_high == 1.0

    # Second slot of every pair measures 2 % higher, whatever runs in it.
    shifted = [Block(b.pattern, (v0, v1 * 1.02, v2, v3 * 1.02)) for b in blocks
               for v0, v1, v2, v3 in [b.values]]
    pe = slot_position_effect(shifted)
    np.testing.assert_allclose(pe.block_log_effects, [math.log(1.02)] * 6, rtol=1e-12)
    assert pe.ratio == pytest.approx(1.02, rel=1e-12)
    assert pe.significant and pe.p_value == 0.0
    # ... and the variant estimate is untouched by it.
    np.testing.assert_allclose(block_log_ratios(shifted), [math.log(1.1)] * 6, rtol=1e-12)


def test_position_effect_t_test_matches_scipy():
    blocks = [
        Block("ABBA", (100, 104, 101, 102)),
        Block("BAAB", (99, 103, 100, 101)),
        Block("ABBA", (101, 102, 103, 104)),
        Block("BAAB", (98, 100, 101, 100)),
    ]
    logs = np.log([b.values for b in blocks])
    per = ((logs[:, 1] - logs[:, 0]) + (logs[:, 3] - logs[:, 2])) / 2
    ref = stats.ttest_1samp(per, 0.0)
    ci = ref.confidence_interval(0.95)
    pe = slot_position_effect(blocks)
    assert pe.log_estimate == pytest.approx(per.mean(), abs=1e-15)
    assert pe.p_value == pytest.approx(ref.pvalue, rel=1e-12)
    assert (pe.log_ci_low, pe.log_ci_high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert pe.ci_low == pytest.approx(math.exp(ci.low), rel=1e-12)
    assert pe.significant == (ref.pvalue < 0.05)


# --- the comparison: numbers --------------------------------------------------


def test_geomean_and_t_ci_match_hand_computation():
    r = np.array([0.05, 0.07, 0.04, 0.08, 0.06, 0.055])
    res = compare(blocks_with_ratios(r), n_bootstrap=0)
    n, mean, sd = r.size, r.mean(), r.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    assert res.n_blocks == 6 and res.n_abba == 3 and res.n_baab == 3
    np.testing.assert_allclose(res.block_log_ratios, r, rtol=0, atol=1e-14)
    assert res.mean_log_ratio == pytest.approx(mean, abs=1e-14)
    assert res.sd_log_ratio == pytest.approx(sd, rel=1e-10)
    assert res.ratio == pytest.approx(math.exp(mean), rel=1e-13)
    assert res.ci_low == pytest.approx(math.exp(mean - half), rel=1e-12)
    assert res.ci_high == pytest.approx(math.exp(mean + half), rel=1e-12)
    assert res.p_value == pytest.approx(stats.ttest_1samp(r, 0).pvalue, rel=1e-10)
    assert res.speedup == res.ratio and res.speedup_ci_low == res.ci_low
    mde = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    assert res.mde == pytest.approx(math.expm1(mde), rel=1e-10)
    assert res.call == "faster"
    assert res.bootstrap_method is None and res.bootstrap_ci_low is None


def test_bootstrap_cross_check_is_scipy_bca_seeded():
    r = np.array([0.05, 0.07, 0.04, 0.08, 0.06, 0.055, 0.03, 0.09])
    res = compare(blocks_with_ratios(r), n_bootstrap=2000, seed=7)
    key = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    data = np.array(res.block_log_ratios)  # r up to float rounding (which can move BCa's z0)
    ref = stats.bootstrap((data,), np.mean, n_resamples=2000, method="BCa",
                          **{key: np.random.default_rng(7)})
    assert res.bootstrap_method == "BCa"
    lo, hi = ref.confidence_interval
    assert res.bootstrap_ci_low == pytest.approx(math.exp(lo), rel=1e-12)
    assert res.bootstrap_ci_high == pytest.approx(math.exp(hi), rel=1e-12)
    assert res.bootstrap_ci_low < res.ratio < res.bootstrap_ci_high
    assert "Bootstrap (BCa)" in paired_reason(res) and "agrees" in paired_reason(res)
    again = compare(blocks_with_ratios(r), n_bootstrap=2000, seed=7)
    assert again == res


def test_lower_is_better_flips_orientation():
    # Seconds: candidate takes 10 % longer -> slower.
    r = [math.log(1.1) + d for d in (0.01, -0.01, 0.005, -0.004, 0.0)]
    res = compare(blocks_with_ratios(r), higher_is_better=False, metric="wall", unit="s",
                  n_bootstrap=0)
    assert res.call == "slower"
    assert res.ratio == pytest.approx(1.1, rel=0.01)
    assert res.speedup == pytest.approx(1 / res.ratio, rel=1e-13)
    assert res.speedup_ci_low == pytest.approx(1 / res.ci_high, rel=1e-13)
    assert res.speedup_ci_high == pytest.approx(1 / res.ci_low, rel=1e-13)
    assert "worse side of 1 (above 1" in paired_reason(res)
    fast = compare(blocks_with_ratios([-x for x in r]), higher_is_better=False,
                   metric="wall", unit="s", n_bootstrap=0)
    assert fast.call == "faster"
    slow = compare(blocks_with_ratios([-x for x in r]), n_bootstrap=0)
    assert slow.call == "slower"


# --- the call -------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratios, margin, call",
    [
        ([0.001, -0.002, 0.0015, -0.001, 0.0005], 0.02, "equivalent"),
        ([0.10, 0.11, 0.09, 0.105, 0.095], 0.02, "faster"),
        ([-0.10, -0.11, -0.09, -0.105, -0.095], 0.02, "slower"),
        ([-0.05, 0.05, 0.10, -0.08, 0.02], 0.02, "inconclusive"),
        # Clearly faster but entirely inside a wide margin: equivalent wins.
        ([0.010, 0.011, 0.009, 0.0105, 0.0095], 0.05, "equivalent"),
        # CI straddles the margin edge on the better side: faster, not equivalent.
        ([0.015, 0.025, 0.02, 0.018, 0.022], 0.02, "faster"),
    ],
)
def test_call_rule(ratios, margin, call):
    res = compare(blocks_with_ratios(ratios), margin=margin, n_bootstrap=0)
    assert res.call == call
    assert res.margin == margin and res.margin_source == "option"
    assert paired_reason(res).startswith(call + ":")
    assert f"{res.ci_low:.4g}-{res.ci_high:.4g}" in paired_reason(res)
    b = math.log1p(margin)
    lo, hi = math.log(res.ci_low), math.log(res.ci_high)
    assert (call == "equivalent") == (-b < lo and hi < b)


def test_a_preregistered_margin_keeps_its_source():
    # a δ fixed beforehand (ab's default for interleaved decode blocks) is named by its source, not "option",
    # and overrides the blocks' own A/A
    from logitlab.perf.prereg import PreregisteredMargin

    blocks = blocks_with_ratios([0.010, 0.011, 0.009, 0.0105, 0.0095])
    res = compare(blocks, margin=PreregisteredMargin(0.05, "default"), n_bootstrap=0)
    assert (res.margin, res.margin_source, res.call) == (0.05, "default", "equivalent")
    assert "from default" in paired_reason(res)
    assert compare(blocks, margin=0.05, n_bootstrap=0).margin_source == "option"


def test_inconclusive_reason_gives_blocks_needed():
    res = compare(blocks_with_ratios([-0.05, 0.05, 0.10, -0.08, 0.02]), margin=0.02,
                  n_bootstrap=0)
    need = blocks_needed(res.sd_log_ratio, 0.02)
    assert f"about {need} blocks would detect a 2.0% change" in paired_reason(res)
    assert need > 5


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_blocks_is_inconclusive(n):
    res = compare(blocks_with_ratios([0.1] * n))
    assert res.call == "inconclusive" and res.n_blocks == n
    assert "needs at least 2 blocks" in paired_reason(res)
    assert res.ci_low is None and res.sd_log_ratio is None and res.mde is None
    assert res.margin_source == "default" and res.margin == 0.02
    if n == 1:
        assert res.ratio == pytest.approx(math.exp(0.1))
        assert res.position.p_value is None and not res.position.significant
    else:
        assert res.ratio is None and res.position is None


def test_degenerate_identical_blocks_warn_free_and_say_so():
    same = [Block("ABBA", (100, 100, 100, 100))] * 4 + [Block("BAAB", (100, 100, 100, 100))] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = compare(same)
        pe = slot_position_effect(same)
    assert res.sd_log_ratio == 0.0
    assert res.ci_low == res.ci_high == res.ratio == 1.0
    assert res.call == "equivalent" and res.p_value == 1.0
    assert res.bootstrap_method == "degenerate"
    assert "identical (sd 0)" in paired_reason(res) and "zero width" in paired_reason(res)
    assert res.margin_source == "a/a" and res.margin == 0.01  # A/A sd 0 -> floor
    assert pe.significant is False and pe.p_value == 1.0

    # Noiseless but a real effect: zero-width CI at the effect.
    faster = blocks_with_ratios([math.log(1.1)] * 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = compare(faster)
    assert res.call == "faster" and res.p_value == 0.0
    assert res.ci_low == pytest.approx(1.1) and res.ci_high == pytest.approx(1.1)
    assert res.mde == 0.0


# --- the margin -------------------------------------------------------------------


def test_margin_from_aa_rule():
    blocks = [
        Block("ABBA", (100, 130, 131, 102)),
        Block("BAAB", (131, 99, 101, 129)),
        Block("ABBA", (101, 130, 129, 100)),
        Block("BAAB", (130, 102, 100, 131)),
        Block("ABBA", (98, 128, 130, 101)),
    ]
    aa = aa_log_ratios(blocks)
    n = len(blocks)
    expected = max(0.01, math.expm1(stats.t.ppf(0.975, n - 1) * aa.std(ddof=1) / math.sqrt(n)))
    assert expected > 0.01  # the floor does not hide the rule here
    assert aa_margin(blocks) == pytest.approx(expected, rel=1e-12)
    res = compare(blocks, n_bootstrap=0)
    assert res.margin_source == "a/a" and res.margin == pytest.approx(expected, rel=1e-12)
    assert res.aa_log_ratios == pytest.approx(list(aa), abs=1e-15)
    assert res.aa_mean_log == pytest.approx(aa.mean(), abs=1e-15)
    assert res.aa_sd_log == pytest.approx(aa.std(ddof=1), rel=1e-12)
    assert "from a/a" in paired_reason(res)


def test_margin_sources():
    two = blocks_with_ratios([0.01, 0.02])
    assert aa_margin(two) is None
    assert compare(two).margin_source == "default"
    assert compare(two).margin == 0.02
    assert compare(two, margin=0.05).margin_source == "option"
    three_quiet = blocks_with_ratios([0.01, 0.02, 0.015])  # A/A exactly 0 -> floor 1 %
    assert compare(three_quiet).margin == 0.01


@pytest.mark.parametrize("margin", [0, -0.01, float("nan"), float("inf"), "2%", True])
def test_bad_margin(margin):
    with pytest.raises(InputError, match="margin .* is not a positive relative change"):
        compare(blocks_with_ratios([0.01, 0.02]), margin=margin)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(confidence=1.0), "confidence 1.0 is not in"),
        (dict(confidence=0), "confidence 0 is not in"),
        (dict(n_bootstrap=-1), "n_bootstrap -1"),
        (dict(n_bootstrap=1.5), "n_bootstrap 1.5"),
        (dict(seed="x"), "seed 'x'"),
        (dict(higher_is_better="yes"), "higher_is_better 'yes'"),
        (dict(metric=3), "metric 3"),
    ],
)
def test_bad_options(kw, match):
    with pytest.raises(InputError, match=match):
        compare(blocks_with_ratios([0.01, 0.02]), **kw)


# --- MDE and blocks_needed ----------------------------------------------------------


def test_mde_formula_and_blocks_needed_inverse():
    sd, n = 0.02, 10
    expected = (stats.t.ppf(0.975, 9) + stats.t.ppf(0.8, 9)) * sd / math.sqrt(n)
    assert minimum_detectable_effect(sd, n) == pytest.approx(math.expm1(expected), rel=1e-12)
    for effect in (0.005, 0.01, 0.03, 0.1, -0.03):
        need = blocks_needed(sd, effect)
        assert need >= 2
        assert abs(math.log1p(minimum_detectable_effect(sd, need))) <= abs(math.log1p(effect)) + 1e-15
        if need > 2:
            assert abs(math.log1p(minimum_detectable_effect(sd, need - 1))) > abs(math.log1p(effect))
    assert blocks_needed(0.0, 0.01) == 2
    assert blocks_needed(0.02, 0.01) > blocks_needed(0.02, 0.03)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: minimum_detectable_effect(0.01, 1), "n_blocks 1 is below 2"),
        (lambda: minimum_detectable_effect(-0.01, 5), "sd -0.01"),
        (lambda: minimum_detectable_effect(0.01, 5, power=1.0), "power 1.0"),
        (lambda: blocks_needed(0.01, 0.0), "effect 0.0 is not a non-zero"),
        (lambda: blocks_needed(0.01, -1.0), "effect -1.0"),
        (lambda: blocks_needed(float("nan"), 0.03), "sd nan"),
        (lambda: blocks_needed(0.01, 0.03, alpha=0), "alpha 0"),
    ],
)
def test_power_input_errors(call, match):
    with pytest.raises(InputError, match=match):
        call()


# --- JSON ---------------------------------------------------------------------------


def test_json_round_trip():
    r = [0.05, 0.07, 0.04, 0.08, 0.06, 0.055]
    res = compare(blocks_with_ratios(r), n_bootstrap=500)
    data = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert data["schema_version"] == 2 and isinstance(data["position"], dict)
    back = PairedComparison.from_dict(data)
    assert back == res and isinstance(back.position, PositionEffect)
    empty = compare([])
    assert PairedComparison.from_dict(json.loads(json.dumps(empty.to_dict()))) == empty


def test_from_dict_errors():
    data = compare(blocks_with_ratios([0.01, 0.02]), n_bootstrap=0).to_dict()
    with pytest.raises(InputError, match=r"unknown keys \['extra'\]"):
        PairedComparison.from_dict({**data, "extra": 1})
    with pytest.raises(InputError, match="schema_version 99 is not supported"):
        PairedComparison.from_dict({**data, "schema_version": 99})
    with pytest.raises(InputError, match="call 'maybe' is not valid"):
        PairedComparison.from_dict({**data, "call": "maybe"})
    missing = dict(data)
    del missing["ratio"]
    with pytest.raises(InputError, match=r"lacks keys \['ratio'\]"):
        PairedComparison.from_dict(missing)
    with pytest.raises(InputError, match="not a mapping"):
        PairedComparison.from_dict([1, 2])


def test_aa_margin_is_capped_on_a_noisy_machine():
    # Control slots that swing by a factor of 2 within blocks: the raw A/A half-width is far above 5 %.
    blocks = [Block("ABBA", (100.0, 120.0, 121.0, 200.0)), Block("BAAB", (118.0, 50.0, 100.0, 119.0)),
              Block("ABBA", (100.0, 119.0, 120.0, 210.0)), Block("BAAB", (121.0, 200.0, 100.0, 120.0))]
    assert aa_margin(blocks) == MAX_AA_MARGIN
    result = paired_comparison(blocks, higher_is_better=True, metric="decode", unit="tokens/s")
    assert (result.margin, result.margin_source) == (MAX_AA_MARGIN, "a/a")
