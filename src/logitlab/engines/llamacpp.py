"""llama.cpp through llama-cpp-python (``pip install 'logitlab[llamacpp]'``).

A session is the ``Llama`` object's single sequence: ``reset()`` empties it and
:func:`decode_rows` appends M tokens in one ``llama_decode`` per ``n_batch``
tokens, with logits requested for every row — ``Llama.eval``'s own steps with
``logits_all=True``, so the same bits. M > 1 decode tokens is llama.cpp's M=K
verify path. Each chunk's rows are copied from llama.cpp's output buffer
straight into the array returned: the ``Llama`` is made with ``logits_all=False``,
so llama-cpp-python keeps no ``n_ctx × n_vocab`` float32 ``scores`` copy of every
row (what it keeps with ``logits_all=True``: one more full run's logits per engine,
growing with the prompt). The memory llama.cpp holds for logits is its output
buffer of one ``n_batch`` chunk (``n_batch × n_vocab × 4`` bytes), whatever the
prompt's length.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from logitlab.engines import llamacpp_library as library
from logitlab.engines import llamacpp_repack as repack
from logitlab.engines.base import BatchRun, Engine, Session
from logitlab.engines.options import positive_int, to_bool
from logitlab.engines.tokenizers import LlamaVocabulary
from logitlab.errors import EngineError
from logitlab.models import check_gguf, default_model_path, file_sha256

#: ggml tensor types accepted for the KV cache (``type_k`` / ``type_v``): name -> ``enum ggml_type``
#: value (ggml/include/ggml.h), the integer ``llama_cpp.Llama(type_k=...)`` itself takes.
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


def _kv_type(value: Any) -> str:
    """A KV cache type by name (``q8_0``) or by its ggml enum value (``8``), as the name."""
    name = str(value).strip().lower()
    by_number = {str(number): type_name for type_name, number in KV_TYPES.items()}
    if name in by_number:
        return by_number[name]
    if name not in KV_TYPES:
        mapping = ", ".join(f"{type_name} ({number})" for type_name, number in KV_TYPES.items())
        raise ValueError(f"valid types, by name or ggml enum value: {mapping}")
    return name


class LlamaCppSession(Session):
    engine: "LlamaCppEngine"

    def __init__(self, engine: "LlamaCppEngine"):
        super().__init__(engine)
        engine.llama.reset()

    def _decode(self, tokens: list[int], out: np.ndarray | None = None) -> np.ndarray:
        llama = self.engine.llama
        start = llama.n_tokens
        try:
            return decode_rows(llama, tokens, out)
        except Exception as exc:  # llama-cpp-python raises RuntimeError/ValueError
            raise EngineError(f"llama.cpp failed to evaluate {len(tokens)} tokens at position {start}: {exc}") from exc

    def _truncate(self, n_past: int) -> None:
        # Llama.eval removes the KV cells from n_tokens on before its next decode
        # (measured: an M=1 decode after a rollback is bit-exact with one without).
        self.engine.llama.n_tokens = n_past

    def _close(self) -> None:
        self.engine.llama.reset()


def decode_rows(llama: Any, tokens: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
    """Append ``tokens`` to ``llama``'s sequence and return their logits, one row per token.

    The steps of ``llama_cpp.Llama.eval`` (0.3.x) with ``logits_all=True`` — the KV cells from
    ``n_tokens`` on removed, one ``llama_decode`` per ``n_batch`` tokens at positions ``n_tokens…``, every
    row's logits requested, ``input_ids`` and ``n_tokens`` kept — except that each chunk's rows go from
    llama.cpp's output buffer (``llama_get_logits``: ``n_outputs × n_vocab`` float32, row-major) into the
    array returned, never into ``Llama.scores``. The same ``llama_decode`` calls as ``eval``, so the same
    bits (tests/engines/test_llamacpp.py checks it against ``eval`` on a ``logits_all=True`` model).

    Args:
        llama: a ``llama_cpp.Llama`` (made with ``logits_all=False`` to save its ``scores`` copy).
        tokens: the token ids to append (M >= 1).
        out: a C-contiguous float32 ``(M, n_vocab)`` array to write the rows into (a view of a run's buffer);
            None: a new one.

    Returns:
        ``(M, n_vocab)`` float32 logits: ``out``, or a new array (the next call does not overwrite it).

    Raises:
        RuntimeError: llama.cpp's ``llama_decode`` failed (llama-cpp-python's error).
    """
    n_vocab = int(llama.n_vocab())
    rows = out if out is not None else np.empty((len(tokens), n_vocab), dtype=np.float32)
    llama._ctx.kv_cache_seq_rm(-1, llama.n_tokens, -1)
    for first in range(0, len(tokens), llama.n_batch):
        chunk = list(tokens[first:first + llama.n_batch])
        n_past = llama.n_tokens
        llama._batch.set_batch(batch=chunk, n_past=n_past, logits_all=True)
        llama._ctx.decode(llama._batch)
        llama.input_ids[n_past:n_past + len(chunk)] = chunk
        rows[first:first + len(chunk)] = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(len(chunk), n_vocab))
        llama.n_tokens += len(chunk)
    return rows


class LlamaCppEngine(LlamaVocabulary, Engine):
    """llama.cpp via llama-cpp-python, CPU by default.

    Options (engine-native names, see ``llama_cpp.Llama``): ``n_threads``,
    ``n_threads_batch``, ``n_batch``, ``n_ubatch``, ``n_ctx``, ``flash_attn``,
    ``type_k``, ``type_v``, ``n_gpu_layers``, ``offload_kqv``, ``use_mmap``,
    ``seed``, ``use_extra_bufts`` (llama.cpp's weight repacking:
    :mod:`~logitlab.engines.llamacpp_repack`), ``lib`` (another build of the
    library: :mod:`~logitlab.engines.llamacpp_library`). Unset options take
    llama-cpp-python's defaults, except ``n_ctx`` (512 here), ``logits_all``
    (off: every row's logits are requested per call by :func:`decode_rows`, not
    kept by llama-cpp-python) and ``use_extra_bufts`` (``auto``: off
    only where the CPU and library have AMX, whose repack path crashes).
    """

    name = "llamacpp"
    ABILITIES = frozenset({"logits", "sessions", "rollback", "batch", "dump", "threads", "chunked-prefill"})
    CAPTURE = "logitlab.dumps.capture_llamacpp:capture_llamacpp"
    LIBRARIES = (("llama-cpp-python", "llama_cpp"),)
    EXTRA = "llamacpp"
    ENV_PREFIXES = ("GGML_", "LLAMA_", "CUDA_")
    #: The invariance matrix's option sweeps: the prompt cut into micro-batches of 512 (one chunk for a prompt
    #: that fits), 32 and 4 tokens (``n_ubatch``, the physical batch of one ``llama_decode`` graph; a last chunk
    #: of one row runs the matrix-vector kernels); 1 vs 2 threads for decode and batched evaluation.
    AXIS_SETTINGS = {
        "chunked-prefill": ({"n_ubatch": "512"}, {"n_ubatch": "32"}, {"n_ubatch": "4"}),
        "threads": ({"n_threads": "1", "n_threads_batch": "1"}, {"n_threads": "2", "n_threads_batch": "2"}),
    }
    OPTIONS = {
        "n_threads": (positive_int, "threads for single-token decode"),
        "n_threads_batch": (positive_int, "threads for batched (prefill) evaluation"),
        "n_batch": (positive_int, "logical batch size (tokens per llama_decode call)"),
        "n_ubatch": (positive_int, "physical micro-batch size"),
        "n_ctx": (positive_int, "context length in tokens (default 512)"),
        "flash_attn": (to_bool, "flash attention on/off"),
        "type_k": (_kv_type, "KV cache type for K (f16 default)"),
        "type_v": (_kv_type, "KV cache type for V (f16 default)"),
        "n_gpu_layers": (int, "layers offloaded to a GPU (0 on CPU builds)"),
        "offload_kqv": (to_bool, "offload KQV ops to the GPU"),
        "use_mmap": (to_bool, "mmap the model file"),
        "seed": (int, "RNG seed (greedy replay does not sample)"),
        "use_extra_bufts": (repack.parse_setting, "weight repacking into the CPU's extra buffer types (the tools' "
                                                  "--no-repack): auto (default: off on AMX CPUs), 1 or 0"),
        "lib": (library.library_folder, "folder of another llama.cpp build to load (logitlab build llamacpp makes "
                                        "one; libllama.so in DIR or DIR/lib); one build per process"),
    }
    DEFAULT_N_CTX = 512

    @classmethod
    def library_details(cls) -> dict[str, str]:
        """llama.cpp's system-info line (the CPU features and backends the build uses), its GPU offload support,
        and :func:`~logitlab.engines.llamacpp_repack.describe_machine`: the CPU's instruction-set classes and the
        embedded model's weight repacking (a load of it, no evaluation: about a second)."""
        import llama_cpp

        details = {"system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()}
        for label, name in (("gpu_offload", "llama_supports_gpu_offload"), ("max_devices", "llama_max_devices")):
            func = getattr(llama_cpp, name, None)
            if callable(func):
                details[label] = str(func())
        from logitlab.errors import LogitlabError

        try:
            model: str | None = str(default_model_path())
        except LogitlabError:
            model = None
        details.update(repack.describe_machine(model))
        return details

    @classmethod
    def crash_hint(cls, options: dict[str, Any]) -> str | None:
        """:data:`~logitlab.engines.llamacpp_repack.CRASH_HINT` where this CPU and library have AMX and the
        options repack weights (``use_extra_bufts=1``) with batched evaluation (``n_ubatch`` not 1); for ``lib=DIR``
        loaded with the installed bindings, that a struct whose layout differs between the two crashes."""
        if "lib" in options:
            folder = library.resolve(options["lib"])
            if folder.bindings is None:
                return (f"the library in {folder.path} was loaded with the installed llama-cpp-python bindings: a "
                        "llama.cpp of another version can match every function name and still lay a struct out "
                        "otherwise; build it from the bindings' release (logitlab build llamacpp "
                        "--llama-cpp-python VERSION) and run it again")
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
        choice = repack.resolve(options.get("use_extra_bufts", repack.AUTO), info)
        amx = repack.library_has_amx(info) and repack.cpu_has_amx()
        return repack.CRASH_HINT if amx and choice.use_extra_bufts and options.get("n_ubatch") != 1 else None

    def _load(self) -> None:
        path = check_gguf(self.model or default_model_path())
        self.model = str(path)
        self.library = library.resolve(self.options["lib"]) if "lib" in self.options else None
        with library.importing(self.library) as llama_cpp:
            self._load_with(llama_cpp)

    def _load_with(self, llama_cpp: Any) -> None:
        kwargs: dict[str, Any] = {k: v for k, v in self.options.items()
                                  if k not in ("type_k", "type_v", "use_extra_bufts", "lib")}
        for key in ("type_k", "type_v"):
            if key in self.options:
                kwargs[key] = KV_TYPES[self.options[key]]
        kwargs.setdefault("n_ctx", self.DEFAULT_N_CTX)
        self.system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
        self.repack = repack.resolve(self.options.get("use_extra_bufts", repack.AUTO), self.system_info)
        log: list[str] = []
        try:
            with repack.loading(self.repack.use_extra_bufts) as log:
                self.llama = llama_cpp.Llama(model_path=self.model, logits_all=False, verbose=False, **kwargs)
        except Exception as exc:
            said = " ".join(line.strip() for line in log if "error" in line.lower() or "failed" in line.lower())
            raise EngineError(f"llama.cpp could not load {self.model} with options {self.options}: {exc}"
                              + (f" (llama.cpp: {said[-300:]})" if said else "")) from exc
        self.buffers = repack.buffer_types("".join(log))
        self._version = getattr(llama_cpp, "__version__", "unknown")
        self.library_identity = library.library_identity(llama_cpp, self.library)

    @property
    def extra_buffer_types(self) -> list[str]:
        """The extra buffer types the loaded model's weights went to (``["AMX"]``, ``["CPU_REPACK"]``; ``[]``: none)."""
        return [name for name in self.buffers if name in repack.EXTRA_BUFFER_TYPES]

    def _open_session(self) -> LlamaCppSession:
        return LlamaCppSession(self)

    @property
    def n_ctx(self) -> int:
        # llama.cpp may pad the context; the token buffer holds the n_ctx asked for.
        return min(int(self.llama.n_ctx()), int(self.llama.input_ids.shape[0]))

    def close(self) -> None:
        llama = getattr(self, "llama", None)
        if llama is not None:
            llama.close()
            self.llama = None

    def forward_rows(self, n_tokens: int) -> list[int]:
        """``eval`` cuts the tokens into ``llama_decode`` calls of ``n_batch``, llama.cpp each into ``n_ubatch``."""
        from logitlab.engines.llamacpp_batch import split_rows

        n_batch, n_ubatch = int(self.llama.n_batch), int(self.llama.context_params.n_ubatch)
        return [rows for chunk in split_rows(n_tokens, n_batch) for rows in split_rows(chunk, n_ubatch)]

    def open_batch(self, max_sequences: int, max_tokens: int) -> BatchRun:
        """Parallel sequences (seq ids) in one ``llama_decode`` on a second context, no padding."""
        from logitlab.engines.llamacpp_batch import LlamaCppBatch

        return LlamaCppBatch(self, max_sequences, max_tokens)

    def peer_settings(self, tool: str) -> list[str]:
        """llama.cpp's tools (``common/arg.cpp``) default to flash attention ``-fa auto`` (on for the CPU) and
        weight repacking on; llama-cpp-python to flash attention off, and this engine to ``use_extra_bufts=auto``."""
        if tool not in ("llama-perplexity", "llama-server", "llama-bench"):
            return []
        fa = bool(self.options.get("flash_attn", False))
        lines = [f"flash attention: {tool} defaults to -fa auto (on for the CPU); this run had flash_attn="
                 f"{int(fa)}" + ("" if fa else " (llama-cpp-python's default): the figures include flash "
                                 "attention's difference unless the tool ran with -fa off, or pass flash_attn=1")]
        flag = "--repack 0" if tool == "llama-bench" else "--no-repack"
        lines.append(f"weight repacking: {tool} repacks by default ({flag} turns it off); this run had "
                     f"use_extra_bufts={int(self.repack.use_extra_bufts)} ({self.repack.reason}), weights in "
                     f"{', '.join(self.extra_buffer_types) or 'no extra buffer type'}")
        return lines

    def _build_identity(self, extra: list[str]) -> dict[str, str]:
        """The build facts a golden's bar and a history series key on: the weights' extra buffer types where they
        were repacked; for ``lib=DIR``, the library's digest (SHA-256 over its shared objects) and version."""
        identity = {"extra_buffer_types": ",".join(extra)} if extra else {}
        if self.library is not None:
            lib = self.library_identity
            identity["library_sha256"] = lib["digest"]
            commit = lib.get("ggml_commit") if lib.get("ggml_commit") not in (None, "unknown") else None
            release = (lib.get("built") or {}).get("llama-cpp-python")
            identity["library_version"] = " ".join(
                part for part in (f"ggml {lib.get('ggml_version') or 'unknown'}", commit,
                                  f"(llama-cpp-python {release}'s llama.cpp)" if release else None) if part)
        return identity

    def describe(self) -> dict[str, Any]:
        extra = self.extra_buffer_types
        return {
            "engine": self.name,
            "engine_version": f"llama-cpp-python {self._version}",
            "system_info": self.system_info,
            # what decides the weights' kernel path on this machine; in the build key only when repacked
            "build_identity": self._build_identity(extra),
            "library": self.library_identity,
            "weight_repacking": {"use_extra_bufts": self.repack.use_extra_bufts, "setting": self.repack.setting,
                                 "reason": self.repack.reason, "extra_buffer_types": extra or ["none"],
                                 "model_buffers_mib": {k: round(v, 2) for k, v in self.buffers.items()}},
            "model": self.model,
            "model_sha256": file_sha256(os.path.abspath(self.model)),
            "model_kind": "GGUF weights as stored (quantised types computed as such)",
            "arithmetic": ("llama.cpp multiplies the quantised weights with activations it quantises on the fly "
                           "(8-bit blocks for 4/5-bit weight types on CPU)"),
            "options": dict(self.options),
            "effective": {
                "n_ctx": self.n_ctx,
                "n_batch": self.llama.n_batch,
                "n_threads": self.llama.n_threads,
                "n_threads_batch": self.llama.n_threads_batch,
                "use_extra_bufts": self.repack.use_extra_bufts,
            },
            "load_seconds": round(self.load_seconds, 4),
        }

