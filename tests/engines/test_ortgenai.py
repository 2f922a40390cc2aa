"""The ONNX Runtime GenAI adapter on the real embedded model (built once by ORT GenAI's model builder, cached)."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("onnxruntime_genai")

from logitlab.engines import engine_class  # noqa: E402
from logitlab.engines.ortgenai import build_tag, builder_command, run_builder  # noqa: E402
from logitlab.engines.variant import parse_variant  # noqa: E402
from logitlab.errors import InputError  # noqa: E402
from logitlab.experiments.ab import AbConfig, run_ab  # noqa: E402
from logitlab.numerics import compare_logits  # noqa: E402

from conftest import SHORT_PROMPT  # noqa: E402
from sessions import greedy  # noqa: E402

pytestmark = pytest.mark.engine
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is ever downloaded
OrtGenAiEngine = engine_class("ortgenai")
THREADS = {"intra_op_num_threads": "1"}  # 2 threads on a busy 2-core machine spin


@pytest.fixture(scope="session")
def engine():
    """fp32 model built from the embedded GGUF (the first run builds it: ~30 s; later runs read the cache)."""
    engine = OrtGenAiEngine(model=None, options=THREADS)
    yield engine
    engine.close()


def bits(a):
    return a.view(np.uint32)


def test_aliases_resolve_to_ortgenai():
    for alias in ("onnxruntime-genai", "ort-genai", "onnxruntime_genai", "ortgenai"):
        assert engine_class(alias) is OrtGenAiEngine


def test_prefill_decode_and_verify_return_fresh_float32_rows(engine):
    ids = engine.tokenize(SHORT_PROMPT)
    with engine.open_session() as session:
        prefill = session.prefill(ids)
        first = session.decode([int(prefill[-1].argmax())])
        kept = first.copy()
        block = session.decode([1, 2, 3, 4])
    assert prefill.shape == (len(ids), engine.n_vocab) == (12, 49152) and prefill.dtype == np.float32
    assert first.shape == (1, 49152) and block.shape == (4, 49152) and block.dtype == np.float32
    assert np.array_equal(first, kept), "a later call overwrote returned logits"
    assert [t.kind for t in session.timings] == ["prefill", "decode", "decode"]
    assert all(t.seconds > 0 for t in session.timings)


def test_tokenizer_matches_llamacpp_on_plain_text(engine):
    llama = engine_class("llamacpp")(model=None, options={})
    try:
        for text in (SHORT_PROMPT, "héllo  wörld\n\nx 12345 ∑ {\"a\": [1, 2]}\n    return x"):
            assert engine.tokenize(text) == llama.tokenize(text), text
        # ORT GenAI reads special-token text as the special token; llama.cpp (special=False) does not
        assert engine.tokenize("<|im_start|>") == [1] and llama.tokenize("<|im_start|>") != [1]
    finally:
        llama.close()


def test_new_session_reproduces_logits_and_greedy_text(engine):
    ids = engine.tokenize(SHORT_PROMPT)
    a, gen_a = greedy(engine, ids, 6)
    b, gen_b = greedy(engine, ids, 6)
    assert np.array_equal(bits(a), bits(b)) and gen_a == gen_b
    assert engine.detokenize(gen_a).startswith(" Rome")


def test_k1_verify_is_bit_exact_and_k4_moves_at_1e5_without_flips(engine):
    """M=K with K=1 is the M=1 path itself; K=4 changes the in-block rows at float32 rounding scale."""
    ids = engine.tokenize(SHORT_PROMPT)
    m1, generated = greedy(engine, ids, 8)
    for k in (1, 4):
        with engine.open_session() as session:
            rows = [session.prefill(ids)]
            for start in range(0, 8, k):  # verify blocks of K tokens, the greedy tokens as drafts
                rows.append(session.decode(generated[start:start + k]))
        mk = np.concatenate(rows)
        c = compare_logits(m1[len(ids):], mk[len(ids):], token_ids=generated)
        print(f"\nORT GenAI fp32 M=1 vs M={k}: max |Δ| {c.max_abs_diff:.3g}, {c.differing_rows}/{c.n_positions} "
              f"rows differ, flips {len(c.flips)}")
        if k == 1:
            assert c.bit_exact
        else:
            assert not c.bit_exact and 1e-7 < c.max_abs_diff < 1e-3 and not c.flips


def test_truncate_rolls_the_kv_cache_back(engine):
    ids = engine.tokenize(SHORT_PROMPT)
    m1, generated = greedy(engine, ids, 3)
    with engine.open_session() as session:
        assert session.can_truncate
        session.prefill(ids)
        session.decode([generated[0]])
        session.decode([999, 998])  # a wrong draft, rolled back
        session.truncate(len(ids) + 1)
        again = session.decode([generated[1]])
        session.truncate(0)  # back to an empty cache: a fresh prefill
        prefill = session.prefill(ids)
    # every KV entry before the row was written by an M=1 call: bit-exact with plain M=1
    assert np.array_equal(bits(again), bits(m1[len(ids) + 1:len(ids) + 2]))
    assert np.array_equal(bits(prefill), bits(m1[:len(ids)]))


def test_context_is_max_length_and_overflow_is_input_error():
    engine = OrtGenAiEngine(model=None, options={**THREADS, "max_length": "16"})
    try:
        assert engine.n_ctx == 16
        with engine.open_session() as session:
            session.prefill(list(range(10)))
            with pytest.raises(InputError, match=r"^the session \(10 tokens\) \+ 7 more = 17 exceeds the context of 16 "
                                                 r"tokens; shorten the prompt or --tokens$"):
                session.decode(list(range(7)))
    finally:
        engine.close()


def test_options_reach_ort_and_growing_kv_cache_matches_the_static_one(engine):
    """past_present_share_buffer=0 and graph_optimization_level are applied (the manifest says so) and run."""
    ids = engine.tokenize(SHORT_PROMPT)
    reference, generated = greedy(engine, ids, 4)
    other = OrtGenAiEngine(model=None, options={**THREADS, "past_present_share_buffer": "0",
                                                "graph_optimization_level": "basic"})
    try:
        overlay = other.describe()["effective"]["session_overlay"]
        assert overlay == {"model": {"decoder": {"session_options": {
            "intra_op_num_threads": 1, "graph_optimization_level": "ORT_ENABLE_BASIC"}}},
            "search": {"past_present_share_buffer": False}}
        rows, other_generated = greedy(other, ids, 4)
        c = compare_logits(reference, rows, token_ids=ids + generated)
        print(f"\nORT GenAI all + static KV vs basic + growing KV: max |Δ| {c.max_abs_diff:.3g}, "
              f"{c.differing_rows}/{c.n_positions} rows differ")
        assert other_generated == generated and c.max_abs_diff < 1e-3
    finally:
        other.close()


def test_describe_reports_versions_hashes_cache_and_load_time(engine):
    info = engine.describe()
    assert info["engine_version"].startswith("onnxruntime-genai ") and "onnxruntime " in info["engine_version"]
    assert len(info["model_sha256"]) == 64 and len(info["ort_model_sha256"]) == 64
    assert info["model_sha256"] != info["ort_model_sha256"]  # the GGUF, then the built ONNX folder
    assert info["effective"]["precision"] == "fp32" and info["effective"]["provider"] == "cpu"
    cache = info["model_cache"]["cache"]
    assert cache == info["ort_model"] and cache.endswith(f"{info['model_sha256']}-fp32")
    with open(os.path.join(cache, "logitlab.json")) as f:
        meta = json.load(f)
    assert meta["folder_sha256"] == info["ort_model_sha256"]
    assert meta["builder"][1:3] == ["-m", "onnxruntime_genai.models.builder"]
    assert info["load_seconds"] > 0
    again = OrtGenAiEngine(model=None, options=THREADS)  # from the cache: no second build
    try:
        assert again.describe()["model_cache"]["hit"] is True
    finally:
        again.close()


def test_built_folder_loads_as_an_ort_genai_model_folder_with_the_same_bits(engine):
    folder = engine.describe()["ort_model"]
    other = OrtGenAiEngine(model=folder, options=THREADS)
    try:
        info = other.describe()
        assert info["model_kind"] == "ORT GenAI model folder"
        assert info["model_sha256"] == info["ort_model_sha256"] == engine.describe()["ort_model_sha256"]
        ids = engine.tokenize(SHORT_PROMPT)
        with engine.open_session() as a, other.open_session() as b:
            assert np.array_equal(bits(a.prefill(ids)), bits(b.prefill(ids)))
    finally:
        other.close()


def test_build_commands_and_cache_keys():
    assert build_tag({}) == "fp32" and build_tag({"precision": "int4"}) == "int4"
    assert build_tag({"precision": "int4", "accuracy_level": 1, "block_size": 64}) == \
        "int4-accuracy_level=1-block_size=64"
    assert build_tag({"precision": "int4", "accuracy_level": 4, "block_size": 32}) == "int4"  # the defaults
    command = builder_command("SRC", "OUT", "WORK", {"precision": "int4", "block_size": 64})
    assert command[1:] == ["-m", "onnxruntime_genai.models.builder", "-i", "SRC", "-o", "OUT", "-p", "int4",
                           "-e", "cpu", "-c", "WORK", "--extra_options", "hf_token=false", "block_size=64"]


def test_fp32_vs_int4_is_a_real_quantisation_ab():
    result = run_ab(AbConfig(
        control=parse_variant("precision=fp32,intra_op_num_threads=1", "control", default_engine="ortgenai"),
        candidate=parse_variant("precision=int4,intra_op_num_threads=1", "candidate", default_engine="ortgenai"),
        prompt=SHORT_PROMPT, n_decode=8, repeats=1, warmup=0))
    c = next(r for r in result.runs if r.slot == result.verdict_slot).comparison
    print(f"\nORT GenAI fp32 vs int4: {result.verdict.word}; top-1 {c.argmax_agreement:.1%}, "
          f"KLD mean {c.kld['mean']:.3g}")
    assert result.control_reproducible
    # int4 weights are a quantisation: the truth is lossy (measured: top-1 60 %, KLD mean 0.93 nats)
    assert result.verdict.word == "lossy", result.verdict.evidence
    assert c.differing_rows == c.n_positions and c.kld["mean"] > 1e-3
    assert result.manifest["engine"]["effective"]["precision"] == "fp32"


def test_a_folder_that_is_not_an_ort_genai_model(tmp_path):
    with pytest.raises(InputError, match=r"is not an ORT GenAI model folder: it has no genai_config.json$"):
        OrtGenAiEngine(model=str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError, match=r"no genai_config.json \(it looks like a Hugging Face folder"):
        OrtGenAiEngine(model=str(tmp_path))
    with pytest.raises(InputError, match=r"does not exist; the ortgenai engine loads a GGUF file"):
        OrtGenAiEngine(model=str(tmp_path / "missing"))


def test_a_broken_ort_genai_folder_is_one_error_line(tmp_path):
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"type": "llama", "vocab_size": 10,
                                                                     "decoder": {"filename": "model.onnx"}}}))
    with pytest.raises(InputError, match=r"ORT GenAI could not load .*: model context_length is 0") as info:
        OrtGenAiEngine(model=str(tmp_path))
    assert "\n" not in str(info.value)


def test_a_model_the_builder_cannot_convert_is_one_input_error_line(tmp_path):
    """The real builder on the real de-quantised weights, under an architecture it does not support."""
    from logitlab.engines.hf import dequantised_folder
    from logitlab.models import default_model_path

    weights, _ = dequantised_folder(default_model_path())
    source = tmp_path / "src"
    source.mkdir()
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (source / name).symlink_to(weights / name)
    config = json.loads((weights / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(InputError, match=r"^the ORT GenAI model builder could not convert .*src \(precision fp32\): "
                                         r"NotImplementedError: .* is not currently supported\.$") as info:
        run_builder(source, tmp_path / "out", {})
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_a_gguf_or_a_gguf_transformers_cannot_read(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGITLAB_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "broken.gguf"
    fake.write_bytes(b"not a gguf" * 8)
    with pytest.raises(InputError, match=r"is not GGUF"):
        OrtGenAiEngine(model=str(fake))
    fake.write_bytes(b"GGUF" + b"\0" * 64)  # the magic, then nothing a reader can use
    with pytest.raises(InputError, match=r"^cannot build an ORT GenAI model from broken.gguf: ") as info:
        OrtGenAiEngine(model=str(fake))
    assert "\n" not in str(info.value)


def test_bad_options_name_the_valid_ones(tmp_path):
    with pytest.raises(InputError, match=r"bad value 'int8' for ortgenai option 'precision': valid: fp32, int4"):
        OrtGenAiEngine(model=None, options={"precision": "int8"})
    with pytest.raises(InputError, match=r"unknown ortgenai option 'n_threads'; valid options: accuracy_level, "):
        OrtGenAiEngine(model=None, options={"n_threads": "1"})
    with pytest.raises(InputError, match=r"'block_size' applies to precision=int4 only"):
        OrtGenAiEngine(model=None, options={"block_size": "64"})
    with pytest.raises(InputError, match=r"bad value '48' for ortgenai option 'block_size': valid: 16, 32, 64"):
        OrtGenAiEngine(model=None, options={"precision": "int4", "block_size": "48"})
    with pytest.raises(InputError, match=r"graph_optimization_level': valid: disable_all, basic, extended, all"):
        OrtGenAiEngine(model=None, options={"graph_optimization_level": "max"})
    (tmp_path / "genai_config.json").write_text("{}")
    with pytest.raises(InputError, match=r"options precision build a model from a GGUF; .* is already built"):
        OrtGenAiEngine(model=str(tmp_path), options={"precision": "int4"})


def test_a_provider_that_is_not_built_in():
    import onnxruntime_genai as og

    from logitlab.engines.ortgenai import PROVIDERS

    # no build has them all (DirectML is Windows-only, QNN Qualcomm's): the first one this build lacks
    missing = next(name for name, probe in PROVIDERS.items() if probe is not None and not getattr(og, probe)())
    with pytest.raises(InputError, match=rf"execution provider '{missing}' is not built into onnxruntime-genai"):
        OrtGenAiEngine(model=None, options={"provider": missing})


def test_an_old_hf_cache_config_gets_its_architectures_named(tmp_path):
    """hf caches written before architectures was recorded are fixed on their next hit (the builder needs it)."""
    from logitlab.engines.hf import _name_architectures

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": None, "vocab_size": 7}))
    _name_architectures(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 7
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary file left behind
