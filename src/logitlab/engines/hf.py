"""Hugging Face transformers + PyTorch (``pip install 'logitlab[hf]'``).

The model is a GGUF file (the embedded SmolLM2 by default), which transformers
de-quantises to float32 (``gguf_file=``), or a local Hugging Face model folder
(``config.json`` plus weights). Nothing is ever downloaded
(``local_files_only=True``).

De-quantising a GGUF through transformers takes 10-35 s on a small CPU, so the
result is cached once as ``model.safetensors`` + ``config.json`` + tokenizer
files in ``$LOGITLAB_CACHE/hf-gguf/<sha256 of the GGUF>/`` (default
``~/.cache/logitlab``); later loads — every slot of an ``engine``-isolated
``ab`` — read that folder in a second or two. The cached weights are the
de-quantised float32 tensors themselves, so a cached load computes the same
bits as a fresh de-quantisation.

A session keeps transformers' KV cache between calls: ``prefill`` and
``decode`` each run one forward over the appended tokens and return one float32
row per token (``bfloat16``/``float16`` logits are widened exactly);
``truncate(n)`` rolls it back (``Cache.crop``), as speculative decoding and the
near-tie guard need. With
``kv_cache=0`` every call recomputes the whole sequence and returns its last M
rows: the "recompute" path of ``invariance prefill-decode``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from logitlab.engines.build_cache import building, cache_root, exclusive, publish, read_meta
from logitlab.engines.base import BatchRun, Engine, Session, check_outputs
from logitlab.engines.options import choice, positive_int, to_bool
from logitlab.errors import EngineError, InputError
from logitlab.models import check_gguf, default_model_path, file_sha256

DTYPES = ("float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
PADDING_SIDES = ("left", "right")
#: files of a Hugging Face model folder that hold weights (their hashes identify the model).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
CACHE_FORMAT = 1


def _device(value: Any) -> str:
    name = str(value).strip().lower()
    kind = name.split(":", 1)[0]
    if kind not in ("cpu", "cuda", "mps", "xpu"):
        raise ValueError("valid: cpu, cuda, cuda:N, mps, xpu")
    return name


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' progress bars and warnings while loading."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:  # the GGUF de-quantisation bar is a plain tqdm that ignores the switch above
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        gguf_utils = None
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if bar is not None:
            gguf_utils.tqdm = bar


class HfSession(Session):
    """One sequence on an :class:`HfEngine`: transformers' KV cache between calls (or none)."""

    engine: "HfEngine"

    def __init__(self, engine: "HfEngine", kv_cache: bool | None = None):
        super().__init__(engine)
        self.kv_cache = engine.kv_cache if kv_cache is None else kv_cache
        self._ids: list[int] = []
        self._cache: Any = None

    def _decode(self, tokens: list[int]) -> np.ndarray:
        engine = self.engine
        torch = engine.torch
        with engine.threads(), torch.inference_mode():
            try:
                if self.kv_cache:
                    inputs = torch.tensor([tokens], dtype=torch.long, device=engine.device)
                    out = engine.forward(inputs, cache=self._cache, use_cache=True)
                    self._cache = engine.output_cache(out)
                    logits = out.logits[0]
                else:
                    inputs = torch.tensor([self._ids + tokens], dtype=torch.long, device=engine.device)
                    logits = engine.forward(inputs, use_cache=False).logits[0, -len(tokens):]
                rows = logits.to(torch.float32).cpu().numpy()
            except RuntimeError as exc:
                raise EngineError(f"hf failed to evaluate {len(tokens)} tokens at position {self.n_past}: "
                                  f"{str(exc).splitlines()[0]}") from exc
        self._ids += tokens
        return np.array(rows, dtype=np.float32, copy=True)

    def _truncate(self, n_past: int) -> None:
        """Roll the KV cache back to ``n_past`` positions: transformers' ``Cache.crop`` with a negative count.

        A negative count removes that many positions in transformers 4.x (where
        a positive one is a length to keep) and 5.x (where only negative counts
        are allowed), so one call serves both. The kept entries are sliced, not
        recomputed: decoding after a rollback reads exactly the KV the session
        wrote before it.

        Raises:
            EngineError: the model's cache cannot be cropped (sliding-window or
                recurrent layers keep no full history).
        """
        del self._ids[n_past:]
        drop = self.n_past - n_past
        if self._cache is None or drop == 0:
            return
        if n_past == 0:
            self._cache = None
            return
        if getattr(self._cache, "is_croppable", True) is False or not hasattr(self._cache, "crop"):
            raise EngineError(f"hf cannot roll back the KV cache of {type(self.engine.hf_model).__name__}: its "
                              f"{type(self._cache).__name__} cannot be cropped (sliding-window or recurrent layers)")
        self._cache.crop(-drop)

    def _close(self) -> None:
        self._cache = None


class HfEngine(Engine):
    """A causal LM on transformers + PyTorch.

    Options:
        dtype: ``float32`` (default), ``bfloat16`` or ``float16`` — weights and activations.
        attn: attention implementation, ``sdpa`` (default) or ``eager``.
        threads: torch intra-op threads, set around every engine call and restored after.
            Default: half the logical cores (at least 1), llama-cpp-python's default
            ``n_threads``, so that the two engines compare at the same thread count;
            torch's own default (every logical core) oversubscribes hyper-threads and,
            on a busy machine, makes OpenMP spin: 100x slower matmuls seen on 2 cores.
        device: ``cpu`` (default), ``cuda``, ``cuda:N``, ``mps``, ``xpu``.
        kv_cache: ``1`` (default) keeps the KV cache between calls; ``0`` recomputes the
            whole sequence at every call.

    Raises:
        InputError: the model is neither a GGUF file nor a model folder, the device is
            not available, or the dtype does not run on it (checked by one untimed
            forward at load).
        EngineError: transformers failed to load the model.
    """

    name = "hf"
    ABILITIES = frozenset({"logits", "sessions", "rollback", "batch", "padded-batch", "recompute", "dump",
                           "threads"})
    CAPTURE = "logitlab.dumps.capture_hf:capture_hf"
    LIBRARIES = (("torch", "torch"), ("transformers", "transformers"), ("gguf", "gguf"), ("accelerate", "accelerate"))
    EXTRA = "hf"
    ENV_PREFIXES = ("TORCH_", "PYTORCH_", "CUDA_", "CUBLAS_", "NVIDIA_TF32")
    # what a worker imports to load a model (the model class's own module is loaded by the model's type)
    PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.generation",
               "transformers.tokenization_utils_fast", "logitlab.engines.hf", "logitlab.engines.workload",
               "logitlab.engines.supervised_worker")
    #: The invariance matrix's thread sweep: torch intra-op threads 1 vs 2.
    AXIS_SETTINGS = {"threads": ({"threads": "1"}, {"threads": "2"})}
    OPTIONS = {
        "dtype": (choice(DTYPES), "weights/activations dtype: float32 (default), bfloat16, float16"),
        "attn": (choice(ATTN_IMPLEMENTATIONS), "attention implementation: sdpa (default) or eager"),
        "threads": (positive_int, "torch intra-op threads during engine calls (default: half the cores)"),
        "device": (_device, "cpu (default), cuda, cuda:N, mps, xpu"),
        "kv_cache": (to_bool, "keep the KV cache between calls (1, default) or recompute (0)"),
    }

    @classmethod
    def library_details(cls) -> dict[str, str]:
        """torch's version, CUDA build and intra-op threads; the devices it can compute on."""
        import torch

        details = {"torch": f"{torch.__version__} (CUDA build {torch.version.cuda or 'none'}), "
                            f"{torch.get_num_threads()} threads"}
        devices = ["cpu"]
        if torch.cuda.is_available():
            devices += [f"cuda:{i} {torch.cuda.get_device_name(i)} "
                        f"(sm{''.join(map(str, torch.cuda.get_device_capability(i)))})"
                        for i in range(torch.cuda.device_count())]
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            devices.append("mps")
        details["devices"] = ", ".join(devices)
        return details

    # -- loading ------------------------------------------------------------
    def _load(self) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise InputError(f"engine 'hf' needs a package that is not installed ({exc.name}): "
                             "pip install 'logitlab[hf]'") from None
        self.torch, self.transformers = torch, transformers
        self.dtype_name = self.options.get("dtype", "float32")
        self.attn = self.options.get("attn", "sdpa")
        self.kv_cache = self.options.get("kv_cache", True)
        self.n_threads = self.options.get("threads", max(1, (os.cpu_count() or 2) // 2))
        self.device = self._check_device(self.options.get("device", "cpu"))
        self.cache_info: dict[str, Any] = {}
        folder, self.model_kind = self._resolve_model()
        with _quiet_transformers(), self.threads():
            try:
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    str(folder), local_files_only=True, dtype=getattr(torch, self.dtype_name),
                    attn_implementation=self.attn)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise EngineError(f"transformers could not load {self.model}: {str(exc).splitlines()[0]}") from exc
        self.hf_model = model.to(self.device).eval()
        self._cache_kwarg = "cache" if "cache" in _forward_parameters(model) else "past_key_values"
        self._smoke_test()

    def _check_device(self, device: str) -> str:
        torch = self.torch
        kind = device.split(":", 1)[0]
        available = {"cpu": True, "cuda": torch.cuda.is_available(),
                     "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available(),
                     "xpu": hasattr(torch, "xpu") and torch.xpu.is_available()}
        if not available[kind]:
            here = ", ".join(k for k, ok in available.items() if ok)
            raise InputError(f"device {device!r} is not available with torch {torch.__version__}; "
                             f"available here: {here}")
        if kind == "cuda" and ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
            raise InputError(f"device {device!r} does not exist: {torch.cuda.device_count()} CUDA device(s)")
        if kind == "cuda" and self.dtype_name == "bfloat16" and not torch.cuda.is_bf16_supported(False):
            raise InputError(f"dtype bfloat16 is not supported on {torch.cuda.get_device_name(device)}; "
                             "use dtype=float16 or float32")
        return device

    def _smoke_test(self) -> None:
        """One untimed 2-token forward: a dtype the device lacks fails here, not mid-run."""
        torch = self.torch
        try:
            with self.threads(), torch.inference_mode():
                self.forward(torch.tensor([[0, 0]], dtype=torch.long, device=self.device), use_cache=False)
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            raise InputError(f"dtype {self.dtype_name} does not run on device {self.device} "
                             f"({str(exc).splitlines()[0]}); use dtype=float32") from None

    def _resolve_model(self) -> tuple[Path, str]:
        """The folder transformers loads and the model kind (``gguf`` or ``folder``)."""
        path = Path(self.model) if self.model else default_model_path()
        if not path.exists():
            raise InputError(f"model {path} does not exist; the hf engine loads a local GGUF file or a local "
                             "Hugging Face model folder (nothing is downloaded)")
        self.model = str(path)
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise InputError(f"{path} is not a Hugging Face model folder: it has no config.json "
                                 "(expected config.json, tokenizer files and *.safetensors weights)")
            if not self._weight_files(path):
                raise InputError(f"{path} is not a Hugging Face model folder: it has config.json but no "
                                 f"weights ({', '.join('*' + s for s in WEIGHT_SUFFIXES)})")
            return path, "folder"
        return self._gguf_cache(check_gguf(path)), "gguf"

    @staticmethod
    def _weight_files(folder: Path) -> list[Path]:
        return sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())

    def _gguf_cache(self, gguf: Path) -> Path:
        folder, self.cache_info = dequantised_folder(gguf)
        return folder

    # -- calls ------------------------------------------------------------------
    @contextlib.contextmanager
    def threads(self) -> Iterator[None]:
        """Set torch's intra-op threads to :attr:`n_threads` for the block, then restore them."""
        wanted = self.n_threads
        saved = self.torch.get_num_threads()
        self.torch.set_num_threads(wanted)
        try:
            yield
        finally:
            self.torch.set_num_threads(saved)

    def forward(self, input_ids: Any, *, cache: Any = None, **kwargs: Any) -> Any:
        """One model forward; ``cache`` goes to the KV-cache keyword of this transformers version."""
        if cache is not None:
            kwargs[self._cache_kwarg] = cache
        return self.hf_model(input_ids=input_ids, **kwargs)

    @staticmethod
    def output_cache(out: Any) -> Any:
        cache = getattr(out, "cache", None)
        return cache if cache is not None else getattr(out, "past_key_values", None)

    def batch_logits(self, sequences: Sequence[Sequence[int]], padding: str = "right", *,
                     outputs: str = "all") -> list[np.ndarray]:
        """Evaluate sequences as one padded batch in one forward (no KV cache).

        Padding uses the tokenizer's pad id (else EOS, else 0) under an attention
        mask, and position ids count only the real tokens (``cumsum(mask) - 1``, as
        ``generate`` does), so left padding does not shift RoPE positions.

        Args:
            sequences: B token-id lists, each non-empty.
            padding: ``right`` or ``left``.
            outputs: ``all`` (every row) or ``last`` (each sequence's last row; the forward computes every row
                all the same).

        Returns:
            B arrays, ``(len(sequence), n_vocab)`` float32, padding rows removed; ``(1, n_vocab)`` with
            ``outputs="last"``.

        Raises:
            InputError: no sequences, an empty one, an unknown padding side or ``outputs``.
        """
        torch = self.torch
        check_outputs(outputs)
        if padding not in PADDING_SIDES:
            raise InputError(f"unknown padding {padding!r}; valid: {', '.join(PADDING_SIDES)}")
        if not sequences or any(len(s) == 0 for s in sequences):
            raise InputError("a batch needs at least one sequence, and no empty sequence")
        width = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        ids = torch.full((len(sequences), width), int(pad or 0), dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        spans = []
        for row, seq in enumerate(sequences):
            start = 0 if padding == "right" else width - len(seq)
            ids[row, start:start + len(seq)] = torch.tensor(list(seq), dtype=torch.long)
            mask[row, start:start + len(seq)] = 1
            spans.append((start, start + len(seq)))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with self.threads(), torch.inference_mode():
            out = self.forward(ids.to(self.device), attention_mask=mask.to(self.device),
                               position_ids=positions.to(self.device), use_cache=False)
            if outputs == "last":  # the last rows taken before the copy to float32 numpy: B rows, not B runs
                ends = torch.tensor([b - 1 for _, b in spans], device=out.logits.device)
                last = out.logits[torch.arange(len(spans), device=out.logits.device), ends]
                return [np.array(row[None], dtype=np.float32, copy=True)
                        for row in last.to(torch.float32).cpu().numpy()]
            logits = out.logits.to(torch.float32).cpu().numpy()
        return [np.array(logits[row, a:b], dtype=np.float32, copy=True) for row, (a, b) in enumerate(spans)]

    def forward_rows(self, n_tokens: int) -> list[int]:
        """One forward of all the tokens appended (with the KV cache: their rows alone)."""
        return [n_tokens]

    def open_batch(self, max_sequences: int, max_tokens: int) -> BatchRun:
        """One padded forward per run (:meth:`batch_logits`); left or right padding."""
        return _HfBatch(self)

    # -- Engine hooks -----------------------------------------------------------
    def _open_session(self) -> HfSession:
        return HfSession(self)

    def open_recompute_session(self) -> HfSession:
        """A session without KV cache whatever ``kv_cache`` says: every call recomputes the sequence."""
        return HfSession(self, kv_cache=False)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text (``<|im_start|>``) is plain text, as on llama.cpp."""
        return list(self.tokenizer(text, add_special_tokens=True, split_special_tokens=True)["input_ids"])

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens))

    @property
    def n_vocab(self) -> int:
        return int(self.hf_model.get_output_embeddings().weight.shape[0])

    @property
    def n_ctx(self) -> int | None:
        value = getattr(self.hf_model.config, "max_position_embeddings", None)
        return int(value) if value else None

    def model_sha256(self) -> str:
        """SHA-256 of the GGUF, or of the sorted weight files' digests of a folder."""
        path = Path(self.model)
        if path.is_file():
            return file_sha256(str(path.resolve()))
        digest = hashlib.sha256()
        for weights in self._weight_files(path):
            digest.update(f"{weights.name}:{file_sha256(str(weights.resolve()))}\n".encode())
        return digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        torch, config = self.torch, self.hf_model.config
        return {
            "engine": self.name,
            "engine_version": f"transformers {self.transformers.__version__}, torch {torch.__version__}",
            "model": self.model,
            "model_sha256": self.model_sha256(),
            "model_kind": "GGUF de-quantised to float32 by transformers" if self.model_kind == "gguf"
            else "Hugging Face model folder",
            "arithmetic": "transformers multiplies weights de-quantised to float with float activations"
            if self.model_kind == "gguf" else None,
            "architecture": type(self.hf_model).__name__,
            "options": dict(self.options),
            "effective": {
                "dtype": self.dtype_name,
                "attn": getattr(config, "_attn_implementation", self.attn),
                "device": self.device,
                "threads": self.n_threads,
                "kv_cache": self.kv_cache,
            },
            "weights_cache": self.cache_info or None,
            "load_seconds": round(self.load_seconds, 4),
        }

    def close(self) -> None:
        model = getattr(self, "hf_model", None)
        if model is not None:
            self.hf_model = None
            if self.device.startswith("cuda"):
                self.torch.cuda.empty_cache()


class _HfBatch(BatchRun):
    pads = True
    params = {"mode": "one padded forward, attention mask, position ids from the mask"}

    def __init__(self, engine: HfEngine):
        self.engine = engine

    def run(self, sequences: Sequence[Sequence[int]], padding: str = "right", *, outputs: str = "all",
            keep: Callable[[np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
        """One forward of the whole batch (its rows are all made at once); with ``keep``, each sequence's array
        is handed to it in turn and its copy let go."""
        rows = self.engine.batch_logits(sequences, padding, outputs=outputs)
        if keep is None:
            return rows
        rows.reverse()
        return [keep(rows.pop()) for _ in range(len(rows))]

    def forward_rows(self, sequences: Sequence[Sequence[int]]) -> list[int]:
        """One forward of B sequences padded to the longest: B × that length rows."""
        return [len(sequences) * max(len(s) for s in sequences)]


def _forward_parameters(model: Any) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def dequantised_folder(gguf: Path) -> tuple[Path, dict[str, Any]]:
    """Folder with the GGUF's de-quantised float32 weights, built on the first call (one process at a time:
    a second one waits for the first one's folder, :func:`~logitlab.engines.build_cache.exclusive`).

    A Hugging Face model folder (``config.json`` naming its ``architectures``,
    ``model.safetensors``, tokenizer files) in ``cache_root()/hf-gguf/<GGUF sha256>/``,
    rebuilt when the transformers version differs from the one that built it (its
    GGUF conversion may change). Other tools (the ORT GenAI model builder) read it
    as a model folder.

    Returns:
        The folder and ``{"cache": folder, "hit": bool, "build_seconds": s}``.

    Raises:
        InputError: transformers or gguf is not installed.
        EngineError: transformers cannot read the GGUF, or the cache is not writable.
    """
    import torch
    import transformers

    sha = file_sha256(str(gguf.resolve()))
    folder = cache_root() / "hf-gguf" / sha

    def cached() -> tuple[Path, dict[str, Any]] | None:
        meta = read_meta(folder)
        if meta and meta.get("transformers") == transformers.__version__ and meta.get("format") == CACHE_FORMAT:
            _name_architectures(folder)
            return folder, {"cache": str(folder), "hit": True, "build_seconds": meta.get("build_seconds")}
        return None

    hit = cached()
    if hit is not None:
        return hit
    with exclusive(folder, "the de-quantised weights cache"):  # another process building it: wait for it
        hit = cached()
        if hit is not None:
            return hit
        start = time.perf_counter()
        with building(folder, f".{sha[:12]}-", "the de-quantised weights cache") as tmp:
            _dequantise(gguf, tmp, transformers, torch)
            build = round(time.perf_counter() - start, 2)
            publish(tmp, folder, {"format": CACHE_FORMAT, "gguf": str(gguf), "gguf_sha256": sha,
                                  "transformers": transformers.__version__, "build_seconds": build})
    return folder, {"cache": str(folder), "hit": False, "build_seconds": build}


def _dequantise(gguf: Path, out: Path, transformers: Any, torch: Any) -> None:
    import safetensors.torch

    with _quiet_transformers():
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, local_files_only=True, dtype=torch.float32)
        except ImportError as exc:
            raise InputError(f"loading a GGUF in transformers needs {exc.name or 'gguf'}: "
                             "pip install 'logitlab[hf]'") from None
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise EngineError(f"transformers could not load the GGUF {gguf}: "
                              f"{str(exc).splitlines()[0]}") from exc
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    # transformers leaves architectures unset for a GGUF; without it no other tool reads the folder as a model
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    (out / "config.json").write_text(json.dumps(config, indent=1))
    safetensors.torch.save_model(model, str(out / "model.safetensors"))  # drops tied duplicates
    tokenizer.save_pretrained(str(out))


def _name_architectures(folder: Path) -> None:
    """Add ``architectures`` to a cache folder's config.json written before it was recorded.

    The class is the one ``AutoModelForCausalLM`` maps the ``model_type`` to; the
    file is replaced atomically, and a folder that cannot be written is left as is.
    """
    path = folder / "config.json"
    config = json.loads(path.read_text())
    if config.get("architectures"):
        return
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.get("model_type", ""))
    if not name:
        return
    config["architectures"] = [name]
    tmp = path.with_name(f".config-{os.getpid()}.json")
    try:
        tmp.write_text(json.dumps(config, indent=1))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
