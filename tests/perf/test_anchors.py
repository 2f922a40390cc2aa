"""The anchors' methods give their tools' answers (the validity simulation that scores them: test_validity_sim.py)."""

from __future__ import annotations

import pytest
from scipy import stats

from logitlab.errors import InputError
from logitlab.perf.anchors import fixed_threshold_anchor, mann_whitney_anchor, student_t_anchor


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
