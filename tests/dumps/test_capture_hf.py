"""Capture from the hf engine (transformers forward hooks) on the embedded model: short prompt, 2 decode steps."""

import json
import subprocess
import sys

import numpy as np
import pytest

from logitlab.dumps import TensorFilter, diff_dumps, dump_pair, dump_variant, open_dump
from logitlab.dumps.capture_hf import capture_hf
from logitlab.engines.variant import parse_variant
from logitlab.errors import InputError

pytestmark = pytest.mark.engine
PROMPT = "Paris is the capital of France. Rome is"  # 9 tokens
N_DECODE = 2
#: Names both engines give (hf module taps mapped onto llama.cpp's graph names), in hf execution order.
SHARED = ["embd", "attn_norm", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up",
          "ffn_swiglu", "ffn_out", "l_out", "result_norm", "result_output"]
HF_ONLY = {"q_proj", "k_proj", "act_fn"}


def variant(spec: str, label: str = "candidate", engine: str = "hf"):
    return parse_variant(spec, label, default_engine=engine)


@pytest.fixture(scope="module")
def hf_engine():
    from logitlab.engines.hf import HfEngine

    engine = HfEngine(model=None, options={})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def bf16_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16")
    return dump_pair(variant("dtype=float32", "control"), variant("dtype=bfloat16"), PROMPT, N_DECODE, root), root


def test_layout_names_and_result_output_is_the_logits(bf16_pair):
    (control, candidate), root = bf16_pair
    m = json.loads((root / "control" / "manifest.json").read_text())
    n_prompt = len(m["prompt_ids"])
    assert m["format"] == "logitlab-dump" and m["complete"] and m["engine"]["engine"] == "hf"
    assert [s["kind"] for s in m["steps"]] == ["prefill"] + ["decode"] * N_DECODE
    assert m["steps"][-1]["positions"] == [n_prompt + 1, n_prompt + 2]
    layer0 = [t["name"] for t in m["tensors"] if t["step"] == 0 and t["layer"] in (None, 0)]
    assert layer0 == ["embd", "attn_norm", "q_proj", "k_proj", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm",
                      "ffn_gate", "act_fn", "ffn_up", "ffn_swiglu", "ffn_out", "l_out", "result_norm", "result_output"]
    assert {t["layer"] for t in m["tensors"]} == {None, *range(30)}
    assert {t["dtype"] for t in m["tensors"]} == {"float32"} and {t["token_axis"] for t in m["tensors"]} == {0}
    by_name = {t["name"]: t for t in m["tensors"] if t["step"] == 0 and t["layer"] in (None, 0)}
    assert by_name["kqv_out"]["op"] == "model.layers.0.self_attn.o_proj:input"
    assert by_name["kqv_out"]["shape"] == [n_prompt, 576] and by_name["ffn_swiglu"]["shape"] == [n_prompt, 1536]
    assert by_name["Vcur"]["shape"] == [n_prompt, 192] and by_name["result_output"]["shape"] == [n_prompt, 49152]
    assert m["bytes_written"] == m["estimate_bytes"]
    # result_output rows are the engine's logits, bit for bit, in float32 and in (widened) bfloat16
    for capture, side in ((control, "control"), (candidate, "candidate")):
        rows = {r.position: r.load() for r in open_dump(root / side).refs if r.name == "result_output"}
        assert sorted(rows) == list(range(n_prompt + N_DECODE))
        assert all(np.array_equal(rows[p], capture.logits[p]) for p in rows)
    assert "hf computed in bfloat16; tensors are stored as float32" in candidate.manifest.engine["capture_notes"][0]
    assert "capture_notes" not in control.manifest.engine


def test_float32_vs_bfloat16_names_the_first_divergence(bf16_pair):
    _, root = bf16_pair
    result = diff_dumps(open_dump(root / "control"), open_dump(root / "candidate"))
    first = result.first_divergence
    print(f"\nfloat32 vs bfloat16: first divergence {first.label} ({first.kind}): {first.stats.differing}/"
          f"{first.stats.n} differ, max |Δ| {first.stats.max_abs_diff:.3e}, max {first.stats.max_ulp} ULP; "
          f"layer 0 first: {result.layers[1].first}")
    assert result.verdict == "differs" and not result.problems and not result.only_left and not result.only_right
    # the bfloat16 engine holds its weights in bfloat16, so the embedding lookup itself is the first to differ,
    # by bfloat16 rounding: at most half a bfloat16 step, 2**15 float32 ULPs
    assert first.label == "embd@pos0" and first.kind == "embedding" and first.stats.max_ulp <= 2**15
    assert result.first_index == 0
    assert result.layers[1].label == "0" and result.layers[1].first == "attn_norm-0@pos0"
    assert result.layers[-1].label == "output" and result.layers[-1].min_cosine > 0.99


def test_float32_vs_float32_is_bit_exact_in_every_tensor(bf16_pair, hf_engine, tmp_path):
    (control, _), root = bf16_pair
    again = capture_hf(hf_engine, control.manifest.prompt_ids, N_DECODE, tmp_path, replay=control.manifest.generated)
    assert again.manifest.generated == control.manifest.generated
    result = diff_dumps(open_dump(root / "control"), open_dump(tmp_path))
    n_positions = len(control.logits)  # 30 layers x 14 tensors + embd, result_norm, result_output at each position
    assert result.verdict == "bit-exact" and result.n_compared == n_positions * (30 * 14 + 3) and not result.problems


def test_names_align_with_a_llamacpp_dump_of_the_same_tokens(bf16_pair, tmp_path):
    (control, _), root = bf16_pair
    lc = dump_variant(variant("", "control", engine="llamacpp"), control.manifest.prompt_ids, N_DECODE, tmp_path,
                      replay=control.manifest.generated, select=TensorFilter.parse(layers="0-1"))
    result = diff_dumps(open_dump(tmp_path), open_dump(root / "control"), select=TensorFilter.parse(layers="0-1"))
    n_pos = len(control.logits)
    aligned = list(dict.fromkeys(t.name for t in result.tensors))
    assert sorted(aligned) == sorted(SHARED) and result.n_aligned == n_pos * (2 * (len(SHARED) - 3) + 3)
    assert {g.name for g in result.only_right} == HF_ONLY
    assert {"norm", "Qcur", "Kcur", "kq", "kq_soft_max", "kqv"} <= {g.name for g in result.only_left}
    # not bit-exact (llama.cpp runs the Q4_1 weights, hf their float32 de-quantisation), but the same quantities
    embd = [t for t in result.tensors if t.name == "embd"]
    assert all(t.stats.bit_exact for t in embd)
    assert all(t.stats.cosine > 0.9995 for t in result.tensors if t.layer == 0), \
        [(t.label, t.stats.cosine) for t in result.tensors if t.layer == 0 and t.stats.cosine <= 0.9995]
    assert all(t.stats.cosine > 0.99 for t in result.tensors)
    # the logits agree on the top-1 token wherever it is not a near-tie (here: all but one prompt position,
    # where both engines' top1-top2 margin is about 0.05), and on every greedy token generated
    flips = np.flatnonzero(lc.logits.argmax(axis=1) != control.logits.argmax(axis=1))
    for logits in (lc.logits, control.logits):
        top2 = np.sort(logits[flips], axis=1)[:, -2:]
        assert np.all(top2[:, 1] - top2[:, 0] < 0.1), (flips, top2)
    assert len(flips) <= 1 and all(p < len(control.manifest.prompt_ids) - 1 for p in flips)
    rows = [t for t in result.tensors if t.name == "result_output"]
    assert len(rows) == len(control.logits) and all(t.stats.cosine > 0.99 and t.stats.max_abs_diff < 2 for t in rows)


def test_filters_and_recompute_sessions(hf_engine, tmp_path, monkeypatch):
    ids = hf_engine.tokenize(PROMPT)
    for name in ("f", "r"):
        (tmp_path / name).mkdir()
    select = TensorFilter.parse("l_out,result_output", "1-2", "3-4")
    capture = capture_hf(hf_engine, ids, N_DECODE, tmp_path / "f", select=select)
    labels = {(t.name, t.layer, t.positions) for t in capture.manifest.tensors}
    assert labels == {(n, l, (p, p + 1)) for n, l in [("l_out", 1), ("l_out", 2), ("result_output", None)]
                      for p in (3, 4)}
    assert {t.shape for t in capture.manifest.tensors if t.name == "l_out"} == {(1, 576)}
    # kv_cache=0: every call recomputes the sequence; only the new rows are stored, at their positions
    monkeypatch.setattr(hf_engine, "kv_cache", False)
    recompute = capture_hf(hf_engine, ids, N_DECODE, tmp_path / "r", select=TensorFilter.parse("result_output"))
    rows = {r.position: r.load() for r in open_dump(tmp_path / "r").refs}
    assert sorted(rows) == list(range(len(ids) + N_DECODE))
    assert all(np.array_equal(rows[p], recompute.logits[p]) for p in rows)


def test_max_bytes_stops_early_and_bad_filters_are_one_line_errors(hf_engine, tmp_path):
    ids = hf_engine.tokenize(PROMPT)
    (tmp_path / "m").mkdir()
    stopped = capture_hf(hf_engine, ids, N_DECODE, tmp_path / "m", max_bytes=3_000_000)
    m = stopped.manifest
    assert not m.complete and m.stopped.startswith("--max-bytes 3.0 MB reached at step 0 (prefill, positions 0-8)")
    assert m.bytes_written <= 3_000_000 and len(m.steps) == 1 and m.generated == []
    assert "incomplete dump" in open_dump(tmp_path / "m").problems[0]
    cases = [
        (dict(select=TensorFilter.parse(positions="100")),
         r"^--positions '100': 100 is past the run's last row 10 \(9 prompt \+ 2 decode rows\)$"),
        (dict(select=TensorFilter.parse(layers="99")), r"^--layers 99 matches no layer: the model has layers 0-29$"),
        (dict(select=TensorFilter.parse("nomatch_*")),
         r"^--names nomatch_\* matches no tensor; the graph has embd, attn_norm, q_proj, k_proj, Vcur, kqv_out, .*"
         r"\(17 names\)$"),
        (dict(max_bytes=0), r"^--max-bytes 0 B is smaller than the first tensor \(embd, 20.7 kB\): nothing would "
                            r"be stored; raise it \(the whole capture is estimated at [0-9.]+ MB\)$"),
    ]
    for i, (kwargs, message) in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        with pytest.raises(InputError, match=message):
            capture_hf(hf_engine, ids, N_DECODE, tmp_path / str(i), **kwargs)
        assert not any((tmp_path / str(i)).iterdir())
    assert not hf_engine.hf_model._forward_hooks and not any(
        mod._forward_hooks for mod in hf_engine.hf_model.modules())  # every capture removed its hooks


def test_cli_dump_float32_vs_bfloat16_then_dump_diff(tmp_path):
    out = tmp_path / "dumps"
    run = [sys.executable, "-m", "logitlab"]
    proc = subprocess.run(run + ["dump", "--engine", "hf", "--control", "dtype=float32", "--candidate",
                                 "dtype=bfloat16", "--out", str(out), "--prompt", PROMPT, "--tokens", "1",
                                 "--layers", "0"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "candidate: note: hf computed in bfloat16" in proc.stdout
    proc = subprocess.run(run + ["dump-diff", str(out / "control"), str(out / "candidate"),
                                 "--json", str(tmp_path / "d.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "verdict: differs" in proc.stdout and "first divergence: embd@pos0 (outside the layers, embedding" \
        in proc.stdout
    assert json.loads((tmp_path / "d.json").read_text())["layers"][1]["first"] == "attn_norm-0@pos0"
    proc = subprocess.run(run + ["dump", "--engine", "openai", "--out", str(tmp_path / "x")], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and not (tmp_path / "x").exists()
    assert proc.stderr.strip() == "error: dump capture is implemented for hf, llamacpp, not 'openai'"


def test_a_model_without_decoder_layers_is_refused_in_one_line(tmp_path):
    import types

    import torch

    from logitlab.dumps.capture_hf import HfCapture

    engine = types.SimpleNamespace(torch=torch, dtype_name="float32", hf_model=torch.nn.Linear(2, 2))
    with pytest.raises(InputError, match=r"^hf dump capture needs a decoder-only model \(model.layers\[i\] with "
                                         r"self_attn and mlp, .*\); Linear has not$"):
        HfCapture(engine, TensorFilter(), tmp_path)
