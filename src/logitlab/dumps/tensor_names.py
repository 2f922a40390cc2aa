"""What logitlab knows of tensor names: llama.cpp's op order in a layer, and the kind of tensor a name is.

A dump that does not record its execution order (raw files, ``.npy``, foreign
``.safetensors``) is walked layer by layer, within a layer in llama.cpp's op
order for known names (then by name), then by position: a causally minimal
order, so the first divergence found is one no earlier tensor can explain
(:func:`walk_order`). :func:`tensor_kind` tells attention from FFN, norm,
residual, embedding and output tensors, for saying what kind of tensor
diverged first.
"""

from __future__ import annotations

#: Names llama.cpp's graph builders give tensors, in the order a layer computes them.
LLAMACPP_NAMES = (
    "inp_embd", "embd", "inp_scaled", "inp_pos", "inp_out_ids",
    "norm", "attn_norm", "wqkv", "bqkv", "Qcur", "Kcur", "Vcur", "Qcur_normed", "Kcur_normed",
    "q", "k", "v", "kq", "kq_scaled", "kq_masked", "kq_soft_max", "kq_soft_max_ext", "__fattn__", "fattn",
    "kqv", "kqv_merged", "kqv_merged_cont", "kqv_out", "kqv_wo", "attn_out", "attn_post_norm", "sa_out",
    "ffn_inp", "ffn_norm", "ffn_up", "ffn_up_b", "ffn_gate", "ffn_gate_b", "ffn_gate_par", "ffn_act",
    "ffn_silu", "ffn_gelu", "ffn_relu", "ffn_swiglu", "ffn_geglu", "ffn_down", "ffn_out", "ffn_post_norm",
    "ffn_moe_logits", "ffn_moe_probs", "ffn_moe_topk", "ffn_moe_weights", "ffn_moe_out", "ffn_shexp",
    "l_out", "result_norm", "result_output",
)
_RANK = {name: i for i, name in enumerate(LLAMACPP_NAMES)}
_BEFORE_LAYERS = {"inp_embd", "embd", "inp_scaled", "inp_pos", "inp_out_ids"}
#: Sort key of a layer: tensors before the layers first, then 0, 1, ..., then the output.
LAYER_BEFORE, LAYER_AFTER = -1, 1 << 30


def layer_sort_key(name: str, layer: int | None) -> int:
    """Where a tensor's layer sorts: before all layers, its layer, or after them."""
    if layer is not None:
        return layer
    return LAYER_BEFORE if name in _BEFORE_LAYERS or name.startswith("inp_") else LAYER_AFTER


def name_rank(name: str) -> int:
    """Position of ``name`` in llama.cpp's op order within a layer (unknown names last)."""
    return _RANK.get(name, len(_RANK))


def is_llamacpp_name(name: str) -> bool:
    """True if ``name`` is one of :data:`LLAMACPP_NAMES`."""
    return name in _RANK


def walk_order(name: str, layer: int | None, instance: int, position: int | None) -> tuple:
    """Sort key of a tensor-position in the causally minimal walk (see the module docstring)."""
    return (layer_sort_key(name, layer), name_rank(name), name, instance,
            position if position is not None else -1)


#: Names of attention tensors (llama.cpp's, and the hf capture's own ``q_proj``/``k_proj``), for saying what
#: kind of tensor diverged first.
ATTENTION_NAMES = frozenset({
    "Qcur", "Kcur", "Vcur", "Qcur_normed", "Kcur_normed", "q", "k", "v", "wqkv", "bqkv", "kq", "kq_scaled",
    "kq_masked", "kq_soft_max", "kq_soft_max_ext", "__fattn__", "fattn", "kqv", "kqv_merged", "kqv_merged_cont",
    "kqv_out", "kqv_wo", "attn_out", "q_proj", "k_proj",
})
#: FFN tensors of the hf capture without a llama.cpp name.
HF_FFN_NAMES = frozenset({"act_fn", "down_proj_in"})


def tensor_kind(name: str) -> str:
    """``attention``, ``ffn``, ``norm``, ``residual``, ``embedding``, ``output`` or ``other``.

    Knows llama.cpp's names and the hf capture's own (``q_proj``, ``act_fn``; for architectures without a
    name table, hf module paths such as ``self_attn.o_proj.input`` or ``post_feedforward_layernorm``)."""
    if name in ATTENTION_NAMES or name.startswith("self_attn."):
        return "attention"
    if name.endswith("norm"):  # attn_norm, attn_post_norm, ffn_norm, ffn_post_norm, result_norm, input_layernorm
        return "norm"
    if name.startswith("attn_"):
        return "attention"
    if name.startswith(("ffn_", "mlp.")) or name in HF_FFN_NAMES:
        return "ffn"
    if name in ("l_out", "ffn_inp", "sa_out", "layer"):
        return "residual"
    if name in ("embd", "inp_embd", "inp_scaled", "embed_tokens"):
        return "embedding"
    if name.startswith("result") or name == "lm_head":
        return "output"
    return "other"
