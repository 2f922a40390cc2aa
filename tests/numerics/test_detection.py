"""numerics.detection on crafted arrays: each limit checked by planting the fault independently and classifying.

The search plants into a copy of the run and judges with the divergence checks against the unplanted floors;
these tests plant with plain numpy and judge with the full ``classify``, so the limit is checked by a path the
search does not share.
"""

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import Thresholds, classify, compare_logits
from logitlab.numerics.detection import (ROW_SHIFT_NOTE, SHAPES, DetectionLimits, detection_limits,
                                         largest_limit)

N, V = 48, 4096


def logits(seed=0):
    rng = np.random.default_rng(seed)
    out = rng.standard_normal((N, V)).astype(np.float32) * 2
    out[np.arange(N), rng.integers(0, V, N)] += 6  # a confident argmax per row, as a language model has
    return out


def noisy(ref, sd, seed=1):
    return (ref + np.random.default_rng(seed).standard_normal(ref.shape).astype(np.float32) * sd).astype(np.float32)


def word(ref, obs):
    return classify(compare_logits(ref, obs), Thresholds()).word


def plant(ref, obs, shape, position, size):
    out = obs.copy()
    if shape == "row-noise":
        out[position] += np.float32(size) * np.random.default_rng(position).standard_normal(V).astype(np.float32)
        return out
    if shape == "all-rows-shift":
        return (out + np.float32(size)).astype(np.float32)
    mid = V // 2
    token = int(np.argpartition(ref[position], mid)[mid]) if shape == "tail-up" else int(np.argmax(ref[position]))
    out[position, token] += np.float32(-size if shape == "argmax-down" else size)
    return out


@pytest.mark.parametrize("sd", [0.0, 0.01])
@pytest.mark.parametrize("shape", ["argmax-up", "argmax-down", "tail-up", "row-noise"])
def test_a_fault_above_the_limit_reads_divergent_anywhere_and_below_it_not_at_the_hardest_position(shape, sd):
    ref = logits()
    obs = ref.copy() if sd == 0 else noisy(ref, sd)
    limits = detection_limits(ref, obs)
    s = limits.shape(shape)
    assert s.limit is not None and s.caught == s.probed == N
    assert s.median <= s.limit
    assert word(ref, plant(ref, obs, shape, s.position, 1.05 * s.limit)) == "divergent"
    assert word(ref, plant(ref, obs, shape, s.position, 0.9 * s.limit)) != "divergent"
    for p in (0, N // 2, N - 1):  # the limit is the largest over positions: caught wherever it lands
        assert word(ref, plant(ref, obs, shape, p, 1.05 * s.limit)) == "divergent"
    assert s.above == "divergent" and s.below != "divergent"


def test_noise_raises_the_limit_and_a_bit_exact_pair_catches_rounding_sized_faults():
    ref = logits()
    exact = detection_limits(ref, ref.copy(), shapes=("argmax-up",)).shape("argmax-up").limit
    noise = detection_limits(ref, noisy(ref, 0.05), shapes=("argmax-up",)).shape("argmax-up").limit
    assert exact < 1e-3 < noise
    assert noise > 10 * exact


def test_the_all_rows_shift_limit_is_where_systematic_offset_begins():
    ref = logits()
    obs = noisy(ref, 0.01)
    s = detection_limits(ref, obs, shapes=("all-rows-shift",)).shape("all-rows-shift")
    assert s.limit is not None
    assert word(ref, plant(ref, obs, "all-rows-shift", None, 1.1 * s.limit)) == "systematic-offset"
    assert word(ref, plant(ref, obs, "all-rows-shift", None, 0.5 * s.limit)) != "systematic-offset"


def test_confident_top2_swaps_are_counted_and_each_one_caught_is_divergent():
    ref = logits()
    s = detection_limits(ref, ref.copy(), shapes=("top2-swap",)).shape("top2-swap")
    assert s.limit is None and 0 < s.probed <= N
    assert s.caught == s.probed and s.missed_margin is None  # on a bit-exact pair every confident swap is caught
    top2 = np.argsort(ref, axis=1)[:, -2:]
    margins = np.take_along_axis(ref, top2, 1) @ np.array([-1, 1], np.float32)
    p = int(np.argmax(margins))  # the most confident position
    swapped = ref.copy()
    swapped[p, top2[p]] = ref[p, top2[p][::-1]]
    assert word(ref, swapped) == "divergent"


def test_a_divergent_pair_has_nothing_worse_to_detect():
    ref = logits()
    obs = ref.copy()
    obs[3, np.argmax(ref[3])] -= 50
    limits = detection_limits(ref, obs)
    assert limits.verdict == "divergent" and limits.shapes == []
    assert limits.summary().startswith("not probed")


def test_the_row_shift_note_and_the_json_round_trip():
    ref = logits()
    limits = detection_limits(ref, noisy(ref, 0.01))
    assert [s.shape for s in limits.shapes] == list(SHAPES)
    assert limits.notes == [ROW_SHIFT_NOTE]
    assert DetectionLimits.from_dict(limits.to_dict()) == limits
    with pytest.raises(InputError, match="DetectionLimits data"):
        DetectionLimits.from_dict({"verdict": "noise", "shapes": [{"shape": "argmax-up"}]})
    with pytest.raises(InputError, match="no detection limit for shape 'sideways'"):
        limits.shape("sideways")


def test_bad_input_is_an_input_error():
    ref = logits()
    with pytest.raises(InputError, match="unknown fault shape"):
        detection_limits(ref, ref, shapes=("sideways",))
    with pytest.raises(InputError):
        detection_limits(ref, ref[:-1])


def test_largest_limit_over_comparisons():
    ref = logits()
    a = detection_limits(ref, ref.copy(), shapes=("argmax-up",))
    b = detection_limits(ref, noisy(ref, 0.05), shapes=("argmax-up",))
    assert largest_limit([a, None, b]) == (b.shape("argmax-up").limit, 2)
    assert largest_limit([None, None]) == (None, 0)
    assert largest_limit([a], shape="tail-up") == (None, 0)
