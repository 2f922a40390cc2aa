"""Compare two logit arrays over the full vocabulary, chunk by chunk.

:func:`compare_logits` answers "is the candidate bit-exact with the control?"
and, when it is not, gathers the numbers a verdict needs: how many entries
and rows differ, by how many ULPs, by how much in logits, whether the mean
difference is an offset, whether argmax and the top-k set survive, at what
margins, and the KL divergence of the softmax distributions.

The work is a fused kernel compiled with numba, row by row over blocks of
rows ("chunks") shared among threads, so the extra memory stays a small
fraction of the inputs.  Rows whose bits are identical skip everything
except the reference's top-k.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics import _kernel as K
from logitlab.numerics.ulp import check_pair, float_bits, float_hex, ulp_distance

__all__ = [
    "LogitComparison",
    "compare_logits",
    "assert_logits_equivalent",
    "SCHEMA_VERSION",
    "HISTOGRAM_BINS",
    "KLD_STATS",
]

#: Version of the JSON form of :class:`LogitComparison`.
#: 1 — first version.
SCHEMA_VERSION = 1

#: Labels of :attr:`LogitComparison.ulp_histogram`, in order.
HISTOGRAM_BINS: tuple[str, ...] = K.HIST_LABELS

#: Keys of :attr:`LogitComparison.kld` with the percentile (0-100) of each;
#: the set and order printed by llama.cpp's ``llama-perplexity --kl-divergence``.
KLD_STATS: tuple[tuple[str, float | None], ...] = (
    ("mean", None), ("max", 100.0), ("p99_9", 99.9), ("p99", 99.0), ("p95", 95.0),
    ("p90", 90.0), ("median", 50.0), ("p10", 10.0), ("p5", 5.0), ("p1", 1.0), ("min", 0.0),
)

# Chunk size target in elements: the kernel works row by row, so this only
# sets the granularity of the threads and of the float32 copies of 16-bit inputs.
_CHUNK_ELEMENTS = 1 << 21
# Default thread count cap.
_MAX_WORKERS = 8


def _f(x) -> float | None:
    """float for JSON: NaN (undefined) becomes None, infinities stay."""
    x = float(x)
    return None if math.isnan(x) else x


@dataclass(frozen=True, slots=True)
class LogitComparison:
    """Result of :func:`compare_logits`: every field is a plain JSON type.

    ``dataclasses.asdict(c)`` then ``json.dumps`` writes it;
    :meth:`from_dict` reads it back.  ``bool(c)`` is :attr:`bit_exact`.
    Floats that are undefined (e.g. the margin of a one-token vocabulary, the
    KLD of a row holding NaN) are ``None``; infinities stay floats (Python's
    ``json`` writes them as ``Infinity``).

    Units: logits for differences, margins and gaps; ULPs of the input dtype
    for ULP fields; nats for KLD.  "Δ" is ``observed - reference``.

    Attributes
    ----------
    n_positions, n_vocab : int
        Shape of the compared arrays.
    dtype : str
        Their dtype (``'float32'``, ``'float16'`` or ``'bfloat16'``).
    top_k : int
        The k of the top-k statistics.
    differing_entries, differing_rows : int
        Entries whose bits differ, rows with at least one such entry.
    max_abs_diff, mean_abs_diff, mean_diff, std_diff : float
        max |Δ|, mean |Δ|, mean Δ (signed) and population std of Δ over all
        entries, except entries where one side is non-finite and the bits
        differ (counted in ``nonfinite_mismatch`` instead).  Equal entries,
        equal infinities and NaN/NaN pairs count as Δ = 0.
    max_ulp : int
        Largest element-wise ULP distance (:func:`~logitlab.numerics.ulp.ulp_distance`),
        the smallest ``max_ulp`` that :func:`assert_logits_equivalent` passes.
    max_scaled_ulp : float
        Max over rows of ``max|Δ_row| / spacing(max|reference_row|)``: the
        largest difference in ULPs at the row's own scale.  Element-wise ULP
        distances explode for logits near zero; this does not.
    ulp_histogram : dict[str, int]
        Entries per ULP-distance bin ``"0", "1", "2-4", "5-16", "17-256", ">256"``.
    argmax_agreement, topk_agreement : float
        Fraction of positions whose argmax, and whose top-k token set, agree.
    kld : dict[str, float | None]
        Per-position KL(P_ref || P_obs) summary: ``mean, max, p99_9, p99, p95,
        p90, median, p10, p5, p1, min`` (nats), over the rows where it is
        defined.
    nan_ref, nan_obs, inf_ref, inf_obs : int
        NaN and ±inf counts of each array.
    nonfinite_mismatch : int
        Entries where the two sides differ in being NaN, +inf, -inf or finite.
    first_mismatch : dict or None
        The first entry (row-major) whose bits differ: ``position, token_id,
        reference_hex, observed_hex, reference_bits, observed_bits, reference,
        observed, ulp``.
    flips : list[dict]
        One per position whose argmax differs: ``position, token_ref,
        token_obs, logit_ref_top, logit_obs_top, margin_ref, margin_obs,
        topk_ref, topk_obs``.
    row_* : list
        Per position: ``row_differing`` (entries), ``row_max_abs_diff``,
        ``row_mean_diff``, ``row_std_diff``, ``row_argmax_ref``,
        ``row_argmax_obs``, ``row_margin_ref`` / ``row_margin_obs`` (top-1
        minus top-2 logit), ``row_kth_gap_ref`` (k-th minus (k+1)-th largest
        reference logit; None when n_vocab <= k), ``row_topk_agree``,
        ``row_kld`` (nats), ``row_max_ulp``, ``row_scaled_ulp``.
    token_ids : list[int] or None
        The token fed at each position, if the caller gave it.
    schema_version : int
        :data:`SCHEMA_VERSION`.
    """

    n_positions: int
    n_vocab: int
    dtype: str
    top_k: int
    differing_entries: int
    differing_rows: int
    max_abs_diff: float
    mean_abs_diff: float
    mean_diff: float
    std_diff: float
    max_ulp: int
    max_scaled_ulp: float
    ulp_histogram: dict
    argmax_agreement: float
    topk_agreement: float
    kld: dict
    nan_ref: int
    nan_obs: int
    inf_ref: int
    inf_obs: int
    nonfinite_mismatch: int
    first_mismatch: dict | None
    flips: list
    row_differing: list
    row_max_abs_diff: list
    row_mean_diff: list
    row_std_diff: list
    row_argmax_ref: list
    row_argmax_obs: list
    row_margin_ref: list
    row_margin_obs: list
    row_kth_gap_ref: list
    row_topk_agree: list
    row_kld: list
    row_max_ulp: list
    row_scaled_ulp: list
    token_ids: list | None = None
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if f.name.startswith("row_") and len(getattr(self, f.name)) != self.n_positions:
                raise InputError(
                    f"LogitComparison.{f.name} has {len(getattr(self, f.name))} entries, "
                    f"expected n_positions = {self.n_positions}"
                )
        if self.token_ids is not None and len(self.token_ids) != self.n_positions:
            raise InputError(
                f"LogitComparison.token_ids has {len(self.token_ids)} entries, "
                f"expected n_positions = {self.n_positions}"
            )

    @property
    def bit_exact(self) -> bool:
        """True iff every entry has identical bits (NaN payloads included)."""
        return self.differing_entries == 0

    def __bool__(self) -> bool:
        return self.bit_exact

    @property
    def topk_changes(self) -> list[int]:
        """Positions whose top-k token set differs."""
        return [i for i, ok in enumerate(self.row_topk_agree) if not ok]

    def to_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict(self)``: plain JSON types only."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LogitComparison":
        """Rebuild from :meth:`to_dict` / ``json.loads`` output.

        Raises
        ------
        InputError
            On an unknown schema version or missing / unknown keys.
        """
        if not isinstance(data, dict):
            raise InputError(f"LogitComparison data must be a dict, got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise InputError(
                f"LogitComparison schema_version {version} not supported (this logitlab reads {SCHEMA_VERSION})"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = sorted(required - data.keys())
        unknown = sorted(data.keys() - names)
        if missing or unknown:
            raise InputError(f"LogitComparison data: missing keys {missing}, unknown keys {unknown}")
        return cls(**data)


def _validate(reference, observed, top_k, chunk_rows, token_ids, workers):
    ref, obs = check_pair(reference, observed)
    if ref.ndim != 2:
        raise InputError(
            f"logits must have shape (n_positions, n_vocab), got {ref.shape}; "
            "reshape one position with x.reshape(1, -1)"
        )
    n, v = ref.shape
    if n == 0 or v == 0:
        raise InputError(f"logits are empty: shape {ref.shape}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InputError(f"top_k must be a positive integer, got {top_k!r}")
    if chunk_rows is not None and (
        isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1
    ):
        raise InputError(f"chunk_rows must be a positive integer or None, got {chunk_rows!r}")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1
    ):
        raise InputError(f"workers must be a positive integer or None, got {workers!r}")
    ids = None
    if token_ids is not None:
        ids = [int(t) for t in token_ids]
        if len(ids) != n:
            raise InputError(f"token_ids has {len(ids)} entries, expected n_positions = {n}")
    return ref, obs, ids


def compare_logits(
    reference,
    observed,
    *,
    top_k: int = 5,
    chunk_rows: int | None = None,
    token_ids: Sequence[int] | None = None,
    workers: int | None = None,
) -> LogitComparison:
    """Compare two logit arrays entry by entry over the full vocabulary.

    Parameters
    ----------
    reference, observed : ndarray, shape (n_positions, n_vocab)
        Logits of the control (reference) and the candidate (observed), same
        shape and same dtype: ``float32``, ``float16`` or
        ``ml_dtypes.bfloat16``.  Not modified.
    top_k : int, optional
        k of the top-k set statistics, >= 1; larger than n_vocab means
        n_vocab (and is stored so).  Default 5.
    chunk_rows : int, optional
        Rows processed at once.  Default: about 2**21 entries per chunk
        (``max(1, 2**21 // n_vocab)``).  Results do not depend on it.
    token_ids : sequence of int, optional
        The token id fed at each position, stored for reports.
    workers : int, optional
        Threads working on chunks (the compiled kernel releases the GIL).
        Default: the CPU count, at most 8.  Results do not depend on it.

    Returns
    -------
    LogitComparison
        ``bool(result)`` is True iff the arrays are bit-exact.

    Raises
    ------
    InputError
        Shapes or dtypes differ (the message names both), a dtype is not
        supported, the arrays are not 2-D or are empty, or an option is out
        of range.

    Notes
    -----
    Cost and memory: rows are handled by a fused kernel compiled with numba
    (``numerics/_fused.py``): one vectorised pass over the bits of both
    rows, one over the values of rows that differ, the top-k from block
    maxima.  On one thread that is about 4x one ``np.array_equal`` of the
    same arrays when every row differs (``benchmarks/bench_compare.py``);
    the first call in a process loads the compiled kernel from numba's
    cache (about 0.5 s; 3-4 s to compile it when there is no cache).
    Rows holding NaN, +inf, -inf on one side only, or magnitudes of 2**50
    and more (float32, bfloat16) take a float64 numpy path row by row,
    20-50x slower per row.  Peak extra memory is the per-row results, plus for float16 and
    bfloat16 a float32 copy of one chunk per worker: well under 1 % of the
    inputs for float32.

    Δ statistics use float32 element-wise maths, float32 partial sums over
    blocks of 256 entries and float64 across blocks.  ULP distances are
    computed on the bits, in the input dtype.

    KL divergence per position, in nats, as llama.cpp's ``llama-perplexity
    --kl-divergence`` reports it (``tools/perplexity/perplexity.cpp``)::

        KL(P || Q) = sum_i p_i (log p_i - log q_i),
        p = softmax(reference_row),  q = softmax(observed_row).

    It is evaluated without cancellation: with δ_i = Δ_i − mean(Δ),
    ``KL = log1p(B + S) − B`` where ``B = Σ p_i δ_i`` and
    ``S = Σ p_i (expm1(δ_i) − δ_i)`` (a sum of non-negative terms; for
    |δ| <= 0.5 its terms use the series δ²/2 + δ³/6 + ... + δ⁹/9!).  p uses
    the log-sum-exp shift.  Relative error about 1e-6 or better (tested
    against 80-bit long double), also for ULP-level differences where a
    direct ``lse(Q) − lse(P) − Σ pΔ`` in float32 would return rounding
    noise and scipy's float64 ``rel_entr`` is off by ~1e-4.  Rows with NaN or infinities use
    float64 with the limits (softmax of +inf entries is uniform over them;
    a token with p > 0 and q = 0 gives +inf; NaN gives None, except in rows
    whose bits are identical, which have KLD 0).  Tokens that are -inf in
    both rows (masked vocabulary) have p = q = 0 and Δ = 0, and stay on the
    fast path.

    Top-k order is value descending, ties broken by the lower token id (as
    ``np.argmax``); NaN ranks below every number.  Margins are top-1 minus
    top-2 logit of each array; ``row_kth_gap_ref`` is the reference's k-th
    minus (k+1)-th largest logit.

    Examples
    --------
    >>> import numpy as np
    >>> ref = np.zeros((2, 8), np.float32); ref[:, 3] = 5
    >>> obs = ref.copy(); obs[1, 0] = np.nextafter(np.float32(0), np.float32(1))
    >>> c = compare_logits(ref, obs, top_k=2)
    >>> bool(c), c.differing_entries, c.max_ulp, c.first_mismatch["position"]
    (False, 1, 1, 1)
    """
    ref, obs, ids = _validate(reference, observed, top_k, chunk_rows, token_ids, workers)
    n, v = ref.shape
    top_k = min(int(top_k), v)
    kk = min(max(top_k, 2) + 1, v)  # reference top list: k+1 for the k-th gap, 3 for margins
    rows = int(chunk_rows) if chunk_rows is not None else max(1, _CHUNK_ELEMENTS // v)
    rows = min(rows, n)
    starts = list(range(0, n, rows))
    nworkers = min(int(workers) if workers is not None else min(os.cpu_count() or 1, _MAX_WORKERS), len(starts))

    def run(start: int) -> K.ChunkResult:
        a = np.ascontiguousarray(ref[start:start + rows])
        b = np.ascontiguousarray(obs[start:start + rows])
        return K.fast_chunk(a, b, kk)

    if nworkers > 1:
        with ThreadPoolExecutor(max_workers=nworkers) as pool:
            chunks = list(pool.map(run, starts))
    else:
        chunks = [run(s) for s in starts]
    return _assemble(ref, obs, chunks, top_k, kk, ids)


def _cat(chunks, name):
    return np.concatenate([getattr(c, name) for c in chunks], axis=0)


def _percentile(sorted_vals: np.ndarray, q: float) -> float:
    """Linear-interpolation percentile (numpy's default, llama.cpp's rule) that copes with inf."""
    pos = q / 100.0 * (sorted_vals.size - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, sorted_vals.size - 1)
    a, b = float(sorted_vals[lo]), float(sorted_vals[hi])
    t = pos - lo
    if a == b or t == 0.0:
        return a
    return a + (b - a) * t


def _kld_summary(kld: np.ndarray) -> dict:
    vals = np.sort(kld[~np.isnan(kld)])
    if vals.size == 0:
        return {name: None for name, _ in KLD_STATS}
    out = {}
    for name, q in KLD_STATS:
        out[name] = float(vals.mean()) if q is None else _percentile(vals, q)
    return out


def _assemble(ref, obs, chunks, top_k, kk, ids) -> LogitComparison:
    n, v = ref.shape
    differing = _cat(chunks, "differing")
    n_used = _cat(chunks, "n_used")
    sum_diff = _cat(chunks, "sum_diff")
    sum_abs = _cat(chunks, "sum_abs")
    m2 = _cat(chunks, "m2")
    max_abs = _cat(chunks, "max_abs")
    max_ulp = _cat(chunks, "max_ulp")
    scaled = _cat(chunks, "scaled_ulp")
    kld = _cat(chunks, "kld")
    top_ref, topv_ref = _cat(chunks, "top_ref"), _cat(chunks, "topv_ref")
    top_obs, topv_obs = _cat(chunks, "top_obs"), _cat(chunks, "topv_obs")
    hist = np.sum([c.hist for c in chunks], axis=0)

    safe_n = np.maximum(n_used, 1)
    row_mean = np.where(n_used > 0, sum_diff / safe_n, 0.0)
    row_std = np.sqrt(np.maximum(m2, 0.0) / safe_n)
    total = int(n_used.sum())
    mean = float(sum_diff.sum() / total) if total else 0.0
    m2_total = float(np.sum(m2 + n_used * (row_mean - mean) ** 2))
    std = math.sqrt(max(m2_total, 0.0) / total) if total else 0.0

    def margins(vals):
        if vals.shape[1] < 2:
            return np.full(n, np.nan)
        with np.errstate(invalid="ignore"):
            return np.where(vals[:, 0] == vals[:, 1], 0.0, vals[:, 0] - vals[:, 1])

    margin_ref, margin_obs = margins(topv_ref), margins(topv_obs)
    if kk > top_k:
        with np.errstate(invalid="ignore"):
            a_, b_ = topv_ref[:, top_k - 1], topv_ref[:, top_k]
            kth_gap = np.where(a_ == b_, 0.0, a_ - b_)
    else:
        kth_gap = np.full(n, np.nan)
    k_eff = min(top_k, kk)
    set_ref = np.sort(top_ref[:, :k_eff], axis=1)
    set_obs = np.sort(top_obs[:, :k_eff], axis=1)
    topk_agree = (set_ref == set_obs).all(axis=1)
    arg_ref, arg_obs = top_ref[:, 0], top_obs[:, 0]
    flips = []
    for r in np.flatnonzero(arg_ref != arg_obs):
        flips.append({
            "position": int(r),
            "token_ref": int(arg_ref[r]),
            "token_obs": int(arg_obs[r]),
            "logit_ref_top": _f(topv_ref[r, 0]),
            "logit_obs_top": _f(topv_obs[r, 0]),
            "margin_ref": _f(margin_ref[r]),
            "margin_obs": _f(margin_obs[r]),
            "topk_ref": [int(t) for t in top_ref[r, :k_eff]],
            "topk_obs": [int(t) for t in top_obs[r, :k_eff]],
        })

    first = None
    diff_rows = np.flatnonzero(differing)
    if diff_rows.size:
        pos = int(diff_rows[0])
        col = K.first_differing_column(ref[pos], obs[pos])
        rv, ov = ref[pos, col], obs[pos, col]
        first = {
            "position": pos,
            "token_id": col,
            "reference_hex": float_hex(rv),
            "observed_hex": float_hex(ov),
            "reference_bits": float_bits(rv),
            "observed_bits": float_bits(ov),
            "reference": _f(rv),
            "observed": _f(ov),
            "ulp": int(ulp_distance(ref[pos, col:col + 1], obs[pos, col:col + 1])[0]),
        }

    return LogitComparison(
        n_positions=int(n),
        n_vocab=int(v),
        dtype=str(ref.dtype),
        top_k=int(top_k),
        differing_entries=int(differing.sum()),
        differing_rows=int(np.count_nonzero(differing)),
        max_abs_diff=float(max_abs.max()),
        mean_abs_diff=float(sum_abs.sum() / total) if total else 0.0,
        mean_diff=mean,
        std_diff=std,
        max_ulp=int(max_ulp.max()),
        max_scaled_ulp=float(scaled.max()),
        ulp_histogram={label: int(c) for label, c in zip(HISTOGRAM_BINS, hist)},
        argmax_agreement=float(np.mean(arg_ref == arg_obs)),
        topk_agreement=float(np.mean(topk_agree)),
        kld=_kld_summary(kld),
        nan_ref=int(sum(c.nan_ref.sum() for c in chunks)),
        nan_obs=int(sum(c.nan_obs.sum() for c in chunks)),
        inf_ref=int(sum(c.inf_ref.sum() for c in chunks)),
        inf_obs=int(sum(c.inf_obs.sum() for c in chunks)),
        nonfinite_mismatch=int(sum(c.nonfinite_mismatch.sum() for c in chunks)),
        first_mismatch=first,
        flips=flips,
        row_differing=[int(x) for x in differing],
        row_max_abs_diff=[float(x) for x in max_abs],
        row_mean_diff=[float(x) for x in row_mean],
        row_std_diff=[float(x) for x in row_std],
        row_argmax_ref=[int(x) for x in arg_ref],
        row_argmax_obs=[int(x) for x in arg_obs],
        row_margin_ref=[_f(x) for x in margin_ref],
        row_margin_obs=[_f(x) for x in margin_obs],
        row_kth_gap_ref=[_f(x) for x in kth_gap],
        row_topk_agree=[bool(x) for x in topk_agree],
        row_kld=[_f(x) for x in kld],
        row_max_ulp=[int(x) for x in max_ulp],
        row_scaled_ulp=[float(x) for x in scaled],
        token_ids=ids,
    )


def assert_logits_equivalent(reference, observed, max_ulp: int = 0) -> np.ndarray:
    """Assert that two logit arrays are within ``max_ulp`` ULPs element-wise.

    In the style of ``numpy.testing.assert_array_max_ulp``.

    Parameters
    ----------
    reference, observed : ndarray
        Same shape and dtype (``float32``, ``float16`` or ``bfloat16``).
    max_ulp : int, optional
        Largest allowed ULP distance.  Default 0: equal values (``+0 == -0``
        and NaN == NaN; use ``compare_logits(...).bit_exact`` for bits).

    Returns
    -------
    ndarray of int64
        The element-wise ULP distances (:func:`~logitlab.numerics.ulp.ulp_distance`).

    Raises
    ------
    AssertionError
        If some distance exceeds ``max_ulp``; the message states the
        tolerance, the worst distance and where it is, with both values.
    InputError
        If shapes or dtypes differ.
    """
    __tracebackhide__ = True  # noqa: F841  (pytest hides this frame)
    dist = ulp_distance(reference, observed)
    if dist.size == 0:
        return dist
    worst = int(dist.max())
    if worst > max_ulp:
        ref = np.asarray(reference)
        obs = np.asarray(observed)
        at = np.unravel_index(int(dist.argmax()), dist.shape)
        n_bad = int(np.count_nonzero(dist > max_ulp))
        where = f"position {at[0]}, token {at[1]}" if len(at) == 2 else f"index {tuple(int(i) for i in at)}"
        raise AssertionError(
            f"Logits not equivalent to {max_ulp} ULP (max is {worst} ULP at {where}: "
            f"reference {float_hex(ref[at])} ({float_bits(ref[at])}), "
            f"observed {float_hex(obs[at])} ({float_bits(obs[at])})); "
            f"{n_bad} of {dist.size} entries exceed the tolerance"
        )
    return dist
