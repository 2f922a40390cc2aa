"""dump-diff on crafted raw-f32 folders: a planted first divergence must be found exactly,
with missing, truncated and mis-sized files reported one line each and the rest still compared."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from logitlab.dumps import ShapeSpec, TensorFilter, diff_dumps, open_dump
from logitlab.dumps.diff_results import DumpDiffResult
from logitlab.dumps.read_files import infer_prefix
from logitlab.errors import InputError
from rawdumps import N_LAYERS, N_POS, WIDTH, base_tensors, plant, raw_path, write_folder

PLANTS = [("attn_norm", 0, 0), ("ffn_out", 2, 1), ("kqv_out", 3, 2), ("l_out", 1, 0)]


@pytest.mark.parametrize("start", PLANTS)
def test_planted_first_divergence_is_found(tmp_path, start):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "ds4_dumps_a")
    b = write_folder(tmp_path / "b", plant(base, start), "ds4_dumps_b")
    result = diff_dumps(open_dump(a), open_dump(b))
    name, layer, pos = start
    first = result.first_divergence
    assert (first.name, first.layer, first.position) == (name, layer, pos)
    assert first.stats.max_ulp == 3 and first.stats.differing == WIDTH // 2
    assert result.verdict == "differs" and not result.problems and not result.only_left
    assert result.n_aligned == len(base)
    # growth: every later layer differs more than the first one
    rows = {row.layer: row for row in result.layers}
    assert rows[layer].first == first.label
    for later in range(layer + 1, N_LAYERS):
        assert rows[later].max_ulp > rows[layer].max_ulp
    assert all(rows[earlier].differing == 0 for earlier in range(layer))


def test_missing_and_truncated_files_are_reported_and_the_plant_still_found(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "run_a")
    b = write_folder(tmp_path / "b", plant(base, ("ffn_out", 2, 1)), "run_b")
    raw_path(b, "run_b", "kqv_out", 0, 2).unlink()                          # missing on B, before the plant
    truncated = raw_path(b, "run_b", "ffn_inp", 1, 0)                       # truncated on B, before the plant
    truncated.write_bytes(truncated.read_bytes()[:-6])
    half = raw_path(a, "run_a", "l_out", 3, 2)                              # A cut to half, after the plant
    half.write_bytes(half.read_bytes()[: WIDTH * 2])
    result = diff_dumps(open_dump(a), open_dump(b))
    first = result.first_divergence
    assert first.label == "ffn_out-2@pos1"
    assert [g.to_dict() for g in result.only_left] == [
        {"side": "left", "name": "kqv_out", "instance": 0, "label": "kqv_out", "layers": "0", "positions": "2",
         "count": 1, "other_side_has_name": True}]
    assert not result.only_right
    assert [t.label for t in result.unresolved_before_first] == ["ffn_inp-1@pos0"]
    problems = "\n".join(result.problems)
    assert f"{truncated}: truncated (250 bytes is not a multiple of 4" in problems
    assert f"l_out-3@pos2: size mismatch: A 32 vs B 64 elements (truncated?: A {half})" in problems  # names the file
    assert len(result.problems) == 2 and all("\n" not in p for p in result.problems)
    assert result.n_unresolved == 2 and result.n_aligned == len(base) - 1


def test_identical_folders_are_bit_exact_and_filters_apply(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "x")
    b = write_folder(tmp_path / "b", base, "y")
    result = diff_dumps(open_dump(a), open_dump(b))
    assert result.verdict == "bit-exact" and result.n_compared == len(base) and result.first_divergence is None
    some = diff_dumps(open_dump(a), open_dump(b), select=TensorFilter.parse("l_out", "1-2", "0"))
    assert [t.label for t in some.tensors] == ["l_out-1@pos0", "l_out-2@pos0"]


def test_result_round_trips_through_json(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", plant(base, ("kqv_out", 1, 1)), "p")
    raw_path(b, "p", "attn_norm", 0, 0).unlink()
    result = diff_dumps(open_dump(a), open_dump(b))
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False, default=str))
    back = DumpDiffResult.from_dict(data)
    assert back.first_divergence.label == "kqv_out-1@pos1" and back.verdict == "differs"
    assert [r.to_dict() for r in back.layers] == [r.to_dict() for r in result.layers]
    assert back.only_left[0].label == "attn_norm"
    assert json.dumps(result.summary(), allow_nan=False)


def test_shapes_from_option_and_shapes_file(tmp_path):
    base = {k: v for k, v in base_tensors().items() if k[0] == "attn_norm"}
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", base, "q")
    dump = open_dump(a, shapes=ShapeSpec.parse(["attn_norm=8x8"]))
    assert dump.refs[0].shape == (8, 8) and dump.refs[0].load().shape == (8, 8) and not dump.problems
    bad = open_dump(a, shapes=ShapeSpec.parse(["attn_norm=576"]))
    assert len(bad.problems) == len(base) and "mis-sized: 64 float32 values, shape 576 needs 576" not in bad.problems[0]
    assert "truncated: 64 float32 values, shape 576 needs 576" in bad.problems[0]
    (b / "shapes.json").write_text(json.dumps({"attn_norm": [4, 16]}))
    assert open_dump(b).refs[0].shape == (4, 16)
    result = diff_dumps(bad, open_dump(b))
    assert result.verdict == "nothing-aligned" and result.n_unresolved == len(base)
    with pytest.raises(InputError, match="bad --shape"):
        ShapeSpec.parse(["attn_norm=axb"])


def test_bad_inputs_one_line_each_and_nothing_aligned(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    other = write_folder(tmp_path / "o", base_tensors(), "z")
    (other / "notes.txt").write_text("hello")
    result = diff_dumps(open_dump(empty), open_dump(other))
    assert result.verdict == "nothing-aligned"
    assert any("empty folder" in p for p in result.problems)
    assert any("notes.txt: skipped" in p for p in result.problems)
    missing = diff_dumps(open_dump(tmp_path / "nope"), open_dump(other))
    assert missing.problems[0] == f"A: {tmp_path / 'nope'}: no such file or folder"
    # names that do not align at all
    c = write_folder(tmp_path / "c", {("mystery", 0, 0): np.ones(4, np.float32)}, "p")
    d = write_folder(tmp_path / "d", {("enigma", 0, 0): np.ones(4, np.float32)}, "p")
    result = diff_dumps(open_dump(c), open_dump(d))
    assert result.verdict == "nothing-aligned" and "no tensor name/layer/position is in both dumps" in result.problems[-1]


def test_a_single_file_that_is_no_dump_says_why(tmp_path):
    dump = write_folder(tmp_path / "a", base_tensors(), "p")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "other.json").write_text('{"some": "thing"}')
    (tmp_path / "step.safetensors.part").write_bytes(b"x" * 16)
    expected = {
        "empty.json": "empty file, not a dump",
        "other.json": "a JSON file, not a dump: give a dump folder, or a .bin/.f32/.i32/.npy/.safetensors file",
        "step.safetensors.part": "an unfinished step file (.part) of a capture that did not end, not a dump",
    }
    for name, why in expected.items():
        result = diff_dumps(open_dump(dump), open_dump(tmp_path / name))
        assert result.verdict == "nothing-aligned"
        assert result.problems == [f"B: {tmp_path / name}: {why}"], result.problems
        assert not any("not a file" in p for p in result.problems)


def test_dtype_mismatch_between_bin_and_i32(tmp_path):
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir(), b.mkdir()
    np.arange(4, dtype="<f4").tofile(a / "r_inp_pos_pos0.bin")
    np.arange(4, dtype="<i4").tofile(b / "r_inp_pos_pos0.i32")
    np.arange(4, dtype="<i4").tofile(a / "r_ids_pos1.i32")
    np.array([0, 1, 2, 5], dtype="<i4").tofile(b / "r_ids_pos1.i32")
    result = diff_dumps(open_dump(a), open_dump(b))
    assert any("dtype mismatch: A float32 vs B int32 (A " in p and str(b) in p for p in result.problems)
    assert result.first_divergence.label == "ids@pos1" and result.first_divergence.stats.max_ulp == 2


def test_npy_and_safetensors_inputs(tmp_path):
    base = {k: v for k, v in base_tensors().items() if k[1] in (None, 0)}
    a = tmp_path / "a"
    a.mkdir()
    for (name, layer, pos), value in base.items():
        np.save(a / (f"{name}" + (f"-{layer}" if layer is not None else "") + f"_pos{pos}.npy"), value)
    changed = plant(base, ("ffn_out", 0, 2))
    st = tmp_path / "b.safetensors"
    save_file({(f"{n}" + (f"-{l}" if l is not None else "") + f"_pos{p}"): v for (n, l, p), v in changed.items()},
              str(st))
    result = diff_dumps(open_dump(a), open_dump(st))
    assert result.first_divergence.label == "ffn_out-0@pos2" and not result.problems
    assert result.left["kind"] == "npy" and result.right["kind"] == "safetensors"


def test_raw_format_forces_float32_for_any_extension(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    np.ones(4, "<f4").tofile(a / "x_l_out-0_pos0.dat")
    dump = open_dump(a, format="raw-f32")
    assert [r.label for r in dump.refs] == ["l_out-0@pos0"] and dump.refs[0].dtype == "float32"
    assert open_dump(a).problems[0].endswith("skipped, not a .bin, .f32, .i32, .npy or .safetensors file")


def test_prefix_inference_and_explicit_prefix(tmp_path):
    assert infer_prefix(["ds4a_result_output"]) == "ds4a_"
    assert infer_prefix(["attn_norm", "attn_out"]) == ""
    assert infer_prefix(["p_attn_norm"]) == "p_"
    a = write_folder(tmp_path / "a", {("result_output", 0, 0): np.ones(4, np.float32)}, "run_a")
    assert [r.name for r in open_dump(a).refs] == ["result_output"]
    assert [r.name for r in open_dump(a, prefix="run").refs] == ["a_result_output"]
    assert "does not start with the prefix 'zz_'" in open_dump(a, prefix="zz").problems[0]


def test_positions_and_layers_sort_layer_major(tmp_path):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    labels = [r.label for r in open_dump(a).refs]
    assert labels[:4] == ["attn_norm-0@pos0", "attn_norm-0@pos1", "attn_norm-0@pos2", "kqv_out-0@pos0"]
    assert labels[-1] == f"result_output@pos{N_POS - 1}"


def test_shape_mismatch_with_equal_sizes_is_reported_and_compared_flat(tmp_path):
    a = write_folder(tmp_path / "a", {("l_out", 0, 0): np.arange(64, dtype=np.float32)}, "p")
    b = write_folder(tmp_path / "b", {("l_out", 0, 0): np.arange(64, dtype=np.float32)}, "q")
    result = diff_dumps(open_dump(a, shapes=ShapeSpec.parse(["8x8"])), open_dump(b, shapes=ShapeSpec.parse(["4x16"])))
    assert result.problems == ["l_out-0@pos0: shape mismatch: A (8, 8) vs B (4, 16); compared as flat vectors"]
    assert result.n_compared == 1 and result.tensors[0].stats.bit_exact
