"""A pair that differs by a factor only (crafted arrays): the fitted scale, the flag, and what dump-diff says."""

import io
import json

import numpy as np
import pytest
from rich.console import Console

from logitlab.dumps import diff_dumps, open_dump
from logitlab.dumps.diff_results import DumpDiffResult
from logitlab.dumps.stats import SCALE_MAX_RESIDUAL, SCALE_MIN_DEVIATION, TensorStats, fitted_scale, tensor_stats
from logitlab import report
from rawdumps import N_POS, base_tensors, plant, write_folder

SQRT_640 = np.float32(np.sqrt(640.0))  # Gemma 3 270M's embedding scale, √hidden_size


def test_a_pure_factor_is_scale_only_with_that_factor():
    x = np.random.default_rng(0).normal(0, 0.05, 640).astype(np.float32)
    s = tensor_stats(x, x * SQRT_640)
    assert s.scale_only and s.scale == pytest.approx(float(SQRT_640), rel=1e-6)
    # the numbers: NMSE (25.3 − 1)² = 590, cosine 1
    assert s.nmse == pytest.approx((float(SQRT_640) - 1) ** 2, rel=1e-5) and s.cosine == pytest.approx(1, abs=1e-12)
    flipped = tensor_stats(x, -x)
    assert flipped.scale_only and flipped.scale == -1.0 and flipped.cosine == pytest.approx(-1)


def test_noise_and_small_or_noisy_factors_are_not_scale_only():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, 4096).astype(np.float32)
    noise = rng.normal(0, 1e-3, 4096).astype(np.float32)
    plain = tensor_stats(x, x + noise)  # rounding-like noise: no preferred direction
    assert not plain.scale_only and abs(plain.scale - 1) < 1e-3
    small = tensor_stats(x, x * np.float32(1.005))  # a factor, but within 1 % of 1
    assert not small.scale_only and small.scale == pytest.approx(1.005, rel=1e-6)
    # a factor of 2 plus noise carrying 5 % of the squared difference: more than the 1 % a pure scale may leave
    noisy = tensor_stats(x, 2 * x + rng.normal(0, np.sqrt(0.05), 4096).astype(np.float32))
    assert not noisy.scale_only and noisy.scale == pytest.approx(2, abs=0.02)
    # the same factor with 0.1 % of the squared difference left over is a scale
    assert tensor_stats(x, 2 * x + rng.normal(0, np.sqrt(0.001), 4096).astype(np.float32)).scale_only


def test_the_thresholds_as_documented():
    rr, sq = 100.0, 1.0
    # o = s·r exactly: residual 0; scale-only from |s − 1| = SCALE_MIN_DEVIATION on
    for s, expected in ((1 + SCALE_MIN_DEVIATION, True), (1 + SCALE_MIN_DEVIATION / 2, False)):
        assert fitted_scale(rr, s * rr, s * s * rr, (s - 1) ** 2 * rr) == (pytest.approx(s), expected)
    # residual Σ(o − s·r)² = oo − ro²/rr: just under and over SCALE_MAX_RESIDUAL · Σ(o − r)²
    s = 3.0
    for extra, expected in ((0.99, True), (1.01, False)):
        oo = s * s * rr + extra * SCALE_MAX_RESIDUAL * sq
        assert fitted_scale(rr, s * rr, oo, sq)[1] is expected
    assert np.isnan(fitted_scale(0.0, 0.0, 1.0, 1.0)[0])  # all-zero reference: no factor


def test_bit_exact_int32_and_nonfinite_pairs_have_no_scale_claim():
    x = np.arange(1, 9, dtype=np.float32)
    assert tensor_stats(x, x.copy()).scale == 1.0 and not tensor_stats(x, x.copy()).scale_only
    ints = tensor_stats(np.arange(1, 9, dtype=np.int32), 3 * np.arange(1, 9, dtype=np.int32))
    assert not ints.scale_only and np.isnan(ints.scale)
    y = 4 * x
    y[0] = np.nan
    assert not tensor_stats(x, y).scale_only


def test_stats_round_trip_and_old_json_reads_as_no_scale():
    x = np.linspace(1, 2, 64, dtype=np.float32)
    s = tensor_stats(x, 3 * x)
    assert TensorStats.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    old = {k: v for k, v in s.to_dict().items() if k not in ("scale", "scale_only")}
    assert not TensorStats.from_dict(old).scale_only


def _scaled_then_planted(tmp_path):
    """A dump pair where B's ``attn_norm-0`` is 25.3 × A's at every position (a naming mismatch) and a real
    divergence is planted at ``ffn_out-1@pos1``."""
    base = base_tensors()
    b = plant(base, ("ffn_out", 1, 1))
    for pos in range(N_POS):
        b[("attn_norm", 0, pos)] = base[("attn_norm", 0, pos)] * SQRT_640
    return diff_dumps(open_dump(write_folder(tmp_path / "a", base, "p")),
                      open_dump(write_folder(tmp_path / "b", b, "q")))


def test_dump_diff_skips_a_scale_for_the_first_divergence_and_says_so(tmp_path):
    result = _scaled_then_planted(tmp_path)
    first = result.first_divergence
    assert first.label == "ffn_out-1@pos1" and sum(t.scale_only for t in result.tensors) == N_POS
    assert all(t.differs for t in result.tensors if t.scale_only)  # still counted as differing
    [group] = result.scale_only
    assert (group.label, group.positions, group.count) == ("attn_norm-0", [0, 1, 2], N_POS)
    assert group.min_scale == pytest.approx(float(SQRT_640), rel=1e-6) and group.max_scale == pytest.approx(
        float(SQRT_640), rel=1e-6)
    assert result.first_by_position() == {1: "ffn_out-1@pos1", 2: "ffn_out-1@pos2"}
    summary = result.summary()
    assert summary["schema_version"] == 5 and summary["scale_only_before_first"] == ["attn_norm-0"]
    assert summary["bit_exact_before_first"] == sum(1 for t in result.tensors[: result.first_index]
                                                    if not t.differs)
    again = DumpDiffResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.first_divergence.label == first.label and again.scale_only[0].count == N_POS
    out = io.StringIO()
    report.display(result, Console(file=out, width=400))
    text = out.getvalue()
    line = ("attn_norm-0 (positions 0-2): B = 25.3 × A: a scale, most likely a naming or convention mismatch "
            "(cosine ")
    assert "first divergence: ffn_out-1@pos1 (layer 1, ffn" in text and line in text
    assert "not taken as the first divergence" in report.markdown(result)


def test_only_scales_differ_then_there_is_no_first_divergence_but_the_scale_is_said(tmp_path):
    base = base_tensors()
    b = dict(base)
    b[("l_out", 2, 0)] = base[("l_out", 2, 0)] * np.float32(-2)
    result = diff_dumps(open_dump(write_folder(tmp_path / "a", base, "p")),
                        open_dump(write_folder(tmp_path / "b", b, "q")))
    assert result.verdict == "differs" and result.first_divergence is None and result.first_by_position() == {}
    out = io.StringIO()
    report.display(result, Console(file=out, width=400))
    assert "l_out-2 (positions 0): B = -2 × A: a scale" in out.getvalue()
    assert "first divergence:" not in out.getvalue()
