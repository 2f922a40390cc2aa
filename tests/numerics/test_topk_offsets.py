"""Per-row normaliser offsets of top-k log-probabilities (numerics/topk_offsets.py), on crafted rows."""

import numpy as np
import pytest

from logitlab.engines.topk import TopKRows
from logitlab.errors import InputError
from logitlab.numerics.topk import compare_topk
from logitlab.numerics.topk_offsets import on_normaliser, row_offsets


def server_rows(logits: np.ndarray, k: int, normaliser_error: np.ndarray) -> TopKRows:
    """What a server returns: float32 log-probabilities with its own (slightly off) normaliser per row."""
    rows = []
    for row, err in zip(logits.astype(np.float64), normaliser_error):
        lse = np.log(np.exp(row - row.max()).sum()) + row.max() + err
        top = np.argsort(-row, kind="stable")[:k]
        rows.append({int(t): float(np.float32(row[t] - lse)) for t in top})
    return TopKRows.from_mappings(rows, k)


@pytest.fixture
def logits():
    return np.random.default_rng(7).normal(0, 3, (6, 500)).astype(np.float32)


def test_a_per_row_constant_is_the_offset_and_the_gaps_are_the_residual(logits):
    ours = TopKRows.from_logits(logits, 10)
    errors = np.array([2e-4, -1e-4, 0.0, 5e-5, -2.3e-4, 1e-6])
    theirs = server_rows(logits, 10, errors)
    r = row_offsets(ours, theirs)
    assert r.positions == list(range(6))
    # the offset is the normaliser error (up to the float32 rounding of the returned values)
    assert np.allclose(r.offset, -errors, atol=2e-6)
    assert r.max_abs_offset == pytest.approx(2.3e-4, abs=2e-6)
    # the gaps agree to the float32 rounding of the two values each gap is made of: at most 1 ULP at row scale
    assert 0 < r.max_residual_ulp <= 1.0
    assert r.max_residual < 1e-5
    # raw, the comparison sees hundreds of ULPs (the normaliser); on the server's normaliser, one at most
    raw = compare_topk(ours, theirs)
    moved = compare_topk(on_normaliser(ours, theirs), theirs)
    assert raw.max_scaled_ulp > 100 and moved.max_scaled_ulp <= 1.0
    assert moved.argmax_agreement == 1.0 and moved.dtype == "float32"


def test_a_change_of_the_logits_shows_in_the_residual_not_only_the_offset(logits):
    ours = TopKRows.from_logits(logits, 10)
    changed = logits.copy()
    top = int(np.argmax(changed[3]))
    changed[3, top] += np.float32(0.01)  # one logit of one row, as another kernel might
    theirs = server_rows(changed, 10, np.zeros(6))
    r = row_offsets(ours, theirs)
    assert r.residual[3] == pytest.approx(0.01, rel=1e-3)
    assert max(r.residual[i] for i in (0, 1, 2, 4, 5)) < 1e-5


def test_on_normaliser_keeps_keys_and_takes_the_others_anchor_value(logits):
    ours = TopKRows.from_logits(logits, 5)
    theirs = server_rows(logits, 5, np.full(6, 1e-4))
    moved = on_normaliser(ours, theirs)
    assert moved.keys == ours.keys
    for mk, mv, tk, tv in zip(moved.keys, moved.values, theirs.keys, theirs.values):
        assert mk[0] == tk[0] and mv[0] == tv[0]  # the anchor (their top-1) takes their value exactly
        assert all(float(np.float32(v)) == v for v in mv)  # their values are float32: so are the moved ones


def test_rows_without_a_shared_token_or_missing_are_left_out():
    a = TopKRows.from_mappings([None, {1: -0.1, 2: -2.0}, {3: -0.5}], k=2)
    b = TopKRows.from_mappings([{1: -0.1}, {1: -0.2, 2: -2.1}, {4: -0.5}], k=2)
    r = row_offsets(a, b)
    assert r.positions == [1] and r.offset[0] is None and r.offset[2] is None
    assert r.offset[1] == pytest.approx(-0.1) and r.residual[1] == pytest.approx(0.0, abs=1e-15)
    assert on_normaliser(a, b).values[2] == a.values[2]  # nothing shared: not shifted
    # a row the other run did not return is not shifted, but rounded as the others (float32 here), so that
    # the comparison's dtype is decided by the rows compared
    full = TopKRows.from_mappings([{5: -0.1000000001, 6: -3.0}, {5: -0.2000000001}], k=2)
    server = TopKRows.from_mappings([None, {5: float(np.float32(-0.2))}], k=2)
    moved = on_normaliser(full, server)
    assert moved.values[0] == (float(np.float32(-0.1000000001)), -3.0) and moved.values[1] == server.values[1]
    with pytest.raises(InputError, match="differ in length"):
        row_offsets(a, TopKRows.from_mappings([None], k=2))


def test_no_row_in_common_says_so():
    r = row_offsets(TopKRows.from_mappings([None], k=1), TopKRows.from_mappings([None], k=1))
    assert r.positions == [] and r.max_abs_offset == 0.0
    assert r.sentence() == "per-row offsets: no position where both runs returned a shared token"
