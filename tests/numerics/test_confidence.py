"""The reference's top-1 probability per position (``row_top1_prob_ref``) and KLD by confidence buckets."""

import numpy as np
import pytest
from scipy.special import softmax

from logitlab.errors import InputError
from logitlab.numerics import LogitComparison, compare_logits
from logitlab.numerics.confidence import CONFIDENCE_EDGES, kld_by_confidence
from logitlab.numerics.comparison import SCHEMA_VERSION


def test_top1_probability_of_differing_rows_matches_scipy_softmax():
    rng = np.random.default_rng(3)
    a = rng.normal(0, 3, (6, 1000)).astype(np.float32)
    a[2, 7] = a[2].max() + 8  # a confident row
    b = a.copy()
    b[[1, 2, 4]] += rng.normal(0, 0.05, (3, 1000)).astype(np.float32)  # rows 0, 3, 5 stay identical
    b[5, 9] = np.nan  # a NaN on one side: the exact float64 path, p still defined by the reference
    c = compare_logits(a, b)
    expected = softmax(a.astype(np.float64), axis=1).max(axis=1)
    got = c.row_top1_prob_ref
    assert got[0] is None and got[3] is None  # bit-identical rows: not computed (KLD 0 there)
    for r in (1, 2, 4, 5):
        assert got[r] == pytest.approx(expected[r], rel=1e-5)
    assert got[2] > 0.99


def test_schema_2_results_still_load_without_top1_probabilities():
    c = compare_logits(np.zeros((2, 8), np.float32), np.ones((2, 8), np.float32))
    old = {k: v for k, v in c.to_dict().items() if k != "row_top1_prob_ref"}
    old["schema_version"] = 2
    back = LogitComparison.from_dict(old)
    assert back.row_top1_prob_ref is None and back.schema_version == SCHEMA_VERSION and back.row_kld == c.row_kld


def test_buckets_split_kld_by_the_reference_confidence():
    kld = [0.4, 0.1, None, 0.02, 0.001, 0.0005, 0.3]
    prob = [0.1, 0.3, 0.5, 0.6, 0.9, 1.0, None]  # 1.0 falls into the last, closed bucket; None rows are left out
    buckets = kld_by_confidence(kld, prob)
    assert [b.label for b in buckets] == ["[0, 0.25)", "[0.25, 0.5)", "[0.5, 0.75)", "[0.75, 0.95)", "[0.95, 1]"]
    assert [b.positions for b in buckets] == [1, 1, 1, 1, 1]
    assert [b.mean_kld for b in buckets] == [0.4, 0.1, 0.02, 0.001, 0.0005]
    assert sum(b.share for b in buckets) == pytest.approx(1.0)
    assert buckets[0].share == pytest.approx(0.4 / 0.5215)


def test_empty_buckets_and_bad_input():
    buckets = kld_by_confidence([0.0, 0.0], [0.97, 0.99])
    assert [b.positions for b in buckets] == [0, 0, 0, 0, 2]
    assert buckets[0].mean_kld is None and buckets[4].mean_kld == 0.0 and buckets[4].share is None
    with pytest.raises(InputError, match="row_kld has 1 entries"):
        kld_by_confidence([0.1], [0.2, 0.3])
    with pytest.raises(InputError, match="rise from 0 to 1"):
        kld_by_confidence([0.1], [0.2], edges=(0.0, 0.5, 0.4, 1.0))
    assert CONFIDENCE_EDGES == (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)
