"""Fused per-row comparison kernel, compiled with numba.

Private; :func:`logitlab.numerics._kernel.fast_chunk` is the only caller.
:func:`chunk` handles rows whose values are all finite and of magnitude
below a limit (2**50 for float32: no overflow anywhere below), except for
tokens that are -inf on both sides (masked vocabulary: Δ = 0, p ~ 0); it
marks the other rows not safe, and the caller sends those to the float64 path.

Per row, two passes; the second reads data the first left in the L2 cache:

1. bits, per block of 256 entries: differing bits, ULP distances (max and
   the histogram counts), magnitudes, masked tokens, and the maximum key of
   each block (for the top-k search);
2. values, for rows that differ: Δ = b - a (sum, sum of |Δ|, max |Δ|),
   Σ (Δ - mean)², and the sums behind the KL divergence (see
   ``compare_logits``' notes) with an exp that vectorises.

Top-k lists come from the block maxima: every entry outside the blocks whose
maximum reaches the kk-th largest block maximum is smaller than kk entries
inside them, so only those few blocks are scanned again.

Loops are written so that LLVM vectorises them (``benchmarks/bench_compare.py``
measures the result): maxima are taken on integer bit patterns, never on
floats (numba's float max checks for NaN and does not vectorise); inner loops
index slices from 0 (an offset index keeps numba's negative-index check and
the loop scalar); integer results are cast back to 32 bits (numba widens
them to 64); sums are float32 within a block, float64 across blocks.
Nothing depends on the chunking, so results do not either.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# reassoc lets LLVM vectorise the float sums; no nnan/ninf: rows holding NaN
# or infinities pass through pass 1 (their results are discarded) and must
# not be undefined behaviour.
_JIT = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy",
            fastmath={"reassoc", "contract", "nsz", "arcp"})
_INLINE = dict(_JIT, inline="always")
# numba types uint32 & uint32, int32 + int32 ... as 64-bit: integer loops cast
# every result back to 32 bits (_U, _I) so that LLVM keeps 4 lanes per SSE
# register instead of 2 (measured: the bits pass ~2.1x -> ~1.2x array_equal).
_U, _I = np.uint32, np.int32
# Element maths whose rounding matters ((b - a) - mean must not become
# b - (a + mean); exp's range reduction must not be regrouped): compiled
# without reassoc as separate functions.  LLVM still inlines them into the
# loops, and their instructions keep these flags there.
_EXACT = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy", fastmath={"contract"})

BLOCK = 256  # entries per pass-1 block, per float32 partial sum and per top-k group

# out_i columns
I_DIFFERING, I_SAFE, I_MAX_ULP, I_LE0, I_LE1, I_LE4, I_LE16, I_LE256, I_MAG_REF, I_MASKED = range(10)
N_I = 10
# out_f columns
F_SUM_DIFF, F_SUM_ABS, F_MAX_ABS, F_M2, F_KLD, F_Z, F_DHI, F_DLO = range(8)
N_F = 8
# ordered keys of float32 bit patterns (see _key)
_SIGN32, _MAG32 = np.uint32(0x80000000), np.uint32(0x7FFFFFFF)

# expf of the Cephes Mathematical Library (S. L. Moshier, cephes/single/expf.c):
# exp(x) = 2**n exp(r), r = x - n ln2 in [-ln2/2, ln2/2], ln2 split in two
# parts, a degree-5 minimax polynomial for (exp(r) - 1 - r) / r**2.
_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-87.0)  # 2**n stays a normal float32
_EXP_MAX = np.float32(88.0)
_P = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                   4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
# expm1(x) - x = x²/2 + x³/6 + ... + x⁹/9!: relative truncation error below
# 5e-8 for |x| <= 0.5; beyond, exp(x) - 1 - x loses < 3e-6 to cancellation.
_SERIES_MAX = np.float32(0.5)
_S = tuple(np.float32(1.0 / c) for c in (2, 6, 24, 120, 720, 5040, 40320, 362880))


@intrinsic
def _bits(typingctx, x):
    """float32 -> its uint32 bit pattern."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def _from_bits(typingctx, u):
    """uint32 bit pattern -> float32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@nb.njit(**_INLINE)
def _key(x, sign, mag):
    """Ordered key of a float bit pattern: monotone in value, +0 and -0 equal, finite > 0."""
    m = x & mag
    return sign - m if x & sign else sign + m


@nb.njit(**_INLINE)
def _unkey(k):
    """The float32 whose ordered key (:func:`_key`, float32 layout) is ``k``."""
    return _from_bits(_U(k - _SIGN32) if k >= _SIGN32 else _U((_SIGN32 - k) | _SIGN32))


@nb.njit(**_EXACT)
def _exp_reduced(x, n):
    """exp(x) given n = round(x / ln 2), x in [-87, 88]: 2**n times a polynomial."""
    fn = np.float32(n)
    r = x - fn * _LN2_HI - fn * _LN2_LO
    p = _P[0]
    p = p * r + _P[1]
    p = p * r + _P[2]
    p = p * r + _P[3]
    p = p * r + _P[4]
    p = p * r + _P[5]
    y = p * r * r + r + np.float32(1.0)
    return y * _from_bits(_U(_U(n + _I(127)) << _U(23)))  # 2**n; 32-bit ints (see _U)


@nb.njit(**_EXACT)
def _exp(x):
    """exp of a float32, clamped to [-87, 88], about 1 ULP; branch-free so it vectorises."""
    x = x if x > _EXP_MIN else _EXP_MIN  # ternaries: numba's float min/max do not vectorise
    x = x if x < _EXP_MAX else _EXP_MAX
    t = x * _LOG2E
    return _exp_reduced(x, np.int32(t + (np.float32(0.5) if t >= 0 else np.float32(-0.5))))


@nb.njit(**_EXACT)
def _exp_neg(x):
    """_exp for x <= 0 (softmax weights): one clamp, and rounding needs no sign test.

    x = -inf (a masked token) gives exp(-87) ~ 1.6e-38 instead of 0: negligible next to exp(0) = 1.
    """
    x = x if x > _EXP_MIN else _EXP_MIN
    return _exp_reduced(x, np.int32(x * _LOG2E - np.float32(0.5)))


@nb.njit(**_EXACT)
def _diff(a, b):
    """b - a, and 0 where both are the same infinity (a masked token: the same on both sides)."""
    d = b - a
    return d if d == d else np.float32(0.0)


@nb.njit(**_EXACT)
def _delta(a, b, mean):
    """Δ - mean with Δ = _diff(a, b), rounded once per step (b - a is exact for close values)."""
    return _diff(a, b) - mean


@nb.njit(**_EXACT)
def _series(d):
    """expm1(d) - d by its series (|d| <= 0.5)."""
    s = _S[7]
    for c in (_S[6], _S[5], _S[4], _S[3], _S[2], _S[1], _S[0]):
        s = s * d + c
    return s * d * d


# --------------------------------------------------------------------------
# pass 1


@nb.njit(**_INLINE)
def _block_bits(ia, ib, sign, mag, masked, u):
    """ULP distances of two blocks into u (int32, clamped to 257).

    Entries equal to ``masked`` (the bits of -inf) on both sides are masked
    tokens: they count, and their magnitude is left out of the maxima.
    Returns differing count, masked count, max distance, max magnitude
    (bits) of a and of b, max key of a and of b.  (Histogram counts are a
    separate loop over u: in this one they spill registers and cost more.)
    """
    nd = nm = _I(0)
    umax = mag_a = mag_b = key_a = key_b = _U(0)
    for t in range(ia.size):
        xa = _U(ia[t])
        xb = _U(ib[t])
        nd = _I(nd + _I(xa != xb))
        both = (xa == masked) & (xb == masked)
        nm = _I(nm + _I(both))
        ma = _U(xa & mag)
        mb = _U(xb & mag)
        mag_a = _U(max(mag_a, _U(0) if both else ma))
        mag_b = _U(max(mag_b, _U(0) if both else mb))
        a = _U(sign - ma) if xa & sign else _U(sign + ma)
        b = _U(sign - mb) if xb & sign else _U(sign + mb)
        d = _U(_U(max(a, b)) - _U(min(a, b)))
        key_a = _U(max(key_a, a))
        key_b = _U(max(key_b, b))
        u[t] = _I(min(d, _U(257)))  # clamped: the histogram loop compares signed ints
        umax = _U(max(umax, d))
    return nd, nm, umax, mag_a, mag_b, key_a, key_b


@nb.njit(**_INLINE)
def _block_hist(u, n, nd, le):
    """Add the block's counts of ULP distances <= 0, 1, 4, 16, 256 to le[0:5]."""
    if nd == 0:
        for j in range(5):
            le[j] += n
        return
    c0 = c1 = c4 = c16 = c256 = _I(0)
    for t in range(n):  # u holds min(distance, 257) as int32: signed compares are single SSE ops
        d = u[t]
        c0 = _I(c0 + _I(d < 1))
        c1 = _I(c1 + _I(d < 2))
        c4 = _I(c4 + _I(d < 5))
        c16 = _I(c16 + _I(d < 17))
        c256 = _I(c256 + _I(d < 257))
    le[0] += c0
    le[1] += c1
    le[2] += c4
    le[3] += c16
    le[4] += c256


@nb.njit(**_JIT)
def _pass_bits(ia, ib, sign, mag, masked, u, kmax_a, kmax_b, out_i):
    """Pass 1 over one row: bits, ULPs, histogram edges, magnitudes, block maxima of the keys.

    Returns the largest magnitude (bits) in either row.
    """
    v = ia.size
    nd = nm = 0
    umax = mag_a = mag_b = np.uint32(0)
    le = np.zeros(5, np.int64)
    for blk in range((v + BLOCK - 1) // BLOCK):
        lo = blk * BLOCK
        hi = min(lo + BLOCK, v)
        bnd, bnm, bumax, bma, bmb, kmax_a[blk], kmax_b[blk] = _block_bits(ia[lo:hi], ib[lo:hi], sign, mag,
                                                                          masked, u)
        nm += bnm
        _block_hist(u, hi - lo, bnd, le)
        nd += bnd
        umax = max(umax, bumax)
        mag_a = max(mag_a, bma)
        mag_b = max(mag_b, bmb)
    out_i[I_DIFFERING] = nd
    out_i[I_MAX_ULP] = umax
    for j in range(5):
        out_i[I_LE0 + j] = le[j]
    out_i[I_MAG_REF] = mag_a
    out_i[I_MASKED] = nm
    return max(mag_a, mag_b)


# --------------------------------------------------------------------------
# top-k


@nb.njit(**_INLINE)
def _insert(keys, idx, n, kk, k, j):
    """Insert (key k, index j) into top lists of length n; returns the new length.

    Order: key descending, then index ascending (the rule of ``np.argmax``).
    """
    if n == kk and (k < keys[kk - 1] or (k == keys[kk - 1] and j > idx[kk - 1])):
        return n
    p = min(n, kk - 1)
    while p > 0 and (keys[p - 1] < k or (keys[p - 1] == k and idx[p - 1] > j)):
        keys[p] = keys[p - 1]
        idx[p] = idx[p - 1]
        p -= 1
    keys[p] = k
    idx[p] = j
    return min(n + 1, kk)


@nb.njit(**_JIT)
def _topk(bits, sign, mag, kk, kmax, idx):
    """Top-kk indices of one row into ``idx``, from its block maxima ``kmax``."""
    v = bits.size
    best = np.zeros(kk, np.uint32)
    unused = np.zeros(kk, np.int64)
    nbest = 0
    for blk in range(kmax.size):
        nbest = _insert(best, unused, nbest, kk, kmax[blk], 0)
    floor = best[kk - 1] if nbest == kk else np.uint32(0)
    keys = np.zeros(kk, np.uint32)
    n = 0
    for blk in range(kmax.size):
        if kmax[blk] >= floor:
            for j in range(blk * BLOCK, min(blk * BLOCK + BLOCK, v)):
                n = _insert(keys, idx, n, kk, _key(np.uint32(bits[j]), sign, mag), j)


# --------------------------------------------------------------------------
# pass 2


@nb.njit(**_INLINE)
def _block_values(fa, fb, c, amax):
    """Sums over two blocks, with Δ = b - a, δ = Δ - c, e = exp(a - amax).

    Returns float32 Σ δ, Σ |Δ|, Σ δ², Σ e, Σ e δ, Σ e·series(δ), the bits
    of max |Δ|, and the ordered keys (:func:`_key`) of max δ and min δ.
    """
    sd = sa = s2 = z = be = se = np.float32(0.0)
    dmax = np.uint32(0)
    khi = np.uint32(0)
    klo = np.uint32(0xFFFFFFFF)
    for t in range(fa.size):
        a = fa[t]
        d = _diff(a, fb[t])
        e = _delta(a, fb[t], c)
        w = _exp_neg(a - amax)
        sd += e
        sa += abs(d)
        s2 += e * e
        z += w
        be += w * e
        se += w * _series(e)
        dmax = _U(max(dmax, _bits(abs(d))))
        k = _U(_key(_bits(e), _SIGN32, _MAG32))
        khi = _U(max(khi, k))
        klo = _U(min(klo, k))
    return sd, sa, s2, z, be, se, dmax, khi, klo


@nb.njit(**_INLINE)
def _block_expm1(fa, fb, c, amax):
    """Σ e (expm1(δ) - δ) over two blocks: the series where |δ| <= 0.5, exp beyond."""
    se = np.float32(0.0)
    for t in range(fa.size):
        a = fa[t]
        e = _delta(a, fb[t], c)
        g = _series(e) if abs(e) <= _SERIES_MAX else _exp(e) - np.float32(1.0) - e
        se += _exp_neg(a - amax) * g
    return se


@nb.njit(**_INLINE)
def _block_sq(fa, fb, mean):
    """Σ ((b - a) - mean)² over two blocks."""
    s2 = np.float32(0.0)
    for t in range(fa.size):
        e = _delta(fa[t], fb[t], mean)
        s2 += e * e
    return s2


@nb.njit(**_JIT)
def _pass_values(fa, fb, top, kld_cap, out_f):
    """Pass 2 over a differing row: Δ statistics and KL(P_a || P_b); False if not safe.

    δ = Δ - c with c = Δ at the reference's argmax ``top``: most of p's mass
    sits where δ ~ 0, so B below stays small.  KL = log1p(B + S) - B with
    B = Σ p δ, S = Σ p (expm1(δ) - δ), p = softmax(a).
    """
    v = fa.size
    amax = fa[top]
    c = fb[top] - amax
    sd = sa = s2 = z = be = se = 0.0
    dmax = np.uint32(0)
    khi = np.uint32(0)
    klo = np.uint32(0xFFFFFFFF)
    for lo in range(0, v, BLOCK):
        hi = min(lo + BLOCK, v)
        r = _block_values(fa[lo:hi], fb[lo:hi], c, amax)
        sd += r[0]
        sa += r[1]
        s2 += r[2]
        z += r[3]
        be += r[4]
        se += r[5]
        dmax = max(dmax, r[6])
        khi = max(khi, r[7])
        klo = min(klo, r[8])
    bound = (_from_bits(dmax) + abs(c)) * (1.0 + 1e-6)  # >= max |δ|
    if bound > kld_cap:
        return False  # exp(δ) could overflow: the caller takes the float64 path
    if bound > _SERIES_MAX:  # some terms are beyond the series' range
        se = 0.0
        for lo in range(0, v, BLOCK):
            hi = min(lo + BLOCK, v)
            se += _block_expm1(fa[lo:hi], fb[lo:hi], c, amax)
    mean = c + sd / v
    # Σ (Δ - mean)² = Σ δ² - v (mean - c)²; recomputed when that cancels
    shift = v * (mean - c) ** 2
    m2 = s2 - shift
    if shift > 0.5 * s2:
        m2 = 0.0
        for lo in range(0, v, BLOCK):
            hi = min(lo + BLOCK, v)
            m2 += _block_sq(fa[lo:hi], fb[lo:hi], np.float32(mean))
    out_f[F_SUM_DIFF] = sd + v * np.float64(c)
    out_f[F_SUM_ABS] = sa
    out_f[F_MAX_ABS] = _from_bits(dmax)
    out_f[F_M2] = max(m2, 0.0)
    out_f[F_Z] = z
    out_f[F_DHI] = np.float64(_unkey(khi)) + np.float64(c)  # max Δ (δ = Δ - c rounded once)
    out_f[F_DLO] = np.float64(_unkey(klo)) + np.float64(c)  # min Δ
    b = be / z
    out_f[F_KLD] = max(np.log1p(b + se / z) - b, 0.0)
    return True


# --------------------------------------------------------------------------


@nb.njit(**_JIT)
def chunk(ia, ib, fa, fb, sign, mag, masked, limit, kk, kld_cap, out_i, out_f, top_a, top_b):
    """Fill per-row results for a chunk of rows.

    Parameters
    ----------
    ia, ib : (rows, V) uint32 or uint16, bit patterns of reference and observed.
    fa, fb : (rows, V) float32, their values.
    sign, mag : uint32, the dtype's sign bit and magnitude mask.
    masked : uint32, the bits of -inf: such entries on both sides are masked tokens (Δ = 0, p = 0).
    limit : uint32, magnitude bits from which a row is not safe (other infinities and NaN included).
    kk : int, length of the top lists (<= V).
    kld_cap : float, rows whose max |δ| may exceed this are not safe (exp overflow).
    out_i : (rows, N_I) int64;  out_f : (rows, N_F) float64 (outputs).
    top_a, top_b : (rows, kk) int64 (outputs; top_b only for differing rows).

    Columns of rows that are not safe (``out_i[:, I_SAFE] == 0``) are undefined.
    """
    rows, v = ia.shape
    nblocks = (v + BLOCK - 1) // BLOCK
    kmax_a = np.empty(nblocks, np.uint32)
    kmax_b = np.empty(nblocks, np.uint32)
    u = np.empty(BLOCK, np.int32)
    for r in range(rows):
        oi = out_i[r]
        magmax = _pass_bits(ia[r], ib[r], sign, mag, masked, u, kmax_a, kmax_b, oi)
        oi[I_SAFE] = magmax < limit and oi[I_MASKED] < v  # a fully masked row: softmax undefined
        if not oi[I_SAFE]:
            continue
        _topk(ia[r], sign, mag, kk, kmax_a, top_a[r])
        if oi[I_DIFFERING] == 0:
            continue
        _topk(ib[r], sign, mag, kk, kmax_b, top_b[r])
        oi[I_SAFE] = _pass_values(fa[r], fb[r], top_a[r, 0], kld_cap, out_f[r])
