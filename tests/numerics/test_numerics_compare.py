"""compare_logits and LogitComparison (numerics.compare); assert_logits_equivalent (numerics.assertions)."""

import dataclasses
import json

import ml_dtypes
import numpy as np
import pytest
from scipy.special import rel_entr, softmax

from logitlab.errors import InputError
from logitlab.numerics import (
    HISTOGRAM_BINS,
    ULP_NAN_MISMATCH,
    LogitComparison,
    assert_logits_equivalent,
    compare_logits,
    ulp_distance,
)
from logitlab.numerics import _kernel as K

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)


def logits(n, v, seed=0, scale=3.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, v)) * scale).astype(dtype)


def noisy(a, sigma, seed=1):
    rng = np.random.default_rng(seed)
    return (a.astype(np.float64) + rng.standard_normal(a.shape) * sigma).astype(a.dtype)


def bits_plus(a, index, steps):
    """Copy of a with the element at index moved by `steps` ULPs (same sign, away from zero if > 0)."""
    out = a.copy()
    u = out.view(np.uint32 if a.itemsize == 4 else np.uint16)
    u[index] = u[index] + steps
    return out


def kld_reference(a, b):
    p = softmax(a.astype(np.float64), axis=1)
    q = softmax(b.astype(np.float64), axis=1)
    return rel_entr(p, q).sum(axis=1)


def hist_reference(u):
    u = u.ravel()
    edges = [(0, 0), (1, 1), (2, 4), (5, 16), (17, 256), (257, None)]
    out = {}
    for label, (lo, hi) in zip(HISTOGRAM_BINS, edges):
        out[label] = int(((u >= lo) & (u <= hi)).sum()) if hi is not None else int((u >= lo).sum())
    return out


# --------------------------------------------------------------------------
# bit-exact and the smallest differences


def test_bit_exact():
    a = logits(4, 1000)
    c = compare_logits(a, a.copy())
    assert c.bit_exact and bool(c)
    assert c.differing_entries == 0 and c.differing_rows == 0
    assert c.first_mismatch is None and c.flips == []
    assert c.max_ulp == 0 and c.max_scaled_ulp == 0.0 and c.max_abs_diff == 0.0
    assert c.mean_diff == 0.0 and c.std_diff == 0.0
    assert c.ulp_histogram == {"0": 4000, "1": 0, "2-4": 0, "5-16": 0, "17-256": 0, ">256": 0}
    assert c.argmax_agreement == 1.0 and c.topk_agreement == 1.0
    assert all(v == 0.0 for v in c.kld.values())
    assert c.row_argmax_ref == list(a.argmax(axis=1)) == c.row_argmax_obs
    assert c.row_kld == [0.0] * 4


def test_bit_exact_with_nan_and_inf():
    a = logits(3, 300)
    a[0, 5] = np.nan
    a[1, :10] = -np.inf
    a[2, 7] = np.inf
    c = compare_logits(a, a.copy())
    assert c.bit_exact and c.nonfinite_mismatch == 0
    assert (c.nan_ref, c.nan_obs, c.inf_ref, c.inf_obs) == (1, 1, 11, 11)
    assert c.ulp_histogram["0"] == 900 and c.row_kld == [0.0, 0.0, 0.0]
    assert c.row_argmax_ref == [int(np.nanargmax(a[0])), int(a[1].argmax()), 7]


def test_single_one_ulp_change():
    a = logits(3, 500)
    r, t = 1, int(np.abs(a[1]).argmax())  # the row's largest |logit|: scaled ULP is exactly 1
    b = bits_plus(a, (r, t), 1)
    c = compare_logits(a, b)
    assert not c.bit_exact and not bool(c)
    assert c.differing_entries == 1 and c.differing_rows == 1
    assert c.row_differing == [0, 1, 0]
    assert c.max_ulp == 1 and c.row_max_ulp == [0, 1, 0]
    assert c.max_scaled_ulp == 1.0 and c.row_scaled_ulp[1] == 1.0
    assert c.ulp_histogram["0"] == 1499 and c.ulp_histogram["1"] == 1
    delta = float(b[r, t]) - float(a[r, t])
    assert c.max_abs_diff == abs(delta) == float(np.spacing(np.abs(a[r, t])))
    assert c.mean_diff == pytest.approx(delta / 1500, rel=1e-6)
    fm = c.first_mismatch
    assert fm["position"] == 1 and fm["token_id"] == t and fm["ulp"] == 1
    assert fm["reference"] == float(a[r, t]) and fm["observed"] == float(b[r, t])


def test_first_mismatch_exact_strings_from_seed_report():
    a = logits(3, 64)
    b = a.copy()
    a[1, 0] = np.uint32(0xC1AA1420).view(np.float32)
    b[1, 0] = np.uint32(0xC1AC5A0E).view(np.float32)
    b[2, 5] += 1.0  # a later difference does not move the first one
    fm = compare_logits(a, b).first_mismatch
    assert fm == {
        "position": 1,
        "token_id": 0,
        "reference_hex": "-0x1.54284p+4",
        "observed_hex": "-0x1.58b41cp+4",
        "reference_bits": "0xc1aa1420",
        "observed_bits": "0xc1ac5a0e",
        "reference": -21.25982666015625,
        "observed": float(np.uint32(0xC1AC5A0E).view(np.float32)),
        "ulp": 0xC1AC5A0E - 0xC1AA1420,
    }


def test_first_mismatch_is_row_major_and_counts_signed_zero():
    a = np.ones((3, 8), np.float32)
    a[2, 1] = 0.0
    b = a.copy()
    b[2, 1] = -0.0  # bits differ, 0 ULP apart
    b[2, 6] = 2.0
    c = compare_logits(a, b)
    assert c.differing_entries == 2
    assert c.first_mismatch["position"] == 2 and c.first_mismatch["token_id"] == 1
    assert c.first_mismatch["ulp"] == 0
    assert c.first_mismatch["reference_bits"] == "0x00000000"
    assert c.first_mismatch["observed_bits"] == "0x80000000"
    assert c.ulp_histogram["0"] == 23  # the signed zero counts as 0 ULP


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16), BF16], ids=str)
def test_histogram_bins(dtype):
    steps = [0, 1, 2, 4, 5, 16, 17, 256, 257, 1000]
    a = np.full((2, 16), 1.5, dtype=dtype)
    b = a.copy()
    for i, s in enumerate(steps):
        b[1, i] = bits_plus(a[1:2, i:i + 1], (0, 0), s)[0, 0]
    c = compare_logits(a, b)
    assert c.ulp_histogram == {"0": 16 + 6 + 1, "1": 1, "2-4": 2, "5-16": 2, "17-256": 2, ">256": 2}
    assert c.max_ulp == 1000 and c.row_max_ulp == [0, 1000]
    assert c.dtype == str(dtype)


def test_sign_crossings_and_subnormals_in_histogram():
    a = np.ones((2, 8), np.float32)
    b = a.copy()
    tiny = np.uint32(1).view(np.float32)
    neg_tiny = np.uint32(0x80000001).view(np.float32)
    a[0, :3] = [tiny, 0.0, 1e-30]
    b[0, :3] = [neg_tiny, -0.0, -1e-30]
    c = compare_logits(a, b)
    ref_u = ulp_distance(a, b)
    assert c.row_max_ulp == list(ref_u.max(axis=1))
    assert c.ulp_histogram == hist_reference(ref_u)
    assert c.ulp_histogram["2-4"] == 1  # +tiny -> -tiny is 2 ULP
    assert c.differing_entries == 3


@pytest.mark.parametrize("sigma", [1e-6, 1e-3, 0.3])
@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16), BF16], ids=str)
def test_ulp_statistics_match_ulp_distance(sigma, dtype):
    a = logits(6, 3000, scale=2.0, dtype=dtype)
    a[:, :20] = np.linspace(-1e-3, 1e-3, 20).astype(dtype)  # values near zero cross sign
    b = noisy(a, sigma)
    b[3] = a[3]  # one identical row
    u = ulp_distance(a, b)
    c = compare_logits(a, b)
    assert c.row_max_ulp == list(u.max(axis=1))
    assert c.max_ulp == int(u.max())
    assert c.ulp_histogram == hist_reference(u)
    bits = (a.view(np.uint32 if a.itemsize == 4 else np.uint16) != b.view(np.uint32 if a.itemsize == 4 else np.uint16))
    assert c.row_differing == list(bits.sum(axis=1))
    assert c.differing_rows == int(bits.any(axis=1).sum())


# --------------------------------------------------------------------------
# differences in logits, scaled ULPs


def test_difference_statistics_match_float64():
    a = logits(5, 2000)
    b = noisy(a, 0.05)
    b[2] = a[2]
    d = b.astype(np.float64) - a.astype(np.float64)
    c = compare_logits(a, b)
    assert c.max_abs_diff == pytest.approx(np.abs(d).max(), rel=1e-6)
    assert c.mean_abs_diff == pytest.approx(np.abs(d).mean(), rel=1e-5)
    assert c.mean_diff == pytest.approx(d.mean(), rel=1e-4, abs=1e-9)
    assert c.std_diff == pytest.approx(d.std(), rel=1e-5)
    np.testing.assert_allclose(c.row_mean_diff, d.mean(axis=1), rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(c.row_std_diff, d.std(axis=1), rtol=1e-5)
    np.testing.assert_allclose(c.row_max_abs_diff, np.abs(d).max(axis=1), rtol=1e-6)
    scaled = np.abs(d).max(axis=1) / np.spacing(np.abs(a).max(axis=1))
    np.testing.assert_allclose(c.row_scaled_ulp, scaled, rtol=1e-6)
    assert c.max_scaled_ulp == pytest.approx(scaled.max(), rel=1e-6)


def test_constant_offset_row_has_zero_spread():
    a = logits(3, 4096)
    b = a.copy()
    b[1] = (a[1].astype(np.float64) + 0.25).astype(np.float32)
    c = compare_logits(a, b)
    assert c.row_mean_diff[1] == pytest.approx(0.25, rel=1e-5)
    assert c.row_std_diff[1] < 1e-5
    assert c.row_kld[1] < 1e-12  # softmax is shift invariant


def test_scaled_ulp_of_an_all_zero_reference_row_uses_the_smallest_subnormal():
    a = np.zeros((2, 64), np.float32)
    b = a.copy()
    b[0, 3] = 1e-6
    b[1, 3] = np.nextafter(np.float32(0), np.float32(1))
    c = compare_logits(a, b)
    tiny = float(np.spacing(np.float32(0)))  # 2**-149
    assert c.row_scaled_ulp == [pytest.approx(float(np.float32(1e-6)) / tiny), 1.0]


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=str)
def test_scaled_ulp_uses_the_input_dtype(dtype):
    a = np.full((1, 32), 1.5, dtype=dtype)
    b = bits_plus(a, (0, 3), 3)
    c = compare_logits(a, b)
    assert c.max_ulp == 3 and c.max_scaled_ulp == 3.0


# --------------------------------------------------------------------------
# KL divergence


@pytest.mark.parametrize("sigma", [2e-6, 1e-4, 3e-3, 2e-2, 0.5, 4.0])
def test_kld_matches_scipy(sigma):
    a = logits(8, 5000, scale=2.5)
    b = noisy(a, sigma)
    c = compare_logits(a, b)
    # atol: a KLD of ~1e-12 nats is a difference of log-probabilities of size ~10, each known to float64's
    # rounding (~2e-15); numpy's SIMD summation order (AVX2 vs AVX-512) moves it by that much
    np.testing.assert_allclose(c.row_kld, kld_reference(a, b), rtol=1e-4, atol=2e-15)


def kld_exact(a, b, rows=(0, -1)):
    """KL(P||Q) of ``rows`` of two logit arrays to ~1e-30 relative: mpmath at 40 digits on the exact values.

    Exists on every machine (80-bit long double does not: aarch64 and MSVC have none, and float64 references
    such as scipy's ``rel_entr`` are off by ~2e-4 relative at ULP-level differences).
    """
    import mpmath

    out = []
    with mpmath.workdps(40):
        for r in rows:
            la = [mpmath.mpf(float(x)) for x in a[r]]
            lb = [mpmath.mpf(float(x)) for x in b[r]]
            lse_a = mpmath.log(mpmath.fsum(mpmath.exp(x) for x in la))
            lse_b = mpmath.log(mpmath.fsum(mpmath.exp(x) for x in lb))
            out.append(float(mpmath.fsum(mpmath.exp(x - lse_a) * ((x - lse_a) - (y - lse_b)) for x, y in zip(la, lb))))
    return np.array(out)


def test_kld_ulp_noise_is_not_rounding_noise():
    # ULP-level differences, KLD ~ 5e-13.  A float32 lse(Q) - lse(P) - sum(p d)
    # would return ~1e-7 of rounding noise; even scipy's float64 rel_entr is
    # off by ~2e-4 relative here, so the reference is exact (mpmath).
    a = logits(4, 3000)
    rng = np.random.default_rng(3)
    b = (a.view(np.int32) + rng.integers(-2, 3, a.shape).astype(np.int32)).view(np.float32)
    rows = (0, 1, 2, 3)
    ref = kld_exact(a, b, rows)
    assert 1e-13 < ref.min() and ref.max() < 1e-11
    np.testing.assert_allclose(compare_logits(a, b).row_kld, ref, rtol=1e-5)
    np.testing.assert_allclose(kld_reference(a, b), ref, rtol=1e-3)  # scipy, coarser


@pytest.mark.parametrize("sigma", [2e-6, 1e-4, 3e-3, 2e-2, 0.3, 0.7, 4.0])
def test_kld_is_accurate_to_1e6_relative(sigma):
    # 0.3 and 0.7 straddle the kernel's switch from the expm1 series to exp; two rows against the exact value
    a = logits(8, 5000, scale=2.5)
    b = noisy(a, sigma)
    rows = (0, 7)
    np.testing.assert_allclose(np.array(compare_logits(a, b).row_kld)[list(rows)], kld_exact(a, b, rows), rtol=1e-6)


def test_kld_summary_statistics():
    a = logits(40, 300)
    b = noisy(a, 0.1)
    c = compare_logits(a, b)
    k = np.array(c.row_kld)
    assert c.kld["mean"] == pytest.approx(k.mean())
    assert c.kld["max"] == k.max() and c.kld["min"] == k.min()
    for key, q in [("p99_9", 99.9), ("p99", 99), ("p95", 95), ("p90", 90), ("median", 50),
                   ("p10", 10), ("p5", 5), ("p1", 1)]:
        assert c.kld[key] == pytest.approx(np.percentile(k, q), rel=1e-12)
    assert list(c.kld) == ["mean", "max", "p99_9", "p99", "p95", "p90", "median", "p10", "p5", "p1", "min"]


def test_kld_with_masked_tokens_and_infinities():
    a = logits(3, 200)
    a[:, 10:20] = -np.inf  # masked in both runs
    b = noisy(a, 0.01)
    b[:, 10:20] = -np.inf
    b[2, 0] = np.inf  # observed puts all mass on token 0
    c = compare_logits(a, b)
    ref = kld_reference(a[:2], b[:2])
    np.testing.assert_allclose(c.row_kld[:2], ref, rtol=1e-6)  # rows 0, 1: the fast kernel (masked tokens)
    assert c.row_kld[2] == float("inf")
    assert c.inf_ref == 30 and c.inf_obs == 31 and c.nonfinite_mismatch == 1
    assert c.kld["max"] == float("inf")


def test_nan_rows():
    a = logits(3, 100)
    b = noisy(a, 0.01)
    b[1, 7] = np.nan
    a[2, 3] = np.nan
    b[2, 3] = np.nan  # NaN in both at the same place: not a mismatch
    c = compare_logits(a, b)
    assert c.nan_ref == 1 and c.nan_obs == 2 and c.nonfinite_mismatch == 1
    assert c.row_kld[1] is None and c.row_kld[2] is None
    assert c.row_max_ulp[1] == ULP_NAN_MISMATCH
    assert np.isfinite(c.max_abs_diff) and np.isfinite(c.mean_diff)
    d = b[1].astype(np.float64) - a[1]
    assert c.row_max_abs_diff[1] == pytest.approx(np.nanmax(np.abs(d)), rel=1e-6)
    assert c.ulp_histogram == hist_reference(ulp_distance(a, b))


# --------------------------------------------------------------------------
# argmax, top-k, margins


def test_flip_with_margins():
    a = logits(4, 1000, scale=1.0)
    a[2, 10], a[2, 20] = 9.0, 8.875  # margin 0.125
    a[2, 30] = 8.0
    b = noisy(a, 1e-3)
    b[2, 10], b[2, 20], b[2, 30] = 8.75, 9.0, 8.0
    c = compare_logits(a, b, top_k=3)
    assert c.row_argmax_ref[2] == 10 and c.row_argmax_obs[2] == 20
    assert c.row_margin_ref[2] == 0.125 and c.row_margin_obs[2] == 0.25
    assert len(c.flips) == 1
    flip = c.flips[0]
    assert flip["position"] == 2 and flip["token_ref"] == 10 and flip["token_obs"] == 20
    assert flip["logit_ref_top"] == 9.0 and flip["logit_obs_top"] == 9.0
    assert flip["margin_ref"] == 0.125 and flip["margin_obs"] == 0.25
    assert flip["topk_ref"] == [10, 20, 30] and flip["topk_obs"] == [20, 10, 30]
    assert c.row_topk_agree[2] is True  # same set, order swapped
    assert c.argmax_agreement == 0.75 and c.topk_agreement == 1.0


def test_topk_set_change_and_kth_gap():
    a = np.zeros((2, 64), np.float32)
    a[:, :4] = [[5.0, 4.0, 3.0, 2.5], [5.0, 4.0, 3.0, 1.0]]
    b = a.copy()
    b[0, 3] = 3.5  # token 3 enters the top-2? no: top-2 stays {0, 1}
    b[1, 2] = 4.5  # token 2 enters the top-2 {0, 2}
    c = compare_logits(a, b, top_k=2)
    assert c.row_kth_gap_ref == [1.0, 1.0]
    assert c.row_topk_agree == [True, False]
    assert c.topk_changes == [1]
    assert c.topk_agreement == 0.5 and c.argmax_agreement == 1.0
    assert c.flips == []


def test_ties_break_by_lower_token_id():
    a = np.zeros((1, 5000), np.float32)
    a[0, [4000, 17, 2500]] = 7.0  # three-way tie at the top
    a[0, [3, 4999]] = 6.0
    b = a.copy()
    b[0, 100] = 1.0
    c = compare_logits(a, b, top_k=4)
    assert c.row_argmax_ref == [17] and c.row_argmax_obs == [17]
    assert c.row_margin_ref == [0.0]
    # top 4: 17, 2500, 4000 (7.0), 3 (6.0); the 5th is 4999 (6.0): a tie at the boundary
    assert c.row_kth_gap_ref == [0.0]
    assert c.flips == []


@pytest.mark.parametrize("v", [7, 300, 4096, 4099])
def test_topk_matches_stable_sort_with_many_ties(v):
    rng = np.random.default_rng(v)
    a = (np.round(rng.standard_normal((12, v)) * 2) / 2).astype(np.float32)  # heavy ties
    b = (np.round(rng.standard_normal((12, v)) * 2) / 2).astype(np.float32)
    k = 5
    kk = min(max(k, 2) + 1, v)
    res = K.fast_chunk(a, b, kk)
    for x, top in ((a, res.top_ref), (b, res.top_obs)):
        expected = np.stack([np.lexsort((np.arange(v), -row))[:kk] for row in x])
        np.testing.assert_array_equal(top, expected)


def test_top_k_larger_than_vocab_is_clamped():
    a = logits(2, 4)
    c = compare_logits(a, noisy(a, 0.1), top_k=10)
    assert c.top_k == 4 and c.row_kth_gap_ref == [None, None] and c.topk_agreement == 1.0


def test_small_vocabularies():
    a = np.array([[1.0], [2.0]], np.float32)
    c = compare_logits(a, a + np.float32(1), top_k=1)
    assert c.row_margin_ref == [None, None] and c.row_kth_gap_ref == [None, None]
    assert c.topk_agreement == 1.0
    a2 = np.array([[1.0, 3.0, 2.0]], np.float32)
    c2 = compare_logits(a2, a2[:, ::-1].copy(), top_k=3)
    assert c2.row_kth_gap_ref == [None] and c2.row_topk_agree == [True]
    assert c2.row_argmax_ref == [1] and c2.row_argmax_obs == [1]


# --------------------------------------------------------------------------
# fast path vs exact path, chunking, threads


@pytest.mark.parametrize("sigma", [1e-5, 1e-2, 1.0])
def test_fast_path_agrees_with_exact_path(sigma):
    a = logits(6, 2048)
    b = noisy(a, sigma)
    kk = 6
    fast = K.fast_chunk(a, b, kk)
    exact = K.new_result(6, kk)
    hist = sum(K.exact_row(exact, r, a[r], b[r], kk) for r in range(6))
    np.testing.assert_array_equal(fast.hist, hist)
    for name in ("differing", "max_ulp", "top_ref", "n_used"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(exact, name), err_msg=name)
    for name in ("max_abs", "sum_abs", "scaled_ulp", "topv_ref"):
        np.testing.assert_allclose(getattr(fast, name), getattr(exact, name), rtol=1e-5, err_msg=name)
    np.testing.assert_array_equal(fast.top_obs, exact.top_obs)
    np.testing.assert_allclose(fast.topv_obs, exact.topv_obs, rtol=1e-6)
    np.testing.assert_allclose(fast.sum_diff, exact.sum_diff, rtol=1e-4, atol=1e-6 * np.abs(exact.sum_abs).max())
    np.testing.assert_allclose(fast.m2, exact.m2, rtol=1e-4)
    np.testing.assert_allclose(fast.kld, exact.kld, rtol=1e-4)


def assert_chunk_agrees_with_exact_path(a, b, kk=6):
    fast = K.fast_chunk(a, b, kk)
    exact = K.new_result(a.shape[0], kk)
    hist = sum(K.exact_row(exact, r, a[r], b[r], kk) for r in range(a.shape[0]))
    np.testing.assert_array_equal(fast.hist, hist)
    for name in ("differing", "max_ulp", "top_ref", "top_obs", "n_used", "inf_ref", "inf_obs", "nan_ref"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(exact, name), err_msg=name)
    for name in ("max_abs", "sum_abs", "scaled_ulp", "topv_ref", "topv_obs", "m2", "kld"):
        np.testing.assert_allclose(getattr(fast, name), getattr(exact, name), rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(fast.sum_diff, exact.sum_diff, rtol=1e-5, atol=1e-6 * exact.sum_abs.max())


@pytest.mark.parametrize("dtype", [F32, np.dtype(np.float16), BF16], ids=str)
def test_kernel_edge_rows_agree_with_exact_path(dtype):
    a = logits(8, 1000, seed=4, dtype=dtype)
    b = a.copy()
    top = np.argmax(a.astype(np.float32), axis=1)
    b[0] = (a[0].astype(np.float32) + 0.25).astype(dtype)  # offset with an outlier at the top token:
    b[0, top[0]] = a[0, top[0]] + dtype.type(5.0)  # Σ δ² about the top's Δ cancels, m2 is recomputed
    b[1] = noisy(a[1:2], 1.5)[0]  # |δ| beyond the expm1 series' range
    b[2, 10] = a[2, 10] + dtype.type(100.0)  # |δ| > 80: exp could overflow, float64 path
    b[3, 20] = -a[3, 20]  # a sign crossing
    b[4, 30] = a[4, 30] + dtype.type(np.spacing(np.float32(a[4, 30]))) if dtype == F32 else a[4, 31]
    a[6, 50:60] = b[6, 50:60] = -np.inf  # masked tokens: fast kernel, Δ = 0 and p = 0 there
    b[6, 0] = a[6, 0] + dtype.type(0.5)
    a[7] = b[7] = -np.inf  # fully masked: softmax undefined, float64 path
    if dtype != np.float16:  # magnitudes of 2**50 and more take the float64 path
        a[5, 40] = b[5, 40] = dtype.type(2.0**60)
        b[5, 41] = a[5, 41] + dtype.type(1.0)
    assert_chunk_agrees_with_exact_path(a, b)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_chunking_and_threads_do_not_change_results(dtype):
    a = logits(23, 700, dtype=dtype)
    b = noisy(a, 0.05)
    b[[3, 9, 10]] = a[[3, 9, 10]]
    b[5, 2] = np.nan
    b[7, 1:4] = a[7, 1:4][::-1]
    base = compare_logits(a, b, chunk_rows=23, workers=1).to_dict()
    for rows, workers in [(1, 1), (4, 1), (5, 3), (None, 2), (100, 1)]:
        assert compare_logits(a, b, chunk_rows=rows, workers=workers).to_dict() == base


def test_inputs_are_not_modified_and_views_work():
    big = logits(10, 600)
    other = noisy(big, 0.1)
    a, b = big[::2, 100:], other[::2, 100:]  # non-contiguous views
    before = (a.copy(), b.copy())
    c = compare_logits(a, b, chunk_rows=2)
    np.testing.assert_array_equal(a, before[0])
    np.testing.assert_array_equal(b, before[1])
    assert c.n_positions == 5 and c.n_vocab == 500
    np.testing.assert_allclose(c.row_kld, kld_reference(a, b), rtol=1e-4)


# --------------------------------------------------------------------------
# errors, JSON


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(InputError, match=r"\(2, 10\) vs \(2, 11\)"):
        compare_logits(np.zeros((2, 10), np.float32), np.zeros((2, 11), np.float32))


def test_dtype_mismatch_names_both():
    with pytest.raises(InputError, match="float32 vs bfloat16"):
        compare_logits(np.zeros((2, 10), np.float32), np.zeros((2, 10), BF16))


@pytest.mark.parametrize("kwargs, match", [
    ({"top_k": 0}, "top_k"),
    ({"top_k": 2.0}, "top_k"),
    ({"chunk_rows": 0}, "chunk_rows"),
    ({"workers": 0}, "workers"),
    ({"token_ids": [1, 2, 3]}, "token_ids has 3 entries"),
])
def test_bad_options(kwargs, match):
    a = np.zeros((2, 10), np.float32)
    with pytest.raises(InputError, match=match):
        compare_logits(a, a, **kwargs)


def test_bad_arrays():
    with pytest.raises(InputError, match="n_positions, n_vocab"):
        compare_logits(np.zeros(10, np.float32), np.zeros(10, np.float32))
    with pytest.raises(InputError, match="empty"):
        compare_logits(np.zeros((0, 10), np.float32), np.zeros((0, 10), np.float32))
    with pytest.raises(InputError, match="float64"):
        compare_logits(np.zeros((2, 10)), np.zeros((2, 10)))


def test_json_round_trip():
    a = logits(6, 400)
    b = noisy(a, 0.3)
    b[4, 5] = np.nan
    a[0, :2] = -np.inf
    b[0, :2] = -np.inf
    c = compare_logits(a, b, token_ids=[1, 2, 3, 4, 5, 6], top_k=4)
    text = json.dumps(dataclasses.asdict(c))
    back = LogitComparison.from_dict(json.loads(text))
    assert back == c
    assert back.token_ids == [1, 2, 3, 4, 5, 6]
    for value in json.loads(text).values():
        assert isinstance(value, (int, float, str, bool, list, dict, type(None)))


def test_to_dict_is_asdict_with_nothing_shared():
    """to_dict copies the per-position lists flat (asdict deep-copies each entry: most of ab's own time at 2k
    positions): the same dict as ``dataclasses.asdict``, and no list or dict of it is one the comparison holds."""
    a = logits(40, 300)
    b = noisy(a, 0.5)
    b[7, 3] = np.nan
    for c in (compare_logits(a, b, token_ids=list(range(40)), top_k=4),
              compare_logits(a, b).at_positions(list(range(100, 140)))):
        d = c.to_dict()
        expected = dataclasses.asdict(c)
        if c.positions is None:
            expected.pop("positions")
        assert d == expected and list(d) == list(expected)
        assert c.flips and d["flips"][0] == c.flips[0]
        held = {id(getattr(c, f.name)) for f in dataclasses.fields(c)}
        held |= {id(x) for x in c.flips} | {id(v) for f in c.flips for v in f.values()}
        copies = [v for v in d.values() if isinstance(v, (list, dict))]
        copies += [x for x in d["flips"]] + [v for f in d["flips"] for v in f.values() if isinstance(v, (list, dict))]
        assert not {id(v) for v in copies} & held


def test_from_dict_rejects_bad_data():
    c = compare_logits(np.zeros((1, 4), np.float32), np.ones((1, 4), np.float32))
    d = c.to_dict()
    with pytest.raises(InputError, match="schema_version 99"):
        LogitComparison.from_dict({**d, "schema_version": 99})
    with pytest.raises(InputError, match="unknown keys \\['extra'\\]"):
        LogitComparison.from_dict({**d, "extra": 1})
    d.pop("kld")
    with pytest.raises(InputError, match="missing keys \\['kld'\\]"):
        LogitComparison.from_dict(d)
    with pytest.raises(InputError, match="row_kld has 2 entries"):
        LogitComparison.from_dict({**c.to_dict(), "row_kld": [0.0, 0.0]})


# --------------------------------------------------------------------------
# assert_logits_equivalent


def test_assert_logits_equivalent_passes_and_returns_ulps():
    a = logits(2, 50)
    b = bits_plus(a, (1, 3), 2)
    u = assert_logits_equivalent(a, b, max_ulp=2)
    assert u.dtype == np.int64 and u.shape == a.shape and u[1, 3] == 2 and u.sum() == 2


def test_assert_logits_equivalent_message():
    a = np.ones((2, 4), np.float32)
    b = bits_plus(a, (1, 2), 3)
    with pytest.raises(AssertionError) as info:
        assert_logits_equivalent(a, b, max_ulp=1)
    msg = str(info.value)
    assert "not equivalent to 1 ULP (max is 3 ULP at position 1, token 2" in msg
    assert "reference 0x1p+0 (0x3f800000), observed 0x1.000006p+0 (0x3f800003)" in msg
    assert "1 of 8 entries exceed" in msg


def test_assert_logits_equivalent_default_is_equal_values():
    a = np.array([[0.0, np.nan]], np.float32)
    b = np.array([[-0.0, np.nan]], np.float32)
    assert_logits_equivalent(a, b)
    with pytest.raises(AssertionError, match="not equivalent to 0 ULP"):
        assert_logits_equivalent(a, bits_plus(np.abs(a), (0, 0), 1))
