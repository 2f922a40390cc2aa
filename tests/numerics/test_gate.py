"""The bar of a golden check (logitlab.numerics.gate): verdict, KLD limits, Wilson-bounded top-1 rate."""

import math

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import compare_logits
from logitlab.numerics.gate import Bar, judge, positions_for_rate, wilson_interval


def test_wilson_interval_matches_the_closed_form():
    # all successes: low = n / (n + z^2)
    z = 1.959963984540054
    low, high = wilson_interval(100, 100)
    assert low == pytest.approx(100 / (100 + z * z), rel=1e-9) and high == pytest.approx(1.0)
    # general case, Wilson (1927): (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    k, n = 37, 50
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson_interval(k, n) == pytest.approx(((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)))
    with pytest.raises(InputError):
        wilson_interval(3, 2)
    assert positions_for_rate(0.95) == 73  # 73/(73+z²) = 0.9500…, 72 gives 0.9493
    assert 73 / (73 + z * z) >= 0.95 > 72 / (72 + z * z)


def _pair(flip_rows=()):
    rng = np.random.default_rng(1)
    ref = rng.normal(0, 1, (40, 16)).astype(np.float32)
    ref[:, 0] += 5
    obs = ref.copy()
    for r in flip_rows:  # a confident flip: another token far ahead
        obs[r, 1] = ref[r, 0] + 3
    return compare_logits(ref, obs)


def test_judge_checks_each_condition_of_the_bar():
    exact = _pair()
    assert judge([exact], "bit-exact", Bar()).passed
    flipped = _pair(flip_rows=[3])
    result = judge([flipped], "divergent", Bar(allow="near-tie", max_kld_mean=1.0, min_top1=0.9))
    assert not result.passed
    assert [c.name for c in result.checks] == ["verdict", "kld_mean", "top1"]
    assert result.failures[0] == "verdict divergent > allowed near-tie"
    top1 = result.checks[2]
    # 39/40 agree; the Wilson lower bound 0.87 is below 0.9 although the rate 0.975 is above it
    assert top1.passed is False and 0.86 < top1.value < 0.88
    assert "same top-1 39/40 = 0.9750" in top1.line


def test_judge_pools_positions_over_parts():
    parts = [_pair(), _pair(flip_rows=[1])]
    result = judge(parts, "bit-exact", Bar(allow="divergent", max_kld_p99=0.0))
    kld = [x for p in parts for x in p.row_kld]
    assert result.checks[1].value == pytest.approx(float(np.percentile(kld, 99)))
    assert not result.checks[1].passed


def test_bar_rejects_bad_values():
    with pytest.raises(InputError, match="unknown verdict"):
        Bar(allow="fine")
    with pytest.raises(InputError, match="min_top1"):
        Bar(min_top1=1.5)
    with pytest.raises(InputError, match="max_kld_mean"):
        Bar(max_kld_mean=-1)
    assert Bar(allow="near-tie", max_kld_p99=0.01).describe() == "verdict ≤ near-tie, p99 KLD ≤ 0.01 nats"
