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
from typing import Callable, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.numerics import _kernel as K
from logitlab.numerics.comparison import SCHEMA_VERSION, Comparison
from logitlab.numerics.ulp import check_pair, float_bits, float_hex, ulp_distance

__all__ = [
    "check_top_k",
    "LogitComparison",
    "compare_logits",
    "compare_blocks",
    "merge_comparisons",
    "SCHEMA_VERSION",
    "HISTOGRAM_BINS",
    "KLD_STATS",
]


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


@dataclass(frozen=True, kw_only=True)
class LogitComparison(Comparison):
    """Result of :func:`compare_logits`: every entry of two ``(n_positions, n_vocab)`` arrays.

    The fields are those of :class:`~logitlab.numerics.comparison.Comparison`
    (``scope`` ``"full"``), with these full-vocabulary meanings:
    ``max_abs_diff`` … ``std_diff`` are over all entries except those where one
    side is non-finite and the bits differ (counted in ``nonfinite_mismatch``;
    equal entries, equal infinities and NaN/NaN pairs count as Δ = 0);
    ``max_ulp`` (:func:`~logitlab.numerics.ulp.ulp_distance`) is the smallest
    ``max_ulp`` that :func:`~logitlab.numerics.assertions.assert_logits_equivalent` passes; element-wise ULP
    distances explode for logits near zero, ``max_scaled_ulp`` does not;
    ``row_kth_gap_ref`` is None when ``n_vocab <= top_k``. Infinities stay
    floats (Python's ``json`` writes them as ``Infinity``).
    """


def merge_comparisons(parts: Sequence[LogitComparison]) -> LogitComparison:
    """Concatenate comparisons of the same vocabulary (rows of all prompts) into one.

    Totals are recomputed from the per-row fields: sums, maxima, entry-weighted
    means, the pooled std of Δ, KLD percentiles over all rows. Positions of
    flips and of the first mismatch are offset to the concatenated rows.

    Raises:
        InputError: no parts, or vocabularies / top-k differ.
    """
    if not parts:
        raise InputError("merge_comparisons needs at least one comparison")
    first = parts[0]
    if any(p.n_vocab != first.n_vocab or p.top_k != first.top_k for p in parts):
        raise InputError("merge_comparisons: comparisons differ in n_vocab or top_k")
    if len(parts) == 1:
        return first
    n = sum(p.n_positions for p in parts)
    w = [p.n_positions / n for p in parts]
    mean = sum(wi * p.mean_diff for wi, p in zip(w, parts))
    second = sum(wi * (p.std_diff ** 2 + p.mean_diff ** 2) for wi, p in zip(w, parts))
    flips, first_mismatch, offset = [], None, 0
    for p in parts:
        flips += [{**f, "position": f["position"] + offset} for f in p.flips]
        if first_mismatch is None and p.first_mismatch is not None:
            first_mismatch = {**p.first_mismatch, "position": p.first_mismatch["position"] + offset}
        offset += p.n_positions
    rows: dict[str, list] = {}
    for f in dataclasses.fields(LogitComparison):
        if f.name.startswith("row_"):
            values = [getattr(p, f.name) for p in parts]  # an optional row field may be None (older results)
            rows[f.name] = None if any(v is None for v in values) else [x for v in values for x in v]
    kld = np.array([x for x in rows["row_kld"] if x is not None], dtype=np.float64)
    kld_summary = {name: (float(kld.mean()) if q is None else float(np.percentile(kld, q))) if kld.size else None
                   for name, q in KLD_STATS}
    ids = None
    if all(p.token_ids is not None for p in parts):
        ids = [t for p in parts for t in p.token_ids]
    return LogitComparison(
        n_positions=n, n_vocab=first.n_vocab, dtype=first.dtype, top_k=first.top_k,
        differing_entries=sum(p.differing_entries for p in parts),
        differing_rows=sum(p.differing_rows for p in parts),
        max_abs_diff=max(p.max_abs_diff for p in parts),
        mean_abs_diff=sum(wi * p.mean_abs_diff for wi, p in zip(w, parts)),
        mean_diff=mean, std_diff=max(second - mean * mean, 0.0) ** 0.5,
        max_ulp=max(p.max_ulp for p in parts), max_scaled_ulp=max(p.max_scaled_ulp for p in parts),
        ulp_histogram={key: sum(p.ulp_histogram[key] for p in parts) for key in first.ulp_histogram},
        argmax_agreement=sum(wi * p.argmax_agreement for wi, p in zip(w, parts)),
        topk_agreement=sum(wi * p.topk_agreement for wi, p in zip(w, parts)),
        kld=kld_summary,
        nan_ref=sum(p.nan_ref for p in parts), nan_obs=sum(p.nan_obs for p in parts),
        inf_ref=sum(p.inf_ref for p in parts), inf_obs=sum(p.inf_obs for p in parts),
        nonfinite_mismatch=sum(p.nonfinite_mismatch for p in parts),
        first_mismatch=first_mismatch, flips=flips, token_ids=ids, **rows,
    )


def check_top_k(top_k: int, n_vocab: int | None) -> None:
    """Refuse a top-k that reaches the whole vocabulary, before any run (``--top-k``).

    ``compare_logits`` clamps ``top_k`` to the vocabulary, so such a k compares the full sorted rows
    (slow: a 49,152-token set per position) and says nothing a full-vocabulary statistic does not.

    Raises:
        InputError: ``top_k >= n_vocab`` (``n_vocab`` None or 0: unknown, as for a server that returns
            top-k log-probabilities only; nothing is checked).
    """
    if n_vocab and top_k >= n_vocab:
        raise InputError(f"--top-k {top_k} reaches the vocabulary of {n_vocab} tokens: the top-k set would be "
                         f"the whole row; give a k below {n_vocab} (default 5)")


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
    against an exact mpmath evaluation), also for ULP-level differences where a
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
    return _compare(ref, lambda start, stop: obs[start:stop], top_k, chunk_rows, ids, workers)


def compare_blocks(
    reference,
    observed_rows: Callable[[int, int], np.ndarray],
    *,
    top_k: int = 5,
    chunk_rows: int | None = None,
    token_ids: Sequence[int] | None = None,
    workers: int | None = None,
) -> LogitComparison:
    """:func:`compare_logits` of ``reference`` and an observed array that is never made whole: its rows are
    asked for one block at a time.

    Parameters
    ----------
    reference : ndarray, shape (n_positions, n_vocab)
        As for :func:`compare_logits`.
    observed_rows : callable
        ``observed_rows(start, stop)`` returns rows ``start:stop`` of the observed array: shape
        ``(stop - start, n_vocab)``, the reference's dtype. Called once per block of ``chunk_rows`` rows (from
        several threads when ``workers`` > 1), so a caller that plants a fault into one row, or shifts every
        row, holds one block of planted rows, not a planted copy of the run.
    top_k, chunk_rows, token_ids, workers
        As for :func:`compare_logits`.

    Returns
    -------
    LogitComparison
        Bit for bit the comparison :func:`compare_logits` returns for the blocks put together: every statistic is
        computed per row, in the same order, from the rows alone.

    Raises
    ------
    InputError
        As for :func:`compare_logits`; a block of another shape or dtype than the reference's rows.
    """
    ref, _, ids = _validate(reference, reference, top_k, chunk_rows, token_ids, workers)

    def rows(start: int, stop: int) -> np.ndarray:
        block = np.asarray(observed_rows(start, stop))
        if block.dtype != ref.dtype or block.shape != (stop - start, ref.shape[1]):
            raise InputError(f"observed rows {start}:{stop} have shape {block.shape} and dtype {block.dtype}; "
                             f"expected {(stop - start, ref.shape[1])} and {ref.dtype}")
        return block

    return _compare(ref, rows, top_k, chunk_rows, ids, workers)


def _compare(ref: np.ndarray, observed_rows: Callable[[int, int], np.ndarray], top_k, chunk_rows, ids,
             workers) -> LogitComparison:
    """The comparison, chunk by chunk: each chunk's kernel results and the per-row facts that need its values
    (top-k spread, first mismatch), so that no step holds more than a chunk of either array."""
    n, v = ref.shape
    top_k = min(int(top_k), v)
    kk = min(max(top_k, 2) + 1, v)  # reference top list: k+1 for the k-th gap, 3 for margins
    k_eff = min(top_k, kk)
    rows = int(chunk_rows) if chunk_rows is not None else max(1, _CHUNK_ELEMENTS // v)
    rows = min(rows, n)
    starts = list(range(0, n, rows))
    nworkers = min(int(workers) if workers is not None else min(os.cpu_count() or 1, _MAX_WORKERS), len(starts))

    def run(start: int) -> tuple[K.ChunkResult, np.ndarray, dict | None]:
        a = np.ascontiguousarray(ref[start:start + rows])
        b = np.ascontiguousarray(observed_rows(start, min(start + rows, n)))
        chunk = K.fast_chunk(a, b, kk)
        spread = _topk_spread(a, b, chunk.top_ref[:, :k_eff], chunk.top_obs[:, :k_eff], chunk.differing)
        first = _first_mismatch(a, b, chunk.differing)
        if first is not None:
            first["position"] += start
        return chunk, spread, first

    if nworkers > 1:
        with ThreadPoolExecutor(max_workers=nworkers) as pool:
            parts = list(pool.map(run, starts))
    else:
        parts = [run(s) for s in starts]
    chunks = [chunk for chunk, _, _ in parts]
    spread = np.concatenate([spread for _, spread, _ in parts])
    first = next((first for _, _, first in parts if first is not None), None)
    return _assemble(n, v, ref.dtype, chunks, spread, first, top_k, kk, ids)


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


#: The kernel's per-row arrays (:class:`~logitlab.numerics._kernel.ChunkResult`), concatenated over the chunks.
_ROW_ARRAYS = ("differing", "n_used", "sum_diff", "sum_abs", "m2", "max_diff", "min_diff", "max_abs", "max_ulp",
               "scaled_ulp", "kld", "p_top_ref", "top_ref", "topv_ref", "top_obs", "topv_obs")
#: The kernel's per-row counts of non-finite entries, summed over all rows.
_NONFINITE_COUNTS = ("nan_ref", "nan_obs", "inf_ref", "inf_obs", "nonfinite_mismatch")


def _gather(chunks) -> dict[str, np.ndarray]:
    """The chunks' results as whole-run arrays: ``(n_positions, ...)`` per row, plus ``hist``."""
    rows = {name: np.concatenate([getattr(c, name) for c in chunks], axis=0) for name in _ROW_ARRAYS}
    rows["hist"] = np.sum([c.hist for c in chunks], axis=0)
    return rows


def _moments(r: dict[str, np.ndarray]) -> dict:
    """Per-row mean and sd of Δ and the farthest entry in row sds; the mean and sd of Δ over every used entry."""
    n_used, sum_diff, m2 = r["n_used"], r["sum_diff"], r["m2"]
    safe_n = np.maximum(n_used, 1)
    row_mean = np.where(n_used > 0, sum_diff / safe_n, 0.0)
    row_std = np.sqrt(np.maximum(m2, 0.0) / safe_n)
    with np.errstate(invalid="ignore", divide="ignore"):
        far = np.maximum(r["max_diff"] - row_mean, row_mean - r["min_diff"])
        delta_z = np.where((r["differing"] > 0) & (row_std > 0), far / row_std, np.nan)
    total = int(n_used.sum())
    mean = float(sum_diff.sum() / total) if total else 0.0
    m2_total = float(np.sum(m2 + n_used * (row_mean - mean) ** 2))
    std = math.sqrt(max(m2_total, 0.0) / total) if total else 0.0
    return {"row_mean": row_mean, "row_std": row_std, "delta_z": delta_z, "total": total, "mean": mean, "std": std}


def _gap(values: np.ndarray, i: int) -> np.ndarray:
    """Per row, sorted top values ``i`` minus ``i + 1`` (0 for a tie, the same infinity included); NaN without
    column ``i + 1``."""
    if values.shape[1] < i + 2:
        return np.full(values.shape[0], np.nan)
    with np.errstate(invalid="ignore"):
        a, b = values[:, i], values[:, i + 1]
        return np.where(a == b, 0.0, a - b)


def _flips(r: dict[str, np.ndarray], margin_ref: np.ndarray, margin_obs: np.ndarray, k_eff: int) -> list[dict]:
    """One record per position whose argmax differs: the two tokens, their logits, margins and top-k lists."""
    top_ref, top_obs, topv_ref, topv_obs = r["top_ref"], r["top_obs"], r["topv_ref"], r["topv_obs"]
    return [{
        "position": int(p),
        "token_ref": int(top_ref[p, 0]),
        "token_obs": int(top_obs[p, 0]),
        "logit_ref_top": _f(topv_ref[p, 0]),
        "logit_obs_top": _f(topv_obs[p, 0]),
        "margin_ref": _f(margin_ref[p]),
        "margin_obs": _f(margin_obs[p]),
        "topk_ref": [int(t) for t in top_ref[p, :k_eff]],
        "topk_obs": [int(t) for t in top_obs[p, :k_eff]],
    } for p in np.flatnonzero(top_ref[:, 0] != top_obs[:, 0])]


def _first_mismatch(ref: np.ndarray, obs: np.ndarray, differing: np.ndarray) -> dict | None:
    """The first differing entry in row-major order: position, token id, both values (hex, bits, float), ULPs."""
    diff_rows = np.flatnonzero(differing)
    if not diff_rows.size:
        return None
    pos = int(diff_rows[0])
    col = K.first_differing_column(ref[pos], obs[pos])
    rv, ov = ref[pos, col], obs[pos, col]
    return {
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


def _assemble(n, v, dtype, chunks, spread, first_mismatch, top_k, kk, ids) -> LogitComparison:
    """The comparison of two ``(n, v)`` arrays of ``dtype`` from the kernel's chunk results, the per-row top-k
    spread and the first mismatch."""
    r = _gather(chunks)
    m = _moments(r)
    differing, max_abs, max_ulp, scaled = r["differing"], r["max_abs"], r["max_ulp"], r["scaled_ulp"]
    top_ref, top_obs = r["top_ref"], r["top_obs"]
    margin_ref, margin_obs = _gap(r["topv_ref"], 0), _gap(r["topv_obs"], 0)
    kth_gap = _gap(r["topv_ref"], top_k - 1) if kk > top_k else np.full(n, np.nan)
    k_eff = min(top_k, kk)
    topk_agree = (np.sort(top_ref[:, :k_eff], axis=1) == np.sort(top_obs[:, :k_eff], axis=1)).all(axis=1)
    arg_ref, arg_obs = top_ref[:, 0], top_obs[:, 0]
    nonfinite = {name: int(sum(getattr(c, name).sum() for c in chunks)) for name in _NONFINITE_COUNTS}
    return LogitComparison(
        n_positions=int(n),
        n_vocab=int(v),
        dtype=str(dtype),
        top_k=int(top_k),
        differing_entries=int(differing.sum()),
        differing_rows=int(np.count_nonzero(differing)),
        max_abs_diff=float(max_abs.max()),
        mean_abs_diff=float(r["sum_abs"].sum() / m["total"]) if m["total"] else 0.0,
        mean_diff=m["mean"],
        std_diff=m["std"],
        max_ulp=int(max_ulp.max()),
        max_scaled_ulp=float(scaled.max()),
        ulp_histogram={label: int(c) for label, c in zip(HISTOGRAM_BINS, r["hist"])},
        argmax_agreement=float(np.mean(arg_ref == arg_obs)),
        topk_agreement=float(np.mean(topk_agree)),
        kld=_kld_summary(r["kld"]),
        **nonfinite,
        first_mismatch=first_mismatch,
        flips=_flips(r, margin_ref, margin_obs, k_eff),
        row_differing=[int(x) for x in differing],
        row_max_abs_diff=[float(x) for x in max_abs],
        row_mean_diff=[float(x) for x in m["row_mean"]],
        row_std_diff=[float(x) for x in m["row_std"]],
        row_argmax_ref=[int(x) for x in arg_ref],
        row_argmax_obs=[int(x) for x in arg_obs],
        row_margin_ref=[_f(x) for x in margin_ref],
        row_margin_obs=[_f(x) for x in margin_obs],
        row_kth_gap_ref=[_f(x) for x in kth_gap],
        row_topk_agree=[bool(x) for x in topk_agree],
        row_kld=[_f(x) for x in r["kld"]],
        row_max_ulp=[int(x) for x in max_ulp],
        row_scaled_ulp=[float(x) for x in scaled],
        row_top1_prob_ref=[_f(x) for x in r["p_top_ref"]],
        row_topk_spread=[_f(x) for x in spread],
        row_delta_z=[_f(x) for x in m["delta_z"]],
        token_ids=ids,
    )


def _topk_spread(ref, obs, top_ref, top_obs, differing) -> np.ndarray:
    """Per row, max Δ − min Δ over top-k(ref) ∪ top-k(obs) (float64; 0 for identical rows, NaN if undefined).

    A gather of 2k entries per row: the kernel already found both top-k lists.
    Entries equal on both sides (the same infinity included) have Δ = 0.
    """
    n = ref.shape[0]
    out = np.zeros(n, np.float64)
    rows = np.flatnonzero(differing)
    if rows.size == 0:
        return out
    idx = np.concatenate([top_ref[rows], top_obs[rows]], axis=1)
    valid = idx >= 0
    idx = np.where(valid, idx, 0)
    a = ref[rows[:, None], idx].astype(np.float64)
    b = obs[rows[:, None], idx].astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.where(a == b, 0.0, b - a)
    d = np.where(valid, d, 0.0)
    with np.errstate(invalid="ignore"):
        out[rows] = d.max(axis=1) - d.min(axis=1)
    out[rows[np.isnan(d).any(axis=1)]] = np.nan
    return out

