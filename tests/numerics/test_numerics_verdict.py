"""Divergence verdicts and their thresholds (logitlab.numerics.verdict)."""

import dataclasses
import json

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import VERDICTS, Thresholds, Verdict, classify, compare_logits, severity


def logits(n=8, v=2000, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal((n, v)) * scale).astype(np.float32)


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
    assert VERDICTS == ("bit-exact", "ulp-noise", "near-tie", "systematic-offset", "divergent")
    assert [severity(w) for w in VERDICTS] == [0, 1, 2, 3, 4]
    v = Verdict("near-tie", ["x"])
    assert v.worse_than("ulp-noise") and not v.worse_than("near-tie") and not v.worse_than("divergent")
    assert Verdict("divergent").worse_than(v)
    with pytest.raises(InputError, match="unknown verdict 'fine'.*bit-exact, ulp-noise"):
        severity("fine")
    with pytest.raises(InputError):
        Verdict("fine")


def test_defaults():
    t = Thresholds()
    assert (t.max_ulp, t.near_tie_margin, t.offset_ratio) == (16.0, 0.5, 1.0)
    with pytest.raises(InputError, match="max_ulp"):
        Thresholds(max_ulp=-1)
    with pytest.raises(InputError, match="near_tie_margin"):
        Thresholds(near_tie_margin=float("nan"))


def test_bit_exact():
    a = logits()
    v = classify(compare_logits(a, a.copy()))
    assert v.word == "bit-exact"
    assert v.evidence == ["all 16000 entries (8 positions × 2000 vocab) have identical bits"]


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


def test_max_ulp_boundary():
    a = np.full((1, 64), 1.5, np.float32)
    a[0, 0] = 3.0  # the row's scale: spacing(3.0) = 2**-22
    a[0, 5] = 2.0
    for steps, word in ((16, "ulp-noise"), (17, "near-tie")):
        b = a.copy()
        b[0, 0] = np.float32(3.0 + steps * 2.0 ** -22)
        c = compare_logits(a, b)
        assert c.max_scaled_ulp == steps
        v = classify(c)
        assert v.word == word, (steps, v.evidence)
    assert "17 ULP at row scale > max_ulp = 16" in v.evidence[0]
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
    assert "1 argmax flip(s), largest reference margin 0 < near_tie_margin = 0.5" in v.evidence[2]


def test_near_tie_flip():
    a = with_top2(logits(), 3, 10.0, 9.875)  # margin 0.125
    b = swap_top2(a + np.random.default_rng(5).standard_normal(a.shape).astype(np.float32) * 1e-3, 3)
    v = verdict(a, b)
    assert v.word == "near-tie", v.evidence
    assert "1 argmax flip(s), largest reference margin 0.125 < near_tie_margin = 0.5" in v.evidence


def test_near_tie_margin_boundary():
    a = with_top2(logits(), 2, 10.0, 9.5)  # margin exactly 0.5
    b = swap_top2(a, 2)
    v = verdict(a, b)
    assert v.word == "divergent"
    assert "reference margin 0.5 ≥ near_tie_margin = 0.5" in v.evidence[0]
    assert verdict(a, b, near_tie_margin=0.5000001).word == "near-tie"
    a2 = with_top2(logits(), 2, 10.0, 9.5000005)  # margin just under 0.5
    assert verdict(a2, swap_top2(a2, 2)).word == "near-tie"


def test_confident_topk_change_is_divergent():
    a = logits(4, 100, scale=0.1)
    a[1, :7] = [9, 8, 7, 6, 5, 4.25, 3]  # 5th/6th gap 0.75
    b = a.copy()
    b[1, 5], b[1, 4] = 5.0, 4.25  # token 5 enters the top 5, token 4 leaves
    c = compare_logits(a, b)
    assert c.topk_changes == [1] and c.flips == []
    v = classify(c)
    assert v.word == "divergent"
    assert "top-5 set changed at 1 position(s)" in v.evidence[0] and "gap 0.75 ≥ near_tie_margin = 0.5" in v.evidence[0]
    assert classify(c, Thresholds(near_tie_margin=0.8)).word == "near-tie"


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
    assert v.evidence[0].startswith("|mean Δ| = 0.01 ≥ offset_ratio × std(Δ) = 1 × ")
    assert v.evidence[0].endswith("over the 8 differing positions")


def test_constant_offset_on_one_row():
    a = logits()
    b = a.copy()
    b[5] += np.float32(0.125)
    assert verdict(a, b).word == "systematic-offset"


def test_seed_report_deltas_are_not_an_offset():
    # The seed M=K verify report: mean Δ -0.0376, mean |Δ| 0.083, top-2 swap at
    # margin 0.17: judged near-tie noise, not a systematic offset.
    rng = np.random.default_rng(9)
    a = with_top2(logits(8, 20000), 3, 22.01366, 21.84366)
    d = (rng.standard_normal(a.shape) * 0.097 - 0.0376).astype(np.float32)
    b = swap_top2(a + d, 3)
    c = compare_logits(a, b)
    assert c.mean_diff == pytest.approx(-0.0376, abs=2e-3)
    assert c.mean_abs_diff == pytest.approx(0.083, abs=3e-3)
    v = classify(c)
    assert v.word == "near-tie", v.evidence
    assert any(line.startswith("|mean Δ| = 0.03") and "<" in line for line in v.evidence)


def test_offset_ratio_boundary():
    a = logits()
    rng = np.random.default_rng(2)
    b = a + (0.02 + rng.standard_normal(a.shape) * 0.02).astype(np.float32)
    c = compare_logits(a, b)
    n = len(c.row_mean_diff)
    mean = sum(c.row_mean_diff) / n
    std = (sum(s * s + m * m for s, m in zip(c.row_std_diff, c.row_mean_diff)) / n - mean * mean) ** 0.5
    ratio = abs(mean) / std
    assert 0.5 < ratio < 2
    assert classify(c, Thresholds(offset_ratio=ratio * (1 - 1e-9))).word == "systematic-offset"
    assert classify(c, Thresholds(offset_ratio=ratio * (1 + 1e-9))).word == "near-tie"


def test_unbiased_scatter_without_flips_is_near_tie():
    a = logits()
    b = a + (np.random.default_rng(4).standard_normal(a.shape) * 1e-3).astype(np.float32)
    c = compare_logits(a, b)
    assert c.flips == []
    v = classify(c)
    assert v.word == "near-tie"
    assert "no argmax flips (argmax agrees at all 8 positions)" in v.evidence


def test_divergent_beats_offset():
    a = with_top2(logits(), 0, 10.0, 8.0)
    b = swap_top2(a + np.float32(0.5), 0)
    v = verdict(a, b)
    assert v.word == "divergent" and "reference margin 2 ≥ near_tie_margin = 0.5" in v.evidence[0]


def test_verdict_json_round_trip():
    a = logits()
    v = verdict(a, a + np.float32(0.01), max_ulp=4)
    back = Verdict.from_dict(json.loads(json.dumps(dataclasses.asdict(v))))
    assert back == v and back.thresholds["max_ulp"] == 4
    with pytest.raises(InputError):
        Verdict.from_dict({"evidence": []})


def test_classify_rejects_other_objects():
    with pytest.raises(InputError, match="LogitComparison"):
        classify({"differing_entries": 0})
