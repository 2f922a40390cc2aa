"""Which transformers module holds which llama.cpp graph tensor, per architecture.

The hf dump capture (:mod:`~logitlab.dumps.capture_hf`) hooks modules of a
transformers causal LM and stores what they see under the name llama.cpp's
graph gives the same quantity, so that a dump from each engine aligns in
``dump-diff`` by (name, layer, position). The correspondence is not the same
for every architecture: Gemma's ``post_attention_layernorm`` is llama.cpp's
``attn_post_norm`` (a norm *after* attention) where Llama's is ``ffn_norm``
(the norm before the feed-forward block); Gemma scales the embedding by
√hidden_size inside ``embed_tokens`` (llama.cpp: ``inp_scaled``); Llama's Q/K
projections are stored permuted in GGUF and Gemma's are not. So there is one
table per architecture family, chosen by the model's ``config.model_type``.

The llama.cpp names come from llama.cpp's graph builders
(``src/models/llama.cpp``, ``gemma.cpp``, ``gemma2.cpp``, ``gemma3.cpp`` of
the llama.cpp vendored in llama-cpp-python 0.3.36; ``cb(tensor, "name", il)``
calls) and were checked against real dumps: ``llama`` on SmolLM2-135M
(LlamaForCausalLM), ``gemma3`` on Gemma 3 270M (Gemma3ForCausalLM); every
mapped pair of layer 0 has cosine similarity above 0.999 there. ``mistral``
and ``qwen2`` share Llama's decoder layer and graph names; ``gemma`` and
``gemma2`` are read from the graph source only (no such model is tested).

An architecture without a table is captured under transformers' own module
names (``input_layernorm-3``, ``self_attn.q_proj-3``, ``mlp.down_proj.input-3``,
``embed_tokens``, ``lm_head``) and the capture says so in a note: those align
with nothing in a llama.cpp dump, which is better than aligning different
quantities under one name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: Layout of a hooked tensor: ``tokens`` = ``(batch, tokens, ...)``; ``heads`` = ``(batch, heads, tokens,
#: head_dim)`` (stored as ``(tokens, heads, head_dim)``, llama.cpp's layout of per-head tensors).
LAYOUTS = ("tokens", "heads")


@dataclass(frozen=True)
class Tap:
    """One hooked quantity.

    Attributes:
        path: module path; inside a decoder layer relative to ``model.layers[i]`` (``""`` = the layer itself),
            outside the layers relative to the causal LM (``model.embed_tokens``).
        side: ``input`` (first positional argument) or ``output`` (first tensor of the output).
        name: the name in the dump.
        layout: ``tokens`` or ``heads`` (see :data:`LAYOUTS`).
    """

    path: str
    side: str
    name: str
    layout: str = "tokens"


@dataclass(frozen=True)
class NameTable:
    """The taps of one architecture family.

    Attributes:
        family: short name (``llama``, ``gemma3``, ``hf`` for the fallback).
        model_types: ``config.model_type`` values it serves.
        model_taps: taps outside the decoder layers, in execution order.
        layer_taps: taps inside each decoder layer, in execution order.
        hf_only: names of this table that no llama.cpp tensor holds (same values, same layout).
        llamacpp_names: True when the names are llama.cpp's (False: the hf-name fallback).
    """

    family: str
    model_types: tuple[str, ...]
    model_taps: tuple[Tap, ...]
    layer_taps: tuple[Tap, ...]
    hf_only: frozenset[str]
    llamacpp_names: bool = True

    def resolve(self, model: Any) -> "NameTable":
        """The table with the placeholders that depend on the loaded model filled in.

        - ``<embedding>``: ``inp_scaled`` when ``embed_tokens`` multiplies by a scale itself (transformers'
          ``*ScaledWordEmbedding``, attribute ``embed_scale``), else ``embd``.
        - ``<down_proj input>``: ``ffn_swiglu`` (SiLU), ``ffn_geglu`` (GELU), else ``down_proj_in``.
        - ``<logits>``: ``result_output``, or ``lm_head`` (hf only) when the config soft-caps the final logits
          (Gemma 2): llama.cpp's ``result_output`` is after the cap, ``lm_head``'s output before it.
        """
        config = getattr(model, "config", None)
        embed = _submodule(model, "model.embed_tokens")
        fill = {
            "<embedding>": "inp_scaled" if hasattr(embed, "embed_scale") else "embd",
            "<down_proj input>": down_proj_input_name(getattr(config, "hidden_act", None)
                                                      or getattr(config, "hidden_activation", None)),
            "<logits>": "lm_head" if getattr(config, "final_logit_softcapping", None) else "result_output",
        }
        def sub(taps: tuple[Tap, ...]) -> tuple[Tap, ...]:
            return tuple(Tap(t.path, t.side, fill.get(t.name, t.name), t.layout) for t in taps)

        hf_only = set(self.hf_only) | {name for name in fill.values() if name in ("down_proj_in", "lm_head")}
        return NameTable(self.family, self.model_types, sub(self.model_taps), sub(self.layer_taps),
                         frozenset(hf_only), self.llamacpp_names)


def _submodule(model: Any, path: str) -> Any:
    try:
        return model.get_submodule(path)
    except (AttributeError, TypeError):
        return None


def down_proj_input_name(hidden_act: str | None) -> str:
    """llama.cpp's name for ``act(gate) * up`` (the input of ``down_proj``) under activation ``hidden_act``.

    ``silu``/``swish`` -> ``ffn_swiglu``; ``gelu*`` -> ``ffn_geglu``; anything
    else -> ``down_proj_in`` (an hf-only name).
    """
    act = (hidden_act or "").lower()
    if act in ("silu", "swish"):
        return "ffn_swiglu"
    if act.startswith("gelu"):
        return "ffn_geglu"
    return "down_proj_in"


_OUTSIDE = (Tap("model.embed_tokens", "output", "<embedding>"), Tap("model.norm", "output", "result_norm"),
            Tap("lm_head", "output", "<logits>"))

#: Llama, Mistral, Qwen2 (llama.cpp ``src/models/llama.cpp``, ``qwen2.cpp``). ``q_proj``/``k_proj`` keep hf
#: names: llama.cpp's GGUF converter reorders the rows of each head of Llama's Q/K weights for its RoPE layout
#: and transformers undoes that on load, so ``Qcur``/``Kcur`` hold the same values in another row order (on
#: SmolLM2: cosine 0.07 as stored, 0.999997 once permuted); they keep hf names rather than a transformed copy.
LLAMA = NameTable(
    "llama", ("llama", "mistral", "qwen2"), _OUTSIDE,
    (Tap("input_layernorm", "output", "attn_norm"),
     Tap("self_attn.q_proj", "output", "q_proj"),
     Tap("self_attn.k_proj", "output", "k_proj"),
     Tap("self_attn.v_proj", "output", "Vcur"),
     Tap("self_attn.o_proj", "input", "kqv_out"),
     Tap("self_attn.o_proj", "output", "attn_out"),
     Tap("post_attention_layernorm", "input", "ffn_inp"),
     Tap("post_attention_layernorm", "output", "ffn_norm"),
     Tap("mlp.gate_proj", "output", "ffn_gate"),
     Tap("mlp.act_fn", "output", "act_fn"),
     Tap("mlp.up_proj", "output", "ffn_up"),
     Tap("mlp.down_proj", "input", "<down_proj input>"),
     Tap("mlp.down_proj", "output", "ffn_out"),
     Tap("", "output", "l_out")),
    frozenset({"q_proj", "k_proj", "act_fn"}))

#: Gemma 3 (``src/models/gemma3.cpp``): scaled embedding, RMS norms on Q and K per head, a norm after
#: attention and after the feed-forward block (Gemma's ``post_attention_layernorm`` is ``attn_post_norm``,
#: its ``pre_feedforward_layernorm`` is ``ffn_norm``), GeGLU. Q/K are not permuted in GGUF, so ``q_proj``'s
#: output is llama.cpp's first ``Qcur`` (before the norm and RoPE). ``q_norm``/``k_norm`` run on
#: ``(batch, heads, tokens, head_dim)``.
_GEMMA3_LAYER = (
    Tap("input_layernorm", "output", "attn_norm"),
    Tap("self_attn.q_proj", "output", "Qcur"),
    Tap("self_attn.k_proj", "output", "Kcur"),
    Tap("self_attn.v_proj", "output", "Vcur"),
    Tap("self_attn.q_norm", "output", "Qcur_normed", "heads"),
    Tap("self_attn.k_norm", "output", "Kcur_normed", "heads"),
    Tap("self_attn.o_proj", "input", "kqv_out"),
    Tap("self_attn.o_proj", "output", "attn_out"),
    Tap("post_attention_layernorm", "output", "attn_post_norm"),
    Tap("pre_feedforward_layernorm", "input", "sa_out"),
    Tap("pre_feedforward_layernorm", "output", "ffn_norm"),
    Tap("mlp.gate_proj", "output", "ffn_gate"),
    Tap("mlp.act_fn", "output", "act_fn"),
    Tap("mlp.up_proj", "output", "ffn_up"),
    Tap("mlp.down_proj", "input", "ffn_geglu"),
    Tap("mlp.down_proj", "output", "ffn_out"),
    Tap("post_feedforward_layernorm", "output", "ffn_post_norm"),
    Tap("", "output", "l_out"),
)
GEMMA3 = NameTable("gemma3", ("gemma3_text", "gemma3"), _OUTSIDE, _GEMMA3_LAYER,
                   frozenset({"attn_out", "act_fn"}))

#: Gemma 2 (``src/models/gemma2.cpp``): Gemma 3 without the Q/K norms. llama.cpp names the weighted
#: ``ffn_post_norm`` without a layer (``cb(cur, "ffn_post_norm", -1)``), so that one shows on one side only.
GEMMA2 = NameTable("gemma2", ("gemma2",), _OUTSIDE,
                   tuple(t for t in _GEMMA3_LAYER if t.name not in ("Qcur_normed", "Kcur_normed")),
                   frozenset({"attn_out", "act_fn"}))

#: Gemma (``src/models/gemma.cpp``): Llama's layer (``post_attention_layernorm`` is the pre-FFN norm) with a
#: scaled embedding, unpermuted Q/K, the residual sum named ``sa_out`` and GeGLU.
_GEMMA_NAMES = {"q_proj": "Qcur", "k_proj": "Kcur", "ffn_inp": "sa_out", "<down_proj input>": "ffn_geglu"}
GEMMA = NameTable(
    "gemma", ("gemma",), _OUTSIDE,
    tuple(replace(t, name=_GEMMA_NAMES.get(t.name, t.name)) for t in LLAMA.layer_taps),
    frozenset({"attn_out", "act_fn"}))

#: Any other architecture: the modules of the tables above that it has, under their hf names (inputs get
#: ``.input``). ``q_norm``/``k_norm`` are left out: their layout differs between architectures.
HF_NAMES = NameTable(
    "hf", (),
    tuple(Tap(path, "output", path.removeprefix("model.")) for path in
          ("model.embed_tokens", "model.norm", "lm_head")),
    tuple(Tap(path, side, (path or "layer") + (".input" if side == "input" else ""))
          for path, side in dict.fromkeys((t.path, t.side) for t in LLAMA.layer_taps + _GEMMA3_LAYER
                                          if t.layout == "tokens")),
    frozenset(), llamacpp_names=False)

TABLES = (LLAMA, GEMMA3, GEMMA2, GEMMA)


def name_table(model: Any) -> NameTable:
    """The (resolved) table for a loaded transformers causal LM, chosen by ``config.model_type``;
    :data:`HF_NAMES` when no table knows it."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    table = next((t for t in TABLES if model_type in t.model_types), HF_NAMES)
    return table.resolve(model)


def known_model_types() -> list[str]:
    """Every ``config.model_type`` with a llama.cpp name table."""
    return [m for t in TABLES for m in t.model_types]


__all__ = ["GEMMA", "GEMMA2", "GEMMA3", "HF_NAMES", "LAYOUTS", "LLAMA", "NameTable", "TABLES", "Tap",
           "down_proj_input_name", "known_model_types", "name_table"]
