"""Per-chunk maths behind :func:`logitlab.numerics.compare.compare_logits`.

Private.  A chunk is a block of whole rows (positions) of the two logit
arrays.  Each row takes one of two paths:

* safe rows (every value of both rows finite and of moderate magnitude, or
  -inf on both sides: a masked token): the
  fused kernel of :mod:`logitlab.numerics._fused` (numba), one pass over the
  bits and one over the values of differing rows;
* other rows (NaN, infinities, magnitudes near the float32 limit, or a
  difference too large for float32 exp): :func:`exact_row`, float64 numpy
  maths one row at a time.

Both paths give the same per-row quantities (:class:`ChunkResult`), so the
caller only concatenates.  Nothing here prints, logs or warns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from logitlab.numerics.dtypes import DtypeTable, as_dtype
from logitlab.numerics.ulp import ulp_distance

# ULP histogram: bin labels and the inclusive upper edge of each bin.
HIST_LABELS = ("0", "1", "2-4", "5-16", "17-256", ">256")
_HIST_EDGES = (0, 1, 4, 16, 256)

# float32 exp overflows above ~88.7: rows whose max |delta| may exceed this
# take the exact path.
_EXP_CAP = 80.0
# Safe rows: magnitudes below 2**50 (float32, bfloat16), so that no sum of
# squares of 2**16 differences overflows float32; float16 is always finite-safe.
_SAFE_EXP = 50
# (bits dtype, sign bit, magnitude mask, bits of -inf, first unsafe magnitude) per input dtype
# (bfloat16's entries are added when one is met: logitlab.numerics.dtypes)
_LAYOUT = DtypeTable({
    np.dtype(np.float32): (np.uint32, 0x80000000, 0x7FFFFFFF, 0xFF800000, (_SAFE_EXP + 127) << 23),
    np.dtype(np.float16): (np.uint16, 0x8000, 0x7FFF, 0xFC00, 0x7C00),
}, (np.uint16, 0x8000, 0x7FFF, 0xFF80, (_SAFE_EXP + 127) << 7))

# (nmant, minexp); bfloat16: 7 and -126 (ml_dtypes.finfo(bfloat16), the float32 exponent range)
_MANT = DtypeTable({
    np.dtype(np.float32): (np.finfo(np.float32).nmant, np.finfo(np.float32).minexp),
    np.dtype(np.float16): (np.finfo(np.float16).nmant, np.finfo(np.float16).minexp),
}, (7, -126))


def spacing(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``np.spacing`` of non-negative float64 values, in the given dtype's grid.

    Equals ``np.spacing(x.astype(dtype))`` for float32 and float16 (also for
    bfloat16, which numpy's spacing does not support): the gap between a value
    and the next representable one away from zero; the smallest subnormal
    below the normal range; NaN for infinite or NaN input.
    """
    nmant, minexp = _MANT[as_dtype(dtype)]
    x = np.asarray(x, dtype=np.float64)
    _, exp = np.frexp(x)  # x = m * 2**exp, 0.5 <= m < 1, so floor(log2 x) = exp - 1
    exp = np.where(x == 0, minexp, np.maximum(exp - 1, minexp))  # frexp(0) gives exp 0
    out = np.ldexp(1.0, exp - nmant)
    return np.where(np.isfinite(x), out, np.nan)


@dataclass
class ChunkResult:
    """Per-row results of one chunk (all arrays have length ``rows``)."""

    differing: np.ndarray  # int64, entries whose bits differ
    max_abs: np.ndarray  # float64, max |delta| over comparable entries
    sum_diff: np.ndarray  # float64, sum of delta
    sum_abs: np.ndarray  # float64, sum of |delta|
    m2: np.ndarray  # float64, sum of (delta - row mean)**2
    max_diff: np.ndarray  # float64, max delta (signed; 0 for identical rows)
    min_diff: np.ndarray  # float64, min delta
    n_used: np.ndarray  # int64, entries that enter the delta statistics
    max_ulp: np.ndarray  # int64
    scaled_ulp: np.ndarray  # float64, max|delta| / spacing(max|ref|)
    kld: np.ndarray  # float64, nats
    p_top_ref: np.ndarray  # float64, the reference's top-1 probability (rows that differ; NaN elsewhere)
    top_ref: np.ndarray  # int64 (rows, kk), -1 padded
    topv_ref: np.ndarray  # float64 (rows, kk), nan padded
    top_obs: np.ndarray  # as top_ref
    topv_obs: np.ndarray
    nan_ref: np.ndarray  # int64
    nan_obs: np.ndarray
    inf_ref: np.ndarray
    inf_obs: np.ndarray
    nonfinite_mismatch: np.ndarray  # int64
    hist: np.ndarray  # int64 (6,)


def new_result(rows: int, kk: int) -> ChunkResult:
    zi = lambda: np.zeros(rows, np.int64)  # noqa: E731
    zf = lambda: np.zeros(rows, np.float64)  # noqa: E731
    return ChunkResult(
        differing=zi(), max_abs=zf(), sum_diff=zf(), sum_abs=zf(), m2=zf(), max_diff=zf(), min_diff=zf(),
        n_used=zi(), max_ulp=zi(), scaled_ulp=zf(), kld=zf(), p_top_ref=np.full(rows, np.nan),
        top_ref=np.full((rows, kk), -1, np.int64), topv_ref=np.full((rows, kk), np.nan),
        top_obs=np.full((rows, kk), -1, np.int64), topv_obs=np.full((rows, kk), np.nan),
        nan_ref=zi(), nan_obs=zi(), inf_ref=zi(), inf_obs=zi(), nonfinite_mismatch=zi(),
        hist=np.zeros(len(HIST_LABELS), np.int64),
    )


# --------------------------------------------------------------------------
# histogram and top-k helpers


def hist_counts(u: np.ndarray) -> np.ndarray:
    """Counts of ULP distances per :data:`HIST_LABELS` bin (u: non-negative ints)."""
    le = [int(np.count_nonzero(u <= edge)) for edge in _HIST_EDGES]
    return np.diff(np.array([0, *le, u.size], dtype=np.int64))


def topk_exact(x: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-kk of one row that may hold NaN or infinities (NaN ranks lowest)."""
    xf = np.asarray(x, dtype=np.float64)
    nan = np.isnan(xf)
    idx = np.full(kk, -1, np.int64)
    val = np.full(kk, np.nan)
    if np.count_nonzero(xf > -np.inf) >= kk:  # the top kk are all > -inf: argmax rounds
        work = np.where(nan, -np.inf, xf)
        for j in range(kk):
            p = int(work.argmax())
            idx[j], val[j] = p, xf[p]
            work[p] = -np.inf
        return idx, val
    key = np.where(nan, 0.0, -xf)
    order = np.lexsort((np.arange(xf.size), key, nan))[:kk]
    idx[: order.size] = order
    val[: order.size] = xf[order]
    return idx, val


# --------------------------------------------------------------------------
# exact (float64, one row) path


def _log_softmax(x: np.ndarray) -> np.ndarray | None:
    """float64 log-softmax of one row with the limits for infinities; None if undefined."""
    if np.isnan(x).any():
        return None
    pos = x == np.inf
    if pos.any():
        return np.where(pos, -math.log(int(pos.sum())), -np.inf)
    m = x.max()
    if m == -np.inf:
        return None
    with np.errstate(divide="ignore"):
        z = x - m
        return z - math.log(float(np.exp(z).sum()))


# Largest |delta| for which the cancellation-free form is evaluated in float64
# (exp(600) * 2**20 entries stays far below the float64 limit).
_STABLE_CAP = 600.0


def kld_exact(a: np.ndarray, b: np.ndarray) -> float:
    """KL(softmax(a) || softmax(b)) in nats, float64, for one row of any values.

    Finite rows use the cancellation-free form of ``compare_logits``' notes
    (log1p(B + S) - B, shifted by the difference at the reference's argmax);
    rows with infinities or NaN use log-softmax with the limits.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if np.isfinite(a).all() and np.isfinite(b).all():
        top = int(a.argmax())
        d = (b - a) - (b[top] - a[top])
        if np.abs(d).max() <= _STABLE_CAP:
            p = np.exp(a - a[top])
            p /= p.sum()
            bsum = float(np.dot(p, d))
            ssum = float(np.dot(p, np.expm1(d) - d))
            return max(0.0, math.log1p(bsum + ssum) - bsum)
    la = _log_softmax(a)
    lb = _log_softmax(b)
    if la is None or lb is None:
        return math.nan
    p = np.exp(la)
    live = p > 0
    if (lb[live] == -np.inf).any():
        return math.inf
    return max(0.0, float(np.sum(p[live] * (la[live] - lb[live]))))


def exact_row(res: ChunkResult, r: int, a_row: np.ndarray, b_row: np.ndarray, kk: int) -> np.ndarray:
    """Fill row ``r`` of ``res`` from native-dtype rows; returns its histogram counts."""
    dtype = a_row.dtype
    u = ulp_distance(a_row, b_row)
    int_dtype = np.int32 if dtype.itemsize == 4 else np.int16
    bits_differ = a_row.view(int_dtype) != b_row.view(int_dtype)
    a = a_row.astype(np.float64)
    b = b_row.astype(np.float64)
    a_nan, b_nan = np.isnan(a), np.isnan(b)
    a_inf, b_inf = np.isinf(a), np.isinf(b)
    both_nan = a_nan & b_nan
    # Bits differ, not both NaN, not both finite: the two differ in being NaN,
    # +inf, -inf or finite (equal infinities have equal bits).
    mismatch = bits_differ & ~both_nan & (a_nan | a_inf | b_nan | b_inf)
    usable = ~mismatch  # finite pairs, identical pairs, NaN/NaN pairs
    with np.errstate(invalid="ignore"):
        d = np.where(bits_differ & ~both_nan & usable, b - a, 0.0)
    n_used = int(usable.sum())
    res.differing[r] = int(bits_differ.sum())
    res.n_used[r] = n_used
    ad = np.abs(d)
    res.max_abs[r] = float(ad.max()) if d.size else 0.0
    res.sum_diff[r] = float(d.sum())
    res.sum_abs[r] = float(ad.sum())
    mean = res.sum_diff[r] / n_used if n_used else 0.0
    res.m2[r] = float(np.sum(np.where(usable, d - mean, 0.0) ** 2))
    res.max_diff[r] = float(d.max()) if d.size else 0.0
    res.min_diff[r] = float(d.min()) if d.size else 0.0
    res.max_ulp[r] = int(u.max()) if u.size else 0
    finite_ref = np.abs(a[np.isfinite(a)])
    scale = float(finite_ref.max()) if finite_ref.size else 0.0
    res.scaled_ulp[r] = float(res.max_abs[r] / spacing(np.array(scale), dtype))
    res.nan_ref[r], res.nan_obs[r] = int(a_nan.sum()), int(b_nan.sum())
    res.inf_ref[r], res.inf_obs[r] = int(a_inf.sum()), int(b_inf.sum())
    res.nonfinite_mismatch[r] = int(mismatch.sum())
    res.top_ref[r], res.topv_ref[r] = topk_exact(a, kk)
    if res.differing[r]:
        res.top_obs[r], res.topv_obs[r] = topk_exact(b, kk)
        res.kld[r] = kld_exact(a, b)
        la = _log_softmax(a)
        res.p_top_ref[r] = math.nan if la is None else math.exp(float(la.max()))
    else:  # identical bits: identical distributions, KLD 0 by definition
        res.top_obs[r], res.topv_obs[r] = res.top_ref[r], res.topv_ref[r]
        res.kld[r] = 0.0
    hist_u = np.minimum(u, 257)  # the sentinel lands in ">256"
    return hist_counts(hist_u)


# --------------------------------------------------------------------------
# fast path (the fused numba kernel)


def fast_chunk(a_nat: np.ndarray, b_nat: np.ndarray, kk: int) -> ChunkResult:
    """All per-row results of one chunk of C-contiguous native-dtype rows.

    ``kk`` is the length of the top lists: ``min(max(top_k, 2) + 1, n_vocab)``.
    """
    from logitlab.numerics import _fused as F  # numba: imported on first comparison

    rows, v = a_nat.shape
    bits, sign, mag, masked, limit = _LAYOUT[a_nat.dtype]
    wide = a_nat.dtype.itemsize == 4
    fa = a_nat if wide else a_nat.astype(np.float32)
    fb = b_nat if wide else b_nat.astype(np.float32)
    out_i = np.zeros((rows, F.N_I), np.int64)
    out_f = np.zeros((rows, F.N_F), np.float64)
    top_a = np.full((rows, kk), -1, np.int64)
    top_b = np.full((rows, kk), -1, np.int64)
    F.chunk(a_nat.view(bits), b_nat.view(bits), fa, fb, np.uint32(sign), np.uint32(mag), np.uint32(masked),
            np.uint32(limit), kk, _EXP_CAP, out_i, out_f, top_a, top_b)

    res = new_result(rows, kk)
    differing = out_i[:, F.I_DIFFERING]
    safe = out_i[:, F.I_SAFE].astype(bool) & np.isfinite(out_f[:, F.F_KLD])
    ok = np.flatnonzero(safe)
    res.differing[:] = differing
    res.n_used[ok] = v
    res.max_ulp[ok] = out_i[ok, F.I_MAX_ULP]
    res.sum_diff[ok] = out_f[ok, F.F_SUM_DIFF]
    res.sum_abs[ok] = out_f[ok, F.F_SUM_ABS]
    res.max_abs[ok] = out_f[ok, F.F_MAX_ABS]
    res.m2[ok] = out_f[ok, F.F_M2]
    live = ok[differing[ok] > 0]  # pass 2 ran: identical rows keep 0
    res.max_diff[live] = out_f[live, F.F_DHI]
    res.min_diff[live] = out_f[live, F.F_DLO]
    res.kld[ok] = out_f[ok, F.F_KLD]
    z = out_f[ok, F.F_Z]  # Σ exp(a - max a) of rows that differ (pass 2), 0 for identical rows
    res.p_top_ref[ok] = np.where(differing[ok] > 0, 1.0 / np.where(z > 0, z, np.nan), np.nan)
    res.inf_ref[ok] = res.inf_obs[ok] = out_i[ok, F.I_MASKED]
    scale = out_i[ok, F.I_MAG_REF].astype(bits).view(a_nat.dtype).astype(np.float64)
    res.scaled_ulp[ok] = res.max_abs[ok] / spacing(scale, a_nat.dtype)
    same = differing[ok] == 0
    obs_top = np.where(same[:, None], top_a[ok], top_b[ok])
    res.top_ref[ok] = top_a[ok]
    res.top_obs[ok] = obs_top
    res.topv_ref[ok] = fa[ok[:, None], top_a[ok]]  # a gather: fa[ok] would copy the rows
    res.topv_obs[ok] = fb[ok[:, None], obs_top]
    le = out_i[ok][:, [F.I_LE0, F.I_LE1, F.I_LE4, F.I_LE16, F.I_LE256]].sum(axis=0)
    res.hist[:] = np.diff(np.concatenate(([0], le, [ok.size * v])))
    for r in np.flatnonzero(~safe):
        res.hist += exact_row(res, int(r), a_nat[r], b_nat[r], kk)
    return res


def first_differing_column(a_row: np.ndarray, b_row: np.ndarray) -> int:
    """Index of the first entry whose bits differ (the rows must differ)."""
    int_dtype = np.int32 if a_row.dtype.itemsize == 4 else np.int16
    return int(np.flatnonzero(a_row.view(int_dtype) != b_row.view(int_dtype))[0])
