"""Any engine binary, driven through a file protocol (``cmd`` engine).

``--engine 'cmd:./my-engine --tokens {tokens} --logits {logits}'``

One run of the workload is one run of the command (no shell; split like a
POSIX shell with :func:`shlex.split`; placeholders filled per argument with
:meth:`str.format`, so write ``{{``/``}}`` for literal braces):

``{tokens}``     (required) input file: token ids as decimal text, one per
                 line — the prompt, then the decode tokens to feed (a replayed
                 run) or none (a greedy reference run of a command that
                 decodes greedily itself, see ``{n_decode}``).
``{logits}``     (required) output file: one float32 row per position,
                 ``(n_prompt + n_decode, n_vocab)``. Read by its content:
                 ``.npy`` (float32, or float16/bfloat16 upcast exactly),
                 ``.safetensors`` (the tensor ``logits``, or the only one),
                 else raw little-endian float32 (needs ``vocab=N`` or a
                 tokenizer). The file name ends in ``.npy``, ``.safetensors``
                 or ``.f32`` as ``format=`` says.
``{n_prompt}``   (optional) how many leading ids are the prompt: prefill
                 them in one batch, decode the rest one token at a time
                 (M=1), as logitlab's own workload does. Without it the
                 command may score the whole file however it likes.
``{n_decode}``   (optional, needs ``{n_prompt}``) decode steps: when the file
                 holds only the prompt, the command continues greedily
                 (argmax of the last row, lowest id on ties) for ``n_decode``
                 steps. Without it logitlab drives the greedy reference run
                 itself, one command run per decode step plus a final run
                 on the whole sequence (replayed runs are always one run).
``{generated}``  (optional) output file: the decode ids the command fed, one
                 per line; default: logitlab takes argmax of rows
                 ``n_prompt-1 … n_prompt+n_decode-2``.
``{model}``, ``{vocab}``, ``{workdir}``: the model path, ``vocab=`` and the
                 run's temporary folder.

The variant's environment knobs (``--candidate-env``) are in the command's
environment. Timing: the command may print ``prefill_seconds=S`` and
``decode_seconds=S`` on stdout or stderr (``timing_regex=`` changes the
pattern: named groups ``prefill``/``decode`` in seconds or ``prefill_ms``/
``decode_ms``); otherwise the wall time of the whole process (start-up and
model load included) is reported as the prefill of all positions. A non-zero
exit raises :class:`~logitlab.errors.EngineError` with the last stderr lines.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import string
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from logitlab.engines.base import Engine, Session, StepTiming
from logitlab.engines.options import positive_float, positive_int
from logitlab.engines.tokenizers import GgufTokenizer
from logitlab.engines.crash import CrashEvidence
from logitlab.errors import EngineCrashed, EngineError, InputError
from logitlab.models import default_model_path, file_sha256

PLACEHOLDERS = ("tokens", "logits", "n_prompt", "n_decode", "generated", "model", "vocab", "workdir")
FORMATS = {"npy": ".npy", "safetensors": ".safetensors", "f32": ".f32"}
DEFAULT_TIMING_REGEX = (r"prefill_seconds\s*[=:]\s*(?P<prefill>[-+0-9.eE]+)"
                        r"|decode_seconds\s*[=:]\s*(?P<decode>[-+0-9.eE]+)")
_TIMING_GROUPS = ("prefill", "decode", "prefill_ms", "decode_ms")
STDERR_LINES = 3
#: Largest file of the command template hashed into its build identity (bytes); larger ones are identified by size.
IDENTITY_MAX_BYTES = 256 << 20


def _format(value: Any) -> str:
    name = str(value).strip().lower().lstrip(".")
    if name not in FORMATS:
        raise ValueError(f"valid formats: {', '.join(FORMATS)}")
    return name


def _timing_regex(value: Any) -> str:
    pattern = str(value)
    try:
        groups = re.compile(pattern).groupindex
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    if not set(groups) & set(_TIMING_GROUPS):
        raise ValueError(f"needs a named group among {', '.join(_TIMING_GROUPS)}")
    return pattern


def read_logits(path: Path, vocab: int | None) -> np.ndarray:
    """Read a logits file written by a command: ``(rows, vocab)`` float32.

    ``.npy`` and ``.safetensors`` are recognised by their content, anything
    else is raw little-endian float32 of ``vocab`` columns.

    Raises:
        EngineError: unreadable, not 2-D, a dtype other than float32/16/bf16,
            or a raw file whose size is not a whole number of rows.
    """
    with path.open("rb") as f:
        head = f.read(16)
    name = path.name
    if head.startswith(b"\x93NUMPY"):
        try:
            array = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise EngineError(f"cannot read logits file {name} (.npy): {exc}") from None
    elif len(head) >= 9 and head[8:9] == b"{":
        array = _read_safetensors(path)
    else:
        size = path.stat().st_size
        if vocab is None:
            raise EngineError(f"logits file {name} is raw ({size} bytes, not .npy/.safetensors): "
                              "pass vocab=N (columns per row) in the engine options")
        if size == 0 or size % (4 * vocab):
            raise EngineError(f"logits file {name} is {size} bytes, not a whole number of rows of "
                              f"{vocab} float32 (= {4 * vocab} bytes each)")
        array = np.fromfile(path, dtype="<f4").reshape(-1, vocab)
    return _as_float32(array, name)


def _read_safetensors(path: Path) -> np.ndarray:
    dtypes = {"F32": "<f4", "F16": "<f2", "BF16": "bfloat16"}
    raw = path.read_bytes()
    try:
        (length,) = np.frombuffer(raw[:8], dtype="<u8")
        header = json.loads(raw[8:8 + int(length)])
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        entry = tensors.get("logits") or (next(iter(tensors.values())) if len(tensors) == 1 else None)
        if entry is None:
            raise ValueError(f"no tensor named 'logits' among {sorted(tensors)}")
        if entry["dtype"] not in dtypes:
            raise ValueError(f"dtype {entry['dtype']}, expected F32 (or F16/BF16)")
        start, end = (8 + int(length) + int(x) for x in entry["data_offsets"])
        dtype = dtypes[entry["dtype"]]
        if dtype == "bfloat16":
            import ml_dtypes

            dtype = ml_dtypes.bfloat16
        return np.frombuffer(raw[start:end], dtype=dtype).reshape(entry["shape"])
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise EngineError(f"cannot read logits file {path.name} (.safetensors): {exc}") from None


def _as_float32(array: np.ndarray, name: str) -> np.ndarray:
    if array.ndim != 2:
        raise EngineError(f"logits file {name} holds shape {array.shape}, expected (positions, n_vocab)")
    if array.dtype == np.float32:
        return np.array(array, dtype=np.float32, copy=True)
    if array.dtype == np.float16 or array.dtype.name == "bfloat16":
        return array.astype(np.float32)  # exact
    raise EngineError(f"logits file {name} holds {array.dtype}, expected float32 (or float16/bfloat16)")


@dataclass
class _Result:
    logits: np.ndarray
    generated: list[int] | None
    timings: list[StepTiming]


class CommandSession(Session):
    """Step-by-step use (``prefill``/``decode``): each call re-runs the command on the whole sequence."""

    engine: "CommandEngine"

    def __init__(self, engine: "CommandEngine"):
        super().__init__(engine)
        self._sequence: list[int] = []

    def _decode(self, tokens: list[int]) -> np.ndarray:
        self._sequence += tokens
        result = self.engine.invoke(self._sequence, n_prompt=len(self._sequence), n_decode=0)
        return result.logits[-len(tokens):].copy()


class CommandEngine(Engine):
    """An engine binary behind the ``cmd`` file protocol (see the module docstring).

    Options: ``command`` (the template; ``--engine cmd:TEMPLATE`` fills it),
    ``format`` (``npy``, ``safetensors``, ``f32``), ``vocab``, ``tokenizer``
    (GGUF file whose vocabulary tokenizes the prompt; default the model,
    else the embedded model), ``timing_regex``, ``timeout`` (s per run).
    """

    name = "cmd"
    ABILITIES = frozenset({"logits", "sessions", "workload"})
    TARGET_OPTION = "command"
    OPTIONS = {
        "command": (str, "command template with {tokens} and {logits} (--engine 'cmd:TEMPLATE')"),
        "format": (_format, "logits file format: npy (default), safetensors, f32 (raw little-endian)"),
        "vocab": (positive_int, "columns per logits row (needed for raw f32 without a tokenizer)"),
        "tokenizer": (str, "GGUF file whose vocabulary tokenizes the prompt (default: the model)"),
        "timing_regex": (_timing_regex, "regex with named groups prefill/decode (s) or prefill_ms/decode_ms"),
        "timeout": (positive_float, "seconds one command run may take (default 600)"),
    }

    def _load(self) -> None:
        template = str(self.options.get("command", "")).strip()
        if not template:
            raise InputError("the cmd engine needs a command template: --engine 'cmd:./my-engine --tokens {tokens} "
                             "--logits {logits}'")
        try:
            argv = shlex.split(template)
        except ValueError as exc:
            raise InputError(f"cannot split the cmd template {template!r}: {exc}") from None
        fields = set()
        for arg in argv:
            try:
                fields |= {name for _, name, _, _ in string.Formatter().parse(arg) if name is not None}
            except ValueError as exc:
                raise InputError(f"bad placeholder in the cmd template argument {arg!r}: {exc} "
                                 "(write {{ and }} for literal braces)") from None
        unknown = sorted(fields - set(PLACEHOLDERS))
        if unknown:
            raise InputError(f"unknown placeholder {{{unknown[0]}}} in the cmd template; valid: "
                             + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
        for required in ("tokens", "logits"):
            if required not in fields:
                raise InputError(f"the cmd template {template!r} has no {{{required}}} placeholder; "
                                 f"logitlab passes the {'input token ids' if required == 'tokens' else 'output logits'}"
                                 f" file path there")
        if "n_decode" in fields and "n_prompt" not in fields:
            raise InputError("the cmd template has {n_decode} but no {n_prompt}: a command that decodes greedily "
                             "needs both")
        if "vocab" in fields and "vocab" not in self.options:
            raise InputError("the cmd template uses {vocab}: pass vocab=N in the engine options")
        program = argv[0]
        if "{" in program:
            raise InputError(f"the first word of the cmd template ({program!r}) must be the program, not a placeholder")
        resolved = shutil.which(program)
        if resolved is None:
            raise InputError(f"command {program!r} (first word of the cmd template) not found: "
                             "give a path to an executable or put it on PATH")
        self._argv, self._fields, self.program = argv, fields, resolved
        self._identity: dict[str, str] | None = None
        self.model = str(self.model or default_model_path())
        self._tokenizer: GgufTokenizer | None = None
        self.last_timing_source = "not run yet"

    # -- tokenizer ----------------------------------------------------------
    @property
    def tokenizer(self) -> GgufTokenizer:
        if self._tokenizer is None:
            path = self.options.get("tokenizer") or self.model
            try:
                self._tokenizer = GgufTokenizer(path)
            except InputError as exc:
                raise InputError(f"the cmd engine tokenizes the prompt with a GGUF vocabulary: {exc}; "
                                 "pass tokenizer=PATH.gguf (or --model)") from None
        return self._tokenizer

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.tokenize(text)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.detokenize(tokens)

    @property
    def n_vocab(self) -> int:
        return int(self.options["vocab"]) if "vocab" in self.options else self.tokenizer.n_vocab

    @property
    def greedy_in_command(self) -> bool:
        """True when the template has ``{n_decode}``: the command decodes the greedy reference itself."""
        return "n_decode" in self._fields

    # -- running ------------------------------------------------------------
    def _open_session(self) -> CommandSession:
        return CommandSession(self)

    def run_workload(self, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None) -> Any:
        """One command run per workload run (see the module docstring); returns a ``RunOutput``.

        Raises:
            InputError: ``replay`` shorter than ``n_decode``.
            EngineError: the command failed, timed out, or wrote bad logits.
        """
        from logitlab.engines.workload import RunOutput

        prompt = [int(t) for t in prompt_ids]
        if replay is not None:
            if len(replay) < n_decode:
                raise InputError(f"replay has {len(replay)} tokens, {n_decode} needed")
            sequence = prompt + [int(t) for t in replay[:n_decode]]
            result = self.invoke(sequence, n_prompt=len(prompt), n_decode=n_decode)
        elif self.greedy_in_command or n_decode == 0:
            result = self.invoke(prompt, n_prompt=len(prompt), n_decode=n_decode)
            generated = result.generated
            if generated is None:
                generated = [int(t) for t in np.argmax(result.logits[len(prompt) - 1:-1], axis=1)]
            if len(generated) != n_decode:
                raise EngineError(f"the command fed {len(generated)} decode tokens, {n_decode} asked for")
            sequence = prompt + generated
        else:
            sequence = list(prompt)
            for _ in range(n_decode):
                step = self.invoke(sequence, n_prompt=len(prompt), n_decode=len(sequence) - len(prompt))
                sequence.append(int(np.argmax(step.logits[-1])))
            result = self.invoke(sequence, n_prompt=len(prompt), n_decode=n_decode)
        generated = sequence[len(prompt):]
        return RunOutput(result.logits, sequence, generated, result.timings)

    def invoke(self, tokens: Sequence[int], *, n_prompt: int, n_decode: int) -> _Result:
        """Run the command once on ``tokens``; expect ``n_prompt + n_decode`` rows back.

        Raises:
            EngineError: non-zero exit (last stderr lines in the message), a
                timeout, no logits file, or logits of the wrong shape.
        """
        n_rows = n_prompt + n_decode
        timeout = float(self.options.get("timeout", 600.0))
        with tempfile.TemporaryDirectory(prefix="logitlab-cmd-") as folder:
            work = Path(folder)
            paths = {"tokens": work / "tokens.txt",
                     "logits": work / ("logits" + FORMATS[self.options.get("format", "npy")]),
                     "generated": work / "generated.txt"}
            paths["tokens"].write_text("".join(f"{int(t)}\n" for t in tokens))
            values = {"tokens": paths["tokens"], "logits": paths["logits"], "generated": paths["generated"],
                      "n_prompt": n_prompt, "n_decode": n_decode, "model": self.model,
                      "vocab": self.options.get("vocab", ""), "workdir": work}
            argv = [self.program] + [arg.format_map(values) for arg in self._argv[1:]]
            start = time.perf_counter()
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                                      timeout=timeout, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise EngineError(f"cmd engine: {self._argv[0]} did not finish within timeout={timeout:g} s") from None
            except OSError as exc:
                raise EngineError(f"cmd engine: cannot run {self._argv[0]}: {exc.strerror or exc}") from None
            wall = time.perf_counter() - start
            if proc.returncode < 0:  # killed by a signal: the engine under test crashed
                evidence = CrashEvidence.of_process(proc.returncode, None, "run", proc.stderr.splitlines(),
                                                    self.name, {}, lambda: None)
                raise EngineCrashed(f"cmd engine: {self._argv[0]} crashed ({evidence.status}); "
                                    f"stderr: {_tail(proc.stderr)}", evidence=evidence)
            if proc.returncode != 0:
                raise EngineError(f"cmd engine: {self._argv[0]} exited with status {proc.returncode}; "
                                  f"stderr: {_tail(proc.stderr)}")
            if not paths["logits"].exists():
                raise EngineError(f"cmd engine: {self._argv[0]} exited 0 but wrote no logits file "
                                  f"(the {{logits}} path); stderr: {_tail(proc.stderr)}")
            logits = read_logits(paths["logits"], self.options.get("vocab"))
            generated = None
            if "generated" in self._fields and paths["generated"].exists():
                try:
                    generated = [int(t) for t in paths["generated"].read_text().split()]
                except ValueError:
                    raise EngineError("cmd engine: the {generated} file holds something other than token ids") \
                        from None
        expected = (n_rows, self.n_vocab)
        if logits.shape != expected:
            what = "rows (one per position: prompt + decode tokens)" if logits.shape[0] != n_rows else \
                "columns (the vocabulary size; vocab=N or the tokenizer says)"
            raise EngineError(f"cmd engine: the logits file holds shape {logits.shape}, expected {expected}: "
                              f"wrong number of {what}")
        return _Result(logits, generated, self._timings(proc.stdout + "\n" + proc.stderr, wall, n_prompt, n_decode))

    def _timings(self, output: str, wall: float, n_prompt: int, n_decode: int) -> list[StepTiming]:
        found: dict[str, float] = {}
        for match in re.finditer(self.options.get("timing_regex", DEFAULT_TIMING_REGEX), output):
            for group, value in match.groupdict().items():
                if group in _TIMING_GROUPS and value is not None:
                    try:
                        seconds = float(value) / (1000.0 if group.endswith("_ms") else 1.0)
                    except ValueError:
                        continue
                    found[group.removesuffix("_ms")] = seconds
        timings = []
        if "n_prompt" not in self._fields and found:
            # The command was not told where the prompt ends: all of its work is one prefill of every position.
            timings = [StepTiming("prefill", n_prompt + n_decode, sum(found.values()))]
            self.last_timing_source = "reported by the command (whole sequence)"
        elif "prefill" in found and "decode" in found and n_decode > 0:
            timings = [StepTiming("prefill", n_prompt, found["prefill"]), StepTiming("decode", n_decode, found["decode"])]
            self.last_timing_source = "reported by the command (prefill and decode)"
        elif "prefill" in found or "decode" in found:
            kind = "prefill" if "prefill" in found else "decode"
            n_tokens = n_prompt + n_decode if kind == "prefill" else n_decode
            timings = [StepTiming(kind, n_tokens, found[kind])]
            self.last_timing_source = f"reported by the command ({kind} only)"
        if not timings:
            timings = [StepTiming("prefill", n_prompt + n_decode, wall)]
            self.last_timing_source = "wall time of the whole process, counted as the prefill of all positions"
        return timings

    def build_identity(self) -> dict[str, str]:
        """What identifies this build of the command, for goldens and manifests (computed once).

        Returns:
            ``{"sha256 PROGRAM": …, "sha256 FILE": …}``: the SHA-256 of the resolved program and
            of every other template word that names an existing file of at most
            :data:`IDENTITY_MAX_BYTES` (a script, a config); a larger one is identified by
            ``"size N"``. A rebuilt binary or an edited script changes it; the placeholders'
            values (the model, the tokens) do not. The template itself is the ``command`` option.
        """
        if self._identity is None:
            identity: dict[str, str] = {}
            for word in [self.program, *self._argv[1:]]:
                if "{" in word or not os.path.isfile(word):
                    continue
                size = os.path.getsize(word)
                identity[f"sha256 {word}"] = file_sha256(word) if size <= IDENTITY_MAX_BYTES else f"size {size}"
            self._identity = identity
        return self._identity

    def describe(self) -> dict[str, Any]:
        model = os.path.abspath(self.model)
        return {
            "engine": self.name,
            "engine_version": f"cmd: {self._argv[0]}",
            "command": shlex.join(self._argv),
            "build_identity": self.build_identity(),
            "program": self.program,
            "protocol": {
                "prefill_decode_split": "n_prompt" in self._fields,
                "greedy_reference": "by the command ({n_decode})" if self.greedy_in_command
                else "driven by logitlab, one run per decode step",
                "format": self.options.get("format", "npy"),
            },
            "model": self.model,
            "model_sha256": file_sha256(model) if os.path.isfile(model) else None,
            "options": dict(self.options),  # the command too: a golden re-creates the engine from them
            "timing": "prefill/decode seconds the command prints (timing_regex), else the wall time of the "
                      "whole process counted as the prefill of all positions",
        }


def _tail(stderr: str, lines: int = STDERR_LINES) -> str:
    kept = [line.strip() for line in stderr.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(empty)"
