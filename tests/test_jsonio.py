"""logitlab.jsonio's conversion of results to JSON types."""

import json

import numpy as np
import pytest


@pytest.mark.parametrize("items", [
    [1.0, 2, -0.0, 1e308, 1e308],  # finite (the sum overflows: the long way, the same answer)
    [1.0, float("nan"), 3],
    [float("inf"), -float("inf")],  # inf + -inf is NaN
    [10 ** 400, 1.5, float("nan")],  # an int too large for a float beside floats
    [True, 1.0, None, "x"],  # not all numbers
    [np.float32(1.5), np.float64(float("nan")), np.int64(3)],
    [],
])
def test_to_jsonable_lists_of_numbers_the_short_way_are_what_the_long_way_gives(items):
    """A list of Python floats and ints with a finite sum is copied as it is; the same as item by item."""
    from logitlab.jsonio import to_jsonable

    long_way = [to_jsonable(v) for v in items]
    got = to_jsonable(items)
    assert json.dumps(got) == json.dumps(long_way) and [type(v) for v in got] == [type(v) for v in long_way]
    assert to_jsonable(tuple(items)) == got and got is not items
