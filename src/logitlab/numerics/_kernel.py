"""Per-chunk maths behind :func:`logitlab.numerics.compare.compare_logits`.

Private.  A chunk is a block of whole rows (positions) of the two logit
arrays.  Each row is handled by one of three paths:

* identical rows (every bit equal): only the reference's top-k is computed;
* finite rows (every value of both rows finite): vectorised float32 maths on
  the whole chunk at once, in preallocated buffers;
* other rows (NaN or infinity present and the rows differ, or a result that
  overflowed float32): :func:`exact_row`, float64 maths one row at a time.

Every path returns the same per-row quantities (:class:`ChunkResult`), so the
caller only concatenates.  Nothing here prints, logs or warns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import ml_dtypes

from logitlab.numerics.ulp import ulp_distance

# ULP histogram: bin labels and the inclusive upper edge of each bin.
HIST_LABELS = ("0", "1", "2-4", "5-16", "17-256", ">256")
_HIST_EDGES = (0, 1, 4, 16, 256)

# KLD tiers by the row's max |delta| (x): expm1(x) - x = x**2/2 + x**3/6 +
# x**4/24 + ...; 1 term up to 3e-5 (relative truncation error <= x/3 = 1e-5),
# 2 terms up to 1e-2 (<= x**2/12 < 8.4e-6), 3 terms up to 0.05 (<= x**3/60 <
# 2.1e-6); above, expm1 itself (cancellation ~ 2 eps/|x| < 5e-6 on the large
# terms, which dominate the sum).
_SERIES_LIMITS = (3e-5, 1e-2, 0.05)
# Softmax without subtracting the row maximum is safe (no float32 overflow in
# exp(a) * expm1(delta), no loss to underflow that matters) when every row
# maximum lies in this window and max + max|delta| stays below _NOSHIFT_CAP.
_NOSHIFT_LO, _NOSHIFT_HI, _NOSHIFT_CAP = -30.0, 60.0, 80.0
# expm1 of a float32 overflows above ~88.7: such rows go to the exact path.
_EXPM1_CAP = 80.0
# Interleaved block size of the top-k candidate search.
_BLOCK = 64
_OFFSETS = np.arange(_BLOCK)

_MANT = {
    np.dtype(np.float32): (np.finfo(np.float32).nmant, np.finfo(np.float32).minexp),
    np.dtype(np.float16): (np.finfo(np.float16).nmant, np.finfo(np.float16).minexp),
    np.dtype(ml_dtypes.bfloat16): (
        ml_dtypes.finfo(ml_dtypes.bfloat16).nmant,
        ml_dtypes.finfo(ml_dtypes.bfloat16).minexp,
    ),
}


def spacing(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``np.spacing`` of non-negative float64 values, in the given dtype's grid.

    Equals ``np.spacing(x.astype(dtype))`` for float32 and float16 (also for
    bfloat16, which numpy's spacing does not support): the gap between a value
    and the next representable one away from zero; the smallest subnormal
    below the normal range; NaN for infinite or NaN input.
    """
    nmant, minexp = _MANT[np.dtype(dtype)]
    x = np.asarray(x, dtype=np.float64)
    _, exp = np.frexp(x)  # x = m * 2**exp, 0.5 <= m < 1, so floor(log2 x) = exp - 1
    exp = np.maximum(exp - 1, minexp)
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
    n_used: np.ndarray  # int64, entries that enter the delta statistics
    max_ulp: np.ndarray  # int64
    scaled_ulp: np.ndarray  # float64, max|delta| / spacing(max|ref|)
    kld: np.ndarray  # float64, nats
    top_ref: np.ndarray  # int64 (rows, kk), -1 padded
    topv_ref: np.ndarray  # float64 (rows, kk), nan padded
    top_obs: np.ndarray  # as top_ref; the last column may be -1 (not computed)
    topv_obs: np.ndarray  # when n_vocab > kk: the kk-1 first are always exact
    nan_ref: np.ndarray  # int64
    nan_obs: np.ndarray
    inf_ref: np.ndarray
    inf_obs: np.ndarray
    nonfinite_mismatch: np.ndarray  # int64
    first_col: int  # column of the first differing entry of the first differing row, or -1
    first_row: int  # row (within chunk) of it, or -1
    hist: np.ndarray  # int64 (6,)


def new_result(rows: int, kk: int) -> ChunkResult:
    zi = lambda: np.zeros(rows, np.int64)  # noqa: E731
    zf = lambda: np.zeros(rows, np.float64)  # noqa: E731
    return ChunkResult(
        differing=zi(), max_abs=zf(), sum_diff=zf(), sum_abs=zf(), m2=zf(),
        n_used=zi(), max_ulp=zi(), scaled_ulp=zf(), kld=zf(),
        top_ref=np.full((rows, kk), -1, np.int64), topv_ref=np.full((rows, kk), np.nan),
        top_obs=np.full((rows, kk), -1, np.int64), topv_obs=np.full((rows, kk), np.nan),
        nan_ref=zi(), nan_obs=zi(), inf_ref=zi(), inf_obs=zi(), nonfinite_mismatch=zi(),
        first_col=-1, first_row=-1, hist=np.zeros(len(HIST_LABELS), np.int64),
    )


# --------------------------------------------------------------------------
# histogram and top-k helpers


def hist_counts(u: np.ndarray, boolbuf: np.ndarray | None = None) -> np.ndarray:
    """Counts of ULP distances per :data:`HIST_LABELS` bin (u: non-negative ints)."""
    n = u.size
    if n == 0:
        return np.zeros(len(HIST_LABELS), np.int64)
    top = int(u.max())
    le = []
    for edge in _HIST_EDGES:
        if top <= edge:
            le.append(n)
        else:
            if boolbuf is not None and boolbuf.shape == u.shape:
                np.less_equal(u, edge, out=boolbuf)
                le.append(int(np.count_nonzero(boolbuf)))
            else:
                le.append(int(np.count_nonzero(u <= edge)))
    le.append(n)
    counts = np.diff(np.array([0] + le, dtype=np.int64))
    return counts


def _topk_full(x: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-kk of finite rows: value descending, ties by lower index."""
    rows, n = x.shape
    take = min(kk, n)
    idx = np.full((rows, kk), -1, np.int64)
    val = np.full((rows, kk), np.nan)
    work = np.array(x, dtype=x.dtype, copy=True)
    rr = np.arange(rows)
    for j in range(take):
        p = work.argmax(axis=1)
        idx[:, j] = p
        val[:, j] = work[rr, p]
        work[rr, p] = -np.inf
    return idx, val


def topk_finite(x: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-kk indices and values of finite float32 rows ``x`` (rows, V).

    Order: value descending, ties broken by the lower index (the rule of
    ``np.argmax``).  Exact, without sorting or partitioning whole rows: the
    row is cut into ``_BLOCK`` interleaved blocks (block j holds indices
    j, j+nb, j+2nb, ...); the kk blocks with the largest maxima contain the kk
    largest values (any value outside them is <= kk distinct block maxima),
    so kk rounds of argmax over those blocks (plus the ragged tail) suffice.
    Rows where a tie could make the choice depend on the tie-break are
    recomputed on the full row.
    """
    rows, v = x.shape
    nb = v // _BLOCK
    if nb < 4 * kk or rows == 0:
        return _topk_full(x, kk)
    rr = np.arange(rows)
    # (rows, _BLOCK, nb) view: block j is column j; max over axis 1 is a
    # vectorised elementwise maximum of _BLOCK contiguous slices.
    bmax = x[:, : nb * _BLOCK].reshape(rows, _BLOCK, nb).max(axis=1)
    sel = np.empty((rows, kk), np.intp)
    for j in range(kk):
        p = bmax.argmax(axis=1)
        sel[:, j] = p
        bmax[rr, p] = -np.inf
    rest_max = bmax.max(axis=1)  # largest value outside the chosen blocks
    cidx = (sel[:, :, None] + _OFFSETS[None, None, :] * nb).reshape(rows, kk * _BLOCK)
    tail = v - nb * _BLOCK
    if tail:
        cidx = np.concatenate([cidx, np.broadcast_to(np.arange(nb * _BLOCK, v), (rows, tail))], axis=1)
    cand = x[rr[:, None], cidx]
    pos = np.empty((rows, kk), np.intp)
    val = np.empty((rows, kk), np.float64)
    for j in range(kk):
        p = cand.argmax(axis=1)
        pos[:, j] = p
        val[:, j] = cand[rr, p]
        cand[rr, p] = -np.inf
    idx = cidx[rr[:, None], pos].astype(np.int64)
    # A tie anywhere in the top kk, or between the kk-th value and a value left
    # out, makes the candidate order (not the index) decide: redo those rows.
    tied = (val[:, :-1] == val[:, 1:]).any(axis=1)
    tied |= cand.max(axis=1) >= val[:, -1]
    tied |= rest_max >= val[:, -1]
    if tied.any():
        t = np.flatnonzero(tied)
        idx[t], val[t] = _topk_full(x[t], kk)
    return idx, val


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


def kld_exact(a: np.ndarray, b: np.ndarray) -> float:
    """KL(softmax(a) || softmax(b)) in nats, float64, for one row of any values."""
    la = _log_softmax(np.asarray(a, np.float64))
    lb = _log_softmax(np.asarray(b, np.float64))
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
    else:  # identical bits: identical distributions, KLD 0 by definition
        res.top_obs[r], res.topv_obs[r] = res.top_ref[r], res.topv_ref[r]
        res.kld[r] = 0.0
    hist_u = np.minimum(u, 257)  # the sentinel lands in ">256"
    return hist_counts(hist_u)


# --------------------------------------------------------------------------
# fast (float32, whole chunk) path


class Workspace:
    """Preallocated buffers for chunks of at most ``rows`` rows (one per thread)."""

    def __init__(self, rows: int, n_vocab: int, dtype: np.dtype):
        shape = (rows, n_vocab)
        self.u = np.empty(shape, np.uint32)
        self.f1 = np.empty(shape, np.float32)
        self.f2 = np.empty(shape, np.float32)
        self.f3 = np.empty(shape, np.float32)
        self.bb = np.empty(shape, np.bool_)
        self.ones = np.ones(n_vocab, np.float32)
        if np.dtype(dtype).itemsize < 4:
            self.a32 = np.empty(shape, np.float32)
            self.b32 = np.empty(shape, np.float32)


def _row_counts(mask: np.ndarray) -> np.ndarray:
    return np.fromiter((np.count_nonzero(m) for m in mask), np.int64, mask.shape[0])


def _ordered32(bits16: np.ndarray) -> np.ndarray:
    """int32 ordered integers of 16-bit float bit patterns (see ulp.ordered_int)."""
    wide = bits16.astype(np.int32)
    mag = wide & 0x7FFF
    return np.where(wide < 0, -mag, mag)


def _ulp_fast(ws: Workspace, a: np.ndarray, b: np.ndarray):
    """ULP distances (uint32; None when all are 0), their row maxima, per-row
    differing-bit counts, and how many differing entries are 0 ULP apart (+0 vs -0)."""
    rows, v = a.shape
    u, bb = ws.u[:rows], ws.bb[:rows]
    i1 = u.view(np.int32)
    if a.dtype.itemsize == 4:
        ia, ib = a.view(np.int32), b.view(np.int32)
        np.not_equal(ia, ib, out=bb)
        differing = _row_counts(bb)
        if not differing.any():  # bit-exact chunk: every distance is 0
            return None, np.zeros(rows, np.int64), differing, 0
        np.subtract(ib, ia, out=i1)  # wraps on sign crossings, fixed below
        np.abs(i1, out=i1)  # |-2**31| stays -2**31, read as uint32 2**31
        umax = u.max(axis=1).astype(np.int64)
        # A sign crossing gives |ib - ia| >= 2**23 (as uint32): look for the
        # crossings among those entries only.  There the distance is |a| + |b|.
        signed_zero = 0
        if umax.max() >= (1 << 23):
            np.greater_equal(u, 1 << 23, out=bb)
            flat = np.flatnonzero(bb)
            flat = flat[(ia.ravel()[flat] ^ ib.ravel()[flat]) < 0]
            if flat.size:
                rr, cc = flat // v, flat % v
                mag = (ia[rr, cc].astype(np.int64) & 0x7FFFFFFF) + (ib[rr, cc].astype(np.int64) & 0x7FFFFFFF)
                u[rr, cc] = mag.astype(np.uint32)
                signed_zero = int(np.count_nonzero(mag == 0))
                fixed = rr[np.concatenate(([True], rr[1:] != rr[:-1]))]  # rr is sorted
                if fixed.size * 4 > rows:
                    umax = u.max(axis=1).astype(np.int64)
                else:
                    umax[fixed] = [u[r].max() for r in fixed]
    else:
        ia, ib = a.view(np.int16), b.view(np.int16)
        np.not_equal(ia, ib, out=bb)
        differing = _row_counts(bb)
        oa, ob = _ordered32(ia), _ordered32(ib)
        np.subtract(ob, oa, out=i1)
        np.abs(i1, out=i1)
        umax = u.max(axis=1).astype(np.int64)
        signed_zero = int(np.count_nonzero(bb)) - int(np.count_nonzero(i1))
    return u, umax, differing, signed_zero


def _hist_fast(u: np.ndarray | None, top: int, zeros: int, bb: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Histogram counts of a chunk, knowing its maximum and its count of zeros.

    When few entries lie in 1..256 ULPs (noise well above ULP level), those
    are gathered and binned; otherwise one compare-and-count pass per edge.
    """
    n = bb.size
    if top > 256:
        np.subtract(u, 1, out=scratch)  # 0 wraps to 2**32 - 1
        np.less_equal(scratch, 255, out=bb)  # 1 <= u <= 256
        small = np.flatnonzero(bb) if np.count_nonzero(bb) <= n // 64 else None
        if small is not None:
            vals = u.ravel()[small]
            le = [zeros] + [zeros + int(np.count_nonzero(vals <= e)) for e in _HIST_EDGES[1:]] + [n]
            return np.diff(np.array([0] + le, dtype=np.int64))
    le = [zeros]
    for edge in _HIST_EDGES[1:]:
        if top <= edge:
            le.append(n)
        else:
            np.less_equal(u, edge, out=bb)
            le.append(int(np.count_nonzero(bb)))
    le.append(n)
    return np.diff(np.array([0] + le, dtype=np.int64))


def _to32(x: np.ndarray, buf: np.ndarray) -> np.ndarray:
    out = buf[: x.shape[0]]
    out[...] = x
    return out


def _first_bits(a_row: np.ndarray, b_row: np.ndarray) -> int:
    int_dtype = np.int32 if a_row.dtype.itemsize == 4 else np.int16
    return int(np.flatnonzero(a_row.view(int_dtype) != b_row.view(int_dtype))[0])


def fast_chunk(ws: Workspace, a_nat: np.ndarray, b_nat: np.ndarray, kk: int) -> ChunkResult:
    """All per-row results of one chunk of C-contiguous native-dtype rows.

    ``kk`` is the length of the top lists: ``min(max(top_k, 2) + 1, n_vocab)``.
    """
    rows, v = a_nat.shape
    res = new_result(rows, kk)
    with np.errstate(all="ignore"):
        u, umax, differing, signed_zero = _ulp_fast(ws, a_nat, b_nat)
        res.differing[:] = differing
        res.max_ulp[:] = umax
        res.n_used[:] = v
        zeros = rows * v - int(differing.sum()) + signed_zero
        res.hist[:] = _hist_fast(u, int(umax.max()), zeros, ws.bb[:rows], ws.f3[:rows].view(np.uint32))
        diff_rows = np.flatnonzero(differing)
        same_rows = np.flatnonzero(differing == 0)
        if diff_rows.size:
            r0 = int(diff_rows[0])
            res.first_row, res.first_col = r0, _first_bits(a_nat[r0], b_nat[r0])

        wide = a_nat.dtype.itemsize < 4
        a32 = _to32(a_nat, ws.a32) if wide else a_nat
        b32 = _to32(b_nat, ws.b32) if wide and diff_rows.size else b_nat
        slow: list[int] = []
        if same_rows.size:
            sa = a32 if same_rows.size == rows else a32[same_rows]
            idx, val = topk_finite(sa, kk)
            finite = np.isfinite(val[:, 0]) & np.isfinite(sa.min(axis=1))
            res.top_ref[same_rows], res.topv_ref[same_rows] = idx, val
            res.top_obs[same_rows], res.topv_obs[same_rows] = idx, val
            slow.extend(int(r) for r in same_rows[~finite])
        if diff_rows.size:
            if diff_rows.size == rows:
                da, db = a32, b32
            else:
                da, db = a32[diff_rows], b32[diff_rows]
            slow.extend(_fast_differing(ws, res, diff_rows, da, db, kk, a_nat.dtype))

        for r in slow:
            res.hist -= hist_counts(u[r] if u is not None else np.zeros(v, np.uint32))
            res.hist += exact_row(res, r, a_nat[r], b_nat[r], kk)
    return res


def _fast_differing(ws, res, rows_idx, a, b, kk, dtype) -> list[int]:
    """Float32 maths for differing rows; returns the rows needing the exact path."""
    n, v = a.shape
    ones = ws.ones
    d = np.subtract(b, a, out=ws.f1[:n])
    ad = np.abs(d, out=ws.f2[:n])
    max_abs = ad.max(axis=1).astype(np.float64)
    sum_abs = np.vecdot(ad, ones).astype(np.float64)
    sum_diff = np.vecdot(d, ones).astype(np.float64)
    good = np.isfinite(sum_abs) & np.isfinite(sum_diff)
    mean = sum_diff / v
    np.subtract(d, mean.astype(np.float32)[:, None], out=d)  # d is now δ = Δ - row mean
    m2 = np.vecdot(d, d).astype(np.float64)

    all_good = bool(good.all())
    top_a, topv_a = _topk_rows(a, kk, good, all_good)
    amax = topv_a[:, 0]
    amin = a.min(axis=1).astype(np.float64)
    scale = np.maximum(np.abs(amax), np.abs(amin))
    scaled = max_abs / spacing(scale, dtype)

    # Observed top list.  Where every gap between consecutive reference top
    # values exceeds 2 max|Δ|, no observed value can change rank among them or
    # pass the k-th: the observed top kk-1 are the reference's tokens.
    slack = 2.0 * max_abs * (1.0 + 1e-6) + 1e-37
    keep = good & (np.diff(topv_a, axis=1) < -slack[:, None]).all(axis=1)
    top_b = top_a.copy()
    topv_b = np.take_along_axis(b, np.maximum(top_a, 0), axis=1).astype(np.float64)
    if kk < v:  # the observed kk-th is not known there: mark it unknown
        top_b[keep, -1] = -1
        topv_b[keep, -1] = np.nan
    redo = good & ~keep
    if redo.any():
        ri = np.flatnonzero(redo)
        top_b[ri], topv_b[ri] = topk_finite(b[ri], kk)

    # KL(P_ref || P_obs).  For δ_i = Δ_i - c (any constant c):
    #   KL = log Σ p_i exp(δ_i) - Σ p_i δ_i = log1p(B + S) - B,
    #   B = Σ p_i δ_i,  S = Σ p_i (expm1(δ_i) - δ_i)  (terms >= 0).
    bound = (max_abs + np.abs(mean)) * (1.0 + 1e-6)  # >= max |δ|
    good &= bound <= _EXPM1_CAP
    # Per-row decision, so that results do not depend on the chunking.
    shift = good & ~((amax >= _NOSHIFT_LO) & (amax <= _NOSHIFT_HI) & (amax + bound <= _NOSHIFT_CAP))
    e = ws.f2[:n]
    if shift.any():
        np.subtract(a, np.where(shift, amax, 0.0).astype(np.float32)[:, None], out=e)
        np.exp(e, out=e)
    else:
        np.exp(a, out=e)
    z = np.vecdot(e, ones).astype(np.float64)
    bsum = np.vecdot(e, d).astype(np.float64) / z
    ssum = np.zeros(n)
    # Terms of the series of expm1(x) - x needed for the row's max |δ|; 0: use expm1.
    terms = np.select([bound <= lim for lim in _SERIES_LIMITS], [1, 2, 3], 0)
    for nterms in (1, 2, 3, 0):
        rows = np.flatnonzero(terms == nterms)
        if rows.size == 0:
            continue
        te = e if rows.size == n else e[rows]
        td = d if rows.size == n else d[rows]
        w = ws.f3[: rows.size]
        if nterms == 0:
            np.expm1(td, out=w)  # Σ p expm1(δ) = B + S
            ssum[rows] = np.vecdot(te, w).astype(np.float64) / z[rows] - bsum[rows]
            continue
        q = np.multiply(td, td, out=w)
        s = np.vecdot(te, q).astype(np.float64) / 2  # Σ e δ²/2
        if nterms >= 2:
            np.multiply(te, q, out=te)  # e δ²; e is not needed after this
            s += np.vecdot(te, td).astype(np.float64) / 6
            if nterms == 3:
                s += np.vecdot(te, q).astype(np.float64) / 24
        ssum[rows] = s / z[rows]
    kld = np.maximum(np.log1p(bsum + ssum) - bsum, 0.0)
    good &= np.isfinite(kld) & np.isfinite(z) & (z > 0)

    res.max_abs[rows_idx] = max_abs
    res.sum_abs[rows_idx] = sum_abs
    res.sum_diff[rows_idx] = sum_diff
    res.m2[rows_idx] = m2
    res.scaled_ulp[rows_idx] = scaled
    res.kld[rows_idx] = kld
    res.top_ref[rows_idx], res.topv_ref[rows_idx] = top_a, topv_a
    res.top_obs[rows_idx], res.topv_obs[rows_idx] = top_b, topv_b
    return [int(r) for r in rows_idx[~good]]


def _topk_rows(x, kk, good, all_good):
    """topk_finite on the rows flagged good; placeholders elsewhere."""
    if all_good:
        return topk_finite(x, kk)
    idx = np.full((x.shape[0], kk), 0, np.int64)
    val = np.full((x.shape[0], kk), np.nan)
    g = np.flatnonzero(good)
    if g.size:
        idx[g], val[g] = topk_finite(x[g], kk)
    return idx, val
