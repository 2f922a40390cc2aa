"""Engine and Session protocols shared by every adapter.

The base classes own the public methods, their input checks and the timing;
an adapter overrides only the ``_open_session``/``_prefill``/``_decode``/
``_close`` hooks (the template-method shape of Polygraphy's ``BaseRunner``).

Contract for adapters: ``_prefill`` and ``_decode`` append M tokens to the
session's sequence and return an ``(M, n_vocab)`` float32 array that the
adapter owns outright — a fresh copy, never a view of an engine buffer that the
next call may overwrite.
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from logitlab.errors import EngineError, InputError

#: The optional abilities an engine can declare in ``Engine.ABILITIES``; code outside
#: ``engines/`` asks :meth:`Engine.supports` instead of testing an engine's name.
ABILITIES: dict[str, str] = {
    "logits": "returns the full vocabulary of logits per position (without it: top-k log-probabilities only)",
    "sessions": "open_session(): prefill, then decode M=1 or M=K tokens per call (M=K is the verify path)",
    "rollback": "Session.truncate(n): rolls the KV cache back (speculative decoding, the near-tie guard)",
    "batch": "open_batch(): several sequences in one forward pass (invariance batch)",
    "padded-batch": "its batches pad the sequences to one length (left or right padding)",
    "recompute": "open_recompute_session(): a session that recomputes the whole sequence on every call",
    "dump": "intermediate tensors can be captured: CAPTURE names the capture function",
    "workload": "run_workload(): runs a whole workload in one go (a process, a request)",
    "threads": "its thread count is an option: AXIS_SETTINGS['threads'] names the settings an invariance matrix "
               "compares",
    "chunked-prefill": "its prefill can be cut into chunks (micro-batches) by an option: "
                       "AXIS_SETTINGS['chunked-prefill'] names the settings an invariance matrix compares",
    "concurrent-requests": "background_requests(count): other requests in flight at the same moment (a server)",
    "prefix-cache": "greedy_request(..., prefix_cache=): one request with the prompt's prefix from its cache or not",
}

#: The abilities that an invariance matrix runs as an option sweep: each needs ``Engine.AXIS_SETTINGS[ability]``.
SETTING_ABILITIES = ("threads", "chunked-prefill")


def check_fits(engine: Any, n_prompt: int, n_decode: int = 0, *, what: str = "the prompt", name: str | None = None,
               side: str | None = None, extra: int = 0, fixed: bool = False) -> None:
    """Check that a prompt and its decode tokens fit the engine's context, before anything runs.

    The one context-length check: every experiment, capture and session asks it, so the
    message reads the same everywhere, e.g. ``the prompt 'story' (57 tokens) + --tokens 64 = 121
    exceeds the control's context of 64 tokens; shorten the prompt or --tokens, or pass a larger
    n_ctx=... in the variant``.

    Args:
        engine (Engine | SupervisedEngine): any object with ``n_ctx`` (tokens; None: no limit
            known, nothing is checked). The advice to pass a larger ``n_ctx=...`` is given only where
            the engine has an ``n_ctx`` option (in ``OPTIONS``, or in a supervised engine's
            ``engine_cls.OPTIONS``).
        n_prompt (int): tokens of the prompt (for a session: the tokens it holds).
        n_decode (int): tokens decoded after it (``--tokens``). Defaults to 0 (not named).
        what (str): the tokens in words. Defaults to ``"the prompt"``.
        name (str): the prompt's name, quoted after ``what``; None when it has none.
        side (str): which engine of a pair (``"control"``, ``"candidate"``): ``the control's
            context``; None when one engine runs.
        extra (int): tokens appended beyond ``n_prompt + n_decode`` (``+ 1 more``). Defaults to 0.
        fixed (bool): the tokens are given (a golden's recording, a base file's chunks) and cannot be
            shortened: the advice is a larger context only. Defaults to False.

    Raises:
        InputError: ``n_prompt + n_decode + extra`` tokens exceed ``engine.n_ctx``.
    """
    n_ctx = engine.n_ctx
    total = n_prompt + n_decode + extra
    if n_ctx is None or total <= n_ctx:
        return
    parts = [f"{what}{f' {name!r}' if name is not None else ''} ({n_prompt} token{'' if n_prompt == 1 else 's'})"]
    if n_decode:
        parts.append(f"--tokens {n_decode}")
    if extra:
        parts.append(f"{extra} more")
    amount = " + ".join(parts) + (f" = {total}" if len(parts) > 1 else "")
    options = getattr(engine, "OPTIONS", None)
    if options is None:
        options = getattr(getattr(engine, "engine_cls", None), "OPTIONS", {})
    advice = [] if fixed else ["shorten the prompt" + (" or --tokens" if n_decode or extra else "")]
    if "n_ctx" in options:
        advice.append("pass a larger n_ctx=... in the variant")
    elif fixed:
        advice.append("use an engine with a larger context")
    context = f"the {side}'s context" if side else "the context"
    raise InputError(f"{amount} exceeds {context} of {n_ctx} tokens; {', or '.join(advice)}")


@dataclass(frozen=True)
class StepTiming:
    """Wall-clock time of one engine call.

    Attributes:
        kind: ``"prefill"`` or ``"decode"``.
        n_tokens: tokens appended by the call.
        seconds: wall time around the engine call only (s).
    """

    kind: str
    n_tokens: int
    seconds: float


class Session:
    """One sequence of appended tokens on an engine (a KV cache).

    Use as a context manager, or call :meth:`close`. ``prefill`` and
    ``decode`` append tokens and return their logits, shape
    ``(M, n_vocab)``, float32, freshly copied — or written into ``out``, a
    caller's array (a run's rows gathered in place, no second copy): an adapter
    whose ``_decode`` (or ``_prefill``) takes an ``out`` parameter writes there
    itself, for any other the rows are copied in after the timed call.
    """

    def __init__(self, engine: "Engine"):
        self.engine = engine
        self.n_past = 0
        self.timings: list[StepTiming] = []
        self._closed = False

    # -- public API -------------------------------------------------------
    def prefill(self, tokens: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
        """Append the prompt tokens; return their logits, ``(M, n_vocab)`` float32 (``out`` itself when given).

        Raises:
            InputError: ``out`` is not a writable C-contiguous float32 array of shape ``(M, n_vocab)``.
        """
        return self._append("prefill", tokens, out)

    def decode(self, tokens: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
        """Append M decode tokens (M=1 greedy, M=K verify); ``(M, n_vocab)`` float32 (``out`` when given)."""
        return self._append("decode", tokens, out)

    def truncate(self, n_past: int) -> None:
        """Drop every position ``>= n_past`` (roll the KV cache back), as speculative decoding needs.

        Raises:
            InputError: ``n_past`` outside ``[0, self.n_past]``.
            InputError: the adapter cannot roll back (no ``_truncate`` hook).
        """
        if not 0 <= n_past <= self.n_past:
            raise InputError(f"cannot roll back to position {n_past}: the session holds {self.n_past}")
        if not self.can_truncate:
            raise InputError(
                f"{self.engine.name} sessions cannot roll back their KV cache, which speculative decoding "
                "(and the near-tie guard) needs; the adapter must implement Session._truncate(n_past)"
            )
        self._truncate(n_past)
        self.n_past = n_past

    @property
    def can_truncate(self) -> bool:
        return type(self)._truncate is not Session._truncate

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            warnings.warn("logitlab Session was never closed", ResourceWarning, stacklevel=1)

    # -- template ---------------------------------------------------------
    def _append(self, kind: str, tokens: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
        if self._closed:
            raise EngineError("session is closed")
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise InputError(f"{kind} needs at least one token")
        if out is not None:
            self._check_out(out, len(tokens))
        if self.n_past:
            check_fits(self.engine, self.n_past, what="the session", extra=len(tokens))
        else:
            check_fits(self.engine, len(tokens))
        hook = self._prefill if kind == "prefill" and type(self)._prefill is not Session._prefill else self._decode
        fills = out is not None and _takes_out(hook.__func__)
        start = time.perf_counter()
        logits = hook(tokens, out=out) if fills else hook(tokens)
        seconds = time.perf_counter() - start
        self.timings.append(StepTiming(kind, len(tokens), seconds))
        self._check_logits(logits, len(tokens))
        self.n_past += len(tokens)
        if out is not None and logits is not out:
            out[...] = logits
            return out
        return logits

    def _check_out(self, out: np.ndarray, n_tokens: int) -> None:
        expected = (n_tokens, self.engine.n_vocab)
        if not (isinstance(out, np.ndarray) and out.shape == expected and out.dtype == np.float32
                and out.flags.c_contiguous and out.flags.writeable):
            what = f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}".strip()
            raise InputError(f"out must be a writable C-contiguous float32 array of shape {expected}, not {what}")

    def _check_logits(self, logits: np.ndarray, n_tokens: int) -> None:
        expected = (n_tokens, self.engine.n_vocab)
        if not isinstance(logits, np.ndarray) or logits.shape != expected:
            shape = getattr(logits, "shape", type(logits).__name__)
            raise EngineError(f"{self.engine.name} returned logits of shape {shape}, expected {expected}")
        if logits.dtype != np.float32:
            raise EngineError(f"{self.engine.name} returned {logits.dtype} logits, expected float32")

    def _prefill(self, tokens: list[int]) -> np.ndarray:
        return self._decode(tokens)

    def _decode(self, tokens: list[int]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _truncate(self, n_past: int) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        pass


@functools.lru_cache(maxsize=None)
def _takes_out(function: Callable[..., Any]) -> bool:
    """Does a session hook (the function, once per adapter class) take ``out=``? Read once, not per step."""
    return "out" in inspect.signature(function).parameters


@dataclass
class Engine:
    """A loaded model on one engine with one set of options.

    Subclasses set ``name`` and implement ``_load``, ``tokenize``,
    ``detokenize``, ``n_vocab``, ``n_ctx``, ``describe`` and ``_open_session``.

    Attributes:
        model: path of the model file or folder.
        options: engine options, already validated by :meth:`validate_options`.
        load_seconds: wall time of loading (s), outside every timed region.
    """

    model: str
    options: dict[str, Any] = field(default_factory=dict)
    load_seconds: float = 0.0
    name: ClassVar[str] = "engine"
    #: option name -> (converter from the command-line string, short help).
    OPTIONS: ClassVar[dict[str, tuple[Callable[[Any], Any], str]]] = {}
    #: option that ``--engine NAME:TARGET`` fills (``cmd``: the command, ``openai``: the URL);
    #: None: TARGET is the model.
    TARGET_OPTION: ClassVar[str | None] = None
    #: what the engine can do beyond the contract's minimum (keys of :data:`ABILITIES`).
    ABILITIES: ClassVar[frozenset[str]] = frozenset({"logits", "sessions"})
    #: ``"module:function"`` of the dump capture for this engine (with the ``dump`` ability);
    #: the function lives in ``logitlab.dumps`` and is imported only when a dump is taken.
    CAPTURE: ClassVar[str | None] = None
    #: For each ability of :data:`SETTING_ABILITIES` the engine declares: the option settings an invariance
    #: matrix compares along that axis, the first one the reference (``{"n_ubatch": "512"}``, ...).
    AXIS_SETTINGS: ClassVar[dict[str, tuple[dict[str, str], ...]]] = {}
    #: For an engine that declares ``batch`` and runs a batch with a kernel or captured graph chosen by its size:
    #: the largest batch size of each bucket (vLLM's CUDA-graph capture sizes: ``(1, 2, 4, 8, 16, ...)``). An
    #: invariance matrix's ``batch`` axis then also runs b-1, b and b+1 around each bucket b
    #: (:mod:`~logitlab.experiments.batch_buckets`); () for an engine without buckets.
    BATCH_BUCKETS: ClassVar[tuple[int, ...]] = ()
    #: The Python libraries the adapter drives, as (distribution, import name), the engine itself first
    #: (``logitlab doctor`` reports each; a golden records their versions). An adapter imports them inside its
    #: methods, never at module level, so that this class (and these facts) import without them.
    LIBRARIES: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: logitlab's pip extra that installs :attr:`LIBRARIES` (``pip install 'logitlab[EXTRA]'``); None: nothing to
    #: install.
    EXTRA: ClassVar[str | None] = None
    #: Modules a supervised worker of this engine imports before it loads a model, imported once by a fork server
    #: that then forks the workers (:mod:`logitlab.engines.forkserver`): for libraries slow to import (PyTorch and
    #: transformers, ~4.5 s); () for a new process per worker.
    PRELOAD: ClassVar[tuple[str, ...]] = ()
    #: Prefixes of the environment variables the engine's libraries read at start-up or per call (``GGML_``);
    #: a golden records the variables of the process environment that start with them.
    ENV_PREFIXES: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def library_details(cls) -> dict[str, str]:
        """What the engine's libraries tell cheaply about this machine, as labelled lines (``system_info``,
        ``devices``, ...) for ``logitlab doctor``; called only when every one of :attr:`LIBRARIES` imports.
        Empty here: an engine without such facts."""
        return {}

    @classmethod
    def supports(cls, ability: str) -> bool:
        """Does this engine declare ``ability`` (a key of :data:`ABILITIES`)?

        Raises:
            InputError: ``ability`` is not a known ability (the message lists them).
        """
        if ability not in ABILITIES:
            raise InputError(f"unknown engine ability {ability!r}; known: {', '.join(ABILITIES)}")
        return ability in cls.ABILITIES

    @classmethod
    def require(cls, ability: str, what: str) -> None:
        """Raise InputError naming the engines that can do ``what``, unless this one declares ``ability``."""
        if not cls.supports(ability):
            from logitlab.engines import engines_with

            able = engines_with(ability)
            names = " and ".join([", ".join(able[:-1]), able[-1]] if len(able) > 1 else able) or "no"
            raise InputError(f"{what} supports the {names} engine{'s' if len(able) != 1 else ''}, not {cls.name!r}")

    def __post_init__(self) -> None:
        self.options = self.validate_options(self.options)
        start = time.perf_counter()
        self._load()
        self.load_seconds = time.perf_counter() - start

    @classmethod
    def crash_hint(cls, options: dict[str, Any]) -> str | None:
        """What to try when a run of this engine with ``options`` (validated) was killed by a signal, where a
        cause is known on this machine (llamacpp: the AMX weight-repack path); None: nothing known."""
        return None

    @classmethod
    def model_file(cls, model: str | None) -> Path | None:
        """The local model file or folder this engine loads for ``model`` (None: the embedded model), before
        loading it; None where there is none to read (an engine run out of process: a served model's name, a
        command's own files).

        For the memory check (:mod:`logitlab.experiments.memory`), which counts the logits of the engines that
        run in logitlab's processes.
        """
        if cls.supports("workload") or not cls.supports("logits"):
            return None
        from logitlab.models import default_model_path

        try:
            path = Path(model) if model else default_model_path()
        except InputError:
            return None
        return path if path.exists() else None

    @classmethod
    def vocab_before_load(cls, model: str | None, options: dict[str, Any]) -> int | None:
        """The logits' width (vocabulary size) for ``model``, read from its metadata without loading it: a GGUF's
        token list, a model folder's ``config.json`` ``vocab_size``; None: unknown (:meth:`model_file`)."""
        from logitlab.models import model_vocab_size

        path = cls.model_file(model)
        return None if path is None else model_vocab_size(path)

    @classmethod
    def token_counter_before_load(cls, model: str | None,
                                  options: dict[str, Any]) -> Callable[[str], int] | None:
        """A function counting a text's tokens (with the BOS the engine adds) without loading the weights: for a
        GGUF model, llama.cpp's vocabulary-only load; None: no such tokenizer here."""
        from logitlab.models import is_gguf

        path = cls.model_file(model)
        if path is None or not is_gguf(path):
            return None
        from logitlab.engines.tokenizers import GgufTokenizer

        try:
            tokenizer = GgufTokenizer(path)
        except InputError:
            return None
        return lambda text: len(tokenizer.tokenize(text))

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Check option names and convert their values; raise InputError naming valid keys."""
        converted = {}
        for key, value in options.items():
            if key not in cls.OPTIONS:
                raise InputError(
                    f"unknown {cls.name} option {key!r}; valid options: {', '.join(sorted(cls.OPTIONS))}"
                )
            convert, _ = cls.OPTIONS[key]
            try:
                converted[key] = convert(value)
            except (TypeError, ValueError) as exc:
                raise InputError(f"bad value {value!r} for {cls.name} option {key!r}: {exc}") from None
        return converted

    def open_session(self) -> Session:
        """Start a fresh sequence (empty KV cache).

        Raises:
            InputError: the engine has no ``sessions`` ability (it only runs whole workloads).
        """
        self.require("sessions", "step-by-step prefill/decode (a session)")
        return self._open_session()

    def run_workload(self, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None) -> Any:
        """A whole workload in one go (the ``workload`` ability).

        :func:`logitlab.engines.workload.run_workload` calls this for engines
        that declare ``workload`` and uses sessions otherwise. Engines whose
        unit of work is a whole sequence (a process, an HTTP request) return a
        ``RunOutput`` here with the same meaning as the session path: one row
        per input position (prompt, then ``n_decode`` greedy or replayed
        tokens), and prefill/decode timings.
        """
        raise NotImplementedError

    def forward_rows(self, n_tokens: int) -> list[int] | None:
        """Token rows in each forward pass a session runs for ``n_tokens`` tokens appended at once (None: not
        known). See :meth:`BatchRun.forward_rows`."""
        return None

    def open_batch(self, max_sequences: int, max_tokens: int) -> "BatchRun":
        """A runner for several sequences in one forward pass (the ``batch`` ability).

        Args:
            max_sequences: most sequences in one :meth:`BatchRun.run`.
            max_tokens: most tokens in one run, over all its sequences.

        Raises:
            InputError: the engine has no batch ability, or the sizes are out of range.
        """
        self.require("batch", "a batch of sequences")
        raise NotImplementedError

    def open_recompute_session(self) -> Session:
        """A session that recomputes the whole sequence on every call (the ``recompute`` ability)."""
        self.require("recompute", "a recomputing session")
        raise NotImplementedError

    def background_requests(self, count: int) -> Any:
        """A context manager: ``count`` other requests (other prompts) in flight while its block runs, each sent
        again as it finishes (the ``concurrent-requests`` ability). Entering it returns an object whose
        ``summary()`` (a dict) says what ran beside the block.

        Raises:
            InputError: the engine has no such ability, or cannot run ``count`` requests beside one more.
        """
        self.require("concurrent-requests", "requests in flight at the same moment")
        raise NotImplementedError

    def greedy_request(self, prompt_ids: Sequence[int], n_decode: int, *, prefix_cache: bool) -> tuple[list[int], Any]:
        """One greedy request as the server answers it (the ``prefix-cache`` ability).

        Args:
            prompt_ids: the prompt's token ids.
            n_decode: tokens to generate.
            prefix_cache: False: the server evaluates the whole prompt (a cache miss); True: it may take the
                prompt's prefix from its cache (a hit, where an earlier request left it there).

        Returns:
            ``(generated ids, rows)``: rows a :class:`~logitlab.engines.topk.TopKRows`, row t the top-k
            log-probabilities (nats) of the distribution that chose generated token t (decode step t).

        Raises:
            InputError: the engine has no such ability, or cannot be asked for a miss.
        """
        self.require("prefix-cache", "a request with and without the prefix cache")
        raise NotImplementedError

    def close(self) -> None:
        """Release the engine's resources."""

    def reload(self) -> None:
        """Close the engine and load it again with the same model and options: a new loaded state (llama.cpp: a new
        ``Llama``, its context, KV cache and buffers allocated anew); :attr:`load_seconds` becomes the new load's.
        Sessions opened before are not usable after it.

        Raises:
            EngineError: the load failed (as when the engine was made).
        """
        self.close()
        start = time.perf_counter()
        self._load()
        self.load_seconds = time.perf_counter() - start

    # hooks ---------------------------------------------------------------
    def _load(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _open_session(self) -> Session:  # pragma: no cover - abstract
        raise NotImplementedError

    def tokenize(self, text: str) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def detokenize(self, tokens: Sequence[int]) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def n_vocab(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def n_ctx(self) -> int | None:
        return None

    def describe(self) -> dict[str, Any]:
        """Name, version, options and model identity for the run manifest.

        Adapters add ``engine_version`` and ``model_sha256``, and may add
        ``arithmetic``: one sentence on how the engine computes (the weights'
        and activations' types), which cross-engine reports quote.
        """
        return {"engine": self.name, "model": self.model, "options": dict(self.options)}

    def peer_settings(self, tool: str) -> list[str]:
        """Lines on the settings in which this engine and a peer tool (``"llama-perplexity"``) may differ.

        A comparison against the peer's figures quotes them: each names a setting that decides
        bit-exactness, the tool's default and this engine's value. Empty: nothing known.
        """
        return []


#: What :meth:`BatchRun.run` returns per sequence: every position's row, or the last position's only.
BATCH_OUTPUTS = ("all", "last")


def check_outputs(outputs: str) -> None:
    """Raise :class:`~logitlab.errors.InputError` unless ``outputs`` is one of :data:`BATCH_OUTPUTS`."""
    if outputs not in BATCH_OUTPUTS:
        raise InputError(f"unknown batch outputs {outputs!r}; valid: {', '.join(BATCH_OUTPUTS)}")


class BatchRun:
    """Several sequences through one forward pass of an engine (``Engine.open_batch``).

    Attributes:
        pads: True when the engine pads the sequences to one length (then
            ``run`` takes a padding side), False when it runs them unpadded
            (llama.cpp's parallel sequences).
        params: what the batch was run with, for the report.

    Use as a context manager, or call :meth:`close`.
    """

    pads: bool = False
    params: dict[str, Any] = {}

    def run(self, sequences: Sequence[Sequence[int]], padding: str = "right", *, outputs: str = "all",
            keep: Callable[[np.ndarray], np.ndarray] | None = None) -> list[np.ndarray]:
        """Logits of the sequences, one float32 array each.

        Args:
            sequences: B non-empty token-id lists.
            padding: the padding side, for an engine that pads (:attr:`pads`).
            outputs: ``"all"``: every position's row, ``(len(seq), n_vocab)``; ``"last"``: the last position's
                only, ``(1, n_vocab)`` — what a server computes for a batch it prefills. An engine that can asks
                for the last rows alone (llama.cpp: the output flag on each sequence's last token only, so it holds
                B rows, not B runs, and skips the last layer's other rows; the bits of a row may then differ from
                ``"all"``'s, as a matmul of another width may); the others compute every row and keep the last.
            keep: each sequence's array is passed through it as soon as it is made (llama.cpp: copied out of its
                output buffer; an engine that makes the batch's arrays at once, ``hf``: in turn afterwards), and
                what it returns is the array given back (``invariance batch``: :func:`~logitlab.engines.spill.spill`,
                so that the caller holds one sequence's rows beside the engine's buffer, not the whole batch
                again); None: as made.

        Raises:
            InputError: an empty sequence, too many for the batch, or ``outputs`` not in :data:`BATCH_OUTPUTS`.
        """
        raise NotImplementedError

    def forward_rows(self, sequences: Sequence[Sequence[int]]) -> list[int] | None:
        """Token rows in each forward pass the engine runs for this batch, in order (None: not known).

        What an invariance probe exercised: a kernel chosen by the number of rows (a matmul's tiling, an
        attention path) can only differ between the prompt alone and the batch if these differ.
        """
        return None

    def close(self) -> None:
        """Release the batch's resources."""

    def __enter__(self) -> "BatchRun":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
