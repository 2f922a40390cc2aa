import pytest

from logitlab.errors import InputError
from logitlab.perf.design import ab_schedule, schedule_patterns as block_patterns


def test_alternating_blocks_after_warmups():
    slots = ab_schedule(2, warmup=1)
    assert [(s.variant, s.pattern) for s in slots[:2]] == [("control", "warmup"), ("candidate", "warmup")]
    measured = "".join("A" if s.variant == "control" else "B" for s in slots[2:])
    assert measured == "ABBABAAB"
    assert [s.position for s in slots[2:6]] == [0, 1, 2, 3]
    assert [s.index for s in slots] == list(range(10))


def test_first_measured_run_is_control_even_when_randomised():
    for seed in range(20):
        slots = ab_schedule(6, warmup=0, randomize=True, seed=seed)
        assert slots[0].variant == "control"
        patterns = block_patterns(7, randomize=True, seed=seed)
        assert patterns[0] == "ABBA" and patterns[1:].count("ABBA") == patterns[1:].count("BAAB") == 3


def test_randomised_order_is_seeded():
    assert block_patterns(8, randomize=True, seed=1) == block_patterns(8, randomize=True, seed=1)
    orders = {tuple(block_patterns(8, randomize=True, seed=s)) for s in range(10)}
    assert len(orders) > 1


def test_bad_counts():
    with pytest.raises(InputError, match="--repeats must be at least 1"):
        ab_schedule(0)
    with pytest.raises(InputError, match="--warmup must be 0 or more"):
        ab_schedule(1, warmup=-1)
