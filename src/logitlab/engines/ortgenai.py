"""ONNX Runtime GenAI (``pip install 'logitlab[ortgenai]'``).

The model is an ORT GenAI model folder (``genai_config.json``, ``model.onnx``,
tokenizer files), given as ``--model DIR``, or a GGUF file (the embedded SmolLM2
by default). A GGUF is first de-quantised to float32 safetensors by the hf
engine's cache (:func:`logitlab.engines.hf.dequantised_folder`, shared with
``--engine hf``), then converted by ORT GenAI's own model builder
(``python -m onnxruntime_genai.models.builder -i DIR -o OUT -p fp32|int4 -e cpu``)
in a subprocess. The built folder is cached in
``$LOGITLAB_CACHE/ort-genai/<GGUF sha256>-<precision>[-options]/`` (default
``~/.cache/logitlab``), rebuilt when the onnxruntime-genai version differs from
the one that built it. ``precision=int4`` is the builder's weight-only int4 path
(MatMulNBits, RTN, block size 32, ``accuracy_level`` 4 = int8 activations on CPU
by default), so ``ab --control precision=fp32 --candidate precision=int4`` is a
quantisation A/B on the same weights.

A session is one ``og.Generator``: ``append_tokens`` appends M tokens (the
prompt, one M=1 decode token or an M=K verify block) and
``get_output("logits")`` returns their ``(1, M, n_vocab)`` logits, copied out
here; ``rewind_to(n)`` rolls the KV cache back. ORT GenAI's search options that
steer sampling (``top_k``, ``temperature`` …) never touch these logits and are
not options here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from logitlab.engines.build_cache import building, cache_root, exclusive, publish, read_meta
from logitlab.engines.base import Engine, Session
from logitlab.engines.options import choice, positive_int, to_bool
from logitlab.errors import EngineError, InputError
from logitlab.models import check_gguf, default_model_path, file_sha256

PRECISIONS = ("fp32", "int4")
ACCURACY_LEVELS = (1, 2, 3, 4)
BLOCK_SIZES = (16, 32, 64, 128, 256)
#: execution providers ORT GenAI names in ``genai_config.json``, with the probe that says one is built in.
PROVIDERS = {"cpu": None, "cuda": "is_cuda_available", "dml": "is_dml_available",
             "webgpu": "is_webgpu_available", "openvino": "is_openvino_available", "qnn": "is_qnn_available"}
OPTIMIZATION_LEVELS = {"disable_all": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                       "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
#: options the model builder reads; they pick the cached folder and need a GGUF source.
BUILD_OPTIONS = ("precision", "accuracy_level", "block_size")
INT4_OPTIONS = BUILD_OPTIONS[1:]
#: the model builder's own defaults for the int4 options on CPU (its --extra_options help).
INT4_DEFAULTS = {"accuracy_level": 4, "block_size": 32}
#: files of an ORT GenAI folder whose hashes identify the model.
MODEL_SUFFIXES = (".onnx", ".data", ".onnx_data")
#: packages the model builder imports (module name, pip name).
BUILDER_MODULES = (("onnx", "onnx"), ("onnx_ir", "onnx-ir"), ("onnxruntime", "onnxruntime"),
                   ("torch", "torch"), ("transformers", "transformers"))
DEFAULT_MAX_LENGTH = 2048
CACHE_FORMAT = 1


def _optimization_level(value: Any) -> str:
    text = str(value).strip().lower()
    for short, ort_name in OPTIMIZATION_LEVELS.items():
        if text in (short, ort_name.lower()):
            return short
    raise ValueError(f"valid: {', '.join(OPTIMIZATION_LEVELS)} (or ORT's names: ORT_ENABLE_ALL …)")


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def folder_sha256(folder: Path) -> str:
    """SHA-256 over the sorted ``name:sha256`` lines of a model folder's graph and weight files."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.is_file() and (path.suffix in MODEL_SUFFIXES or path.name == "genai_config.json"):
            digest.update(f"{path.name}:{file_sha256(str(path.resolve()))}\n".encode())
    return digest.hexdigest()


# -- building from a GGUF ------------------------------------------------------------
def build_tag(options: dict[str, Any]) -> str:
    """Folder-name part for the builder options: ``fp32``, ``int4``, ``int4-accuracy_level=1`` …

    Values equal to the builder's defaults (``INT4_DEFAULTS``) are left out, so that
    ``precision=int4`` and ``precision=int4,block_size=32`` share one cached build.
    """
    precision = options.get("precision", "fp32")
    extra = [f"{key}={int(options[key])}" for key in INT4_OPTIONS
             if key in options and options[key] != INT4_DEFAULTS[key]]
    return "-".join([precision, *extra])


def builder_command(source: Path, out: Path, work: Path, options: dict[str, Any]) -> list[str]:
    """The ``python -m onnxruntime_genai.models.builder`` command line for ``options``."""
    extra = ["hf_token=false"]
    extra += [f"{key}={int(options[key])}" for key in INT4_OPTIONS if key in options]
    return [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(out),
            "-p", options.get("precision", "fp32"), "-e", "cpu", "-c", str(work), "--extra_options", *extra]


def built_model(gguf: Path, options: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The ORT GenAI folder built from ``gguf`` with the builder ``options``, cached.

    The GGUF goes through the hf engine's de-quantised safetensors cache, then
    through ORT GenAI's model builder in a subprocess (offline). The result lives in
    ``cache_root()/ort-genai/<GGUF sha256>-<build_tag(options)>/`` with a
    ``logitlab.json`` that records the builder command, the onnxruntime-genai
    version, the build time (s) and the folder's hash. One process builds it at a
    time: a second one waits for the first one's folder
    (:func:`~logitlab.engines.build_cache.exclusive`).

    Returns:
        The folder and ``{"cache": folder, "hit": bool, "build_seconds": s, ...}``.

    Raises:
        InputError: a package the builder needs is missing, or the builder cannot
            convert this model (its last error line is quoted).
        EngineError: the cache folder is not writable.
    """
    sha = file_sha256(str(gguf.resolve()))
    tag = build_tag(options)
    folder = cache_root() / "ort-genai" / f"{sha}-{tag}"
    genai_version = package_version("onnxruntime-genai")

    def cached() -> tuple[Path, dict[str, Any]] | None:
        meta = read_meta(folder)
        if meta and meta.get("onnxruntime_genai") == genai_version and meta.get("format") == CACHE_FORMAT:
            return folder, {"cache": str(folder), "hit": True, "build_seconds": meta.get("build_seconds"),
                            "folder_sha256": meta.get("folder_sha256")}
        return None

    hit = cached()
    if hit is not None:
        return hit
    missing = [pip for module, pip in BUILDER_MODULES if importlib.util.find_spec(module) is None]
    if missing:
        raise InputError(f"building an ORT GenAI model from {gguf.name} needs {', '.join(missing)}: "
                         "pip install 'logitlab[ortgenai]'")
    with exclusive(folder, "the ORT GenAI model cache"):  # another process building it: wait for it
        return cached() or _build_model(gguf, options, sha, tag, folder, genai_version)


def _build_model(gguf: Path, options: dict[str, Any], sha: str, tag: str, folder: Path,
                 genai_version: str) -> tuple[Path, dict[str, Any]]:
    """:func:`built_model`'s build, under its lock: de-quantise (cached), run the builder, publish."""
    from logitlab.engines.hf import dequantised_folder

    start = time.perf_counter()
    try:
        source, _ = dequantised_folder(gguf)
    except EngineError as exc:  # transformers cannot read this GGUF: bad input for this engine
        raise InputError(f"cannot build an ORT GenAI model from {gguf.name}: {exc}") from None
    dequantise_seconds = round(time.perf_counter() - start, 2)
    with building(folder, f".{sha[:12]}-{tag}-", "the ORT GenAI model cache") as tmp:
        out = tmp / "model"
        command = run_builder(source, out, options, what=gguf.name)
        build = round(time.perf_counter() - start, 2)
        info = {"format": CACHE_FORMAT, "gguf": str(gguf), "gguf_sha256": sha, "options": options,
                "builder": [Path(command[0]).name, *command[1:]], "onnxruntime_genai": genai_version,
                "build_seconds": build, "dequantise_seconds": dequantise_seconds,
                "folder_sha256": folder_sha256(out)}
        publish(out, folder, info)
    return folder, {"cache": str(folder), "hit": False, "build_seconds": build,
                    "folder_sha256": info["folder_sha256"]}


def run_builder(source: Path, out: Path, options: dict[str, Any], what: str | None = None) -> list[str]:
    """Run ORT GenAI's model builder on a Hugging Face folder, offline, in a subprocess.

    Its output goes to ``builder.log`` beside ``out`` (kept only on failure, in the
    error); its scratch folder is ``out``'s sibling ``work``.

    Args:
        source: Hugging Face model folder (``config.json`` naming ``architectures``).
        out: folder to create, the ORT GenAI model.
        options: builder options (``precision``, ``accuracy_level``, ``block_size``).
        what: the name of the model for the error message (default: ``source``).

    Returns:
        The command that was run.

    Raises:
        InputError: the builder failed; the message quotes its last error line.
    """
    command = builder_command(source, out, out.parent / "work", options)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    log_path = out.parent / "builder.log"
    with open(log_path, "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out.parent,
                              stdin=subprocess.DEVNULL, check=False).returncode
    if code != 0 or not (out / "genai_config.json").is_file():
        raise InputError(f"the ORT GenAI model builder could not convert {what or source} "
                         f"(precision {options.get('precision', 'fp32')}): {_last_error(log_path)}")
    return command


def _last_error(log: Path) -> str:
    """The builder's last meaningful line (its exception), for a one-line error."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    for line in reversed(lines):
        if "Error" in line or "Exception" in line or line.startswith("error"):
            return line[:300]
    return lines[-1][:300] if lines else "no output"


# -- engine ---------------------------------------------------------------------------
class OrtGenAiSession(Session):
    """One ``og.Generator``: its KV cache holds the session's tokens."""

    engine: "OrtGenAiEngine"

    def __init__(self, engine: "OrtGenAiEngine"):
        super().__init__(engine)
        self.generator = engine.new_generator()

    def _decode(self, tokens: list[int]) -> np.ndarray:
        try:
            self.generator.append_tokens(np.asarray(tokens, dtype=np.int32))
            logits = self.generator.get_output("logits")
        except RuntimeError as exc:
            raise EngineError(f"ORT GenAI failed to evaluate {len(tokens)} tokens at position {self.n_past}: "
                              f"{str(exc).splitlines()[0]}") from exc
        if logits.ndim != 3 or logits.shape[1] != len(tokens):
            raise InputError(f"{self.engine.model} returns logits of shape {tuple(logits.shape)} for {len(tokens)} "
                             "tokens; logitlab needs one row per token (was the model built with prune_lm_head?)")
        return np.array(logits[0], dtype=np.float32, copy=True)  # float16 models: widened exactly

    def _truncate(self, n_past: int) -> None:
        try:
            self.generator.rewind_to(n_past)
        except RuntimeError as exc:
            raise EngineError(f"ORT GenAI could not rewind to position {n_past}: {str(exc).splitlines()[0]}") from exc

    def _close(self) -> None:
        self.generator = None


class OrtGenAiEngine(Engine):
    """A causal LM on ONNX Runtime GenAI (``onnxruntime_genai``).

    Options (ORT GenAI's own names where it has them):
        precision: ``fp32`` (default) or ``int4``: the model builder's precision, for a GGUF source.
        accuracy_level: int4 MatMulNBits compute type, 1 = fp32, 2 = fp16, 3 = bf16, 4 = int8
            activations (the builder's CPU default), for a GGUF source.
        block_size: int4 quantisation block (16, 32 = builder default, 64, 128, 256), for a GGUF source.
        provider: execution provider, ``cpu`` (default), ``cuda``, ``dml``, ``webgpu``, ``openvino``,
            ``qnn`` (must be built into the installed onnxruntime-genai).
        intra_op_num_threads, inter_op_num_threads: ORT session threads (default: ORT's own).
        graph_optimization_level: ``disable_all``, ``basic``, ``extended`` or ``all`` (ORT's default).
        enable_cpu_mem_arena: ORT's CPU memory arena on/off.
        max_length: tokens the KV cache holds, the context (default 2048).
        past_present_share_buffer: one static KV buffer of ``max_length`` (1, the builder's choice)
            or a cache that grows (0).

    Raises:
        InputError: a model that is neither a GGUF nor an ORT GenAI folder, build options with
            a model folder, a provider that is not built in, or a model whose logits are not one
            row per token (checked by one untimed 2-token forward at load).
        EngineError: ORT GenAI failed to load the model.
    """

    name = "ortgenai"
    ABILITIES = frozenset({"logits", "sessions", "rollback"})
    LIBRARIES = (("onnxruntime-genai", "onnxruntime_genai"), ("onnxruntime", "onnxruntime"))
    EXTRA = "ortgenai"
    ENV_PREFIXES = ("ORT_", "ONNXRUNTIME_", "CUDA_")
    OPTIONS = {
        "precision": (choice(PRECISIONS), "model builder precision for a GGUF: fp32 (default) or int4"),
        "accuracy_level": (choice(ACCURACY_LEVELS, int), "int4 compute: 1 fp32, 2 fp16, 3 bf16, 4 int8 (default)"),
        "block_size": (choice(BLOCK_SIZES, int), "int4 block size (default 32)"),
        "provider": (choice(tuple(PROVIDERS)), "execution provider: cpu (default), cuda, dml, webgpu, ..."),
        "intra_op_num_threads": (positive_int, "ORT intra-op threads (default: ORT's)"),
        "inter_op_num_threads": (positive_int, "ORT inter-op threads (default: ORT's)"),
        "graph_optimization_level": (_optimization_level, "disable_all, basic, extended, all (default)"),
        "enable_cpu_mem_arena": (to_bool, "ORT CPU memory arena on/off"),
        "max_length": (positive_int, f"KV cache length, the context (default {DEFAULT_MAX_LENGTH})"),
        "past_present_share_buffer": (to_bool, "static KV buffer (1) or a growing one (0)"),
    }

    @classmethod
    def library_details(cls) -> dict[str, str]:
        """ONNX Runtime's execution providers."""
        import onnxruntime

        return {"providers": ", ".join(onnxruntime.get_available_providers())}

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        converted = super().validate_options(options)
        if converted.get("precision", "fp32") != "int4":
            for key in INT4_OPTIONS:
                if key in converted:
                    raise InputError(f"ortgenai option {key!r} applies to precision=int4 only")
        return converted

    # -- loading ------------------------------------------------------------
    def _load(self) -> None:
        try:
            import onnxruntime_genai as og
        except ImportError:
            raise InputError("engine 'ortgenai' needs onnxruntime-genai: pip install 'logitlab[ortgenai]'") from None
        self.og = og
        self.max_length = self.options.get("max_length", DEFAULT_MAX_LENGTH)
        self.provider = self.options.get("provider", "cpu")
        probe = PROVIDERS[self.provider]
        if probe is not None and not getattr(og, probe)():
            raise InputError(f"execution provider {self.provider!r} is not built into onnxruntime-genai "
                             f"{og.__version__}; use provider=cpu or install its build (onnxruntime-genai-cuda …)")
        self.folder, self.model_kind, self.cache_info = self._resolve_model()
        overlay = self._overlay()
        try:
            config = og.Config(str(self.folder))
            if self.provider != "cpu":
                config.clear_providers()
                config.append_provider(self.provider)
            if overlay:
                config.overlay(json.dumps(overlay))
            self.og_model = og.Model(config)
            self.tokenizer = og.Tokenizer(self.og_model)
        except RuntimeError as exc:
            # a user's folder is bad input; a folder we built is the builder's or ORT's failure
            error = InputError if self.model_kind == "ORT GenAI model folder" else EngineError
            raise error(f"ORT GenAI could not load {self.folder}: {str(exc).splitlines()[0]}") from exc
        self._n_vocab = self._read_vocab()
        self._folder_sha: str | None = self.cache_info.get("folder_sha256") if self.cache_info else None
        self._smoke_test()

    def _overlay(self) -> dict[str, Any]:
        """genai_config.json keys set by the options, as ``Config.overlay`` takes them."""
        session = {key: self.options[key] for key in ("intra_op_num_threads", "inter_op_num_threads",
                                                       "enable_cpu_mem_arena") if key in self.options}
        if "graph_optimization_level" in self.options:
            session["graph_optimization_level"] = OPTIMIZATION_LEVELS[self.options["graph_optimization_level"]]
        overlay: dict[str, Any] = {"model": {"decoder": {"session_options": session}}} if session else {}
        if "past_present_share_buffer" in self.options:
            overlay["search"] = {"past_present_share_buffer": self.options["past_present_share_buffer"]}
        return overlay

    def _resolve_model(self) -> tuple[Path, str, dict[str, Any]]:
        """The ORT GenAI folder to load, the model kind and the build-cache info."""
        path = Path(self.model) if self.model else default_model_path()
        if not path.exists():
            raise InputError(f"model {path} does not exist; the ortgenai engine loads a GGUF file (built once "
                             "with ORT GenAI's model builder) or an ORT GenAI model folder")
        self.model = str(path)
        build = {key: self.options[key] for key in BUILD_OPTIONS if key in self.options}
        if path.is_dir():
            if not (path / "genai_config.json").is_file():
                hint = (" (it looks like a Hugging Face folder: convert it with python -m "
                        "onnxruntime_genai.models.builder -i DIR -o OUT -p fp32 -e cpu)"
                        if (path / "config.json").is_file() else "")
                raise InputError(f"{path} is not an ORT GenAI model folder: it has no genai_config.json{hint}")
            if build:
                raise InputError(f"ortgenai options {', '.join(build)} build a model from a GGUF; "
                                 f"{path} is already built")
            return path, "ORT GenAI model folder", {}
        folder, info = built_model(check_gguf(path), build)
        precision = build.get("precision", "fp32")
        kind = ("GGUF de-quantised to float32 by transformers, built to fp32 ONNX by ORT GenAI's model builder"
                if precision == "fp32" else
                f"GGUF de-quantised to float32 by transformers, re-quantised to symmetric int4 (MatMulNBits, block "
                f"{build.get('block_size', 32)}, accuracy_level {build.get('accuracy_level', 4)}) by ORT GenAI's "
                "model builder")
        return folder, kind, info

    def _read_vocab(self) -> int:
        try:
            config = json.loads((self.folder / "genai_config.json").read_text())
            return int(config["model"]["vocab_size"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{self.folder}/genai_config.json has no model.vocab_size ({exc})") from None

    def _smoke_test(self) -> None:
        """One untimed 2-token append: a model that keeps only the last row fails here, not mid-run."""
        with self.open_session() as session:
            session.prefill([0, 0])

    def new_generator(self) -> Any:
        """A fresh ``og.Generator`` (empty KV cache) holding up to ``max_length`` tokens."""
        og = self.og
        params = og.GeneratorParams(self.og_model)
        params.set_search_options(max_length=self.max_length)
        try:
            return og.Generator(self.og_model, params)
        except RuntimeError as exc:
            raise EngineError(f"ORT GenAI could not start a generator: {str(exc).splitlines()[0]}") from exc

    # -- Engine hooks -----------------------------------------------------------
    def _open_session(self) -> OrtGenAiSession:
        return OrtGenAiSession(self)

    def tokenize(self, text: str) -> list[int]:
        """ORT GenAI's tokenizer (it reads special-token text such as ``<|im_start|>`` as the special token)."""
        return [int(t) for t in self.tokenizer.encode(text)]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(np.asarray(list(tokens), dtype=np.int32))

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        return self.max_length

    def folder_sha256(self) -> str:
        """SHA-256 of the ORT model folder's graph, weights and genai_config.json (computed once)."""
        if self._folder_sha is None:
            self._folder_sha = folder_sha256(self.folder)
        return self._folder_sha

    def describe(self) -> dict[str, Any]:
        from_gguf = self.model_kind != "ORT GenAI model folder"
        return {
            "engine": self.name,
            "engine_version": f"onnxruntime-genai {self.og.__version__} "
                              f"(onnxruntime {package_version('onnxruntime')})",
            "model": self.model,
            "model_sha256": file_sha256(str(Path(self.model).resolve())) if from_gguf else self.folder_sha256(),
            "model_kind": self.model_kind,
            "ort_model": str(self.folder),
            "ort_model_sha256": self.folder_sha256(),
            "options": dict(self.options),
            "effective": {
                "precision": self.options.get("precision", "fp32") if from_gguf else "as built",
                "provider": self.provider,
                "max_length": self.max_length,
                "intra_op_num_threads": self.options.get("intra_op_num_threads", "ORT default"),
                **({"session_overlay": self._overlay()} if self._overlay() else {}),
            },
            "model_cache": self.cache_info or None,
            "load_seconds": round(self.load_seconds, 4),
        }

    def close(self) -> None:
        self.tokenizer = None
        self.og_model = None
