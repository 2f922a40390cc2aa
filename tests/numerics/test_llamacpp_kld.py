"""llama.cpp's 16-bit log-probability rows and KLD statistics (logitlab.numerics.llamacpp_kld), on crafted arrays.

The agreement with llama-perplexity itself is tested in tests/test_llamacpp_kld_peer.py.
"""

import math

import numpy as np
import pytest
from scipy.special import log_softmax

from logitlab.errors import InputError
from logitlab.numerics.llamacpp_kld import (
    KldRows,
    dequantize_log_probs,
    kld_rows,
    kld_statistics,
    quantize_log_probs,
    row_width,
)


def rows(n=6, v=101, seed=0, spread=4.0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, spread, (n, v)).astype(np.float32)
    x[:, 7] += 10
    return x


def test_row_layout_and_reconstruction():
    x = rows()
    q = quantize_log_probs(x)
    assert q.dtype == np.uint16 and q.shape == (6, row_width(101)) == (6, 106)
    head = q[:, :4].copy().view(np.float32)
    scale, min_log_prob = head[:, 0], head[:, 1]
    exact = log_softmax(x.astype(np.float64), axis=1)
    floor = exact.max(axis=1) - 16
    assert np.allclose(scale, (x.max(1) - np.maximum(x.min(1), x.max(1) - 16)) / 65535, rtol=1e-6)
    got = dequantize_log_probs(q, 101)
    above = exact > floor[:, None] + 1e-3
    # each stored entry is within half a step (plus float32 rounding) of the exact log-probability
    assert np.all(np.abs(got - exact)[above] <= (scale[:, None] / 2 + 1e-5).repeat(101, 1)[above])
    # everything 16 nats or more below the top is stored as the floor, min_log_prob
    below = exact <= floor[:, None]
    assert below.any() and np.all(got[below] == np.broadcast_to(min_log_prob[:, None], got.shape)[below])
    assert np.allclose(min_log_prob, np.maximum(exact.min(1), floor), atol=1e-5)
    assert np.all(q[:, 4 + 101:] == 0)  # padding


def test_constant_row_has_scale_zero():
    x = np.zeros((1, 10), np.float32)
    q = quantize_log_probs(x)
    head = q[:, :4].copy().view(np.float32)
    assert head[0, 0] == 0 and head[0, 1] == pytest.approx(-math.log(10), rel=1e-6)
    assert np.all(q[:, 4:] == 0)


def test_kld_rows_against_float64():
    base_logits = rows(seed=1)
    obs = base_logits + np.random.default_rng(2).normal(0, 0.3, base_logits.shape).astype(np.float32)
    nxt = np.array([7, 3, 7, 0, 50, 7])
    r = kld_rows(quantize_log_probs(base_logits), obs, nxt)
    b = dequantize_log_probs(quantize_log_probs(base_logits), 101).astype(np.float64)
    lq = log_softmax(obs.astype(np.float64), axis=1)
    keep = b > -16
    direct = np.where(keep, np.exp(b) * (b - lq), 0).sum(axis=1)
    assert np.allclose(r.kld, direct, rtol=1e-4, atol=2e-6)  # llama.cpp sums float32 terms: ~1e-6 nats absolute
    assert np.allclose(r.nll, -lq[np.arange(6), nxt], rtol=1e-5, atol=1e-5)  # float32 (max + lse) - logit
    assert np.allclose(r.nll_base, -b[np.arange(6), nxt], rtol=1e-6)
    assert np.allclose(r.p_diff, np.exp(-r.nll) - np.exp(-r.nll_base), atol=1e-6)
    assert r.same_top.sum() >= 5


def test_identical_logits_give_kld_at_the_16_bit_noise_floor():
    x = rows(seed=3)
    r = kld_rows(quantize_log_probs(x), x, np.zeros(6, int))
    assert np.abs(r.kld).max() < 1e-4 and r.same_top.all()


def test_statistics_follow_llama_cpp_formulas():
    n = 12
    kld = np.arange(n, dtype=np.float32) / 100
    nll = np.linspace(1, 3, n).astype(np.float32)
    base = (nll + np.linspace(-0.1, 0.1, n)).astype(np.float32)
    dp = np.linspace(-0.02, 0.04, n).astype(np.float32)
    same = np.array([True] * 9 + [False] * 3)
    s = kld_statistics(KldRows(kld=kld, nll=nll, nll_base=base, p_diff=dp, same_top=same))
    k = kld.astype(np.float64)
    assert s.kld_mean == pytest.approx(k.mean())
    assert s.kld_unc == pytest.approx(math.sqrt((np.mean(k * k) - k.mean() ** 2) / (n - 1)))
    assert s.ppl_q == pytest.approx(math.exp(nll.astype(np.float64).mean()))
    assert s.ppl_base == pytest.approx(math.exp(base.astype(np.float64).mean()))
    assert s.ratio == pytest.approx(s.ppl_q / s.ppl_base)
    # llama.cpp's percentile: linear at fraction*(n-1) in float32; the median of 12 values is the middle pair's mean
    assert s.kld["p90"] == pytest.approx(0.099, abs=1e-7)     # 0.9*11 = 9.9 -> 0.09 + 0.9*0.01
    assert s.kld["median"] == pytest.approx(0.055, abs=1e-7)
    assert s.kld["max"] == pytest.approx(0.11) and s.kld["min"] == 0
    assert s.same_top == 0.75 and s.same_top_unc == pytest.approx(math.sqrt(0.75 * 0.25 / 11))
    assert s.rms_dp == pytest.approx(math.sqrt(np.mean(dp.astype(np.float64) ** 2)), rel=1e-6)
    with pytest.raises(InputError, match="at least 2"):
        kld_statistics(KldRows(kld=kld[:1], nll=nll[:1], nll_base=base[:1], p_diff=dp[:1], same_top=same[:1]))


def test_bad_shapes_are_input_errors():
    x = rows()
    with pytest.raises(InputError, match="float32"):
        quantize_log_probs(x.astype(np.float64))
    with pytest.raises(InputError, match="uint16"):
        kld_rows(quantize_log_probs(x)[:, :-2], x, np.zeros(6, int))
    with pytest.raises(InputError, match="outside the vocabulary"):
        kld_rows(quantize_log_probs(x), x, np.full(6, 101))
