"""Name tables of the hf capture per architecture, on tiny randomly initialised transformers models (no weights
are read or downloaded): which table a model gets, the placeholders it resolves, and the hooks firing under
those names, per-head tensors included."""

import contextlib
import types

import pytest

from logitlab.dumps.capture_hf import HfCapture
from logitlab.dumps.filters import TensorFilter
from logitlab.dumps.hf_names import GEMMA2, GEMMA3, HF_NAMES, LLAMA, TABLES, down_proj_input_name, name_table

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=64)


def tiny(config_class: str, model_class: str, **extra):
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**{**SMALL, **extra})
    return getattr(transformers, model_class)(config).eval()


class ShimEngine:
    """What :class:`HfCapture` needs of an hf engine, around a bare model."""

    dtype_name = "float32"
    device = "cpu"

    def __init__(self, model):
        self.hf_model, self.torch = model, torch

    def threads(self):
        return contextlib.nullcontext()

    def forward(self, input_ids, **kwargs):
        return self.hf_model(input_ids=input_ids, **kwargs)


def probe_names(model, tmp_path):
    """(name, layer) of every tap that fired in a 1-token forward, in execution order, and the capture's notes."""
    capture = HfCapture(ShimEngine(model), TensorFilter(), tmp_path)
    try:
        per_token = capture.probe_bytes_per_token()
    finally:
        capture.close()
    assert per_token > 0 and not model._forward_hooks
    return list(capture.seen), capture.notes, capture.table


def test_llama_keeps_its_names(tmp_path):
    model = tiny("LlamaConfig", "LlamaForCausalLM")
    seen, notes, table = probe_names(model, tmp_path)
    assert table.family == "llama" and not notes
    assert [n for n, layer in seen if layer in (None, 0)] == [
        "embd", "attn_norm", "q_proj", "k_proj", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm", "ffn_gate",
        "act_fn", "ffn_up", "ffn_swiglu", "ffn_out", "l_out", "result_norm", "result_output"]


def test_gemma3_gets_gemmas_names_and_per_head_norms_are_stored_token_major(tmp_path):
    model = tiny("Gemma3TextConfig", "Gemma3ForCausalLM", hidden_activation="gelu_pytorch_tanh")
    seen, notes, table = probe_names(model, tmp_path)
    assert table.family == "gemma3" and not notes
    # q_norm sees (batch, heads=4, tokens=1, head_dim): a wrong layout would give 4 token rows and raise
    assert [n for n, layer in seen if layer in (None, 0)] == [
        "inp_scaled", "attn_norm", "Qcur", "Kcur", "Vcur", "Qcur_normed", "Kcur_normed", "kqv_out", "attn_out",
        "attn_post_norm", "sa_out", "ffn_norm", "ffn_gate", "act_fn", "ffn_up", "ffn_geglu", "ffn_out",
        "ffn_post_norm", "l_out", "result_norm", "result_output"]
    assert {layer for _, layer in seen} == {None, 0, 1}


def test_gemma2_soft_capped_logits_are_not_result_output(tmp_path):
    model = tiny("Gemma2Config", "Gemma2ForCausalLM", final_logit_softcapping=30.0)
    seen, notes, table = probe_names(model, tmp_path)
    assert table.family == "gemma2" and "lm_head" in table.hf_only and not notes
    names = [n for n, _ in seen]
    assert "lm_head" in names and "result_output" not in names and "Qcur_normed" not in names
    assert names[0] == "inp_scaled"


def test_an_unknown_architecture_keeps_hf_names_and_says_so(tmp_path):
    model = tiny("Qwen3Config", "Qwen3ForCausalLM")
    seen, notes, table = probe_names(model, tmp_path)
    assert table.family == HF_NAMES.family == "hf" and not table.llamacpp_names
    assert len(notes) == 1 and notes[0].startswith("Qwen3ForCausalLM (model_type qwen3) has no llama.cpp name "
                                                   "table: tensors keep hf module names")
    names = [n for n, layer in seen if layer in (None, 0)]
    assert names[:3] == ["embed_tokens", "input_layernorm", "self_attn.q_proj"]
    assert {"self_attn.o_proj.input", "mlp.down_proj.input", "layer", "norm", "lm_head"} <= set(names)
    llamacpp = {t.name for table in TABLES for t in table.model_taps + table.layer_taps}
    assert not set(names) & llamacpp  # nothing that could align with a llama.cpp tensor


def test_tables_cover_the_architectures_they_claim():
    assert {"llama", "mistral", "qwen2"} <= set(LLAMA.model_types) and "gemma3_text" in GEMMA3.model_types
    assert "gemma2" in GEMMA2.model_types
    assert name_table(types.SimpleNamespace(config=types.SimpleNamespace(model_type="phi3"))).family == "hf"
    assert [down_proj_input_name(a) for a in ("silu", "gelu_pytorch_tanh", "relu", None)] == [
        "ffn_swiglu", "ffn_geglu", "down_proj_in", "down_proj_in"]
