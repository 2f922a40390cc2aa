"""Capture named intermediate tensors from llama.cpp (llama-cpp-python).

How the callback is installed
-----------------------------
ggml's scheduler calls ``llama_context_params.cb_eval(tensor, ask, user_data)``
for every node of the compute graph: first with ``ask=True`` ("do you want to
see this one?"), then — if the answer was yes — with ``ask=False`` once the
node is computed, as llama.cpp's ``eval-callback`` tool uses it. The
parameter is only read when the context is created, and ``llama_cpp.Llama``
builds its context inside ``__init__`` from ``Llama.context_params`` with no
hook in between. Rather than monkeypatching llama-cpp-python's module
functions around ``Llama(...)`` (global, not thread-safe), this module lets
:class:`~logitlab.engines.llamacpp.LlamaCppEngine` load as usual, then sets
``cb_eval`` on the very ``context_params`` the engine's context was built from
and **creates a second context** from them (``llama_cpp._internals.LlamaContext``),
swapping it in for ``Llama._ctx`` and closing the first. Every option
(``flash_attn``, ``n_ubatch``, ``type_k`` …) carries over because the
parameters are the same object; the cost is one extra context creation
(milliseconds for the embedded model). The ctypes callback object is kept on
the ``Llama`` object so it lives as long as the context that calls it.

What is captured
----------------
Named graph nodes (``attn_norm-3``, ``Qcur-0``, ``kqv_out-0``, ``ffn_out-3``,
``l_out-3``, ``result_norm``, ``result_output`` …) of type f32, f16, bf16 or
i32. Skipped: unnamed nodes (``node_123``), views llama.cpp labels with a
suffix (``cache_k_l0 (view)``, ``Qcur-0 (permuted)``), and view ops
(RESHAPE/VIEW/PERMUTE/TRANSPOSE) that merely relabel a tensor already seen
under the same name in the graph (``Qcur-0`` reshaped after its matmul). A
name seen twice in one graph gets an instance number (``norm-3`` and
``norm-3#1``: the attention and the FFN RMS norm).

Positions: each graph is one micro-batch (ubatch) of ``n`` tokens at known
positions (llama-cpp-python splits an ``eval`` into ``n_batch`` chunks,
llama.cpp each chunk into ``n_ubatch`` ubatches; the split is checked
against ``result_output``'s row count). The tensor's token axis is the ggml
dimension whose size is ``n`` (remembered per name for 1-token ubatches and
ambiguous sizes); tensors are stored per ubatch with their position range and
token axis, or per position when a position filter is given.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.dumps.capture import (
    CaptureResult,
    StepRecorder,
    capture_with,
    check_filter_matches,
)
from logitlab.dumps.filters import TensorFilter
from logitlab.dumps.format import np_dtype
from logitlab.dumps.manifest import StepInfo
from logitlab.errors import EngineError

#: ggml type id -> numpy dtype name (types a dump can hold).
GGML_DTYPES = {0: "float32", 1: "float16", 26: "int32", 30: "bfloat16"}
VIEW_OPS = frozenset({"RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE", "NONE"})
_SKIP_NAME = re.compile(r"^(node|leaf)_\d+$|\s\(")
_NAME_LAYER = re.compile(r"^(?P<name>.+?)-(?P<layer>\d+)$")
LAST_NODE = "result_output"


class _TensorHead(ctypes.Structure):
    """The first fields of ``struct ggml_tensor`` (ggml.h): type, buffer, ne[4], nb[4]."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4)]


def _ggml_library() -> ctypes.CDLL:
    try:
        from llama_cpp import _ggml

        lib = _ggml.libggml
    except (ImportError, AttributeError, OSError):  # pragma: no cover - older llama-cpp-python
        import llama_cpp

        lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    vp = ctypes.c_void_p
    for fn, restype, argtypes in (
        ("ggml_get_name", ctypes.c_char_p, [vp]), ("ggml_op_desc", ctypes.c_char_p, [vp]),
        ("ggml_nbytes", ctypes.c_size_t, [vp]), ("ggml_nelements", ctypes.c_int64, [vp]),
        ("ggml_backend_tensor_get", None, [vp, vp, ctypes.c_size_t, ctypes.c_size_t]),
    ):
        getattr(lib, fn).restype = restype
        getattr(lib, fn).argtypes = argtypes
    return lib


def install_eval_callback(llama: Any, callback: Callable[[int, bool, int], bool]) -> Any:
    """Recreate ``llama``'s context with ``cb_eval = callback`` (see the module docstring).

    Args:
        llama: a ``llama_cpp.Llama`` that has evaluated nothing yet that must be kept.
        callback: ``callback(tensor_address, ask, user_data) -> bool``.

    Returns:
        The ctypes callback object (also kept on ``llama``).

    Raises:
        EngineError: the new context could not be created.
    """
    import llama_cpp
    from llama_cpp import _internals

    cfun = llama_cpp.ggml_backend_sched_eval_callback(callback)
    params = llama.context_params
    params.cb_eval = cfun
    params.cb_eval_user_data = None
    try:
        context = _internals.LlamaContext(model=llama._model, params=params, verbose=llama.verbose)
    except Exception as exc:
        raise EngineError(f"llama.cpp could not create a context with the eval callback: {exc}") from exc
    old, llama._ctx = llama._ctx, context
    old.close()
    llama._stack.callback(context.close)
    llama._logitlab_cb_eval = cfun
    llama.n_tokens = 0
    return cfun


@dataclass
class _Graph:
    start: int
    n_tokens: int


class LlamaCppCapture(StepRecorder):
    """Observe and store named tensors of a :class:`LlamaCppEngine` while it evaluates.

    Use :meth:`probe_bytes_per_token` for the size estimate, then
    :meth:`begin_step` / engine call / :meth:`end_step` around each engine call
    (storage, filters and ``--max-bytes``: :class:`~logitlab.dumps.capture.StepRecorder`).
    """

    callback_where = "the ggml eval callback"

    def __init__(self, engine: Any, select: TensorFilter, out_dir: Path, *, max_bytes: int | None = None):
        super().__init__(select, out_dir, max_bytes=max_bytes)
        self.engine = engine
        self.llama = engine.llama
        self.lib = _ggml_library()
        self._axis_memory: dict[tuple[str, int], int] = {}
        self._active = False
        self._probe: int | None = None
        self._graphs: list[_Graph] = []
        self._graph_index = -1
        self._graph_done = True
        self._instances: dict[str, int] = {}
        self._names_seen: set[str] = set()
        self._pending: tuple[int, dict[str, Any]] | None = None
        self._checked_layout = False
        self._callback_ref = install_eval_callback(self.llama, self._callback)

    # -- schedule -------------------------------------------------------------
    def _ubatches(self, start: int, n_tokens: int) -> list[_Graph]:
        import llama_cpp

        n_batch = int(self.llama.n_batch)
        try:
            n_ubatch = int(llama_cpp.llama_n_ubatch(self.llama._ctx.ctx))
        except Exception:  # pragma: no cover - older bindings
            n_ubatch = int(self.llama.context_params.n_ubatch)
        graphs = []
        for b in range(0, n_tokens, n_batch):
            chunk = min(n_batch, n_tokens - b)
            for u in range(0, chunk, n_ubatch):
                graphs.append(_Graph(start + b + u, min(n_ubatch, chunk - u)))
        return graphs

    # -- size estimate ----------------------------------------------------------
    def probe_bytes_per_token(self) -> int:
        """Bytes the filter keeps for one token, from a 1-token evaluation that observes nothing.

        The probe evaluates token 0 at position 0 and leaves the engine reset.
        """
        self._probe = 0
        self.seen = {}
        self._start_graphs(0, 1)
        try:
            self.llama.reset()
            self.llama.eval([0])
        except Exception as exc:
            raise EngineError(f"llama.cpp failed on the 1-token probe: {exc}") from exc
        finally:
            self._active = False
            self.llama.reset()
        self.raise_pending_error()
        size, self._probe = self._probe, None
        return int(size)

    # -- steps --------------------------------------------------------------------
    def _start_graphs(self, start: int, n_tokens: int) -> None:
        self._graphs = self._ubatches(start, n_tokens)
        self._graph_index = -1
        self._graph_done = True
        self._active = True

    def begin_step(self, index: int, kind: str, start: int, n_tokens: int) -> None:
        """Prepare for one engine call appending ``n_tokens`` at positions ``start``…"""
        super().begin_step(index, kind, start, n_tokens)
        self._start_graphs(start, n_tokens)

    def end_step(self) -> StepInfo:
        """Finish the step file; returns the step's info.

        Raises:
            EngineError: an error inside the callback, or the ubatch accounting failed.
        """
        self._active = False
        if not self.failed and self._graph_index + 1 != len(self._graphs):
            self.fail(EngineError(
                f"llama.cpp computed {self._graph_index + 1} graphs for step {self._step.index}, "
                f"{len(self._graphs)} expected from n_batch/n_ubatch; positions cannot be assigned"))
        return super().end_step()

    def abort(self) -> None:
        self._active = False
        super().abort()

    # -- the callback ----------------------------------------------------------------
    def _callback(self, tensor: int, ask: bool, _user_data: int) -> bool:
        try:
            if not self._active or self.failed:
                return not ask
            if ask:
                return self._ask(tensor)
            self._observe(tensor)
            return True
        except BaseException as exc:  # never let an exception cross into C
            self.fail(exc)
            return False

    def _next_graph(self) -> None:
        self._graph_index += 1
        if self._graph_index >= len(self._graphs):
            raise EngineError(f"llama.cpp computed more graphs than the {len(self._graphs)} expected "
                              "from n_batch/n_ubatch; positions cannot be assigned")
        self._graph_done = False
        self._instances = {}
        self._names_seen = set()

    def _check_layout(self, tensor: int, head: _TensorHead) -> None:
        ne = [int(x) for x in head.ne]
        if (int(self.lib.ggml_nelements(tensor)) != int(np.prod(ne)) or any(n < 1 for n in ne)
                or head.nb[0] > 16):
            raise EngineError("this ggml build's struct ggml_tensor does not start with type, buffer, ne[4], "
                              "nb[4]: dump capture does not support it")
        self._checked_layout = True

    def _token_dim(self, key: tuple[str, int], ne: list[int], n_tokens: int) -> int | None:
        dims = [d for d in (1, 2, 3) if ne[d] == n_tokens]
        memory = self._axis_memory.get(key)
        if n_tokens > 1:
            if len(dims) == 1:
                self._axis_memory[key] = dims[0]
                return dims[0]
            return memory if memory in dims else None
        if memory is not None and ne[memory] == 1:
            return memory
        n_dims = max((d + 1 for d in range(4) if ne[d] > 1), default=1)
        return n_dims if n_dims < 4 else (dims[0] if dims else None)

    def _ask(self, tensor: int) -> bool:
        if self._graph_done:
            self._next_graph()
        label = self.lib.ggml_get_name(tensor).decode("utf-8", "replace")
        head = _TensorHead.from_address(tensor)
        if not self._checked_layout:
            self._check_layout(tensor, head)
        graph = self._graphs[self._graph_index]
        if label == LAST_NODE:
            self._graph_done = True
            if int(head.ne[1]) != graph.n_tokens:
                raise EngineError(f"{LAST_NODE} has {int(head.ne[1])} rows, the ubatch {graph.n_tokens} tokens: "
                                  "positions cannot be assigned (is logits_all on?)")
        if not label or _SKIP_NAME.search(label):
            return False
        op = (self.lib.ggml_op_desc(tensor) or b"").decode("utf-8", "replace")
        if op in VIEW_OPS and label in self._names_seen:
            return False
        self._names_seen.add(label)
        instance = self._instances.get(label, 0)
        self._instances[label] = instance + 1
        match = _NAME_LAYER.match(label)
        name, layer = (match.group("name"), int(match.group("layer"))) if match else (label, None)
        ne = [int(x) for x in head.ne]
        token_dim = self._token_dim((name, instance), ne, graph.n_tokens)
        dtype = GGML_DTYPES.get(int(head.type))
        if self._probe is not None:
            self.seen[(name, layer)] = None
        if not self.select.keeps_name(name, layer):
            return False
        if self._probe is None and not self.select.keeps_span(graph.start, graph.start + graph.n_tokens):
            return False
        if dtype is None:
            note = f"{label}: ggml type {int(head.type)} cannot be dumped; skipped"
            if note not in self.notes:
                self.notes.append(note)
            return False
        if self._probe is not None:
            self._probe += int(np.prod(ne)) * np_dtype(dtype).itemsize
            return False
        if self.stopped or self._writer is None:
            return False
        if not head.buffer:
            self.notes.append(f"{label}: no backend buffer; skipped")
            return False
        self._pending = (tensor, {"name": name, "layer": layer, "instance": instance, "op": op, "dtype": dtype,
                                  "ne": ne, "nb": [int(x) for x in head.nb], "token_dim": token_dim,
                                  "label": label})
        return True

    def _observe(self, tensor: int) -> None:
        if self._pending is None or self._pending[0] != tensor:
            return
        info = self._pending[1]
        self._pending = None
        nbytes = int(self.lib.ggml_nbytes(tensor))
        raw = np.empty(nbytes, dtype=np.uint8)
        self.lib.ggml_backend_tensor_get(tensor, raw.ctypes.data, 0, nbytes)
        ne, nb, token_dim = info["ne"], info["nb"], info["token_dim"]
        n_dims = max((d + 1 for d in range(4) if ne[d] > 1), default=1)
        keep = max(n_dims, (token_dim + 1) if token_dim is not None else 0)
        shape = tuple(reversed(ne[:keep]))
        strides = tuple(reversed(nb[:keep]))
        array = np.ndarray(shape, dtype=np_dtype(info["dtype"]), buffer=raw, strides=strides).copy()
        axis = keep - 1 - token_dim if token_dim is not None else None
        graph = self._graphs[self._graph_index]
        self.store(info, array, (graph.start, graph.start + graph.n_tokens), axis)


def capture_llamacpp(engine: Any, prompt_ids: Sequence[int], n_decode: int, out_dir: str | Path,
                     **options: Any) -> CaptureResult:
    """Run prefill + ``n_decode`` M=1 decode steps on a loaded llama.cpp engine and dump tensors.

    :func:`~logitlab.dumps.capture.capture_with` with :class:`LlamaCppCapture`: parameters, result and
    errors as described there. ``engine`` is a freshly loaded ``LlamaCppEngine`` (its context is recreated
    with the eval callback); ``InputError`` when the tokens do not fit its context, ``EngineError`` when
    llama.cpp fails or tensors cannot be assigned to positions.
    """
    return capture_with(LlamaCppCapture, engine, prompt_ids, n_decode, out_dir, **options)


__all__ = ["CaptureResult", "GGML_DTYPES", "LlamaCppCapture", "capture_llamacpp", "check_filter_matches",
           "install_eval_callback"]
