"""ULP distance and exact value formatting (logitlab.numerics.ulp)."""

import ml_dtypes
import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import ULP_NAN_MISMATCH, float_bits, float_hex, ulp_distance

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
UINT = {4: np.uint32, 2: np.uint16}


def from_bits(bits, dtype):
    """Array of the given dtype from raw unsigned bit patterns."""
    return np.asarray(bits, dtype=UINT[dtype.itemsize]).view(dtype)


def layout(dtype):
    """(sign bit, bits of +inf, bits of the largest finite, bits of the smallest normal)."""
    if dtype.itemsize == 4:
        return 0x80000000, 0x7F800000, 0x7F7FFFFF, 0x00800000
    if dtype == BF16:
        return 0x8000, 0x7F80, 0x7F7F, 0x0080
    return 0x8000, 0x7C00, 0x7BFF, 0x0400


def dist(a_bits, b_bits, dtype):
    return ulp_distance(from_bits(a_bits, dtype), from_bits(b_bits, dtype)).tolist()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
class TestEdgeCases:
    def test_identical_is_zero(self, dtype):
        x = np.linspace(-3, 3, 11).astype(dtype)
        assert ulp_distance(x, x).tolist() == [0] * 11

    def test_signed_zeros_are_zero_apart(self, dtype):
        sign = layout(dtype)[0]
        assert dist([0, sign], [sign, 0], dtype) == [0, 0]

    def test_neighbours_are_one_apart(self, dtype):
        one = np.asarray([1.0], dtype=dtype)
        bits = one.view(UINT[dtype.itemsize]).astype(np.int64)[0]
        assert dist([bits, bits], [bits + 1, bits - 1], dtype) == [1, 1]

    def test_sign_crossing_counts_through_zero(self, dtype):
        sign = layout(dtype)[0]
        # smallest positive vs smallest negative subnormal: +1 -> 0 -> -1
        assert dist([1], [sign | 1], dtype) == [2]
        # +3 subnormal steps vs -5 subnormal steps
        assert dist([3], [sign | 5], dtype) == [8]
        # -0 vs +smallest subnormal
        assert dist([sign], [1], dtype) == [1]

    def test_subnormals(self, dtype):
        _, _, _, min_normal = layout(dtype)
        assert dist([0], [1], dtype) == [1]
        assert dist([min_normal - 1], [min_normal], dtype) == [1]  # largest subnormal -> smallest normal
        assert dist([1], [min_normal - 1], dtype) == [min_normal - 2]

    def test_max_finite_to_inf_is_one(self, dtype):
        sign, inf, fmax, _ = layout(dtype)
        assert dist([fmax, sign | fmax], [inf, sign | inf], dtype) == [1, 1]
        assert dist([inf], [sign | inf], dtype) == [2 * inf]

    def test_nan(self, dtype):
        nan = np.asarray([np.nan, np.nan, 1.0, np.nan], dtype=dtype)
        other = np.asarray([np.nan, 1.0, np.nan, -np.nan], dtype=dtype)
        assert ulp_distance(nan, other).tolist() == [0, ULP_NAN_MISMATCH, ULP_NAN_MISMATCH, 0]

    def test_symmetric(self, dtype):
        rng = np.random.default_rng(1)
        a = rng.standard_normal(200).astype(dtype)
        b = (a.astype(np.float32) + rng.standard_normal(200).astype(np.float32) * 0.1).astype(dtype)
        assert (ulp_distance(a, b) == ulp_distance(b, a)).all()
        assert ulp_distance(a, b).dtype == np.int64


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matches_numpy_nulp_diff(dtype):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(500) * 4).astype(dtype)
    b = (a.astype(np.float64) + rng.standard_normal(500) * 1e-2).astype(dtype)
    a[:3] = [0.0, -0.0, 1e-3]
    b[:3] = [-0.0, 1e-3, -1e-3]
    # numpy returns the distance converted to the input's float dtype, so it
    # is exact only below 2**(nmant+1); compare there, and check the rest by hand.
    expected = np.asarray(np.testing.assert_array_max_ulp(a, b, maxulp=np.inf)).ravel()
    ours = ulp_distance(a, b)
    exact = expected < 2.0 ** (np.finfo(dtype).nmant + 1)
    assert exact.sum() > 400
    np.testing.assert_array_equal(ours[exact], expected[exact].astype(np.int64))
    bits = a.view(UINT[a.itemsize]).astype(np.int64)
    assert ours[1] == bits[2] and ours[2] == 2 * bits[2]  # -0 -> x, x -> -x


def test_shape_mismatch_names_both():
    with pytest.raises(InputError, match=r"\(3,\) vs \(4,\)"):
        ulp_distance(np.zeros(3, np.float32), np.zeros(4, np.float32))


def test_dtype_mismatch_names_both():
    with pytest.raises(InputError, match="float32 vs float16"):
        ulp_distance(np.zeros(3, np.float32), np.zeros(3, np.float16))


def test_unsupported_dtype():
    with pytest.raises(InputError, match="float64.*supported: float32, float16, bfloat16"):
        ulp_distance(np.zeros(3), np.zeros(3))


class TestFloatHexBits:
    def test_seed_report_values(self):
        # The first mismatch of the seed report, checked by hand:
        # 0xc1aa1420 = sign 1, exponent 0x83 = 131 -> 2**4, mantissa 0x2a1420;
        # 23 mantissa bits shifted to 24 = 0x542840 -> hex digits 1.542840 -> 1.54284
        # value -(1 + 0x2a1420 / 2**23) * 16 = -21.25982666015625.
        ref = np.uint32(0xC1AA1420).view(np.float32)
        obs = np.uint32(0xC1AC5A0E).view(np.float32)
        assert float(ref) == -21.25982666015625
        assert float_hex(ref) == "-0x1.54284p+4"
        assert float_bits(ref) == "0xc1aa1420"
        assert float_hex(obs) == "-0x1.58b41cp+4"
        assert float_bits(obs) == "0xc1ac5a0e"
        assert float_hex(-21.25982666015625) == "-0x1.54284p+4"  # Python float -> float32
        assert float.fromhex(float_hex(obs)) == float(obs)
        assert ulp_distance(np.array([ref]), np.array([obs])).tolist() == [0xC1AC5A0E - 0xC1AA1420]

    def test_python_float_is_rounded_to_float32(self):
        # -21.2598 is 14 float32 ULPs away from the seed value: not the same number.
        assert float_bits(-21.2598) == "0xc1aa1412"
        assert float_hex(-21.2598) != "-0x1.54284p+4"

    def test_special_values(self):
        assert float_hex(1.0) == "0x1p+0"
        assert float_bits(1.0) == "0x3f800000"
        assert float_hex(0.0) == "0x0p+0"
        assert float_hex(-0.0) == "-0x0p+0"
        assert float_bits(-0.0) == "0x80000000"
        assert float_hex(np.float32(1e-45)) == "0x1p-149"
        assert float_bits(np.float32(1e-45)) == "0x00000001"
        assert float_hex(np.inf) == "inf"
        assert float_hex(-np.inf) == "-inf"
        assert float_hex(np.nan) == "nan"
        assert float_bits(np.inf) == "0x7f800000"

    def test_16_bit_types_keep_their_dtype(self):
        assert float_bits(np.float16(1.0)) == "0x3c00"
        assert float_bits(ml_dtypes.bfloat16(1.0)) == "0x3f80"
        assert float_bits(ml_dtypes.bfloat16(-21.25)) == "0xc1aa"
        assert float_hex(ml_dtypes.bfloat16(-21.25)) == "-0x1.54p+4"
        assert float_hex(np.float16(-0.5)) == "-0x1p-1"
        assert float_bits(0.5, dtype=np.float16) == "0x3800"

    def test_zero_dim_array_and_errors(self):
        assert float_bits(np.array(1.0, np.float32)) == "0x3f800000"
        with pytest.raises(InputError, match="single value"):
            float_bits(np.zeros(2, np.float32))
        with pytest.raises(InputError, match="not supported"):
            float_bits(1.0, dtype=np.float64)
