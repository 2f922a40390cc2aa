"""Statistics of one pair of dumped tensors (vectorised, chunked).

A small, self-contained counterpart of the logit comparison in
``numerics/``: dumps hold many small tensors, and what a dump-diff needs per
tensor is a handful of numbers — is it bit-exact, how many elements differ,
by how much in absolute terms and in ULPs, and how large the difference is
relative to the signal (NMSE, cosine similarity) — and whether the two differ
by a factor only (the fitted scale), as a tensor taken before and after a
scaling does (Gemma's embedding and its ×√hidden_size copy ``inp_scaled``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics.ulp import ULP_NAN_MISMATCH, supported, ulp_distance

#: Upper edges (inclusive) of the ULP histogram bins: 0, 1, 2-4, 5-16, 17-256, >256.
ULP_BIN_EDGES = (0, 1, 4, 16, 256)
ULP_BIN_LABELS = ("0", "1", "2-4", "5-16", "17-256", ">256")

_CHUNK = 1 << 20  # elements per chunk for the float64 sums

#: A pair differs "by a scale only" when the least-squares factor s (observed ≈ s · reference) is at least this
#: far from 1 ...
SCALE_MIN_DEVIATION = 0.01
#: ... and what is left after scaling, Σ(o − s·r)², is at most this fraction of the difference Σ(o − r)²: the
#: factor explains at least 99 % of the squared difference. A factor of 1 % or more that explains nearly all of
#: it is a convention (√d, 1/√d, a norm weight stored as w vs 1 + w, a sign) or two names for quantities taken
#: before and after a scaling, not rounding noise, which has no preferred direction.
SCALE_MAX_RESIDUAL = 0.01


@dataclass(frozen=True)
class TensorStats:
    """How two same-shape tensors differ.

    Attributes:
        n: number of elements.
        differing: elements whose bit patterns differ (``+0`` vs ``-0`` counts).
        max_abs_diff: largest |observed − reference| over pairs where both are
            finite (0.0 when bit-exact).
        max_ulp: largest ULP distance (int32 tensors: largest integer
            difference); ``ULP_NAN_MISMATCH`` where exactly one side is NaN.
        ulp_hist: element counts in the bins ``ULP_BIN_LABELS``; sums to ``n``.
        nmse: Σ(obs − ref)² / Σ ref² over finite pairs (0.0 when bit-exact;
            inf if the reference is all zeros and the observed is not).
        cosine: cosine similarity of the two tensors as flat vectors over
            finite pairs (1.0 when bit-exact, nan for two zero vectors).
        nonfinite_mismatch: elements where one side is finite and the other
            is not, or both are non-finite with different bits.
        scale: least-squares factor s = Σ r·o / Σ r² of observed ≈ s ·
            reference over finite pairs (1.0 when bit-exact; nan when the
            reference is all zeros, and for int32).
        scale_only: the two differ by the factor ``scale`` and (almost)
            nothing else: |s − 1| ≥ ``SCALE_MIN_DEVIATION`` and Σ(o − s·r)² ≤
            ``SCALE_MAX_RESIDUAL`` · Σ(o − r)², with no non-finite mismatch.
    """

    n: int
    differing: int
    max_abs_diff: float
    max_ulp: int
    ulp_hist: tuple[int, ...]
    nmse: float
    cosine: float
    nonfinite_mismatch: int = 0
    scale: float = 1.0
    scale_only: bool = False

    @property
    def bit_exact(self) -> bool:
        return self.differing == 0

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "differing": self.differing, "max_abs_diff": self.max_abs_diff,
                "max_ulp": self.max_ulp, "ulp_hist": list(self.ulp_hist), "nmse": self.nmse,
                "cosine": self.cosine, "nonfinite_mismatch": self.nonfinite_mismatch, "scale": self.scale,
                "scale_only": self.scale_only}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TensorStats":
        def num(value: Any) -> float:
            return float("nan") if value is None else float(value)

        return cls(int(data["n"]), int(data["differing"]), num(data["max_abs_diff"]), int(data["max_ulp"]),
                   tuple(int(x) for x in data["ulp_hist"]), num(data["nmse"]), num(data["cosine"]),
                   int(data.get("nonfinite_mismatch", 0)), num(data.get("scale", 1.0)),
                   bool(data.get("scale_only", False)))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b in float64 without BLAS (a multi-threaded BLAS dot stalls on a busy machine)."""
    return float(np.einsum("i,i->", a, b))


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def ulp_histogram(ulps: np.ndarray) -> tuple[int, ...]:
    """Counts of ``ulps`` in the bins 0, 1, 2-4, 5-16, 17-256, >256."""
    cumulative = [int(np.count_nonzero(ulps <= edge)) for edge in ULP_BIN_EDGES] + [int(ulps.size)]
    return (cumulative[0],) + tuple(b - a for a, b in zip(cumulative, cumulative[1:]))


def tensor_stats(reference: np.ndarray, observed: np.ndarray) -> TensorStats:
    """Compare two tensors element by element.

    Parameters
    ----------
    reference, observed : ndarray
        Same number of elements (compared as flat vectors), same dtype:
        float32, float16, bfloat16 or int32.

    Returns
    -------
    TensorStats

    Raises
    ------
    InputError
        If the dtypes differ, the dtype is not supported or the element
        counts differ.

    Notes
    -----
    Bit-exact pairs are found by comparing bit patterns (one pass, no
    float maths). Otherwise only the differing elements go through
    :func:`logitlab.numerics.ulp.ulp_distance`; sums for NMSE and cosine are
    accumulated in float64 in chunks of 2**20 elements.
    NMSE = Σ(o − r)² / Σ r²; cosine = Σ r·o / √(Σ r² Σ o²); the fitted
    scale s = Σ r·o / Σ r² (least squares, no intercept) and its residual
    Σ(o − s·r)² = Σ o² − (Σ r·o)² / Σ r² (see :class:`TensorStats`).
    """
    ref = np.ascontiguousarray(reference).reshape(-1)
    obs = np.ascontiguousarray(observed).reshape(-1)
    if ref.dtype != obs.dtype:
        raise InputError(f"dtype mismatch: {ref.dtype} vs {obs.dtype}")
    is_int = ref.dtype == np.int32
    if not is_int and not supported(ref.dtype):
        raise InputError(f"unsupported dtype {ref.dtype}; supported: float32, float16, bfloat16, int32")
    if ref.size != obs.size:
        raise InputError(f"size mismatch: {ref.size} vs {obs.size} elements")
    n = int(ref.size)
    diff_mask = _bits(ref) != _bits(obs)
    differing = int(np.count_nonzero(diff_mask))
    if differing == 0:
        return TensorStats(n, 0, 0.0, 0, (n, 0, 0, 0, 0, 0), 0.0, 1.0)

    where = np.flatnonzero(diff_mask)  # take() on indices is ~4x faster than boolean indexing
    r_d, o_d = ref.take(where), obs.take(where)
    if is_int:
        ulps = np.abs(r_d.astype(np.int64) - o_d.astype(np.int64))
    else:
        ulps = ulp_distance(r_d, o_d)
    r64, o64 = r_d.astype(np.float64), o_d.astype(np.float64)
    r_ok = np.isfinite(r64)
    finite_d = r_ok & np.isfinite(o64)
    nonfinite = int(differing - np.count_nonzero(finite_d))
    if nonfinite:
        ulps = np.where(finite_d, ulps, np.maximum(ulps, 257))
        r_f, o_f, r_fin = r64[finite_d], o64[finite_d], r64[r_ok]
    else:
        r_f, o_f, r_fin = r64, o64, r64
    hist = list(ulp_histogram(ulps))
    hist[0] += n - differing
    max_ulp = int(ulps.max())
    delta = o_f - r_f
    max_abs = float(np.abs(delta).max()) if delta.size else float("nan")
    sq_diff = _dot(delta, delta)

    # Σr², Σro, Σo² over finite pairs: equal elements contribute r² to all three, so one pass over the
    # reference plus corrections from the differing elements gives all of them.
    rr_all = 0.0
    for start in range(0, n, _CHUNK):
        r = ref[start : start + _CHUNK].astype(np.float64)
        part = _dot(r, r)
        if not np.isfinite(part):
            r = r[np.isfinite(r)]
            part = _dot(r, r)
        rr_all += part
    same = rr_all - _dot(r_fin, r_fin)  # Σr² over the equal elements
    rr = same + _dot(r_f, r_f)
    ro = same + _dot(r_f, o_f)
    oo = same + _dot(o_f, o_f)
    nmse = sq_diff / rr if rr > 0 else (0.0 if sq_diff == 0 else float("inf"))
    denom = np.sqrt(rr * oo)
    cosine = ro / denom if denom > 0 else float("nan")
    scale, scale_only = fitted_scale(rr, ro, oo, sq_diff) if not is_int and not nonfinite else (float("nan"), False)
    return TensorStats(n, differing, max_abs, max_ulp, tuple(hist), nmse, float(cosine), nonfinite, scale,
                       scale_only)


def fitted_scale(rr: float, ro: float, oo: float, sq_diff: float) -> tuple[float, bool]:
    """The least-squares factor s of observed ≈ s · reference and whether it is all the two differ by.

    Parameters
    ----------
    rr, ro, oo : float
        Σ r², Σ r·o, Σ o² (float64 sums over finite pairs).
    sq_diff : float
        Σ (o − r)².

    Returns
    -------
    (scale, scale_only)
        ``scale`` = ro / rr (nan when rr is 0); ``scale_only`` as defined in :class:`TensorStats`
        (thresholds ``SCALE_MIN_DEVIATION``, ``SCALE_MAX_RESIDUAL``).
    """
    if not rr > 0 or not np.isfinite(rr * oo):
        return float("nan"), False
    scale = ro / rr
    residual = max(oo - ro * scale, 0.0)  # Σ(o − s r)², the projection's remainder
    scale_only = abs(scale - 1.0) >= SCALE_MIN_DEVIATION and residual <= SCALE_MAX_RESIDUAL * sq_diff
    return float(scale), bool(scale_only)


__all__ = ["SCALE_MAX_RESIDUAL", "SCALE_MIN_DEVIATION", "TensorStats", "ULP_BIN_LABELS", "ULP_NAN_MISMATCH",
           "fitted_scale", "tensor_stats", "ulp_histogram"]
