"""The anchors' methods and the validity benchmark's claims (fewer simulations than the benchmark)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from logitlab.errors import InputError
from logitlab.perf.anchors import (
    METHODS,
    VALIDITY_SCENARIOS,
    SimScenario,
    fixed_threshold_anchor,
    mann_whitney_anchor,
    score_methods,
    simulate_machine,
    student_t_anchor,
)


def test_anchor_methods_match_their_tools():
    a = [100.0, 101.0, 99.0, 100.5, 100.2, 99.8]
    b = [110.0, 111.0, 109.0, 110.5, 110.2, 109.8]
    mw = mann_whitney_anchor(a, b, higher_is_better=False)
    assert mw.p_value == pytest.approx(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert mw.flagged and mw.direction == "slower"  # times went up
    t = student_t_anchor(a, b, higher_is_better=True)
    assert t.p_value == pytest.approx(stats.ttest_ind(a, b, equal_var=True).pvalue)
    assert t.direction == "faster"
    assert not fixed_threshold_anchor(a, b, higher_is_better=True).flagged  # +10 % < 15 %
    assert fixed_threshold_anchor(a, [x * 1.2 for x in b], higher_is_better=True).direction == "faster"
    with pytest.raises(InputError):
        mann_whitney_anchor([1.0], [1.0, 2.0], higher_is_better=True)
    with pytest.raises(InputError):
        student_t_anchor([1.0, -1.0], [1.0, 2.0], higher_is_better=True)


def test_machine_model():
    logs = simulate_machine(5, np.random.default_rng(0), drift=0.1, noise_sd=0.0, block_sd=0.0)
    assert logs.shape == (20,) and logs[-1] == pytest.approx(math.log1p(0.1)) and logs[0] == 0.0
    pen = simulate_machine(2, np.random.default_rng(0), first_slot_penalty=0.1, noise_sd=0.0, block_sd=0.0)
    assert pen[[0, 4]] == pytest.approx([math.log(0.9)] * 2) and pen[1] == 0.0


def test_validity_claims_with_fewer_simulations():
    n = 200
    limit = 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)
    by_label = {s.label: s for s in VALIDITY_SCENARIOS}
    for label in ("A/A, linear drift +10%", "A/A, first-slot penalty 5%"):
        r = score_methods(by_label[label], n_experiments=n, seed=1)
        assert r[METHODS[0]]["flag_rate"] <= limit, label
        assert r[METHODS[1]]["flag_rate"] > limit  # the unpaired sequential U test does not hold its level
    drift = score_methods(by_label["A/A, linear drift +10%"], n_experiments=n, seed=2)
    assert drift[METHODS[1]]["flag_rate"] > 0.5 and drift[METHODS[2]]["flag_rate"] > 0.5
    power = score_methods(by_label["real effect 3%"], n_experiments=n, seed=3)
    best_anchor = max(power[m]["correct_rate"] for m in METHODS[1:])
    assert power[METHODS[0]]["correct_rate"] >= best_anchor
    assert power[METHODS[0]]["wrong_way_rate"] == 0.0


def test_score_methods_input_checks():
    with pytest.raises(InputError):
        score_methods(SimScenario("x"), n_experiments=0)
    with pytest.raises(InputError):
        score_methods(SimScenario("x"), n_blocks=1)
