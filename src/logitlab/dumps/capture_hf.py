"""Capture named intermediate tensors from Hugging Face transformers (the ``hf`` engine).

How tensors are observed
------------------------
PyTorch forward hooks (``Module.register_forward_hook``) on the modules of a
decoder-only causal LM (Llama, Qwen2, Gemma …) — ``model.embed_tokens``, each decoder layer
``model.layers[i]`` and its sub-modules, ``model.norm`` and ``lm_head`` — see
each module's input and output as the engine's own forward pass runs (the
session, its KV cache and its thread setting are the engine's, untouched).
Hooks are registered when the capture starts and removed when it ends. A hook
never raises into the forward pass: an error is kept and raised once the
engine call returns.

Names: llama.cpp's where the two correspond
-------------------------------------------
Each tap gets the name llama.cpp's graph gives the same quantity
(``attn_norm-3``, ``kqv_out-3``, ``l_out-3``, ``result_output``), so a dump
from hf and one from llama.cpp align in ``dump-diff`` by (name, layer,
position). Which module holds which quantity depends on the architecture:
one table per family in :mod:`logitlab.dumps.hf_names`, chosen by
``config.model_type``. Checked against llama.cpp dumps of the same tokens
(llama.cpp runs the quantised weights, hf their float32 de-quantisation, so
they are never bit-exact; the embedding lookup is):

=====================================  ======  ==============================  ===============================
hf module (decoder layer ``i``)        side    Llama / Mistral / Qwen2         Gemma 3 (Gemma 2: no Q/K norms)
=====================================  ======  ==============================  ===============================
``model.embed_tokens``                 output  ``embd``                        ``inp_scaled`` (×√hidden_size)
``model.layers.i.input_layernorm``     output  ``attn_norm-i``                 ``attn_norm-i``
``self_attn.q_proj`` / ``k_proj``      output  ``q_proj-i`` / ``k_proj-i``     ``Qcur-i`` / ``Kcur-i``
                                               (hf only: permuted in GGUF)
``self_attn.v_proj``                   output  ``Vcur-i``                      ``Vcur-i``
``self_attn.q_norm`` / ``k_norm``      output  –                               ``Qcur_normed-i`` /
                                                                               ``Kcur_normed-i``
``self_attn.o_proj``                   input   ``kqv_out-i``                   ``kqv_out-i``
``self_attn.o_proj``                   output  ``attn_out-i``                  ``attn_out-i`` (hf only)
``post_attention_layernorm``           input   ``ffn_inp-i`` (residual sum)    –
``post_attention_layernorm``           output  ``ffn_norm-i``                  ``attn_post_norm-i``
``pre_feedforward_layernorm``          input   –                               ``sa_out-i`` (residual sum)
``pre_feedforward_layernorm``          output  –                               ``ffn_norm-i``
``mlp.gate_proj`` / ``mlp.up_proj``    output  ``ffn_gate-i`` / ``ffn_up-i``   ``ffn_gate-i`` / ``ffn_up-i``
``mlp.act_fn``                         output  ``act_fn-i`` (hf only)          ``act_fn-i`` (hf only)
``mlp.down_proj``                      input   ``ffn_swiglu-i`` (SiLU)         ``ffn_geglu-i``
``mlp.down_proj``                      output  ``ffn_out-i``                   ``ffn_out-i``
``post_feedforward_layernorm``         output  –                               ``ffn_post_norm-i``
``model.layers.i``                     output  ``l_out-i``                     ``l_out-i``
``model.norm``                         output  ``result_norm``                 ``result_norm``
``lm_head``                            output  ``result_output``               ``result_output``
=====================================  ======  ==============================  ===============================

An architecture without a table is captured under hf module names
(``input_layernorm-3``, ``self_attn.o_proj.input-3``, ``lm_head``) with a
note in the manifest: it aligns with nothing in a llama.cpp dump rather than
comparing different quantities under one name. llama.cpp's un-weighted RMS
norms (``norm-i``, ``norm-i#1``, ``norm``), the RoPE'd Q/K and the attention
internals (``kq``, ``kq_soft_max``, ``kqv``) have no hf module and are not
captured; they show as "only in" one dump in a cross-engine dump-diff.

Layout and dtype
----------------
One row per token position, like the llama.cpp capture: a module output of
shape ``(1, T, features)`` is stored as ``(n, features)`` float32 with
``token_axis`` 0 and positions ``[start, start + n)`` of the engine call
(``n`` new tokens; with ``kv_cache=0`` the engine recomputes the whole
sequence and only the last ``n`` rows, the new positions, are stored). With a
position filter each kept position is stored as ``(1, features)``.

Every tensor is **stored as float32**, whatever the engine's ``dtype``:
bfloat16 and float16 values are widened exactly (no rounding), so a float32
run and a bfloat16 run compare tensor by tensor in ``dump-diff`` (it compares
only equal dtypes), with max |Δ|, NMSE and cosine in real units and ULP
distances counted in float32 ULPs. A run that computed in another dtype says
so in the manifest's ``capture_notes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from logitlab.dumps.capture import CaptureResult, StepRecorder, capture_with
from logitlab.dumps.filters import TensorFilter
from logitlab.dumps.format import format_label
from logitlab.dumps.manifest import StepInfo
from logitlab.dumps.hf_names import NameTable, down_proj_input_name, known_model_types, name_table
from logitlab.errors import EngineError, InputError

STORED_DTYPE = "float32"


def _first_tensor(value: Any) -> Any:
    """The tensor of a module output: itself, or the first item of a tuple/list (older decoder layers)."""
    while isinstance(value, (tuple, list)):
        if not value:
            return None
        value = value[0]
    return value


class HfCapture(StepRecorder):
    """Observe and store tensors of an :class:`~logitlab.engines.hf.HfEngine` through forward hooks.

    Use :meth:`probe_bytes_per_token` for the size estimate, then
    :meth:`begin_step` / engine call / :meth:`end_step` around each engine call;
    :meth:`close` removes the hooks. Names and layout: see the module docstring.

    Names come from :func:`logitlab.dumps.hf_names.name_table` (``self.table``).

    Raises:
        InputError: the model has no ``model.layers`` of decoder layers with
            ``self_attn`` and ``mlp``.
    """

    callback_where = "a transformers forward hook"

    def __init__(self, engine: Any, select: TensorFilter, out_dir: Path, *, max_bytes: int | None = None):
        super().__init__(select, out_dir, max_bytes=max_bytes)
        self.engine = engine
        self.torch = engine.torch
        self._active = False
        self._probe: int | None = None
        self._handles: list[Any] = []
        self._span = (0, 0)
        dtype = getattr(engine, "dtype_name", STORED_DTYPE)
        if dtype != STORED_DTYPE:
            self.notes.append(f"hf computed in {dtype}; tensors are stored as {STORED_DTYPE} (widened exactly), "
                              f"so ULP distances are float32 ULPs")
        self._install(engine.hf_model)

    # -- hooks --------------------------------------------------------------------
    def _install(self, model: Any) -> None:
        base = getattr(model, "model", None)
        layers = getattr(base, "layers", None)
        arch = type(model).__name__
        if layers is None or not len(layers) or not all(
                hasattr(layer, "self_attn") and hasattr(layer, "mlp") for layer in layers):
            raise InputError(f"hf dump capture needs a decoder-only model (model.layers[i] with self_attn and mlp, "
                             f"as LlamaForCausalLM, Qwen2ForCausalLM, Gemma3ForCausalLM); {arch} has not")
        table = self.table = name_table(model)
        if not table.llamacpp_names:
            model_type = getattr(getattr(model, "config", None), "model_type", None)
            self.notes.append(f"{arch} (model_type {model_type}) has no llama.cpp name table: tensors keep hf "
                              f"module names and align with nothing in a llama.cpp dump (tables: "
                              f"{', '.join(known_model_types())})")
        taps: dict[int, tuple[Any, str, list[tuple[str, str, int | None, str]]]] = {}
        missing: dict[str, None] = {}
        # (path, side, name, layer, layout) of every tap; hooks fire in execution order whatever the order here
        wanted = [(t.path, t.side, t.name, None, t.layout) for t in table.model_taps]
        for i in range(len(layers)):
            wanted += [(f"model.layers.{i}" + (f".{t.path}" if t.path else ""), t.side, t.name, i, t.layout)
                       for t in table.layer_taps]
        for path, side, name, layer, layout in wanted:
            try:
                module = model.get_submodule(path)
            except AttributeError:
                missing[path if layer is None else "model.layers.*" + path[len(f"model.layers.{layer}"):]] = None
                continue
            taps.setdefault(id(module), (module, path, []))[2].append((side, name, layer, layout))
        for path in missing if table.llamacpp_names else ():  # the hf-name fallback takes the modules there are
            self.notes.append(f"{arch} has no module {path}: its tensor is not captured")
        for module, path, specs in taps.values():
            specs.sort(key=lambda spec: spec[0] != "input")  # a module's input comes before its output
            self._handles.append(module.register_forward_hook(self._hook_for(path, specs), with_kwargs=True))

    def close(self) -> None:
        """Remove every hook (idempotent)."""
        self._active = False
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _hook_for(self, path: str, specs: list[tuple[str, str, int | None, str]]) -> Callable[..., None]:
        def hook(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
            if not self._active or self.failed:
                return
            try:
                for side, name, layer, layout in specs:
                    if side == "input":
                        value = args[0] if args else next(iter(kwargs.values()), None)
                    else:
                        value = output
                    self._observe(f"{path}:{side}", name, layer, _first_tensor(value), layout)
            except BaseException as exc:  # never unwind transformers' forward from a hook
                self.fail(exc)

        return hook

    # -- size estimate ----------------------------------------------------------
    def probe_bytes_per_token(self) -> int:
        """Bytes the filter keeps for one token (float32), from a 1-token forward that stores nothing.

        The probe evaluates token 0 at position 0 without a KV cache; the
        engine's sessions are not touched.

        Raises:
            EngineError: the forward failed.
        """
        torch, engine = self.torch, self.engine
        self._probe = 0
        self.seen = {}
        self._span = (0, 1)
        self._active = True
        try:
            with engine.threads(), torch.inference_mode():
                engine.forward(torch.tensor([[0]], dtype=torch.long, device=engine.device), use_cache=False)
        except RuntimeError as exc:
            raise EngineError(f"hf failed on the 1-token probe: {str(exc).splitlines()[0]}") from exc
        finally:
            self._active = False
        self.raise_pending_error()
        size, self._probe = self._probe, None
        return int(size)

    # -- steps --------------------------------------------------------------------
    def begin_step(self, index: int, kind: str, start: int, n_tokens: int) -> None:
        super().begin_step(index, kind, start, n_tokens)
        self._span = (start, start + n_tokens)
        self._active = True

    def end_step(self) -> StepInfo:
        """Finish the step file (see :meth:`StepRecorder.end_step`)."""
        self._active = False
        return super().end_step()

    def abort(self) -> None:
        self._active = False
        super().abort()

    # -- one tensor ------------------------------------------------------------------
    def _observe(self, where: str, name: str, layer: int | None, tensor: Any, layout: str = "tokens") -> None:
        label = format_label(name, layer)
        if self._probe is not None:
            self.seen[(name, layer)] = None
        if not self.select.keeps_name(name, layer):
            return
        if self._probe is None and (self.stopped or self._writer is None or not self.select.keeps_span(*self._span)):
            return
        torch = self.torch
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 2:
            raise EngineError(f"{label} ({where}) is {type(tensor).__name__} "
                              f"{tuple(getattr(tensor, 'shape', ()))}, not a (batch, tokens, ...) tensor")
        if tensor.shape[0] != 1:
            raise EngineError(f"{label} ({where}) has batch size {tensor.shape[0]}; dump capture runs one sequence")
        if layout == "heads":  # (batch, heads, tokens, head_dim) -> (batch, tokens, heads, head_dim)
            if tensor.dim() != 4:
                raise EngineError(f"{label} ({where}) is {tuple(tensor.shape)}, not (batch, heads, tokens, head_dim)")
            tensor = tensor.transpose(1, 2)
        start, stop = self._span
        n_new, rows = stop - start, int(tensor.shape[1])
        if rows not in (n_new, stop):
            raise EngineError(f"{label} ({where}) has {rows} token rows; the engine call appends {n_new} tokens at "
                              f"positions {start}-{stop - 1}: positions cannot be assigned")
        if self._probe is not None:
            per_row = int(tensor[0, 0].numel())
            self._probe += per_row * 4  # float32
            return
        array = tensor.detach()[0, rows - n_new:].to(dtype=torch.float32).cpu().numpy()
        info = {"name": name, "layer": layer, "instance": 0, "op": where, "label": label}
        self.store(info, array, self._span, 0)


def capture_hf(engine: Any, prompt_ids: Sequence[int], n_decode: int, out_dir: str | Path,
               **options: Any) -> CaptureResult:
    """Run prefill + ``n_decode`` M=1 decode steps on a loaded hf engine and dump tensors.

    :func:`~logitlab.dumps.capture.capture_with` with :class:`HfCapture`: parameters, result and errors as
    described there. ``engine`` is a loaded ``HfEngine``; hooks are added for the capture and removed
    afterwards. Tensors are stored as float32 rows, ``(n_positions, features)`` per step (see the module
    docstring for names and layout); the result's ``logits``, ``(n_positions, n_vocab)`` float32, equal the
    stored ``result_output``. ``InputError`` also when the tokens exceed the model's
    ``max_position_embeddings``, or for a model without ``model.layers`` of decoder layers (``self_attn``
    and ``mlp``); ``EngineError`` when transformers fails or a tensor has an unexpected shape.
    """
    return capture_with(HfCapture, engine, prompt_ids, n_decode, out_dir, **options)


__all__ = ["HfCapture", "NameTable", "STORED_DTYPE", "capture_hf", "down_proj_input_name"]
