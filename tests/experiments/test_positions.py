"""``--positions``: the spec parser and the rows it selects, on crafted run sizes."""

from __future__ import annotations

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.experiments.positions import Selected, parse_positions, row_counter


def rows(spec: str, n_prompt: int = 10, n_decode: int = 4) -> list[int]:
    out = parse_positions(spec).rows(n_prompt, n_decode)
    assert out.dtype == np.int64
    return out.tolist()


def test_keywords():
    assert rows("all") == list(range(14))
    assert rows("prompt") == list(range(10))
    assert rows("decode") == [10, 11, 12, 13]
    assert rows("last") == [13]
    assert rows("last", 7, 0) == [6]
    assert rows(" PROMPT ") == list(range(10))


def test_every_and_ranges():
    assert rows("every:5") == [0, 5, 10]
    assert rows("every:1") == list(range(14))
    assert rows("0-2,5,12-") == [0, 1, 2, 5, 12, 13]
    assert rows("3-3") == [3]
    assert rows("13") == [13]


def test_union_is_sorted_and_distinct():
    assert rows("last,0-1,decode,1") == [0, 1, 10, 11, 12, 13]
    assert parse_positions("all").is_all and parse_positions("prompt,all").is_all
    assert not parse_positions("0-").is_all


def test_decode_of_a_prompt_only_run_is_empty():
    with pytest.raises(InputError, match=r"--positions 'decode' selects no row of a run of 5 prompt \+ 0 decode"):
        rows("decode", 5, 0)


@pytest.mark.parametrize("spec, part", [
    ("", "is empty"), ("  ", "is empty"), ("frist", "'frist' is not a position spec"),
    ("0-3,,5", "an empty item is not a position spec"), ("every:0", "'every:0' needs a step of at least 1"),
    ("every:x", "'every:x' is not a position spec"), ("5-2", "'5-2' ends before it starts"),
    ("-3", "'-3' is not a position spec"), ("1.5", "'1.5' is not a position spec"),
])
def test_bad_specs_name_the_option_and_the_part(spec, part):
    with pytest.raises(InputError) as caught:
        parse_positions(spec)
    message = str(caught.value)
    assert message.startswith("--positions") and part in message and "\n" not in message


@pytest.mark.parametrize("spec, text", [("14", "14 is past the run's last row 13"),
                                        ("3-20", "3-20 is past the run's last row 13"),
                                        ("20-", "20- is past the run's last row 13")])
def test_rows_past_the_run_are_refused(spec, text):
    with pytest.raises(InputError, match=f"--positions '{spec}': {text} \\(10 prompt \\+ 4 decode rows\\)"):
        rows(spec)


def test_selected_line():
    assert Selected("last", 1, 81).line() == "compared 1 of 81 positions (last)"


def test_count_for_estimates_ignores_rows_past_the_run():
    assert parse_positions("0-3,40").count(10, 4) == 4 and parse_positions("last").count(10, 4) == 1
    assert parse_positions("decode").count(5, 0) == 0 and parse_positions("every:2").count(10, 4) == 7


def test_row_counter():
    assert row_counter(None, 8) is None and row_counter("all", 8) is None
    count = row_counter("prompt,last", 8)
    assert count(20) == 13 and count(3) == 1  # 12 prompt rows + the last; a run shorter than its decode steps
    with pytest.raises(InputError, match="--positions 'x'"):
        row_counter("x", 8)
