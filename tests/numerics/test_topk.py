"""Top-k-only comparison: what is exact, what is a bound, and the verdicts it allows."""

import dataclasses
import json
import math

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import Thresholds
from logitlab.engines.topk import TopKRows
from logitlab.numerics.topk import classify_topk, compare_topk, kld_lower_bound


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def rows_from_logits(logits, k, first_missing=True):
    """Top-k rows as a server returns them: float32 log-probabilities, keys as token text."""
    rows = []
    for i, row in enumerate(logits):
        if first_missing and i == 0:
            rows.append(None)
            continue
        lp = log_softmax(row).astype(np.float32)
        rows.append({f"t{j}": float(lp[j]) for j in np.argsort(-lp, kind="stable")[: k + 1]})
    return TopKRows.from_mappings(rows, k)


@pytest.fixture
def logits():
    return np.random.default_rng(0).normal(0, 3, (6, 50)).astype(np.float32)


def test_identical_runs_are_bit_exact_on_the_returned_topk(logits):
    a, b = rows_from_logits(logits, 8), rows_from_logits(logits, 8)
    c = compare_topk(a, b, top_k=5)
    assert c.bit_exact and c.scope == "top-k" and c.positions_missing == [0]
    assert c.positions_compared == [1, 2, 3, 4, 5] and c.n_vocab == 8 and c.dtype == "float32"
    v = classify_topk(c)
    assert v.word == "bit-exact"
    assert any("bit-exact on the returned top-k" in line for line in v.evidence)
    assert any("not returned and are not checked" in line for line in v.evidence)


def test_from_mappings_keeps_the_k_largest_and_drops_extras():
    rows = TopKRows.from_mappings([{"a": -3.0, "b": -0.1, "c": -1.0, "extra": -9.0}], k=3)
    assert rows.keys == (("b", "c", "a"),) and rows.values == ((-0.1, -1.0, -3.0),)


def test_one_ulp_is_ulp_noise_and_names_the_first_mismatch(logits):
    a = rows_from_logits(logits, 8)
    values = [list(v) if v else v for v in a.values]
    values[2][3] = float(np.nextafter(np.float32(values[2][3]), np.float32(0)))
    b = TopKRows(a.keys, tuple(tuple(v) if v else v for v in values), 8)
    c = compare_topk(a, b, top_k=5)
    assert c.differing_entries == 1 and c.differing_rows == 1 and c.max_ulp == 1
    assert c.first_mismatch["position"] == 2 and c.first_mismatch["ulp"] == 1
    assert c.first_mismatch["reference_bits"].startswith("0x") and len(c.first_mismatch["reference_bits"]) == 10
    assert classify_topk(c).word == "ulp-noise"


def test_shifting_all_logits_is_invisible_but_perturbation_is_not(logits):
    shifted = compare_topk(rows_from_logits(logits, 8), rows_from_logits(logits + np.float32(2.0), 8))
    # a constant logit offset cancels in the softmax: at most rounding noise remains
    assert shifted.max_abs_diff < 1e-5 and shifted.argmax_agreement == 1.0
    assert classify_topk(shifted).word == "ulp-noise"
    assert "systematic offset of the logits (cancels in the softmax)" in shifted.undecidable


def test_confident_flip_is_divergent_and_near_tie_flip_is_near_tie():
    ref = TopKRows.from_mappings([{"x": -0.1, "y": -3.0, "z": -4.0, "w": -5.0}], 4)
    confident = TopKRows.from_mappings([{"y": -0.1, "x": -3.0, "z": -4.0, "w": -5.0}], 4)
    c = compare_topk(ref, confident, top_k=2)
    assert c.flips[0]["token_ref"] == "x" and c.flips[0]["margin_ref"] == pytest.approx(2.9)
    assert classify_topk(c).word == "divergent"
    tie_ref = TopKRows.from_mappings([{"x": -0.70, "y": -0.72, "z": -4.0, "w": -5.0}], 4)
    tie_obs = TopKRows.from_mappings([{"y": -0.70, "x": -0.72, "z": -4.0, "w": -5.0}], 4)
    v = classify_topk(compare_topk(tie_ref, tie_obs, top_k=2))
    assert v.word == "near-tie"
    assert any("not decidable" in line for line in v.evidence)


def test_topk_change_with_unknown_boundary_is_divergent():
    ref = TopKRows.from_mappings([{"x": -0.1, "y": -3.0}], 2)
    obs = TopKRows.from_mappings([{"x": -0.1, "q": -3.0}], 2)
    c = compare_topk(ref, obs, top_k=2)
    assert c.row_kth_gap_ref[0] is None and c.topk_changes == [0]
    v = classify_topk(c)
    assert v.word == "divergent" and any("gap is unknown" in line for line in v.evidence)
    assert c.differing_entries == 1  # y is not in the observed top-2 (q took its place)


def test_topk_data_is_judged_against_its_own_noise_floor():
    rng = np.random.default_rng(4)
    a = rng.normal(0, 3, (40, 50)).astype(np.float32)
    b = (a + rng.normal(0, 1e-4, a.shape)).astype(np.float32)
    b[17] = a[17] + rng.normal(0, 0.3, 50).astype(np.float32)  # one position moved ~3000x the others
    c = compare_topk(rows_from_logits(a, 8), rows_from_logits(b, 8), top_k=5)
    assert c.row_topk_spread[0] is None and c.row_topk_spread[17] > 0.1
    v = classify_topk(c)
    assert v.word == "divergent" and v.outside == [17], v.evidence
    assert "position 17" in v.evidence[0] and "the pair's p99" in v.evidence[0]
    assert any("spreads are over the tokens both runs returned" in line for line in v.evidence)
    b[17] = a[17] + rng.normal(0, 1e-4, 50).astype(np.float32)
    quiet = classify_topk(compare_topk(rows_from_logits(a, 8), rows_from_logits(b, 8), top_k=5))
    assert quiet.word == "noise" and quiet.floor["measured"] and quiet.floor["positions"] == 39


def test_kld_lower_bound_never_exceeds_the_full_kld():
    rng = np.random.default_rng(1)
    for _ in range(200):
        a = rng.normal(0, 2, 40)
        b = a + rng.normal(0, rng.choice([0.01, 0.3, 2.0]), 40)
        pa, pb = log_softmax(a), log_softmax(b)
        full = float(np.sum(np.exp(pa) * (pa - pb)))
        k = int(rng.integers(1, 20))
        ref = {j: float(pa[j]) for j in np.argsort(-pa)[:k]}
        obs = {j: float(pb[j]) for j in np.argsort(-pb)[:k]}
        bound = kld_lower_bound(ref, obs)
        assert 0.0 <= bound <= full + 1e-12


def test_kld_bound_is_tight_when_everything_is_returned():
    a, b = log_softmax([1.0, 2.0, 0.5, -1.0]), log_softmax([1.2, 1.8, 0.4, -0.5])
    full = float(np.sum(np.exp(a) * (a - b)))
    assert kld_lower_bound(dict(enumerate(a)), dict(enumerate(b))) == pytest.approx(full, rel=1e-9)


def test_float64_values_use_float64_ulps():
    a = TopKRows.from_mappings([{"x": -0.1, "y": -2.0}], 2)
    b = TopKRows.from_mappings([{"x": math.nextafter(-0.1, 0.0), "y": -2.0}], 2)
    c = compare_topk(a, b)
    assert c.dtype == "float64" and c.max_ulp == 1 and classify_topk(c).word == "ulp-noise"


def test_missing_rows_on_either_side_are_not_compared():
    a = TopKRows.from_mappings([None, {"x": -0.1}, {"x": -0.2}], 1)
    b = TopKRows.from_mappings([None, None, {"x": -0.2}], 1)
    c = compare_topk(a, b)
    assert c.positions_missing == [0, 1] and c.positions_compared == [2] and c.bit_exact


def test_roundtrips_through_json():
    rows = TopKRows.from_mappings([None, {"a b": -0.5, 7: -1.5}], 2)
    back = TopKRows.from_dict(json.loads(json.dumps(rows.to_dict())))
    assert back == rows and back.same_bits(rows)
    c = compare_topk(rows, back, token_ids=[1, 2])
    assert json.loads(json.dumps(dataclasses.asdict(c)))["scope"] == "top-k"


def test_bad_input():
    with pytest.raises(InputError, match="differ in length"):
        compare_topk(TopKRows.from_mappings([None], 1), TopKRows.from_mappings([None, None], 1))
    with pytest.raises(InputError, match="top_k must be a positive integer"):
        compare_topk(TopKRows.from_mappings([None], 1), TopKRows.from_mappings([None], 1), top_k=0)
    with pytest.raises(InputError, match="classify_topk needs a TopKComparison"):
        classify_topk("nope", Thresholds())
