"""llama.cpp's KL-divergence statistics, computed as ``llama-perplexity --kl-divergence`` computes them.

``llama-perplexity --kl-divergence-base FILE`` stores, for every scored
position, the base model's log-probabilities over the whole vocabulary,
quantised to 16 bits; ``--kl-divergence`` then runs another model (or build,
or option) on the same tokens and prints PPL(Q) and PPL(base), their ratio,
the mean KL divergence with its standard error and percentiles, the change
of the probability of the next token (Δp) and the "same top" rate. This
module holds that arithmetic, so any engine's logits can be judged against a
file llama.cpp wrote, and a file llama.cpp can read can be written from any
engine's logits:

- :func:`quantize_log_probs`: one row of logits to llama.cpp's 16-bit row
  (``log_softmax(n_vocab, logits, uint16_t *, tok)`` in
  ``tools/perplexity/perplexity.cpp``);
- :func:`dequantize_log_probs`: a 16-bit row back to log-probabilities;
- :func:`kld_rows`: per position, the KL divergence, the NLL of both sides,
  Δp and whether the top token agrees (``log_softmax(..., kl_divergence_result &)``);
- :func:`kld_statistics`: the summary ``kl_divergence()`` prints.

All formulas and their float32/float64 mix follow the vendored
``tools/perplexity/perplexity.cpp`` of the llama.cpp release that
llama-cpp-python 0.3.x ships; only the order of the float64 sums differs
(llama.cpp sums on several threads in no fixed order). ``expf`` is numpy's
float32 ``exp`` here, glibc's there: the two may differ in the last bit.

Nothing here prints, reads files or knows about engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from logitlab.errors import InputError

__all__ = [
    "LOG_PROB_RANGE",
    "KLD_PERCENTILES",
    "DP_PERCENTILES",
    "row_width",
    "quantize_log_probs",
    "dequantize_log_probs",
    "KldRows",
    "kld_rows",
    "LlamaCppKldStats",
    "kld_statistics",
]

#: Log-probabilities more than this many nats below the row's maximum are stored as the
#: row's floor (llama.cpp: ``min_logit = max(min_logit, max_logit - 16)``).
LOG_PROB_RANGE = 16.0
#: (key, fraction) of the KLD percentiles llama-perplexity prints, in its order.
KLD_PERCENTILES: tuple[tuple[str, float], ...] = (
    ("max", 1.0), ("p99_9", 0.999), ("p99", 0.99), ("p95", 0.95), ("p90", 0.90), ("median", 0.5),
    ("p10", 0.10), ("p5", 0.05), ("p1", 0.01), ("p0_1", 0.001), ("min", 0.0),
)
#: (key, fraction) of the Δp percentiles llama-perplexity prints, in its order.
DP_PERCENTILES: tuple[tuple[str, float], ...] = (
    ("max", 1.0), ("p99_9", 0.999), ("p99", 0.99), ("p95", 0.95), ("p90", 0.90), ("p75", 0.75),
    ("median", 0.5), ("p25", 0.25), ("p10", 0.10), ("p5", 0.05), ("p1", 0.01), ("p0_1", 0.001), ("min", 0.0),
)

_F = np.float32


def row_width(n_vocab: int) -> int:
    """uint16 entries per stored row: 4 (two float32 header values) + ``n_vocab`` rounded up to even.

    llama.cpp: ``nv = 2*((n_vocab + 1)/2) + 4``.
    """
    return 2 * ((int(n_vocab) + 1) // 2) + 4


def _check_logits(logits: Any, what: str = "logits") -> np.ndarray:
    array = np.asarray(logits)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] < 2:
        raise InputError(f"{what} must have shape (n_positions, n_vocab) with n_vocab >= 2, got {array.shape}")
    if array.dtype != np.float32:
        raise InputError(f"{what} must be float32 (llama.cpp's logits), got {array.dtype}")
    if not np.isfinite(array).all():
        raise InputError(f"{what} hold NaN or infinite values: llama.cpp's statistics are undefined for them")
    return array


def _sum_exp(logits: np.ndarray, max_logit: np.ndarray) -> np.ndarray:
    """Per row ``Σ expf(logit - max)``: float32 terms summed in float64, as llama.cpp does."""
    return np.exp(logits - max_logit[:, None]).sum(axis=1, dtype=np.float64)


def quantize_log_probs(logits: Any) -> np.ndarray:
    """Rows of logits as llama.cpp's ``--kl-divergence-base`` file stores them.

    Parameters
    ----------
    logits : ndarray, shape (n_positions, n_vocab), float32
        The base model's logits at the scored positions.

    Returns
    -------
    ndarray, shape (n_positions, row_width(n_vocab)), uint16
        Per row: entries 0-1 hold ``scale`` and entries 2-3 ``min_log_prob``
        (two little-endian float32), entries 4.. the vocabulary's
        ``round((logit - min_logit) / scale)``, 0 at or below ``min_logit``;
        the padding entry (odd ``n_vocab``) is 0.

    Raises
    ------
    InputError
        Not a 2-D float32 array, or NaN/inf values.

    Notes
    -----
    llama.cpp (``tools/perplexity/perplexity.cpp``, ``log_softmax`` with a
    ``uint16_t *``), in float32 except the float64 sum::

        min_logit    = max(min(row), max(row) - 16)
        log_sum_exp  = (float) log(Σ expf(row - max(row)))
        min_log_prob = min_logit - max_logit - log_sum_exp
        scale        = (max_logit - min_logit) / 65535
        q_i          = nearest_int((row_i - min_logit) / scale)    if row_i > min_logit, else 0

    so that ``log p_i ≈ scale * q_i + min_log_prob`` with a step of at most
    16/65535 ≈ 2.4e-4 nats; log-probabilities below the maximum minus 16 are
    stored as ``min_log_prob``. A row whose values are all equal has scale 0
    and stores zeros.
    """
    x = _check_logits(logits)
    n, v = x.shape
    max_logit = x.max(axis=1)
    min_logit = np.maximum(x.min(axis=1), max_logit - _F(LOG_PROB_RANGE))
    log_sum_exp = np.log(_sum_exp(x, max_logit)).astype(_F)
    min_log_prob = (min_logit - max_logit) - log_sum_exp
    scale = (max_logit - min_logit) / _F(65535)
    out = np.zeros((n, row_width(v)), dtype=np.uint16)
    header = out[:, :4].view(np.float32)  # two float32 per row, little-endian on every platform llama.cpp runs
    header[:, 0] = scale
    header[:, 1] = min_log_prob
    with np.errstate(divide="ignore"):
        inv_scale = np.where(scale > 0, _F(1) / scale, _F(0)).astype(_F)
    scaled = inv_scale[:, None] * (x - min_logit[:, None])
    q = np.rint(scaled).astype(np.int64)  # nearest_int: round half to even in the float adder, as rint
    q = np.where(x > min_logit[:, None], q, 0)
    out[:, 4:4 + v] = np.clip(q, 0, 65535).astype(np.uint16)
    out[scale == 0, 4:] = 0
    return out


def _header(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    head = np.ascontiguousarray(rows[:, :4]).view(np.float32)
    return head[:, 0].copy(), head[:, 1].copy()


def dequantize_log_probs(rows: Any, n_vocab: int) -> np.ndarray:
    """Log-probabilities of 16-bit rows: ``scale * q + min_log_prob``, float32, shape (n_positions, n_vocab).

    Raises
    ------
    InputError
        ``rows`` is not 2-D uint16 of width :func:`row_width` (``n_vocab``).
    """
    rows = _check_rows(rows, n_vocab)
    scale, min_log_prob = _header(rows)
    return scale[:, None] * rows[:, 4:4 + n_vocab].astype(_F) + min_log_prob[:, None]


def _check_rows(rows: Any, n_vocab: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.dtype != np.uint16 or rows.ndim != 2 or rows.shape[1] != row_width(n_vocab):
        raise InputError(f"16-bit log-probability rows must be uint16 of shape (n, {row_width(n_vocab)}) for a "
                         f"vocabulary of {n_vocab}, got {rows.dtype} {rows.shape}")
    return rows


@dataclass(frozen=True)
class KldRows:
    """Per-position values of :func:`kld_rows` (all arrays of length n_positions).

    Attributes
    ----------
    kld : ndarray of float32
        KL(P_base || P_obs) in nats over the tokens whose base log-probability
        is above -16 (llama.cpp leaves the rest out); may be slightly negative
        from the 16-bit rounding of the base.
    nll, nll_base : ndarray of float32
        Negative log-likelihood of the next token under the observed logits and under the base rows (nats).
    p_diff : ndarray of float32
        ``exp(-nll) - exp(-nll_base)``: the change of the next token's probability.
    same_top : ndarray of bool
        The observed argmax equals the base row's argmax (first index on ties, both sides).
    """

    kld: np.ndarray
    nll: np.ndarray
    nll_base: np.ndarray
    p_diff: np.ndarray
    same_top: np.ndarray


def kld_rows(base_rows: Any, logits: Any, next_tokens: Sequence[int]) -> KldRows:
    """Per position: llama.cpp's KLD, NLL of both sides, Δp and same-top, against a 16-bit base.

    Parameters
    ----------
    base_rows : ndarray, shape (n_positions, row_width(n_vocab)), uint16
        The base rows, as :func:`quantize_log_probs` makes them or a
        ``--kl-divergence-base`` file holds them.
    logits : ndarray, shape (n_positions, n_vocab), float32
        The observed logits at the same positions.
    next_tokens : sequence of int, length n_positions
        The token that follows each position (the one whose NLL is scored).

    Returns
    -------
    KldRows

    Raises
    ------
    InputError
        Shapes that do not fit each other, non-finite logits, or a token id
        outside the vocabulary.

    Notes
    -----
    llama.cpp (``tools/perplexity/perplexity.cpp``, ``log_softmax`` with a
    ``kl_divergence_result &``), float32 except the float64 sums::

        lse      = max(row) + (float) log(Σ expf(row - max(row)))
        nll      = lse - row[tok]
        nll_base = -(scale * q[tok] + min_log_prob)
        KLD      = Σ_{i: b_i > -16} expf(b_i) * (b_i - row_i + lse),   b_i = scale * q_i + min_log_prob
        Δp       = expf(-nll) - expf(-nll_base)
    """
    x = _check_logits(logits)
    n, v = x.shape
    rows = _check_rows(base_rows, v)
    if rows.shape[0] != n:
        raise InputError(f"{rows.shape[0]} base rows for {n} rows of logits")
    tok = np.asarray(next_tokens, dtype=np.int64)
    if tok.shape != (n,):
        raise InputError(f"next_tokens has {tok.size} entries, expected {n}")
    if n and (tok.min() < 0 or tok.max() >= v):
        raise InputError(f"a next token id is outside the vocabulary of {v}")
    idx = np.arange(n)
    max_logit = x.max(axis=1)
    imax = x.argmax(axis=1)
    log_sum_exp = np.log(_sum_exp(x, max_logit)).astype(_F)
    nll = (max_logit + log_sum_exp) - x[idx, tok]
    scale, min_log_prob = _header(rows)
    base = scale[:, None] * rows[:, 4:4 + v].astype(_F) + min_log_prob[:, None]
    nll_base = -base[idx, tok]
    lse = max_logit + log_sum_exp
    keep = base > _F(-LOG_PROB_RANGE)
    terms = np.exp(np.where(keep, base, _F(0))) * ((base - x) + lse[:, None])
    kld = np.where(keep, terms, _F(0)).sum(axis=1, dtype=np.float64).astype(_F)
    imax_base = base.argmax(axis=1)
    p_diff = np.exp(-nll) - np.exp(-nll_base)
    return KldRows(kld=kld, nll=nll.astype(_F), nll_base=nll_base.astype(_F), p_diff=p_diff.astype(_F),
                   same_top=imax == imax_base)


def _mean_and_uncertainty(total: float, total2: float, count: int) -> tuple[float, float]:
    """llama.cpp's ``mean_and_uncertainty``: mean and its standard error (0 with 10 values or fewer)."""
    if count < 1:
        return 0.0, 0.0
    mean = float(total) / count
    var = float(total2) / count - mean * mean
    return mean, math.sqrt(var / (count - 1)) if var > 0 and count > 10 else 0.0


def _percentile(sorted_values: np.ndarray, fraction: float) -> float:
    """llama.cpp's ``percentile`` lambda: linear interpolation in float32 at ``fraction * (n - 1)``."""
    if fraction <= 0:
        return float(sorted_values[0])
    if fraction >= 1:
        return float(sorted_values[-1])
    p = _F(fraction) * _F(sorted_values.size - 1)
    ip = int(p)
    p = _F(p - _F(ip))
    hi = min(ip + 1, sorted_values.size - 1)
    return float((_F(1) - p) * sorted_values[ip] + p * sorted_values[hi])


def _median(sorted_values: np.ndarray) -> float:
    n = sorted_values.size
    return float(_F(0.5) * (sorted_values[n // 2] + sorted_values[n // 2 - 1])) if n % 2 == 0 \
        else float(sorted_values[n // 2])


def _quantiles(values: np.ndarray, names: tuple[tuple[str, float], ...]) -> dict[str, float]:
    ordered = np.sort(values.astype(_F))
    return {key: (_median(ordered) if key == "median" else _percentile(ordered, frac)) for key, frac in names}


@dataclass(frozen=True)
class LlamaCppKldStats:
    """What ``llama-perplexity --kl-divergence`` prints after its per-chunk lines.

    Every ``*_unc`` is the ± llama.cpp prints (a standard error, propagated to
    PPL by the first-order rule, as llama.cpp does). Units: perplexities are
    plain numbers, KLD in nats, Δp and the same-top rate as fractions (llama.cpp
    prints them as %).

    Attributes
    ----------
    count : int
        Positions scored.
    ppl_q, ppl_q_unc, ppl_base, ppl_base_unc : float
        ``exp(mean NLL)`` of the observed logits and of the base rows.
    cor : float
        Correlation of the two per-position NLLs (``Cor(ln(PPL(Q)), ln(PPL(base)))``).
    ln_ratio, ln_ratio_unc, ratio, ratio_unc, diff, diff_unc : float
        ``ln(PPL(Q)/PPL(base))``, ``PPL(Q)/PPL(base)``, ``PPL(Q) - PPL(base)``.
    kld_mean, kld_unc : float
        Mean KLD ± its standard error (nats).
    kld : dict[str, float]
        KLD percentiles, keys of :data:`KLD_PERCENTILES` (``max`` … ``min``).
    dp_mean, dp_unc : float
        Mean Δp ± standard error.
    dp : dict[str, float]
        Δp percentiles, keys of :data:`DP_PERCENTILES`.
    rms_dp, rms_dp_unc : float
        ``sqrt(mean Δp²)`` ± its propagated standard error.
    same_top, same_top_unc : float
        Fraction of positions whose top token agrees ± ``sqrt(p (1 - p) / (n - 1))``.
    """

    count: int
    ppl_q: float
    ppl_q_unc: float
    ppl_base: float
    ppl_base_unc: float
    cor: float | None
    ln_ratio: float
    ln_ratio_unc: float
    ratio: float
    ratio_unc: float
    diff: float
    diff_unc: float
    kld_mean: float
    kld_unc: float
    kld: dict = field(default_factory=dict)
    dp_mean: float = 0.0
    dp_unc: float = 0.0
    dp: dict = field(default_factory=dict)
    rms_dp: float = 0.0
    rms_dp_unc: float = 0.0
    same_top: float = 0.0
    same_top_unc: float = 0.0


def kld_statistics(rows: KldRows) -> LlamaCppKldStats:
    """The summary ``llama-perplexity --kl-divergence`` prints, from :func:`kld_rows`.

    Raises
    ------
    InputError
        Fewer than 2 positions (llama.cpp itself prints the summary only from 100).

    Notes
    -----
    From ``kl_divergence()`` in ``tools/perplexity/perplexity.cpp``: sums in
    float64; ``mean_and_uncertainty(s, s2, n)`` is ``(s/n, sqrt((s2/n -
    (s/n)²)/(n-1)))`` (0 for n ≤ 10); the covariance of the two NLLs is
    ``(Σab/n - (Σa/n)(Σb/n))/(n-1)`` (0 for n < 10); percentiles interpolate
    linearly at ``fraction * (n - 1)`` in float32; the median of an even count
    is the mean of the two middle values.
    """
    n = int(rows.kld.size)
    if n < 2:
        raise InputError(f"llama.cpp's statistics need at least 2 scored positions, got {n}")
    # llama.cpp squares and multiplies the float32 values in float32 and sums the products in float64
    nll32, base32, dp32 = rows.nll.astype(_F), rows.nll_base.astype(_F), rows.p_diff.astype(_F)
    nll, base = nll32.astype(np.float64), base32.astype(np.float64)
    nll2, base2, cross = ((a * b).astype(np.float64) for a, b in ((nll32, nll32), (base32, base32), (nll32, base32)))
    mean_nll, se_nll = _mean_and_uncertainty(nll.sum(), nll2.sum(), n)
    mean_base, se_base = _mean_and_uncertainty(base.sum(), base2.sum(), n)
    cov = float((cross.sum() / n - (nll.sum() / n) * (base.sum() / n)) / (n - 1)) if n >= 10 else 0.0
    ppl, ppl_base = math.exp(mean_nll), math.exp(mean_base)
    ppl_unc, ppl_base_unc = ppl * se_nll, ppl_base * se_base
    ln_ratio = mean_nll - mean_base
    ln_ratio_unc = math.sqrt(max(se_nll ** 2 + se_base ** 2 - 2 * cov, 0.0))
    ratio = math.exp(ln_ratio)
    diff_var = ppl_unc ** 2 + ppl_base_unc ** 2 - 2 * ppl * ppl_base * cov
    kld = rows.kld.astype(np.float64)
    kld_mean, kld_unc = _mean_and_uncertainty(kld.sum(), (kld * kld).sum(), n)
    dp = dp32.astype(np.float64)
    dp2 = (dp32 * dp32).astype(np.float64)
    dp_mean, dp_unc = _mean_and_uncertainty(dp.sum(), dp2.sum(), n)
    mse, mse_unc = _mean_and_uncertainty(dp2.sum(), (dp2 * dp2).sum(), n)
    rms = math.sqrt(mse)
    same = float(np.count_nonzero(rows.same_top)) / n
    return LlamaCppKldStats(
        count=n, ppl_q=ppl, ppl_q_unc=ppl_unc, ppl_base=ppl_base, ppl_base_unc=ppl_base_unc,
        cor=cov / (se_nll * se_base) if se_nll > 0 and se_base > 0 else None,
        ln_ratio=ln_ratio, ln_ratio_unc=ln_ratio_unc, ratio=ratio, ratio_unc=ratio * ln_ratio_unc,
        diff=ppl - ppl_base, diff_unc=math.sqrt(max(diff_var, 0.0)),
        kld_mean=kld_mean, kld_unc=kld_unc, kld=_quantiles(rows.kld, KLD_PERCENTILES),
        dp_mean=dp_mean, dp_unc=dp_unc, dp=_quantiles(rows.p_diff, DP_PERCENTILES),
        rms_dp=rms, rms_dp_unc=0.5 / rms * mse_unc if rms > 0 else 0.0,
        same_top=same, same_top_unc=math.sqrt(same * (1 - same) / (n - 1)),
    )
