"""Capture from llama.cpp on the embedded model (short prompt, 2 decode steps)."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import SHORT_PROMPT
from logitlab.dumps import TensorFilter, diff_dumps, dump_pair, dump_variant, localize, open_dump
from logitlab.engines.variant import parse_variant
from logitlab.errors import InputError

pytestmark = pytest.mark.engine
N_DECODE = 2


def variant(spec: str, label: str = "candidate"):
    return parse_variant(spec, label, default_engine="llamacpp")


@pytest.fixture(scope="module")
def flash_attn_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("fa")
    return dump_pair(variant("", "control"), variant("flash_attn=1"), SHORT_PROMPT, N_DECODE, root,
                     select=TensorFilter.parse(layers="0-2")), root


def test_dump_layout_manifest_and_logits_match_result_output(flash_attn_pair):
    (control, _), root = flash_attn_pair
    m = json.loads((root / "control" / "manifest.json").read_text())
    assert m["format"] == "logitlab-dump" and m["complete"] and m["stopped"] is None
    assert len(m["model_sha256"]) == 64 and m["variant"]["label"] == "control"
    n_prompt = len(m["prompt_ids"])
    assert [s["kind"] for s in m["steps"]] == ["prefill"] + ["decode"] * N_DECODE
    assert m["steps"][0]["positions"] == [0, n_prompt] and m["steps"][-1]["positions"] == [n_prompt + 1, n_prompt + 2]
    names = {(t["name"], t["instance"]) for t in m["tensors"]}
    for expected in [("attn_norm", 0), ("norm", 1), ("Qcur", 1), ("kq", 0), ("kqv_out", 0), ("ffn_out", 0),
                     ("l_out", 0), ("result_norm", 0), ("result_output", 0)]:
        assert expected in names
    assert not any(" (" in t["name"] or t["name"].startswith("node_") for t in m["tensors"])
    assert m["bytes_written"] == sum(step["nbytes"] for step in m["steps"])
    assert {t["layer"] for t in m["tensors"]} == {None, 0, 1, 2}
    assert 0.8 < m["bytes_written"] / m["estimate_bytes"] < 1.25
    # result_output at every position is exactly the engine's logits row
    dump = open_dump(root / "control")
    rows = {r.position: r for r in dump.refs if r.name == "result_output"}
    assert sorted(rows) == list(range(n_prompt + N_DECODE))
    for pos, ref in rows.items():
        assert np.array_equal(ref.load().reshape(-1), control.logits[pos])
    prefill = load_file(str(root / "control" / m["steps"][0]["file"]))
    kq = next(t for t in m["tensors"] if t["name"] == "kq" and t["layer"] == 0 and t["step"] == 0)
    assert list(prefill[kq["key"]].shape) == kq["shape"] and kq["shape"][kq["token_axis"]] == n_prompt


def test_flash_attn_first_divergence_is_attention_in_layer_0(flash_attn_pair):
    _, root = flash_attn_pair
    result = diff_dumps(open_dump(root / "control"), open_dump(root / "candidate"))
    first = result.first_divergence
    assert result.verdict == "differs" and not result.problems
    assert first.layer == 0 and first.kind == "attention" and first.name == "kqv_out", first.label
    # everything before it in execution order is bit-exact (embeddings, norms, Q/K/V of layer 0)
    assert all(not t.differs for t in result.tensors[: result.first_index])
    # the non-fused attention tensors exist only in the control
    assert {g.name for g in result.only_left} == {"kq", "kq_soft_max", "kqv"} and not result.only_right
    assert result.layers[-1].label == "output" and result.layers[-1].differing > 0


def test_n_threads_1_vs_2_all_tensors_bit_exact(tmp_path):
    pair = dump_pair(variant("n_threads=1,n_threads_batch=1", "control"), variant("n_threads=2,n_threads_batch=2"),
                     SHORT_PROMPT, N_DECODE, tmp_path, select=TensorFilter.parse(layers="0-4"))
    assert pair[0].manifest.generated == pair[1].manifest.generated
    result = diff_dumps(open_dump(tmp_path / "control"), open_dump(tmp_path / "candidate"))
    assert result.verdict == "bit-exact" and result.n_compared > 1000 and not result.problems


def test_ubatch_split_assigns_positions(tmp_path):
    """n_ubatch=4 computes the prompt in several graphs; positions still line up with n_ubatch=512."""
    pair = dump_pair(variant("", "control"), variant("n_ubatch=4,n_batch=4"), SHORT_PROMPT, 1, tmp_path,
                     select=TensorFilter.parse("attn_norm,result_output"))
    for capture, side in zip(pair, ("control", "candidate")):
        rows = {r.position: r for r in open_dump(tmp_path / side).refs if r.name == "result_output"}
        for pos, ref in rows.items():
            assert np.array_equal(ref.load().reshape(-1), capture.logits[pos])
    result = diff_dumps(open_dump(tmp_path / "control"), open_dump(tmp_path / "candidate"))
    assert not result.only_left and not result.only_right and result.n_compared == 31 * (len(pair[0].logits))
    assert result.tensors[0].label == "attn_norm-0@pos0" and not result.tensors[0].differs


def test_filters_and_max_bytes_stop(tmp_path):
    select = TensorFilter.parse("l_out,result_output", "1-2", "3-4")
    capture = dump_variant(variant("", "control"), SHORT_PROMPT, N_DECODE, tmp_path / "f", select=select)
    labels = {(t.name, t.layer, t.positions) for t in capture.manifest.tensors}
    assert labels == {(n, l, (p, p + 1)) for n, l in [("l_out", 1), ("l_out", 2), ("result_output", None)]
                      for p in (3, 4)}
    stopped = dump_variant(variant("", "control"), SHORT_PROMPT, N_DECODE, tmp_path / "m", max_bytes=3_000_000)
    m = stopped.manifest
    assert not m.complete and "--max-bytes 3.0 MB reached at step 0" in m.stopped
    assert m.bytes_written <= 3_000_000 and len(m.steps) == 1 and m.generated == []
    dump = open_dump(tmp_path / "m")
    assert dump.problems and "incomplete dump" in dump.problems[0] and dump.refs


def test_filters_that_keep_nothing_and_a_too_small_max_bytes_are_errors(tmp_path):
    control = variant("", "control")
    cases = [
        (dict(select=TensorFilter.parse(positions="100")),
         r"^--positions '100': 100 is past the run's last row 13 \(12 prompt \+ 2 decode rows\)$"),
        (dict(select=TensorFilter.parse(layers="99")), r"^--layers 99 matches no layer: the model has layers 0-29$"),
        (dict(select=TensorFilter.parse("nomatch_*")),
         r"^--names nomatch_\* matches no tensor; the graph has embd, .*attn_norm, .*\(20 names\)$"),
        (dict(max_bytes=0), r"^--max-bytes 0 B is smaller than the first tensor \(embd, [0-9.]+ kB\): nothing would "
                            r"be stored; raise it \(the whole capture is estimated at [0-9.]+ MB\)$"),
    ]
    for i, (kwargs, message) in enumerate(cases):
        with pytest.raises(InputError, match=message):
            dump_variant(control, SHORT_PROMPT, N_DECODE, tmp_path / str(i), **kwargs)
        assert not (tmp_path / str(i)).exists()  # nothing written, not even a manifest: the folder it made is gone
    with pytest.raises(InputError, match=r"^the prompt \(12 tokens\) \+ --tokens 2 = 14 exceeds the context of 8 "
                                         r"tokens; shorten the prompt or --tokens, or pass a larger n_ctx=\.\.\. in "
                                         r"the variant$"):
        dump_variant(variant("n_ctx=8", "control"), SHORT_PROMPT, N_DECODE, tmp_path / "small")
    assert not (tmp_path / "small").exists()
    (tmp_path / "mine").mkdir()
    with pytest.raises(InputError, match="--layers 99 matches no layer"):
        dump_variant(control, SHORT_PROMPT, N_DECODE, tmp_path / "mine", select=TensorFilter.parse(layers="99"))
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())  # a folder given empty stays


def test_out_dir_must_be_empty_and_engines_without_capture_are_named(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="is not empty"):
        dump_variant(variant("", "control"), SHORT_PROMPT, 1, tmp_path / "x")
    with pytest.raises(InputError, match="^dump capture is implemented for hf, llamacpp, not 'fake'$"):
        dump_variant(parse_variant("", "control", default_engine="fake"), SHORT_PROMPT, 1, tmp_path / "y")


def test_localize_returns_a_json_summary():
    fa = variant("flash_attn=1")
    summary = localize(variant("", "control"), fa, [1, 504, 3458, 282, 4649, 314], [28, 2443],
                       select=TensorFilter.parse(layers="0-1"))
    assert summary["verdict"] == "differs" and summary["first_divergence"]["name"] == "kqv_out"
    assert summary["dumps"] is None and json.dumps(summary, allow_nan=False)
