"""Per-tensor statistics of a dump-diff."""

import ml_dtypes
import numpy as np
import pytest

from logitlab.dumps.stats import ULP_NAN_MISMATCH, tensor_stats, ulp_histogram
from logitlab.errors import InputError


def test_bit_exact_pair():
    x = np.linspace(-3, 3, 100, dtype=np.float32)
    s = tensor_stats(x, x.copy())
    assert s.bit_exact and s.differing == 0 and s.max_ulp == 0 and s.ulp_hist == (100, 0, 0, 0, 0, 0)
    assert s.nmse == 0.0 and s.cosine == 1.0


def test_known_ulp_offsets_fill_the_histogram_bins():
    x = np.full(8, 1.5, dtype=np.float32)
    y = x.copy()
    y.view(np.int32)[:] += np.array([0, 1, 2, 4, 5, 16, 17, 300], dtype=np.int32)
    s = tensor_stats(x, y)
    assert s.differing == 7 and s.max_ulp == 300
    assert s.ulp_hist == (1, 1, 2, 2, 1, 1)
    eps = np.spacing(np.float32(1.5))
    assert s.max_abs_diff == pytest.approx(300 * eps)
    expected_nmse = float(np.sum((y.astype(np.float64) - x) ** 2) / np.sum(x.astype(np.float64) ** 2))
    assert s.nmse == pytest.approx(expected_nmse)
    assert 0.999999 < s.cosine <= 1.0


def test_signed_zero_differs_in_bits_but_is_zero_ulp():
    s = tensor_stats(np.array([0.0, 1.0], np.float32), np.array([-0.0, 1.0], np.float32))
    assert s.differing == 1 and s.max_ulp == 0 and s.ulp_hist[0] == 2 and s.max_abs_diff == 0.0


def test_nan_on_one_side_is_a_nonfinite_mismatch():
    s = tensor_stats(np.array([1.0, 2.0], np.float32), np.array([np.nan, 2.0], np.float32))
    assert s.nonfinite_mismatch == 1 and s.max_ulp == ULP_NAN_MISMATCH and s.ulp_hist[-1] == 1
    assert np.isnan(s.max_abs_diff) and s.nmse == 0.0


def test_float16_bfloat16_and_int32():
    for dtype in (np.float16, ml_dtypes.bfloat16):
        x = np.ones(4, dtype=dtype)
        y = x.copy()
        y.view(np.int16)[0] += 2
        assert tensor_stats(x, y).max_ulp == 2
    s = tensor_stats(np.array([1, 5, 9], np.int32), np.array([1, 7, 9], np.int32))
    assert s.differing == 1 and s.max_ulp == 2 and s.max_abs_diff == 2.0


def test_shapes_are_compared_flat_but_sizes_and_dtypes_must_match():
    x = np.arange(6, dtype=np.float32)
    assert tensor_stats(x.reshape(2, 3), x.reshape(3, 2)).bit_exact
    with pytest.raises(InputError, match="size mismatch: 6 vs 5"):
        tensor_stats(x, x[:5])
    with pytest.raises(InputError, match="dtype mismatch"):
        tensor_stats(x, x.astype(np.float16))


def test_histogram_bins():
    assert ulp_histogram(np.array([0, 1, 2, 4, 5, 16, 17, 256, 257])) == (1, 1, 2, 2, 2, 1)
