"""Divergence verdicts, their thresholds and the pair's own noise floor (logitlab.numerics.verdict, .floor)."""

import dataclasses
import json
import math

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import VERDICTS, Thresholds, Verdict, classify, compare_logits, severity
from logitlab.numerics.floor import measure_floor, topk_spread


def logits(n=8, v=2000, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal((n, v)) * scale).astype(np.float32)


def noisy(a, sigma, seed=1):
    return (a + np.random.default_rng(seed).standard_normal(a.shape) * sigma).astype(np.float32)


def ulp_noise(a, max_steps=2, seed=1):
    rng = np.random.default_rng(seed)
    steps = rng.integers(-max_steps, max_steps + 1, a.shape).astype(np.int32)
    return (a.view(np.int32) + steps).view(np.float32)  # same sign: a ±max_steps ULP move


def with_top2(a, row, top1, top2):
    """Put a clear top-2 (top1 at token 0, top2 at token 1) in row; everything else below."""
    a = a.copy()
    a[row] = np.minimum(a[row], top2 - 2.0)
    a[row, 0], a[row, 1] = top1, top2
    return a


def swap_top2(b, row):
    b = b.copy()
    b[row, [0, 1]] = b[row, [1, 0]]
    return b


def verdict(a, b, **kw):
    return classify(compare_logits(a, b), Thresholds(**kw))


def test_order_and_severity():
    assert VERDICTS == ("bit-exact", "ulp-noise", "noise", "near-tie", "lossy", "systematic-offset", "divergent",
                        "crashed")
    assert [severity(w) for w in VERDICTS] == list(range(8))
    v = Verdict("near-tie", ["x"])
    assert v.worse_than("noise") and not v.worse_than("near-tie") and not v.worse_than("lossy")
    assert Verdict("divergent").worse_than(v) and Verdict("lossy").worse_than(v)
    with pytest.raises(InputError, match="unknown verdict 'fine'.*bit-exact, ulp-noise, noise"):
        severity("fine")
    with pytest.raises(InputError):
        Verdict("fine")


def test_defaults_and_validation():
    t = Thresholds()
    assert (t.max_ulp, t.near_tie_margin, t.offset_ratio, t.floor_factor, t.min_positions, t.calibrate) == \
        (16.0, 0.5, 1.0, 4.0, 8, True)
    with pytest.raises(InputError, match="max_ulp"):
        Thresholds(max_ulp=-1)
    with pytest.raises(InputError, match="near_tie_margin"):
        Thresholds(near_tie_margin=float("nan"))
    with pytest.raises(InputError, match="floor_factor must be a finite number >= 1"):
        Thresholds(floor_factor=0.5)
    with pytest.raises(InputError, match="min_positions must be an integer >= 2"):
        Thresholds(min_positions=1)


def test_bit_exact():
    a = logits()
    v = classify(compare_logits(a, a.copy()))
    assert v.word == "bit-exact"
    assert v.evidence == ["all 16000 entries (8 positions × 2000 vocab) have identical bits"]


def test_one_compared_position_is_worded_in_the_singular():
    """A ``--positions last`` comparison has one row: "the 1 position", not "all 1 positions"."""
    a = logits(1)
    assert classify(compare_logits(a, a.copy())).evidence == [
        "all 2000 entries (1 position × 2000 vocab) have identical bits"]
    v = verdict(a, ulp_noise(a))
    assert v.word == "ulp-noise" and "argmax and top-5 set agree at the 1 position" in v.evidence[2]
    assert "of 1 position; largest" in v.evidence[1]
    b = noisy(a, 1e-3, seed=4)
    v = classify(compare_logits(a, b))
    assert v.word == "noise"
    assert "no argmax flips (argmax agrees at the 1 position); top-5 set agrees at the 1 position" in v.evidence


def test_ulp_noise():
    a = logits()
    v = verdict(a, ulp_noise(a))
    assert v.word == "ulp-noise"
    assert v.evidence[0].startswith("max |Δ| = ") and "ULP at row scale ≤ max_ulp = 16" in v.evidence[0]
    assert "argmax and top-5 set agree at all 8 positions" in v.evidence[2]


def test_only_signed_zero_or_nan_payload_differences_are_ulp_noise():
    a = np.zeros((2, 8), np.float32)
    b = a.copy()
    b[1, 3] = -0.0
    v = classify(compare_logits(a, b))
    assert v.word == "ulp-noise" and "max |Δ| = 0 ULP" in v.evidence[0]


def test_max_ulp_boundary_without_flips_is_noise_never_near_tie():
    a = np.full((1, 64), 1.5, np.float32)
    a[0, 0] = 3.0  # the row's scale: spacing(3.0) = 2**-22
    a[0, 5] = 2.0
    b = a.copy()
    b[0, :] += np.float32(2.0 ** -22)  # every entry moves (not a localized change)
    for steps, word in ((16, "ulp-noise"), (17, "noise")):
        b[0, 0] = np.float32(3.0 + steps * 2.0 ** -22)
        c = compare_logits(a, b)
        assert c.max_scaled_ulp == steps
        v = classify(c)
        assert v.word == word, (steps, v.evidence)
    assert "17 ULP at row scale > max_ulp = 16" in v.evidence[0]
    assert "no argmax flips" in v.evidence[1]
    assert classify(c, Thresholds(max_ulp=17)).word == "ulp-noise"


def test_flip_inside_ulp_noise_is_a_near_tie():
    a = logits(2, 500)
    a[1, 7] = a[1, 9] = 20.0  # exact tie: argmax is token 7
    b = a.copy()
    b[1, 9] = np.nextafter(np.float32(20.0), np.float32(21.0))  # 1 ULP flips it
    c = compare_logits(a, b)
    assert c.max_scaled_ulp <= 1 and len(c.flips) == 1
    v = classify(c)
    assert v.word == "near-tie"
    assert "every flip and top-5 change at a reference margin < near_tie_margin = 0.5" in v.evidence[0]
    assert "1 argmax flip(s), largest reference margin 0" in v.evidence[1]


def test_near_tie_flip_inside_the_floor():
    # 16 positions moved by ~0.05 per logit: top-5 spreads ~0.2; a flip at margin 0.125 is inside the floor
    a = with_top2(logits(16), 3, 10.0, 9.875)
    b = noisy(a, 0.05, seed=5)
    b[3, 0], b[3, 1] = 9.9, 9.95  # token 1 overtakes token 0 (Δ -0.1 and +0.075)
    c = compare_logits(a, b)
    floor = measure_floor(c)
    assert floor.measured and 0.1 < floor.value < 0.4
    v = classify(c)
    assert v.word == "near-tie", v.evidence
    assert v.evidence[0].startswith("every flip and top-5 change at a reference margin < near_tie_margin = 0.5; "
                                    "their top-5 Δ spread ≤ ")
    assert "the pair's p99" in v.evidence[0] and "(inside floor_factor = 4)" in v.evidence[0]
    assert 3 in {f["position"] for f in c.flips}
    assert any(line.startswith(f"{len(c.flips)} argmax flip(s), largest reference margin ") for line in v.evidence)
    assert v.floor["measured"] and v.floor["positions"] == 16 - len(c.flips)


def test_issue_case_one_position_moved_far_outside_the_floor_is_divergent():
    # logits move by ~1e-5 everywhere, but one position by 0.3, which flips a margin of 0.2
    a = with_top2(logits(64), 20, 10.0, 9.8)
    b = noisy(a, 1e-5)
    b[20] = a[20] + np.random.default_rng(3).standard_normal(a.shape[1]).astype(np.float32) * 0.1
    b[20, 0], b[20, 1] = a[20, 0] - 0.15, a[20, 1] + 0.15
    c = compare_logits(a, b)
    assert len(c.flips) == 1 and c.flips[0]["margin_ref"] == pytest.approx(0.2, abs=1e-6)
    v = classify(c)
    assert v.word == "divergent" and v.outside == [20]
    line = v.evidence[0]
    assert line.startswith("1 position(s) outside the noise floor (20); position 20 (an argmax flip 0 → 1 at "
                           "reference margin 0.2) moved 0.3 (top-5 Δ spread), ")
    factor = float(line.split("moved 0.3 (top-5 Δ spread), ")[1].split("×")[0].replace(",", ""))
    assert factor > 1000 and "the pair's p99" in line and "> floor_factor = 4" in line
    assert v.evidence[1].startswith("noise floor: p99 of the top-5 Δ spread over the 63 differing positions")
    # Today's fixed rule (margin 0.2 < 0.5) would call it a near-tie:
    assert classify(c, Thresholds(calibrate=False)).word == "near-tie"


def test_a_few_positions_far_outside_cannot_raise_their_own_floor():
    a = logits(64)
    b = noisy(a, 1e-5)
    for row in (5, 6, 7):  # three positions moved by ~0.3, no flip (3/64 > 1 %: a plain p99 would include them)
        b[row] = a[row] + np.random.default_rng(row).standard_normal(a.shape[1]).astype(np.float32) * 0.1
    c = compare_logits(a, b)
    assert c.flips == []
    floor = measure_floor(c)
    assert floor.excluded >= 3 and floor.value < 1e-3
    v = classify(c)
    assert v.word == "divergent" and v.outside == [5, 6, 7]
    assert "3 position(s) outside the noise floor (5, 6, 7)" in v.evidence[0]


def test_one_position_8x_the_median_cannot_lift_the_p99_of_90_positions_over_itself():
    """Measured with the cmd engine (flash attention + one perturbed row): with ~90 positions the p99 is nearly
    their maximum, so a position between 4x the others' p99 and 16x the median lifted the floor enough to sit
    inside it. The floor is now the p99 of the others while the largest exceeds floor_factor x that."""
    a = logits(90, 1000)
    b = noisy(a, 0.05)  # a spread of ~0.2-0.3 everywhere, like flash attention on the embedded model
    top = np.argsort(a[40])[::-1][:5]
    b[40, top[0]] += np.float32(0.6)  # the top-1 pulled away from its competitors: a spread of ~1.2, no flip
    b[40, top[1:]] -= np.float32(0.6)
    c = compare_logits(a, b)
    spreads = np.array(c.row_topk_spread)
    others = np.array([s for i, s in enumerate(spreads)
                       if i != 40 and c.row_argmax_ref[i] == c.row_argmax_obs[i]])  # the noise positions but 40
    assert 4 * np.percentile(others, 99) < spreads[40] < 16 * np.median(others)  # the window the old floor missed
    assert np.percentile(spreads, 99) * 4 > spreads[40]  # a plain p99 over all positions would hide it
    floor = measure_floor(c)
    assert floor.excluded == 1 and floor.value == pytest.approx(np.percentile(others, 99))
    assert "or 4× the p99 of the others left out of it" in floor.reason
    v = classify(c)
    assert v.word == "divergent" and v.outside == [40], v.evidence


def test_issue_case_one_entry_raised_without_flip_is_divergent_not_near_tie():
    a = logits(4, 1000)
    b = a.copy()
    b[1, 500] += np.float32(0.5)
    c = compare_logits(a, b)
    assert c.flips == [] and c.topk_changes == []
    v = classify(c)
    assert v.word == "divergent" and v.outside == [1]
    assert v.evidence[0].startswith("a change confined to a few entries at 1 position(s) (1); position 1: 1 of 1000 "
                                    "entries differ (0.1 % < 10 %), by up to 0.5")
    assert "noise floor not measured: 1 differing position(s) kept their argmax < min_positions = 8" in v.evidence[1]


def test_issue_case_uniformly_noisy_change_is_lossy_with_its_kld_and_agreement():
    a = logits(64)
    b = noisy(a, 0.6)
    c = compare_logits(a, b)
    margins = [f["margin_ref"] for f in c.flips]
    assert max(margins) >= 0.5  # flips at confident margins, as a 4-bit KV cache does
    v = classify(c)
    assert v.word == "lossy", v.evidence
    assert v.evidence[0].startswith(f"{sum(1 for f in c.flips if f['margin_ref'] >= 0.5) + sum(1 for i in c.topk_changes if i not in {f['position'] for f in c.flips} and c.row_kth_gap_ref[i] >= 0.5)} flip(s) or top-5 change(s) at reference margins ≥ near_tie_margin = 0.5")
    assert "every one inside the pair's noise floor" in v.evidence[0]
    assert v.evidence[1].startswith("noise floor: p99 of the top-5 Δ spread") and "everywhere" in v.evidence[1]
    assert v.evidence[2].startswith("KLD (nats) mean ") and f"top-1 agreement {100 * c.argmax_agreement:.2f} %" in v.evidence[2]
    # with the fixed thresholds alone, the same change reads as a bug
    fixed = classify(c, Thresholds(calibrate=False))
    assert fixed.word == "divergent" and any("fixed" in line for line in fixed.evidence)


def tiny(a, row):
    """Move every entry of one row by up to 4 ULP (so that a swap there is not a localized change)."""
    b = a.copy()
    b[row] = ulp_noise(a[row:row + 1], 4)[0]
    return b


def test_fixed_near_tie_margin_boundary_without_a_floor():
    a = with_top2(logits(), 2, 10.0, 9.5)  # margin exactly 0.5; the other rows are bit-exact: no floor
    b = swap_top2(tiny(a, 2), 2)
    # The swap is also a within-row outlier (two entries 0.5 away in a row of tiny noise): that rule is switched
    # off here (outlier_z = inf) to test the margin boundary alone, and on at the end.
    v = verdict(a, b, outlier_z=math.inf)
    assert v.word == "divergent"
    assert "reference margin 0.5 ≥ near_tie_margin = 0.5" in v.evidence[0]
    assert verdict(a, b, near_tie_margin=0.5000001, outlier_z=math.inf).word == "near-tie"
    a2 = with_top2(logits(), 2, 10.0, 9.5000005)  # margin just under 0.5
    assert verdict(a2, swap_top2(tiny(a2, 2), 2), outlier_z=math.inf).word == "near-tie"
    outlier = verdict(a2, swap_top2(tiny(a2, 2), 2))
    assert outlier.word == "divergent" and "one logit far outside its own row's noise" in outlier.evidence[0]
    assert verdict(a, swap_top2(a, 2)).word == "divergent"  # two entries swapped, the rest bit-exact: localized


def test_confident_topk_change_is_divergent_without_a_floor():
    a = logits(4, 100, scale=0.1)
    a[1, :7] = [9, 8, 7, 6, 5, 4.25, 3]  # 5th/6th gap 0.75
    b = tiny(a, 1)
    b[1, 5], b[1, 4] = 5.0, 4.25  # token 5 enters the top 5, token 4 leaves
    c = compare_logits(a, b)
    assert c.topk_changes == [1] and c.flips == []
    v = classify(c)
    assert v.word == "divergent"
    assert "top-5 set changed at 1 position(s)" in v.evidence[0] and "gap 0.75 ≥ near_tie_margin = 0.5" in v.evidence[0]
    assert classify(c, Thresholds(near_tie_margin=0.8)).word == "near-tie"
    assert classify(c, judge_topk=False).word != "near-tie"  # verify does not judge the k-th boundary


def test_nonfinite_mismatch_is_divergent():
    a = logits()
    b = a.copy()
    b[4, 10] = np.nan
    v = verdict(a, b)
    assert v.word == "divergent" and "1 entries are NaN/Inf" in v.evidence[0]
    b = a.copy()
    b[0, 0] = -np.inf
    assert verdict(a, b).word == "divergent"
    a2, b2 = a.copy(), a.copy()
    a2[:, :3] = -np.inf
    b2[:, :3] = -np.inf  # masked the same way in both: not a mismatch
    assert classify(compare_logits(a2, b2)).word == "bit-exact"


def test_constant_offset_on_all_rows():
    a = logits()
    v = verdict(a, a + np.float32(0.01))
    assert v.word == "systematic-offset"
    assert v.evidence[0].startswith("|mean Δ per position| averages 0.01 ≥ offset_ratio × its sd across positions "
                                    "= 1 × ")
    assert v.evidence[0].endswith("over 8 differing positions")


def test_shift_of_one_or_two_rows_is_no_evidence_of_an_offset():
    # invariance batch on llama.cpp: 2 of 68 rows differ, both shifted by +0.116 (std 0.074), no flips
    a = logits(68)
    b = a.copy()
    for row in (20, 37):
        b[row] = noisy(a[row:row + 1], 0.074, seed=row)[0] + np.float32(0.116)
        top = np.argsort(a[row])[-10:]
        b[row, top] = a[row, top] + np.float32(0.116)  # the competing tokens move together: no flip
    assert compare_logits(a, b).topk_changes == []
    v = verdict(a, b)
    assert v.word == "noise", v.evidence
    assert "systematic offset: not testable on 2 differing position(s) < min_positions = 8" in " ".join(v.evidence)
    assert verdict(a, b, min_positions=2).word == "systematic-offset"


def test_per_position_shifts_of_varying_sign_are_not_an_offset():
    # llama.cpp's other paths shift each row's logits together (|row mean| > row std), by a different amount
    # and sign at each position; pooled, |mean Δ| can still exceed std(Δ) on a few rows, never across positions
    rng = np.random.default_rng(9)
    a = logits(32)
    shifts = rng.standard_normal(32) * 0.2
    b = (a + shifts[:, None] + rng.standard_normal(a.shape) * 0.05).astype(np.float32)
    c = compare_logits(a, b)
    v = classify(c)
    assert v.word in ("noise", "near-tie", "lossy"), v.evidence
    assert any(line.startswith("|mean Δ per position| averages") and " < offset_ratio" in line for line in v.evidence)


def test_offset_ratio_boundary():
    a = logits(12)
    rng = np.random.default_rng(2)
    b = a + (0.02 + rng.standard_normal((12, 1)) * 0.02 + rng.standard_normal(a.shape) * 1e-3).astype(np.float32)
    c = compare_logits(a, b)
    means = np.array(c.row_mean_diff)
    ratio = abs(means.mean()) / means.std(ddof=1)
    assert 0.3 < ratio < 3
    assert classify(c, Thresholds(offset_ratio=ratio * (1 - 1e-9))).word == "systematic-offset"
    assert classify(c, Thresholds(offset_ratio=ratio * (1 + 1e-9))).word != "systematic-offset"


def test_unbiased_scatter_without_flips_is_noise():
    a = logits(16)
    b = noisy(a, 1e-3, seed=4)
    c = compare_logits(a, b)
    assert c.flips == []
    v = classify(c)
    assert v.word == "noise"
    assert "no argmax flips (argmax agrees at all 16 positions); top-5 set agrees at all 16 positions" in v.evidence
    assert v.evidence[-1].endswith("no position beyond floor_factor = 4 × it")


def test_divergent_beats_offset():
    a = with_top2(logits(), 0, 10.0, 8.0)
    b = swap_top2(a + np.float32(0.5), 0)
    v = verdict(a, b)
    assert v.word == "divergent" and v.outside == [0]
    assert any("reference margin 2 ≥ near_tie_margin = 0.5" in line for line in v.evidence)


def test_floor_is_the_p99_of_the_spread_and_matches_topk_spread():
    a = logits(40)
    b = noisy(a, 0.02)
    c = compare_logits(a, b)
    spreads = topk_spread(a, b, 5)
    assert np.allclose(c.row_topk_spread, spreads)
    floor = measure_floor(c)
    keep = [i for i in range(40) if c.row_argmax_ref[i] == c.row_argmax_obs[i]]
    assert floor.value == pytest.approx(np.percentile(spreads[keep], 99))
    assert floor.positions == len(keep) and floor.measured and floor.excluded == 0
    assert not measure_floor(c, min_positions=100).measured


def test_old_comparisons_without_spreads_use_the_fixed_thresholds():
    a = with_top2(logits(16), 3, 10.0, 9.875)
    c = compare_logits(a, swap_top2(noisy(a, 0.05, seed=5), 3))
    old = dataclasses.replace(c, row_topk_spread=None)
    v = classify(old)
    assert v.word == "near-tie" and not v.floor["measured"]
    assert any("has no top-k Δ spreads" in line for line in v.evidence)


def test_verdict_json_round_trip():
    a = logits()
    v = verdict(a, a + np.float32(0.01), max_ulp=4)
    back = Verdict.from_dict(json.loads(json.dumps(dataclasses.asdict(v))))
    assert back == v and back.thresholds["max_ulp"] == 4 and back.floor == v.floor
    with pytest.raises(InputError):
        Verdict.from_dict({"evidence": []})


def test_classify_rejects_other_objects():
    with pytest.raises(InputError, match="comparison"):
        classify({"differing_entries": 0})


def test_without_a_floor_near_tie_margin_stands_in_for_it():
    # one position of an otherwise bit-exact pair moves wholesale (a fault at one position): no floor to judge by
    a = logits(16)
    b = a.copy()
    b[9] = noisy(a[9:10], 1.0, seed=3)[0]
    c = compare_logits(a, b)
    assert not measure_floor(c).measured and c.row_topk_spread[9] > 2.0
    v = classify(c)
    assert v.word == "divergent" and v.outside == [9]
    assert v.evidence[0].startswith("1 position(s) moved far without a noise floor to judge them by (9); position 9 "
                                    "moved ") and "> floor_factor × near_tie_margin = 4 × 0.5" in v.evidence[0]
    # a small other-path change of a few rows (llama.cpp prefill vs decode: spreads 0.15-0.36) stays noise
    b[9] = noisy(a[9:10], 0.02, seed=3)[0]
    top = np.argsort(a[9])[-10:]
    b[9, top] = a[9, top] + np.float32(0.05)
    assert classify(compare_logits(a, b)).word == "noise"


def test_rounding_noise_is_never_outside_a_zero_floor():
    # the tails move, the top tokens stay bit-exact (floor 0); one position's top moves by 20 ULP: not a bug
    a = logits(200, 100)
    b = a.copy()
    for row in range(200):
        tail = np.argsort(a[row])[:50]
        b[row, tail] = ulp_noise(a[row:row + 1, tail], 30, seed=row)[0]
    top = int(np.argmax(a[5]))
    b[5, top] = (a[5, top:top + 1].view(np.int32) + 20).view(np.float32)[0]
    c = compare_logits(a, b)
    floor = measure_floor(c)
    assert floor.measured and floor.value == 0.0 and c.row_topk_spread[5] > 0
    v = classify(c)
    assert v.word == "noise" and v.outside == [], v.evidence
