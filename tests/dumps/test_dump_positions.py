"""``dump-diff --positions`` takes the SPEC of ``ab`` and ``verify`` (:mod:`logitlab.positions`), on crafted dumps:
the same SPEC keeps the same positions as ``ab`` keeps rows of the same run, and a bad SPEC is the same error."""

import pytest

from logitlab.dumps import TensorFilter, diff_dumps, open_dump
from logitlab.errors import InputError, InternalError
from logitlab.experiments.positions import parse_positions
from rawdumps import N_POS, base_tensors, write_folder, write_logitlab_dump

#: the crafted logitlab dump's run: 1 prompt token (position 0), then N_POS - 1 decode steps
N_PROMPT, N_DECODE = 1, N_POS - 1
SPECS = ["all", "prompt", "decode", "last", "every:2", "1-", "0,2", "prompt,last", "1-1,decode"]


def compared(result) -> list[int]:
    return sorted({t.position for t in result.tensors})


@pytest.mark.parametrize("spec", SPECS)
def test_a_spec_keeps_in_a_logitlab_dump_the_rows_ab_keeps_of_the_same_run(tmp_path, spec):
    a = write_logitlab_dump(tmp_path / "a", base_tensors())
    b = write_logitlab_dump(tmp_path / "b", base_tensors())
    result = diff_dumps(open_dump(a), open_dump(b), select=TensorFilter.parse(positions=spec))
    assert compared(result) == parse_positions(spec).rows(N_PROMPT, N_DECODE).tolist()


@pytest.mark.parametrize("spec", ["all", "last", "every:2", "1-", "0,2"])
def test_raw_dumps_take_the_spec_words_that_need_no_prompt_length(tmp_path, spec):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    result = diff_dumps(open_dump(a), open_dump(a), select=TensorFilter.parse(positions=spec))
    assert compared(result) == parse_positions(spec).rows(N_POS, 0).tolist()  # the run: the positions held


@pytest.mark.parametrize("spec", ["prompt", "last,decode"])
def test_raw_dumps_refuse_prompt_and_decode_in_one_line(tmp_path, spec):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    word = spec.split(",")[-1]
    with pytest.raises(InputError, match=rf"^--positions '{spec}': '{word}' needs to know where the prompt ends, "
                                         r"which only a logitlab dump records \(neither dump has a manifest\); give "
                                         r"position numbers: the dumps have positions 0-2$"):
        diff_dumps(open_dump(a), open_dump(a), select=TensorFilter.parse(positions=spec))


@pytest.mark.parametrize("spec", ["frist", "every:0", "9-3", "0,,2", "", "-3"])
def test_a_bad_spec_is_the_error_ab_gives(spec):
    with pytest.raises(InputError) as ab_error:
        parse_positions(spec)
    with pytest.raises(InputError) as dump_error:
        TensorFilter.parse(positions=spec)
    assert str(dump_error.value) == str(ab_error.value) and str(ab_error.value).startswith("--positions")


def test_positions_past_the_run_are_the_error_ab_gives(tmp_path):
    a = write_logitlab_dump(tmp_path / "a", base_tensors())
    with pytest.raises(InputError) as ab_error:
        parse_positions("0,5").rows(N_PROMPT, N_DECODE)
    with pytest.raises(InputError) as dump_error:
        diff_dumps(open_dump(a), open_dump(a), select=TensorFilter.parse(positions="0,5"))
    assert str(dump_error.value) == str(ab_error.value) == ("--positions '0,5': 5 is past the run's last row 2 "
                                                            "(1 prompt + 2 decode rows)")


def test_an_unresolved_spec_cannot_be_tested_and_all_needs_no_run():
    select = TensorFilter.parse(positions="last")
    with pytest.raises(InternalError, match="not resolved"):
        select.keeps_position(0)
    assert select.for_run(4, 2).positions == {5} and select.for_run(4, 2).to_dict()["positions_spec"] == "last"
    assert TensorFilter.parse(positions="all") == TensorFilter() and TensorFilter().keeps_position(7)
