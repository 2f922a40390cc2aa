"""An inference server (``openai`` engine): llama-server, vLLM, SGLang, TGI, llama-cpp-python's server.

``--engine openai:http://127.0.0.1:8080/v1``

Servers do not return logits; they return the top-k log-probabilities of
positions. When the engine loads it asks which server it talks to
(:mod:`~logitlab.engines.servers.identity`: llama-server's ``/props`` gives its
build), then *probes* the scoring modes (:mod:`~logitlab.engines.servers.modes`:
``prompt_logprobs``, ``return_logprob``, ``echo``, ``teacher-forced``) in the
order that suits that server, on a short counting prompt, and keeps the first
whose rows line up with the server's own greedy completion
(:mod:`~logitlab.engines.servers.alignment`); ``mode=NAME`` forces one (it is
still checked). None working is an :class:`~logitlab.errors.EngineError`
naming every mode tried and why it failed.

One run of the workload, ``temperature`` 0 throughout:

1. **generate** (the reference run; every other run too while
   ``decode_timing`` is on, for the decode timing): a greedy completion of
   ``n_decode`` tokens with the top-k log-probabilities of each
   (:mod:`~logitlab.engines.servers.dialects`). The reference's decode tokens
   are its ids where the server gives ids, else the tokenization of prompt
   text + completion text minus the prompt (the canonical tokenization of the
   greedy text, which may merge tokens the model produced one by one).
2. **reset** (``fresh``, default on): a one-token request that shares no
   prefix with the sequence, so a server that reuses the previous request's
   KV cache evaluates the next sequence from the same state every run.
3. **score** the whole sequence (prompt + decode tokens) in the chosen mode;
   the rows are checked against the generation's (where its tokens are the
   replayed ones) and kept as :class:`~logitlab.engines.topk.TopKRows`.

``RunOutput.scoring`` records the mode, the endpoint, the requests and their
time, the tokens the server evaluated per request (where it says), the
alignment check and the run's retried requests (``retries``: request, failure,
attempt, wait; ``describe()["retries_while_loading"]`` has those of the
probe). ``prompt_format``: ``ids`` sends token ids (llama-server, vLLM,
SGLang), ``text`` the detokenized sequence (llama-cpp-python's server, TGI),
``auto`` (default) ids if the server takes a one-token id prompt.
Tokenizing uses the server's endpoint (``/extras/tokenize``, ``/tokenize``)
or ``tokenizer=PATH.gguf``. Requests time out after ``timeout`` s and are
retried (:mod:`~logitlab.engines.servers.http`); a server that stops answering
ends the run with :class:`~logitlab.errors.EngineError` (``ab`` keeps the runs
done so far).
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import numpy as np

from logitlab.engines.base import Engine, StepTiming
from logitlab.engines.options import choice, positive_float, positive_int, to_bool
from logitlab.engines.servers.alignment import AlignmentCheck, check_against_generation
from logitlab.engines.servers.dialects import Dialect, Generation, dialect_for
from logitlab.engines.servers.http import HttpStatusError, ServerClient
from logitlab.engines.servers.identity import identify
from logitlab.engines.servers.modes import MODE_NAMES, MODES, ModeContext, ModeUnsupported, ScoringMode, \
    preferred_modes
from logitlab.errors import EngineError, InputError

PROMPT_FORMATS = ("auto", "ids", "text")
#: Probe prompt: a counting sequence, whose continuation every model is confident about
#: (large top1–top2 gaps make the alignment check decisive).
PROBE_TEXT = "1, 2, 3, 4, 5, 6,"
PROBE_TOKENS = 4


def _url(value: Any) -> str:
    url = str(value).strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError("expected http://HOST[:PORT]/v1")
    return url


def _count(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be 0 or more")
    return number


def _mode(value: Any) -> str:
    name = str(value).strip().lower().replace("_", "-")
    names = {m.replace("_", "-"): m for m in MODE_NAMES}
    if name == "auto":
        return "auto"
    if name not in names:
        raise ValueError(f"valid: auto, {', '.join(MODE_NAMES)}")
    return names[name]


class OpenAIEngine(Engine):
    """An inference server (see the module docstring).

    ``model`` is the served model name (``--model``, ``--control-model``,
    ``--candidate-model``; default: the first one ``GET {url}/models`` lists).
    """

    name = "openai"
    TARGET_OPTION = "url"
    ABILITIES = frozenset({"workload", "concurrent-requests", "prefix-cache"})
    EXTRA = "server"  # LIBRARIES: none, an HTTP client of the standard library
    OPTIONS = {
        "url": (_url, "base URL of the API, e.g. http://127.0.0.1:8080/v1 (--engine openai:URL)"),
        "mode": (_mode, "scoring mode: auto (probe), prompt_logprobs, return_logprob, echo or teacher-forced"),
        "logprobs": (positive_int, "log-probabilities asked per position (default 20; above --top-k)"),
        "timeout": (positive_float, "seconds per HTTP request (default 120)"),
        "retries": (_count, "retries of a failed request (default 3)"),
        "backoff": (positive_float,
                    "first retry delay in s, doubled per retry, or longer if Retry-After asks (default 0.5)"),
        "prompt_format": (choice(PROMPT_FORMATS), "ids, text or auto (default: ids if the server takes them)"),
        "tokenizer": (str, "GGUF file to tokenize with (default: the server's tokenize endpoint)"),
        "fresh": (to_bool, "a one-token reset request before each scoring (default 1)"),
        "decode_timing": (to_bool, "time a greedy completion of n_decode tokens in every run (default 1)"),
        "api_key": (str, "sent as 'Authorization: Bearer …' (default: $OPENAI_API_KEY if set)"),
    }

    def _load(self) -> None:
        if "url" not in self.options:
            raise InputError("the openai engine needs the server's URL: --engine openai:http://HOST:PORT/v1 "
                             "or url=... in the variant")
        self.url: str = self.options["url"]
        self.k: int = self.options.get("logprobs", 20)
        self.client = ServerClient(self.url, timeout=self.options.get("timeout", 120.0),
                                   retries=self.options.get("retries", 3), backoff=self.options.get("backoff", 0.5),
                                   api_key=self.options.get("api_key") or os.environ.get("OPENAI_API_KEY"))
        self.root = self.client.root
        self._tokenize_endpoint: str | None = None
        self._detokenize_endpoint: str | None = None
        self._gguf = None
        if "tokenizer" in self.options:
            from logitlab.engines.tokenizers import GgufTokenizer

            self._gguf = GgufTokenizer(self.options["tokenizer"])
        self.served = self._served_models()
        if self.server.kind == "llama-server":  # its own /tokenize and /detokenize (with add_special)
            self._tokenize_endpoint, self._detokenize_endpoint = "/tokenize", "/detokenize"
        if self.model is None:
            self.model = self.served[0]
        elif self.model not in self.served:
            raise InputError(f"model {self.model!r} is not served at {self.url}; served: {', '.join(self.served)}")
        self._prompt_format = self._settle_prompt_format(self.options.get("prompt_format", "auto"))
        self.dialect = self._dialect()
        self.mode, self.tried, self.probe_check = self._choose_mode()
        self.load_retries = list(self.client.retried)

    # -- set-up ---------------------------------------------------------------------
    def _served_models(self) -> list[str]:
        try:
            listing = self.client.get("/models")
        except HttpStatusError as exc:
            self.server = identify(self.client)
            if exc.status == 404 and self.server.kind == "tgi" and self.server.model_path:
                return [self.server.model_path]  # TGI serves one model and may not list it under /v1/models
            raise
        self.server = identify(self.client)
        served = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict) and m.get("id")]
        if not served:
            raise EngineError(f"{self.url}/models lists no model; is this an OpenAI-compatible server?")
        return served

    def _settle_prompt_format(self, wanted: str) -> str:
        if wanted != "auto":
            return wanted
        if self.server.kind in ("llama-server", "vllm", "sglang"):
            return "ids"
        if self.server.kind == "tgi":
            return "text"
        try:  # one token-id prompt, not retried: an error status means the server wants text
            self.client.post("/completions", {"model": self.model, "prompt": [0], "max_tokens": 1, "temperature": 0},
                             retries=0)
            return "ids"
        except HttpStatusError:
            return "text"

    def _prompt_of(self, sequence: list[int]) -> Any:
        return sequence if self._prompt_format == "ids" else self.detokenize(sequence)

    def _dialect(self) -> Dialect:
        cls = dialect_for(self.server.kind)
        extra = {"detokenize": self.detokenize} if self.server.kind == "tgi" else {}
        return cls(self.client, self.k, self.model, self._prompt_of, self.server.kind, **extra)

    def _context(self) -> ModeContext:
        return ModeContext(self.client, self.dialect, self.k, self.model, self._prompt_format, self._prompt_of,
                           self.server.kind)

    def _choose_mode(self) -> tuple[ScoringMode, list[tuple[str, str]], AlignmentCheck | None]:
        """Probe the modes on :data:`PROBE_TEXT` and its greedy continuation; the first that lines up wins."""
        forced = self.options.get("mode", "auto")
        order = preferred_modes(self.server.kind) if forced == "auto" else (forced,)
        prompt = self.tokenize(PROBE_TEXT)
        generation = self.dialect.generate(prompt, PROBE_TOKENS)
        generated = self._generated_ids(prompt, generation)
        sequence = prompt + generated
        anchors = self._anchors(prompt, generation, generated)
        tried: list[tuple[str, str]] = []
        for name in order:
            mode = MODES[name](self._context())
            if self._prompt_format == "text" and name in ("prompt_logprobs", "return_logprob"):
                tried.append((name, "needs token-id prompts (the server takes text)"))
                continue
            if self.fresh:
                self._reset(sequence)
            try:
                scored = mode.score(sequence)
            except ModeUnsupported as exc:
                tried.append((name, str(exc)))
                continue
            check = check_against_generation(
                scored.rows, anchors, text_of=self._text_of,
                where=f"{self.url} in {name} mode (probe: {PROBE_TEXT!r} + {PROBE_TOKENS} greedy tokens)")
            return mode, tried, check
        what = "; ".join(f"{name}: {why}" for name, why in tried)
        raise EngineError(f"the server at {self.url} ({self.server.text()}) supports none of the scoring modes "
                          f"tried — {what}; it must return log-probabilities of prompt tokens (echo, "
                          "prompt_logprobs, return_logprob) or of a generated token (teacher-forced)")

    @property
    def fresh(self) -> bool:
        return self.options.get("fresh", True)

    # -- tokenizer ----------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        if self._gguf is not None:
            return self._gguf.tokenize(text)
        for path, body in (("/extras/tokenize", {"input": text, "model": self.model}),
                           ("/tokenize", {"model": self.model, "prompt": text, "content": text, "inputs": text,
                                          "add_special": True})):
            if self._tokenize_endpoint not in (None, path):
                continue
            try:
                data = self.client.request("POST", self.root + path, body)
            except HttpStatusError:
                continue
            tokens = data.get("tokens") if isinstance(data, dict) else data  # TGI answers a list of {id, ...}
            if isinstance(tokens, list):
                self._tokenize_endpoint = path
                return [int(t["id"] if isinstance(t, dict) else t) for t in tokens]
        raise InputError(f"the server at {self.root} has no tokenize endpoint (tried /extras/tokenize, /tokenize): "
                         "pass tokenizer=PATH.gguf in the variant")

    def detokenize(self, tokens: Sequence[int]) -> str:
        if self._gguf is not None:
            return self._gguf.detokenize(tokens)
        ids = [int(t) for t in tokens]
        # llama-cpp-python: /extras/detokenize -> text; vLLM: /detokenize -> prompt; llama-server: -> content
        for path in ("/extras/detokenize", "/detokenize"):
            if self._detokenize_endpoint not in (None, path):
                continue
            try:
                data = self.client.request("POST", self.root + path, {"tokens": ids, "model": self.model})
            except HttpStatusError:
                continue
            text = next((data[key] for key in ("text", "prompt", "content")
                         if isinstance(data, dict) and isinstance(data.get(key), str)), None)
            if text is not None:
                self._detokenize_endpoint = path
                return text
        raise InputError(f"the server at {self.root} has no detokenize endpoint (tried /extras/detokenize, "
                         "/detokenize): pass tokenizer=PATH.gguf in the variant")

    def _text_of(self, token: int) -> str:
        return self.detokenize([token])

    @property
    def n_vocab(self) -> int:
        return 0  # unknown: servers return top-k log-probabilities only

    @property
    def n_ctx(self) -> int | None:
        return self.server.n_ctx

    # -- the workload ----------------------------------------------------------------
    def _generated_ids(self, prompt: list[int], generation: Generation) -> list[int]:
        if generation.tokens is not None:
            return list(generation.tokens)
        if not generation.text:
            return []
        full = self.tokenize(self.detokenize(prompt) + generation.text)
        if full[:len(prompt)] != prompt:
            raise EngineError("the server's completion does not re-tokenize after the prompt (the prompt's last "
                              "token merges with the completion); the server must return token ids "
                              "(vLLM: return_tokens_as_token_ids) or use another prompt")
        return full[len(prompt):]

    @staticmethod
    def _anchors(prompt: list[int], generation: Generation, generated: list[int],
                 replay: Sequence[int] | None = None) -> dict[int, dict]:
        """Position -> the generation's top-k for the token it generated after it, while it matches the sequence.

        Without ids from the server (text only), the entries are used only if their count equals the
        re-tokenized completion's. With ``replay``, only up to the first token where the generation left it.
        """
        entries = generation.entries
        if generation.tokens is None and len(entries) != len(generated):
            return {}
        anchors = {}
        for t, entry in enumerate(entries[:len(generated)]):
            if replay is not None and (t >= len(replay) or list(replay[:t]) != list(generated[:t])):
                break
            if entry.top:
                anchors[len(prompt) - 1 + t] = entry.top
        return anchors

    def _reset(self, sequence: list[int]) -> None:
        """A one-token request sharing no prefix with ``sequence`` (see ``fresh``)."""
        if self.server.kind == "tgi":
            return  # TGI's prefix cache does not change what a request computes
        if self._prompt_format == "text":
            first = self.detokenize(sequence[:1]).lstrip()[:1]
            self.client.post("/completions", {"model": self.model, "prompt": "0" if first != "0" else "1",
                                              "max_tokens": 1, "temperature": 0})
        else:
            self.dialect.step([sequence[0] - 1 if sequence[0] > 0 else sequence[0] + 1])

    def greedy_request(self, prompt_ids: Sequence[int], n_decode: int, *, prefix_cache: bool) -> tuple[list[int], Any]:
        """One greedy completion with its top-k rows (see :meth:`Engine.greedy_request`); llama-server only
        (``cache_prompt``: a miss evaluates the whole prompt).

        Raises:
            InputError: another server (no per-request switch of its prefix cache here).
        """
        from logitlab.engines.topk import TopKRows

        if self.server.kind != "llama-server":
            raise InputError(f"a prefix-cache miss on demand needs llama-server (cache_prompt); the server at "
                             f"{self.url} is {self.server.text()}")
        prompt = [int(t) for t in prompt_ids]
        generation = self.dialect.generate(prompt, n_decode, cache=prefix_cache)
        return self._generated_ids(prompt, generation), TopKRows.from_mappings(
            [entry.top for entry in generation.entries], self.k)

    def background_requests(self, count: int) -> Any:
        """``count`` greedy completions of other prompts in flight while the block runs
        (:class:`~logitlab.engines.servers.background.BackgroundRequests`; on llama-server pinned to slots
        1..count).

        Raises:
            InputError: ``count`` below 1, or a llama-server with fewer than ``count + 1`` slots.
        """
        from logitlab.engines.servers.background import BACKGROUND_PROMPTS, BackgroundRequests, check_slots

        check_slots(count, self.server.slots if self.server.kind == "llama-server" else None, self.url)
        client = self.client
        prompts = [self._prompt_of(self.tokenize(text)) for text in BACKGROUND_PROMPTS[:count]]
        return BackgroundRequests(lambda: ServerClient(self.url, timeout=client.timeout, retries=0,
                                                       api_key=client.api_key), self.server.kind, self.model,
                                  prompts, count)

    def run_workload(self, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None) -> Any:
        """Generate (reference) or take ``replay``, then score the whole sequence; returns a ``RunOutput``.

        ``logits`` is empty (``(n_positions, 0)``), ``topk`` holds the data and ``scoring`` says how it
        was obtained. Timings: ``prefill`` = the scoring requests over all positions (their summed wall
        time), ``decode`` = the greedy completion request (wall time, HTTP included); a retried request
        counts its answered attempt only.

        Raises:
            EngineError: the server failed, stopped answering, or its rows do not line up with its own
                greedy completion.
        """
        from logitlab.engines.topk import TopKRows
        from logitlab.engines.workload import RunOutput

        prompt = [int(t) for t in prompt_ids]
        retried_before = len(self.client.retried)
        generation = None
        if replay is None or self.options.get("decode_timing", True):
            generation = self.dialect.generate(prompt, n_decode)
        if replay is None:
            generated = self._generated_ids(prompt, generation)
        else:
            generated = [int(t) for t in replay[:n_decode]]
        sequence = prompt + generated
        if self.fresh:
            self._reset(sequence)
        scored = self.mode.score(sequence)
        check = None
        if generation is not None:
            own = generated if replay is None else self._generated_ids(prompt, generation)
            anchors = self._anchors(prompt, generation, own, None if replay is None else generated)
            check = check_against_generation(scored.rows, anchors, where=f"{self.url} in {self.mode.name} mode",
                                             text_of=self._text_of)
        timings = [StepTiming("prefill", len(sequence), scored.seconds)]
        if generation is not None and generation.n_tokens:
            timings.append(StepTiming("decode", generation.n_tokens, generation.seconds))
        counted = [e for e in scored.evaluated if e is not None]
        scoring = {
            "mode": self.mode.name, "endpoint": self.mode.endpoint, "requests": scored.requests,
            "seconds": scored.seconds, "positions": len(sequence),
            "evaluated_per_request": ({str(n): counted.count(n) for n in sorted(set(counted))}
                                      if len(counted) == len(scored.evaluated) else None),
            "alignment": None if check is None else check.to_dict(),
            "retries": self.client.retried[retried_before:],
        }
        return RunOutput(np.empty((len(sequence), 0), np.float32), sequence, generated, timings,
                         topk=TopKRows.from_mappings(scored.rows, self.k), scoring=scoring)

    def describe(self) -> dict[str, Any]:
        server = self.server
        return {
            "engine": self.name,
            "engine_version": f"{server.text()} at {self.url} (OpenAI-compatible)",
            "url": self.url,
            "model": self.model,
            "served_models": self.served,
            "model_sha256": "n/a (remote server)",
            "server": {"kind": server.kind, "build": server.build, "model_path": server.model_path,
                       "n_ctx": server.n_ctx, "slots": server.slots, "asked": server.endpoint},
            "options": {k: v for k, v in self.options.items() if k != "api_key"},
            "data": f"top-{self.k} log-probabilities per position (not logits)",
            "prompt_format": self._prompt_format,
            "scoring": {
                "mode": self.mode.name, "endpoint": self.mode.endpoint, "requests": self.mode.requests,
                "chosen": "forced (mode=)" if self.options.get("mode", "auto") != "auto" else "probed",
                "tried_before": [{"mode": name, "why_not": why} for name, why in self.tried],
                "probe_alignment": None if self.probe_check is None else self.probe_check.to_dict(),
            },
            "retries_while_loading": self.load_retries,
            "timing": "prefill: summed wall time of the scoring requests over all positions; decode: wall time of "
                      "a greedy completion of n_decode tokens (HTTP included)",
        }
