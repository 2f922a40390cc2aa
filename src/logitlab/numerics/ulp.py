"""ULP distance between floating-point arrays, and exact text forms of a value.

A ULP ("unit in the last place") distance counts how many representable
values of the array's dtype lie between two numbers.  It is the natural unit
for "is this rounding noise?": a kernel that sums in a different order moves
results by a few ULPs, a wrong kernel by millions.

Supported dtypes: ``float32``, ``float16`` and ``bfloat16``
(``ml_dtypes.bfloat16``), the dtypes LLM engines hand out logits in.
"""

from __future__ import annotations

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics.dtypes import DtypeTable, bfloat16

__all__ = [
    "ULP_NAN_MISMATCH",
    "SUPPORTED_DTYPES",
    "supported",
    "ulp_distance",
    "float_hex",
    "float_bits",
]

#: ULP distance reported where exactly one of the two values is NaN.  It is
#: larger than any real distance (those are below 2**32), so a maximum over an
#: array containing it is the sentinel itself.
ULP_NAN_MISMATCH: int = int(np.iinfo(np.int64).max)

# dtype -> (signed integer view dtype, mask of the magnitude bits, hex digits); bfloat16's entry is added when
# one is met (logitlab.numerics.dtypes: ml_dtypes loads in 0.6 s)
_LAYOUT = DtypeTable({
    np.dtype(np.float32): (np.dtype(np.int32), 0x7FFFFFFF, 8),
    np.dtype(np.float16): (np.dtype(np.int16), 0x7FFF, 4),
}, (np.dtype(np.int16), 0x7FFF, 4))


def supported(dtype: np.dtype) -> bool:
    """Whether :func:`ulp_distance` and the comparison functions take arrays of ``dtype``."""
    return dtype in _LAYOUT


def __getattr__(name: str):  # SUPPORTED_DTYPES, built when asked for: it holds bfloat16 (imports ml_dtypes)
    if name == "SUPPORTED_DTYPES":
        return (np.dtype(np.float32), np.dtype(np.float16), bfloat16())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dtype_names() -> str:
    return "float32, float16, bfloat16"


def check_pair(reference, observed, *, what: str = "logits") -> tuple[np.ndarray, np.ndarray]:
    """Return both inputs as arrays after checking they share a supported dtype and shape.

    Raises
    ------
    InputError
        If a dtype is not supported, the dtypes differ or the shapes differ;
        the message names both.
    """
    ref = np.asarray(reference)
    obs = np.asarray(observed)
    if ref.dtype not in _LAYOUT:
        raise InputError(
            f"reference {what} have dtype {ref.dtype}; supported: {_dtype_names()} "
            "(convert with .astype(np.float32))"
        )
    if obs.dtype != ref.dtype:
        raise InputError(
            f"reference and observed {what} differ in dtype: {ref.dtype} vs {obs.dtype}; "
            "compare arrays of the same dtype"
        )
    if ref.shape != obs.shape:
        raise InputError(
            f"reference and observed {what} differ in shape: {ref.shape} vs {obs.shape}"
        )
    return ref, obs


def ordered_int(x: np.ndarray) -> np.ndarray:
    """Map the bits of a float array to int64 integers ordered like the values.

    The sign-magnitude bit pattern ``s|m`` becomes ``+m`` for ``s = 0`` and
    ``-m`` for ``s = 1``, so ``+0`` and ``-0`` both map to 0 and consecutive
    representable values map to consecutive integers (subnormals included;
    the largest finite value and infinity are neighbours).
    """
    int_dtype, mag_mask, _ = _LAYOUT[x.dtype]
    bits = x.view(int_dtype).astype(np.int64)
    mag = bits & mag_mask
    return np.where(bits < 0, -mag, mag)


def ulp_distance(reference, observed) -> np.ndarray:
    """Element-wise distance in ULPs of the arrays' dtype.

    Parameters
    ----------
    reference, observed : ndarray
        Arrays of the same shape and the same dtype, one of ``float32``,
        ``float16`` or ``ml_dtypes.bfloat16``.

    Returns
    -------
    ndarray of int64, same shape as the inputs
        The number of representable values of the dtype between each pair,
        in ULPs.  Where both values are NaN the distance is 0; where exactly
        one is NaN it is :data:`ULP_NAN_MISMATCH` (``np.iinfo(np.int64).max``).

    Raises
    ------
    InputError
        If the dtype is not supported, or the dtypes or shapes differ (the
        message names both).

    See Also
    --------
    numpy.testing.assert_array_max_ulp, numpy.testing.nulp_diff :
        the reference this follows.

    Notes
    -----
    Each value's bit pattern, read as a sign-magnitude integer ``(s, m)``, is
    mapped to the two's-complement integer ``o = -m if s else m``; the
    distance is ``|o(observed) - o(reference)|``.  This is the construction
    of ``numpy.testing.nulp_diff`` (``numpy/testing/_private/utils.py``:
    ``integer_repr`` then ``abs(rx - ry)``), done in int64 so that no
    distance overflows, and with a defined answer for NaN.  Consequences:

    - ``+0`` and ``-0`` are 0 ULP apart;
    - a sign crossing counts the ULPs through zero, e.g. the smallest
      positive and smallest negative subnormal are 2 ULP apart;
    - subnormals are spaced 1 ULP apart like every other neighbour;
    - the largest finite value and infinity are 1 ULP apart.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, 0.0, -0.0], dtype=np.float32)
    >>> y = np.array([np.nextafter(np.float32(1), np.float32(2)), -0.0, 1e-45], dtype=np.float32)
    >>> ulp_distance(x, y).tolist()
    [1, 0, 1]
    """
    ref, obs = check_pair(reference, observed, what="arrays")
    ref = np.ascontiguousarray(ref)
    obs = np.ascontiguousarray(obs)
    dist = np.abs(ordered_int(obs) - ordered_int(ref))
    ref_nan = np.isnan(ref)
    obs_nan = np.isnan(obs)
    if ref_nan.any() or obs_nan.any():
        dist[ref_nan & obs_nan] = 0
        dist[ref_nan ^ obs_nan] = ULP_NAN_MISMATCH
    return dist


def _as_scalar(x, dtype) -> np.generic:
    if isinstance(x, np.ndarray):
        if x.ndim != 0:
            raise InputError(f"expected a single value, got an array of shape {x.shape}")
        x = x[()]
    if isinstance(x, np.generic) and x.dtype in _LAYOUT:
        return x
    if dtype is None:
        dtype = np.float32
    dt = np.dtype(dtype)
    if dt not in _LAYOUT:
        raise InputError(f"dtype {dt} not supported; supported: {_dtype_names()}")
    return np.asarray(x, dtype=dt)[()]


def float_hex(x, dtype=None) -> str:
    """The exact value as a C99 ``%a`` style hexadecimal float.

    Parameters
    ----------
    x : float or numpy scalar
        A numpy scalar of a supported dtype keeps its dtype; anything else is
        first rounded to `dtype` (default ``float32``).
    dtype : dtype, optional
        Used only when `x` is not already a supported numpy scalar.

    Returns
    -------
    str
        ``float.hex`` of the value, trailing zero hex digits dropped, as C's
        ``printf("%a")`` prints it: ``'-0x1.54284p+4'``, ``'0x1p+0'``,
        ``'0x0p+0'``, ``'-0x0p+0'``, ``'inf'``, ``'-inf'``, ``'nan'``.

    Examples
    --------
    >>> float_hex(-21.259826)
    '-0x1.54284p+4'
    """
    v = float(_as_scalar(x, dtype))
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    text = v.hex()  # e.g. '-0x1.5428400000000p+4'
    mantissa, exponent = text.split("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"


def float_bits(x, dtype=None) -> str:
    """The raw bit pattern of a value as ``0x``-prefixed hex.

    Parameters
    ----------
    x : float or numpy scalar
        As for :func:`float_hex`.
    dtype : dtype, optional
        Used only when `x` is not already a supported numpy scalar
        (default ``float32``).

    Returns
    -------
    str
        8 hex digits for ``float32`` (``'0xc1aa1420'``), 4 for ``float16``
        and ``bfloat16`` (``'0xc1aa'``).

    Examples
    --------
    >>> float_bits(-21.259826)
    '0xc1aa1420'
    """
    s = _as_scalar(x, dtype)
    int_dtype, _, digits = _LAYOUT[s.dtype]
    unsigned = np.asarray(s).view(int_dtype.str.replace("i", "u"))[()]
    return f"0x{int(unsigned):0{digits}x}"
