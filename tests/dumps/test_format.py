"""The dump format: labels, filters, sizes, streamed safetensors step files, the manifest."""

import json

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file

from logitlab.dumps.filters import TensorFilter, format_ranges, parse_ranges
from logitlab.dumps.format import format_label, split_label
from logitlab.dumps.manifest import DumpManifest, TensorEntry, read_manifest
from logitlab.dumps.sizes import parse_size
from logitlab.dumps.step_writer import StepWriter
from logitlab.errors import InputError


def test_labels_round_trip():
    assert split_label("attn_norm-3") == ("attn_norm", 3, 0)
    assert split_label("result_output") == ("result_output", None, 0)
    assert split_label("norm-3#1") == ("norm", 3, 1)
    assert format_label("norm", 3, 1, 5) == "norm-3#1@pos5"
    assert format_label("result_output", None) == "result_output"


def test_ranges_and_sizes():
    assert parse_ranges("0-2,7", "--layers") == {0, 1, 2, 7}
    assert parse_ranges(None, "--layers") is None
    with pytest.raises(InputError, match="bad --layers item 'x'"):
        parse_ranges("x", "--layers")
    with pytest.raises(InputError, match="bad --layers range '3-1'"):
        parse_ranges("3-1", "--layers")
    assert parse_size("500MB") == 500_000_000 and parse_size("2GiB") == 2 * 1024**3 and parse_size("10") == 10
    with pytest.raises(InputError, match="bad size 'lots'"):
        parse_size("lots")
    assert format_ranges({7, 0, 1, 2, 9, 10}) == "0-2,7,9-10" and format_ranges(parse_ranges("3", "--x")) == "3"


@pytest.mark.parametrize("args, message", [
    (dict(positions="0,,2"), r"^--positions '0,,2': an empty item is not a position spec; valid: all, prompt, "),
    (dict(positions=","), r"^--positions ',': an empty item is not a position spec"),
    (dict(positions=""), r"^--positions is empty; valid: all, prompt, decode, last, every:K, A, A-B, A- "),
    (dict(layers=""), r"^--layers '' is empty: give ranges like 0-3,7, or leave --layers out for all$"),
    (dict(layers=" "), r"^--layers ' ' is empty"),
    (dict(positions="-3"), r"^--positions '-3': '-3' is not a position spec"),
    (dict(positions="frist"), r"^--positions 'frist': 'frist' is not a position spec; valid: all, prompt, "),
    (dict(names=""), r"^--names '' is empty: give globs like 'attn_\*,l_out', or leave --names out for all$"),
    (dict(names="l_out,,kq"), r"^--names 'l_out,,kq' has an empty item"),
    (dict(names="["), r"^bad --names glob '\[': '\[' without a closing '\]'$"),
    (dict(names="l_out,attn_[!]"), r"^bad --names glob 'attn_\[!\]'"),
])
def test_empty_and_malformed_filters_name_the_option(args, message):
    with pytest.raises(InputError, match=message):
        TensorFilter.parse(**args)


def test_well_formed_filters_still_parse():
    f = TensorFilter.parse("attn_[nk]*, l_out ,[!x]*", " 0-1, 3 ", "2")
    assert f.names == ("attn_[nk]*", "l_out", "[!x]*") and f.layers == {0, 1, 3} and f.spec.spec == "2"
    assert f.positions is None and f.for_run(3, 0).positions == {2}  # a SPEC: positions once the run is known
    assert TensorFilter.parse(layers="1048575").layers == {1048575}


def test_filters_that_keep_no_tensor_are_named_with_what_exists():
    from logitlab.dumps.capture_llamacpp import check_filter_matches

    seen = [("embd", None)] + [(n, layer) for layer in range(30) for n in ("attn_norm", "kq", "l_out")] + [
        ("result_output", None)]
    check_filter_matches(TensorFilter.parse("l_out", "0-3"), seen)  # keeps something: fine
    with pytest.raises(InputError, match=r"^--layers 99 matches no layer: the model has layers 0-29$"):
        check_filter_matches(TensorFilter.parse(layers="99"), seen)
    with pytest.raises(InputError, match=r"^--names nomatch_\* matches no tensor; the graph has embd, attn_norm, kq, "
                                         r"l_out, result_output$"):
        check_filter_matches(TensorFilter.parse("nomatch_*"), seen)
    with pytest.raises(InputError, match=r"^--names kq-0 with --layers 3 matches no tensor: those names are in "
                                         r"other layers \(layers 0-29\)$"):
        check_filter_matches(TensorFilter.parse("kq-0", "3"), seen)


def test_filter_names_layers_positions():
    f = TensorFilter.parse("attn_*,result_output", "0-1", "3").for_run(10, 0)
    assert f.keeps_name("attn_norm", 0) and not f.keeps_name("attn_norm", 2) and not f.keeps_name("ffn_out", 0)
    assert f.keeps_name("result_output", None)
    assert f.keeps_position(3) and not f.keeps_position(4) and f.keeps_span(0, 4) and not f.keeps_span(4, 9)
    assert TensorFilter.parse("kq-0").keeps_name("kq", 0) and not TensorFilter.parse("kq-0").keeps_name("kq", 1)


def test_step_writer_streams_a_standard_safetensors_file(tmp_path):
    arrays = {
        "000000/attn_norm-0@0": np.arange(12, dtype=np.float32).reshape(3, 4),
        "000001/cache@0": np.arange(6, dtype=np.float16),
        "000002/bf@0": np.ones((2, 2), dtype=ml_dtypes.bfloat16),
        "000003/ids@0": np.array([1, 2, 3], dtype=np.int32),
        "000004/strided@0": np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2],
    }
    writer = StepWriter(tmp_path / "step-0000-prefill.safetensors")
    for key, value in arrays.items():
        writer.add(key, value)
    with pytest.raises(InputError, match="written twice"):
        writer.add("000000/attn_norm-0@0", arrays["000000/attn_norm-0@0"])
    path = writer.close({"step": "0"})
    assert not list(tmp_path.glob("*.part"))
    loaded = load_file(str(path))
    assert set(loaded) == set(arrays)
    for key, value in arrays.items():
        assert loaded[key].dtype == value.dtype and np.array_equal(loaded[key], value)


def test_manifest_round_trip(tmp_path):
    entry = TensorEntry("000000/kq-0@0", "kq", 0, 0, (0, 5), 1, "float32", (9, 5, 256), 0, 0,
                        "step-0000-prefill.safetensors", "MUL_MAT")
    manifest = DumpManifest(engine={"engine": "llamacpp", "model_sha256": "ab" * 32}, variant={"label": "control"},
                            prompt_ids=[1, 2, 3, 4, 5], generated=[6], filter=TensorFilter().to_dict(),
                            tensors=[entry])
    manifest.write(tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["format"] == "logitlab-dump" and data["schema_version"] == 1 and data["input_ids"] == [1, 2, 3, 4, 5, 6]
    back = read_manifest(tmp_path)
    assert back.tensors[0] == entry and back.input_ids == [1, 2, 3, 4, 5, 6]
    assert entry.nbytes == 9 * 5 * 256 * 4


def test_manifest_errors(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "logitlab-dump", "schema_version": 99}))
    with pytest.raises(InputError, match="schema_version 99"):
        read_manifest(tmp_path)
