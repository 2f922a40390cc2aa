"""Compare two runs that returned only the top-k log-probabilities per position.

Servers (the ``openai`` engine: vLLM, SGLang, llama.cpp-based servers) return,
for each position, the k most likely tokens with their log-probabilities —
not the full vocabulary of logits. :func:`compare_topk` compares two such runs
and says, field by field, what the data can and cannot show:

Exact on the returned data
    bit-exactness of the returned entries (``bit-exact`` here means
    *bit-exact on the returned top-k*: every returned key, in the same order,
    with identical bits; entries outside the top-k were never seen), argmax
    agreement, top-k set agreement (for k up to the returned k), top1–top2
    margins (a log-probability difference equals the logit difference), the
    argmax flips and their margins.
Lower bounds of the full-vocabulary statistic
    ``max_abs_diff``, ``max_ulp``, ``max_scaled_ulp`` (taken over the tokens
    both runs returned), and the KL divergence (see :func:`kld_lower_bound`).
Not decidable
    a systematic offset: a constant added to every logit cancels in the
    softmax, so log-probabilities cannot show it; :func:`~logitlab.numerics.verdict.classify` never
    returns ``systematic-offset``.

Nothing here prints, logs or knows about engines.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from logitlab.engines.topk import Key, TopKRows, float64_bits as _bits64
from logitlab.errors import InputError
from logitlab.numerics.comparison import SCHEMA_VERSION, Comparison
from logitlab.numerics.ulp import float_hex

__all__ = ["TopKComparison", "compare_topk", "classify_topk", "kld_lower_bound", "SCHEMA_VERSION"]



_HIST_LABELS = ("0", "1", "2-4", "5-16", "17-256", ">256")
_HIST_EDGES = (0, 1, 4, 16, 256)


@dataclass(frozen=True, kw_only=True)
class TopKComparison(Comparison):
    """Result of :func:`compare_topk`. Field names follow
    :class:`~logitlab.numerics.compare.LogitComparison` so that reports read
    both; the meaning is restricted to the returned entries as stated here.

    Units: nats (log-probabilities) for values, differences and margins; ULPs
    of ``dtype`` for ULP fields. "Δ" is ``observed - reference``.

    Attributes
    ----------
    scope : str
        Always ``"top-k"``: the statistics cover the returned entries only.
    n_positions : int
        Positions of the run (compared or not).
    n_vocab : int
        Entries per position that were compared: the largest number of
        entries a row returned (not the vocabulary size, which is unknown).
    dtype : str
        ``"float32"`` when every returned value is a float32 number (most
        servers compute in float32), else ``"float64"``; ULPs are of this dtype.
    top_k : int
        k of the top-k set agreement (at most the returned k).
    positions_compared : list[int]
        Positions where both runs returned entries.
    positions_missing : list[int]
        Positions skipped because a run returned nothing there.
    differing_entries, differing_rows : int
        Exact, over the returned entries: reference entries that the observed
        run does not return with identical bits (a different value, or the
        key missing from its top-k; a row whose keys differ only in order
        counts 1), and the positions with any.
    max_abs_diff, mean_abs_diff, mean_diff, std_diff : float
        Over the keys both runs returned. ``max_abs_diff`` is a lower bound of
        the full-vocabulary max |Δ log-probability|.
    max_ulp, max_scaled_ulp : int, float
        Largest ULP distance and largest row max |Δ| in ULPs of the row's
        largest |reference value|, over shared keys: lower bounds.
    argmax_agreement, topk_agreement : float
        Exact: fraction of compared positions whose top-1 key, and whose
        top-``top_k`` key set, agree.
    kld : dict[str, float | None]
        Summary (``mean, max, p99_9, p99, p95, p90, median, p10, p5, p1, min``)
        of the per-position :func:`kld_lower_bound` (nats): every number is a
        lower bound of the corresponding KL(P_ref || P_obs) statistic's
        per-position values.
    kld_is_lower_bound : bool
        Always True (a reminder for readers of the JSON).
    exact, bounds, undecidable : list[str]
        Which statistics are exact on the returned top-k, which are lower
        bounds of their full-vocabulary meaning, and what cannot be decided.
    first_mismatch : dict or None
        First differing entry (position order, then reference rank):
        ``position, token_id, reference_hex, observed_hex, reference_bits,
        observed_bits, reference, observed, ulp``; a key absent from one run
        has hex ``"absent"`` and ``ulp`` None.
    flips : list[dict]
        One per compared position whose argmax differs, as in LogitComparison
        (``logit_*`` fields hold log-probabilities).
    row_* : list
        Per position, None where not compared (``row_differing`` 0).
    token_ids : list[int] or None
        The token fed at each position, if the caller gave it.
    """

    scope: str = "top-k"
    requested_k: int
    positions_compared: list
    positions_missing: list
    kld_is_lower_bound: bool
    exact: list
    bounds: list
    undecidable: list


# -- float helpers ------------------------------------------------------------
def _is_f32(x: float) -> bool:
    return math.isnan(x) or float(np.float32(x)) == x


def _ordered(x: float, dtype: str) -> int:
    if dtype == "float32":
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        sign, mag = bits >> 31, bits & 0x7FFFFFFF
    else:
        bits = _bits64(x)
        sign, mag = bits >> 63, bits & 0x7FFFFFFFFFFFFFFF
    return -mag if sign else mag


def _ulp(a: float, b: float, dtype: str) -> int | None:
    if math.isnan(a) or math.isnan(b):
        return 0 if math.isnan(a) and math.isnan(b) else None
    return abs(_ordered(a, dtype) - _ordered(b, dtype))


def _hex(x: float, dtype: str) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return float_hex(np.float32(x)) if dtype == "float32" else float(x).hex()


def _bits_hex(x: float, dtype: str) -> str:
    if dtype == "float32":
        return f"0x{struct.unpack('<I', struct.pack('<f', x))[0]:08x}"
    return f"0x{_bits64(x):016x}"


def _spacing(x: float, dtype: str) -> float:
    return float(np.spacing(np.float32(abs(x)))) if dtype == "float32" else float(np.spacing(abs(x)))


def _same(a: float, b: float) -> bool:
    return _bits64(a) == _bits64(b)


def kld_lower_bound(ref: Mapping[Key, float], obs: Mapping[Key, float]) -> float:
    """A lower bound of KL(P_ref || P_obs) from two top-k log-probability rows (nats).

    Parameters
    ----------
    ref, obs : mapping of key to log-probability
        The returned entries of one position of each run.

    Returns
    -------
    float
        ``KL`` of the two distributions coarse-grained onto the cells
        {each token both runs returned} ∪ {everything else}, ≥ 0; 0 when the
        rows are identical or share no token.

    Notes
    -----
    Merging outcomes never increases a KL divergence (the data-processing
    inequality; Cover & Thomas, *Elements of Information Theory*, 2nd ed.,
    Theorem 2.8.1 and §2.9), so the coarse-grained KL is a lower bound of the
    full-vocabulary KL. The "everything else" cell has mass ``1 - Σ p`` resp.
    ``1 - Σ q`` over the shared tokens; when rounding of the returned values
    leaves either at or below 1e-12, that cell is merged into the least
    likely shared token's cell (a coarser partition: still a lower bound).
    No upper bound exists without the tail: a token outside the observed
    top-k may have any probability below the observed k-th.
    """
    shared = [key for key in ref if key in obs]
    if not shared:
        return 0.0
    p = [math.exp(ref[key]) for key in shared]
    q = [math.exp(obs[key]) for key in shared]
    p_rest, q_rest = 1.0 - math.fsum(p), 1.0 - math.fsum(q)
    if p_rest <= 1e-12 or q_rest <= 1e-12:
        p[-1] += max(p_rest, 0.0)
        q[-1] += max(q_rest, 0.0)
    else:
        p.append(p_rest)
        q.append(q_rest)
    total = math.fsum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q) if pi > 0 and qi > 0)
    return max(total, 0.0)


def _summary(values: Sequence[float]) -> dict[str, float | None]:
    names = (("mean", None), ("max", 100.0), ("p99_9", 99.9), ("p99", 99.0), ("p95", 95.0), ("p90", 90.0),
             ("median", 50.0), ("p10", 10.0), ("p5", 5.0), ("p1", 1.0), ("min", 0.0))
    vals = np.sort(np.asarray([v for v in values if v is not None], dtype=np.float64))
    if vals.size == 0:
        return {name: None for name, _ in names}
    return {name: float(vals.mean()) if q is None else float(np.percentile(vals, q)) for name, q in names}


def _hist(distances: Iterable[int]) -> dict[str, int]:
    counts = dict.fromkeys(_HIST_LABELS, 0)
    for d in distances:
        index = next((i for i, edge in enumerate(_HIST_EDGES) if d <= edge), len(_HIST_EDGES))
        counts[_HIST_LABELS[index]] += 1
    return counts


def compare_topk(
    reference: TopKRows,
    observed: TopKRows,
    *,
    top_k: int = 5,
    token_ids: Sequence[int] | None = None,
) -> TopKComparison:
    """Compare two runs' top-k log-probabilities, position by position.

    Parameters
    ----------
    reference, observed : TopKRows
        Same number of positions. Keys are compared as given (ids or text).
    top_k : int, optional
        k of the top-k set agreement; capped per position at the number of
        entries both runs returned. Default 5.
    token_ids : sequence of int, optional
        The token fed at each position, stored for reports.

    Returns
    -------
    TopKComparison
        ``bool(result)`` is True iff bit-exact on the returned top-k.

    Raises
    ------
    InputError
        Different numbers of positions, ``top_k < 1``, or ``token_ids`` of the
        wrong length.

    Examples
    --------
    >>> a = TopKRows.from_mappings([None, {"x": -0.1, "y": -2.5}], k=2)
    >>> b = TopKRows.from_mappings([None, {"x": -0.1, "y": -2.5000002}], k=2)
    >>> c = compare_topk(a, b, top_k=1)
    >>> bool(c), c.differing_entries, c.positions_missing, c.argmax_agreement
    (False, 1, [0], 1.0)
    """
    n = reference.n_positions
    if observed.n_positions != n:
        raise InputError(f"top-k runs differ in length: reference {n} positions, observed {observed.n_positions}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InputError(f"top_k must be a positive integer, got {top_k!r}")
    ids = None if token_ids is None else [int(t) for t in token_ids]
    if ids is not None and len(ids) != n:
        raise InputError(f"token_ids has {len(ids)} entries, expected n_positions = {n}")

    every = [v for rows in (reference.values, observed.values) for row in rows if row for v in row]
    tally = _Tally(n, top_k, "float32" if all(_is_f32(v) for v in every) else "float64")
    for r in range(n):
        tally.add_row(r, reference.keys[r], reference.values[r], observed.keys[r], observed.values[r])
    return tally.result(min(reference.requested_k, observed.requested_k), ids)


_ROW_FIELDS = ("max_abs_diff", "mean_diff", "std_diff", "argmax_ref", "argmax_obs", "margin_ref", "margin_obs",
               "kth_gap_ref", "topk_agree", "kld", "max_ulp", "scaled_ulp", "topk_spread")


class _Tally:
    """What :func:`compare_topk` gathers position by position, and the comparison it makes of it."""

    def __init__(self, n: int, top_k: int, dtype: str):
        self.n, self.top_k, self.dtype = n, top_k, dtype
        self.rows: dict[str, list] = {name: [None] * n for name in _ROW_FIELDS}
        self.row_differing = [0] * n
        self.compared: list[int] = []
        self.missing: list[int] = []
        self.flips: list[dict] = []
        self.deltas: list[float] = []
        self.distances: list[int] = []
        self.first: dict | None = None
        self.nonfinite = {"nan_ref": 0, "nan_obs": 0, "inf_ref": 0, "inf_obs": 0, "mismatch": 0}
        self.width, self.k_used = 0, top_k

    def add_row(self, r: int, rk: Sequence, rv: Sequence[float], ok: Sequence, ov: Sequence[float]) -> None:
        """Position ``r``: reference keys and values ``rk, rv``, observed ``ok, ov`` (empty: not returned)."""
        for values, side in ((rv, "ref"), (ov, "obs")):
            for v in values or ():
                self.nonfinite["nan_" + side] += math.isnan(v)
                self.nonfinite["inf_" + side] += math.isinf(v)
        if not rk or not ok:
            self.missing.append(r)
            return
        self.compared.append(r)
        self.width = max(self.width, len(rk), len(ok))
        ref, obs = dict(zip(rk, rv)), dict(zip(ok, ov))
        shared = [key for key in rk if key in obs]
        differing = [key for key in shared if not _same(ref[key], obs[key])]
        only = [key for key in rk if key not in obs] + [key for key in ok if key not in ref]
        # reference entries the observed run does not return with the same bits (+1 if only the order differs)
        self.row_differing[r] = len(differing) + sum(key not in obs for key in rk) + (rk != ok and not differing
                                                                                        and not only)
        if self.row_differing[r] and self.first is None:
            self.first = self._mismatch(r, differing[0] if differing else only[0], ref, obs)
        self._differences(r, shared, ref, obs, rv)
        self._ranks(r, rk, rv, ok, ov, ref, obs)

    def _mismatch(self, r: int, key: Any, ref: Mapping, obs: Mapping) -> dict:
        a, b, dtype = ref.get(key), obs.get(key), self.dtype
        return {
            "position": r, "token_id": key,
            "reference_hex": "absent" if a is None else _hex(a, dtype),
            "observed_hex": "absent" if b is None else _hex(b, dtype),
            "reference_bits": "absent" if a is None else _bits_hex(a, dtype),
            "observed_bits": "absent" if b is None else _bits_hex(b, dtype),
            "reference": a, "observed": b,
            "ulp": None if a is None or b is None else _ulp(a, b, dtype),
        }

    def _differences(self, r: int, shared: list, ref: Mapping, obs: Mapping, rv: Sequence[float]) -> None:
        """Δ, ULP and non-finite statistics of position ``r`` over the keys both runs returned."""
        rows, dtype = self.rows, self.dtype
        row_deltas, row_ulps = [], []
        for key in shared:
            a, b = ref[key], obs[key]
            if math.isfinite(a) and math.isfinite(b):
                row_deltas.append(b - a)
            elif not _same(a, b):
                self.nonfinite["mismatch"] += 1
            d = _ulp(a, b, dtype)
            if d is not None:
                row_ulps.append(d)
        self.deltas.extend(row_deltas)
        self.distances.extend(row_ulps)
        if row_deltas:
            arr = np.asarray(row_deltas)
            rows["max_abs_diff"][r] = float(np.abs(arr).max())
            rows["mean_diff"][r] = float(arr.mean())
            rows["std_diff"][r] = float(arr.std())
            scale = max(abs(v) for v in rv if math.isfinite(v))
            rows["scaled_ulp"][r] = rows["max_abs_diff"][r] / _spacing(scale, dtype)
        else:
            rows["max_abs_diff"][r] = rows["mean_diff"][r] = rows["std_diff"][r] = rows["scaled_ulp"][r] = 0.0
        rows["max_ulp"][r] = max(row_ulps, default=0)

    def _ranks(self, r: int, rk: Sequence, rv: Sequence[float], ok: Sequence, ov: Sequence[float],
               ref: Mapping, obs: Mapping) -> None:
        """Argmax, margins, top-k agreement, KLD bound and top-k spread of position ``r``; its flip if any."""
        rows = self.rows
        rows["argmax_ref"][r], rows["argmax_obs"][r] = rk[0], ok[0]
        rows["margin_ref"][r] = rv[0] - rv[1] if len(rv) > 1 else None
        rows["margin_obs"][r] = ov[0] - ov[1] if len(ov) > 1 else None
        kk = min(self.top_k, len(rk), len(ok))
        self.k_used = min(self.k_used, kk)
        rows["topk_agree"][r] = set(rk[:kk]) == set(ok[:kk])
        rows["kth_gap_ref"][r] = rv[kk - 1] - rv[kk] if len(rv) > kk else None
        rows["kld"][r] = kld_lower_bound(ref, obs)
        top_deltas = [obs[key] - ref[key] for key in dict.fromkeys([*rk[:kk], *ok[:kk]])
                      if key in ref and key in obs and math.isfinite(ref[key]) and math.isfinite(obs[key])]
        rows["topk_spread"][r] = max(top_deltas) - min(top_deltas) if top_deltas else 0.0
        if rk[0] != ok[0]:
            self.flips.append({
                "position": r, "token_ref": rk[0], "token_obs": ok[0],
                "logit_ref_top": rv[0], "logit_obs_top": ov[0],
                "margin_ref": rows["margin_ref"][r], "margin_obs": rows["margin_obs"][r],
                "topk_ref": list(rk[:kk]), "topk_obs": list(ok[:kk]),
            })

    def result(self, requested_k: int, ids: list[int] | None) -> TopKComparison:
        rows, compared, nonfinite, distances = self.rows, self.compared, self.nonfinite, self.distances
        arr = np.asarray(self.deltas, dtype=np.float64)
        n_cmp = len(compared)
        agree = [rows["topk_agree"][r] for r in compared]
        return TopKComparison(
            scope="top-k",
            n_positions=self.n,
            n_vocab=self.width,
            dtype=self.dtype,
            top_k=int(self.k_used if compared else self.top_k),
            requested_k=requested_k,
            positions_compared=compared,
            positions_missing=self.missing,
            differing_entries=int(sum(self.row_differing)),
            differing_rows=int(sum(1 for d in self.row_differing if d)),
            max_abs_diff=float(np.abs(arr).max()) if arr.size else 0.0,
            mean_abs_diff=float(np.abs(arr).mean()) if arr.size else 0.0,
            mean_diff=float(arr.mean()) if arr.size else 0.0,
            std_diff=float(arr.std()) if arr.size else 0.0,
            max_ulp=int(max(distances, default=0)),
            max_scaled_ulp=float(max((rows["scaled_ulp"][r] for r in compared), default=0.0)),
            ulp_histogram=_hist(distances),
            argmax_agreement=float(np.mean([rows["argmax_ref"][r] == rows["argmax_obs"][r] for r in compared]))
            if n_cmp else 1.0,
            topk_agreement=float(np.mean(agree)) if n_cmp else 1.0,
            kld=_summary([rows["kld"][r] for r in compared]),
            kld_is_lower_bound=True,
            nan_ref=nonfinite["nan_ref"], nan_obs=nonfinite["nan_obs"],
            inf_ref=nonfinite["inf_ref"], inf_obs=nonfinite["inf_obs"],
            nonfinite_mismatch=nonfinite["mismatch"],
            first_mismatch=self.first,
            flips=self.flips,
            row_differing=self.row_differing,
            row_max_abs_diff=rows["max_abs_diff"], row_mean_diff=rows["mean_diff"], row_std_diff=rows["std_diff"],
            row_argmax_ref=rows["argmax_ref"], row_argmax_obs=rows["argmax_obs"],
            row_margin_ref=rows["margin_ref"], row_margin_obs=rows["margin_obs"],
            row_kth_gap_ref=rows["kth_gap_ref"], row_topk_agree=rows["topk_agree"], row_kld=rows["kld"],
            row_max_ulp=rows["max_ulp"], row_scaled_ulp=rows["scaled_ulp"], row_topk_spread=rows["topk_spread"],
            exact=["differing_entries", "differing_rows", "first_mismatch", "argmax_agreement", "topk_agreement",
                   "row_margin_ref", "row_margin_obs", "row_kth_gap_ref", "flips"],
            bounds=["max_abs_diff", "max_ulp", "max_scaled_ulp", "kld", "row_topk_spread"],
            undecidable=["systematic offset of the logits (cancels in the softmax)",
                         "differences outside the returned top-k"],
            token_ids=ids,
        )


def classify_topk(comparison: TopKComparison, thresholds: Any = None) -> Any:
    """The one-word verdict for top-k-only data: :func:`~logitlab.numerics.verdict.classify`, checking the type.

    Kept for callers that hold a :class:`TopKComparison` and want the type
    checked; ``classify`` itself takes either kind of comparison.

    ``classify`` reads the comparison's scope itself and applies the rules
    top-k data can decide (:mod:`logitlab.numerics.verdict_rules`):

    - **bit-exact** means bit-exact on the returned top-k (nothing else was seen);
    - a top-k set change whose reference k-th/(k+1)-th gap cannot be seen (the
      source returned only k entries) is **divergent**;
    - ``systematic-offset`` is never returned (a constant logit shift is
      invisible in log-probabilities), nor the localized-change rule (it needs
      every entry of a row);
    - max |Δ|, ULPs, spreads and KLD are lower bounds of their full-vocabulary values.

    ``thresholds`` is a :class:`~logitlab.numerics.verdict.Thresholds` (default
    ``Thresholds()``); the result is a :class:`~logitlab.numerics.verdict.Verdict`.
    Raises :class:`~logitlab.errors.InputError` when ``comparison`` is not a
    :class:`TopKComparison`.
    """
    from logitlab.numerics.verdict import Thresholds, classify

    if not isinstance(comparison, TopKComparison):
        raise InputError(f"classify_topk needs a TopKComparison, got {type(comparison).__name__}")
    return classify(comparison, thresholds or Thresholds())
