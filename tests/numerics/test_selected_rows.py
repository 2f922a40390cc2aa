"""A comparison of selected rows (``--positions``) names run positions: flips, first mismatch, verdict evidence,
the positions outside the floor and the detection limit's hardest position."""

from __future__ import annotations

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import LogitComparison, classify, compare_logits
from logitlab.numerics.detection import detection_limits


def pair(fault_row: int = 15) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    ref = (3 * rng.standard_normal((20, 64))).astype(np.float32)
    obs = (ref + 1e-4 * rng.standard_normal(ref.shape)).astype(np.float32)
    top = int(ref[fault_row].argmax())
    obs[fault_row, top] -= 8.0  # a flip far outside the pair's noise
    return ref, obs


def test_selected_rows_report_run_positions():
    ref, obs = pair()
    whole = classify(compare_logits(ref, obs))
    assert whole.word == "divergent" and whole.outside == [15]
    rows = np.r_[0:10, 15, 19]
    c = compare_logits(ref[rows], obs[rows]).at_positions(rows)
    assert c.n_positions == 12 and c.positions == rows.tolist()
    assert [f["position"] for f in c.flips] == [15]
    assert c.first_mismatch["position"] == 0 and c.row_of(15) == 10 and c.position_of(11) == 19
    verdict = classify(c)
    assert verdict.word == "divergent" and verdict.outside == [15]
    assert any("(15)" in line and "position 15" in line for line in verdict.evidence)
    again = LogitComparison.from_dict(c.to_dict())
    assert again == c and classify(again).evidence == verdict.evidence


def test_a_fault_outside_the_selection_is_not_seen():
    ref, obs = pair()
    rows = np.r_[0:10, 19]
    c = compare_logits(ref[rows], obs[rows]).at_positions(rows)
    assert not c.flips and classify(c).word != "divergent"


def test_unselected_comparisons_keep_their_json():
    ref, obs = pair()
    c = compare_logits(ref, obs)
    assert "positions" not in c.to_dict() and c.position_of(4) == 4 and c.row_of(4) == 4
    with pytest.raises(InputError, match="positions has 2 entries"):
        LogitComparison.from_dict({**c.to_dict(), "positions": [1, 2]})


def test_detection_limit_names_a_run_position():
    ref, obs = pair()
    obs[15] = ref[15] + 1e-4  # no fault: detection limits are measured
    rows = np.r_[5:15, 17]
    c = compare_logits(ref[rows], obs[rows]).at_positions(rows)
    limits = detection_limits(ref[rows], obs[rows], c)
    measured = [s.position for s in limits.shapes if s.position is not None]
    assert measured and set(measured) <= set(rows.tolist())
