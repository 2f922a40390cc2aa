"""An OpenAI-compatible server (``openai`` engine): vLLM, SGLang, llama.cpp-based servers.

``--engine openai:http://127.0.0.1:8080/v1``

Servers do not return logits; they return the top-k log-probabilities of
each position of an echoed prompt. One run of the workload is, in order
(all on ``POST {url}/completions``, ``temperature`` 0):

1. **generate** (reference run; also every other run while ``decode_timing``
   is on, for the decode timing only): ``prompt`` = the prompt,
   ``max_tokens`` = n_decode, ``logprobs`` 1. The reference's decode tokens
   are the completion's tokens: ids when the server returns them
   (``token_id:N``, as vLLM's ``return_tokens_as_token_ids``), else the
   tokenization of prompt text + completion text, minus the prompt — the
   canonical tokenization of the greedy text, which may merge tokens the
   model produced one by one (two ``"\n"`` become one ``"\n\n"``).
2. **reset** (``fresh``, default on): a one-token request that shares no
   prefix with the sequence, so a server that reuses the previous request's
   KV cache (llama.cpp-based single-slot servers) evaluates the next
   sequence from scratch — every scoring request starts from the same state.
3. **score**: ``prompt`` = prompt + decode tokens (N tokens), ``echo``
   true, ``max_tokens`` 1, ``logprobs`` k. With N+1 entries in
   ``choices[0].logprobs.top_logprobs`` (the OpenAI layout: one per prompt
   token, the first ``null``, then the generated token's), entry j is
   position j-1, the distribution after input token j-1; with N (or N-1)
   entries (llama-cpp-python's server) entry j is position j. A ``null``
   entry is a position without data. Each entry keeps its k largest values.
   ``usage.prompt_tokens``, when given, must be N.

``prompt_format``: ``ids`` sends token ids (vLLM, SGLang), ``text`` sends the
detokenized sequence and checks the token count (llama-cpp-python's server
accepts text only), ``auto`` (default) sends a one-token id prompt when the
engine loads and uses ids if the server accepts it, else text. Tokenizing uses the server's tokenize endpoint
(``/extras/tokenize``, ``/tokenize``) or ``tokenizer=PATH.gguf``.

Requests time out after ``timeout`` s and are retried ``retries`` times on
connection errors, timeouts, 408/429 and 5xx, waiting ``backoff`` s, doubled
each time. A server that stops answering ends the run with
:class:`~logitlab.errors.EngineError` (``ab`` keeps the runs done so far).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Sequence

import numpy as np

from logitlab.engines.base import Engine, StepTiming
from logitlab.engines.options import positive_float, positive_int, to_bool
from logitlab.errors import EngineError, InputError

PROMPT_FORMATS = ("auto", "ids", "text")
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


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


def _prompt_format(value: Any) -> str:
    name = str(value).strip().lower()
    if name not in PROMPT_FORMATS:
        raise ValueError(f"valid: {', '.join(PROMPT_FORMATS)}")
    return name


class HttpStatusError(EngineError):
    """The server answered with an HTTP error status that is not worth retrying (4xx)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class OpenAIEngine(Engine):
    """An OpenAI-compatible completions server (see the module docstring).

    ``model`` is the served model name (``--model``, ``--control-model``,
    ``--candidate-model``; default: the first one ``GET {url}/models`` lists).
    """

    name = "openai"
    TARGET_OPTION = "url"
    ABILITIES = frozenset({"workload"})
    OPTIONS = {
        "url": (_url, "base URL of the API, e.g. http://127.0.0.1:8080/v1 (--engine openai:URL)"),
        "logprobs": (positive_int, "log-probabilities asked per position (default 20; above --top-k)"),
        "timeout": (positive_float, "seconds per HTTP request (default 120)"),
        "retries": (_count, "retries of a failed request (default 3)"),
        "backoff": (positive_float, "first retry delay in s, doubled per retry (default 0.5)"),
        "prompt_format": (_prompt_format, "ids, text or auto (default: ids if the server takes them)"),
        "tokenizer": (str, "GGUF file to tokenize with (default: the server's tokenize endpoint)"),
        "fresh": (to_bool, "a one-token reset request before each scoring request (default 1)"),
        "decode_timing": (to_bool, "time a greedy completion of n_decode tokens in every run (default 1)"),
        "api_key": (str, "sent as 'Authorization: Bearer …' (default: $OPENAI_API_KEY if set)"),
    }

    def _load(self) -> None:
        if "url" not in self.options:
            raise InputError("the openai engine needs the server's URL: --engine openai:http://HOST:PORT/v1 "
                             "or url=... in the variant")
        self.url: str = self.options["url"]
        self.root = re.sub(r"/v1$", "", self.url)
        self.k: int = self.options.get("logprobs", 20)
        self._prompt_format = self.options.get("prompt_format", "auto")
        self._tokenize_endpoint: tuple[str, str] | None = None
        self._gguf = None
        listing = self._request("GET", self.url + "/models", None)
        served = [m.get("id") for m in listing.get("data", []) if isinstance(m, dict)]
        if not served:
            raise EngineError(f"{self.url}/models lists no model; is this an OpenAI-compatible server?")
        if self.model is None:
            self.model = served[0]
        elif self.model not in served:
            raise InputError(f"model {self.model!r} is not served at {self.url}; served: {', '.join(served)}")
        self.served = served
        if self._prompt_format == "auto":
            # One token-id prompt, not retried: an error status means the server wants text.
            try:
                self._complete({"prompt": [0], "max_tokens": 1}, retries=0)
                self._prompt_format = "ids"
            except HttpStatusError:
                self._prompt_format = "text"
        if "tokenizer" in self.options:
            from logitlab.engines.tokenizers import GgufTokenizer

            self._gguf = GgufTokenizer(self.options["tokenizer"])

    # -- HTTP -------------------------------------------------------------------
    def _request(self, method: str, url: str, body: dict | None, retries: int | None = None) -> dict:
        """One JSON request with retries; returns the decoded JSON object.

        Raises:
            HttpStatusError: a 4xx answer (not retried), or a 408/429/5xx answer after the retries.
            EngineError: no answer after the retries, or an answer that is not JSON.
        """
        retries = self.options.get("retries", 3) if retries is None else retries
        delay = self.options.get("backoff", 0.5)
        timeout = self.options.get("timeout", 120.0)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self.options.get("api_key") or os.environ.get("OPENAI_API_KEY")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        last = "no attempt"
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(delay * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace").strip().replace("\n", " ")
                last = f"HTTP {exc.code}: {detail}"
                if (exc.code in (408, 429) or exc.code >= 500) and attempt < retries:
                    continue
                raise HttpStatusError(f"{method} {url} answered {last}", exc.code) from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError,
                    http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
                continue
            try:
                return json.loads(raw)
            except ValueError:
                raise EngineError(f"{method} {url} answered something that is not JSON: {raw[:120]!r}") from None
        raise EngineError(f"openai server {url} did not answer after {retries + 1} attempt(s) "
                          f"(timeout {timeout:g} s each): {last}")

    def _complete(self, body: dict, retries: int | None = None) -> tuple[dict, float]:
        start = time.perf_counter()
        data = self._request("POST", self.url + "/completions", {"model": self.model, "temperature": 0, **body},
                             retries)
        seconds = time.perf_counter() - start
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{self.url}/completions answered without choices: {str(data)[:200]}")
        return data, seconds

    # -- tokenizer ----------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        if self._gguf is not None:
            return self._gguf.tokenize(text)
        for path, body in (("/extras/tokenize", {"input": text, "model": self.model}),
                           ("/tokenize", {"model": self.model, "prompt": text, "content": text,
                                          "add_special": True})):
            if self._tokenize_endpoint not in (None, path):
                continue
            try:
                data = self._request("POST", self.root + path, body)
            except HttpStatusError:
                continue
            if isinstance(data.get("tokens"), list):
                self._tokenize_endpoint = path
                return [int(t["id"] if isinstance(t, dict) else t) for t in data["tokens"]]
        raise InputError(f"the server at {self.root} has no tokenize endpoint (tried /extras/tokenize, /tokenize): "
                         "pass tokenizer=PATH.gguf in the variant")

    def detokenize(self, tokens: Sequence[int]) -> str:
        if self._gguf is not None:
            return self._gguf.detokenize(tokens)
        ids = [int(t) for t in tokens]
        for path, body, key in (("/extras/detokenize", {"tokens": ids, "model": self.model}, "text"),
                                ("/detokenize", {"tokens": ids, "model": self.model}, "prompt"),
                                ("/detokenize", {"tokens": ids}, "content")):
            try:
                data = self._request("POST", self.root + path, body)
            except HttpStatusError:
                continue
            if isinstance(data.get(key), str):
                return data[key]
        raise InputError(f"the server at {self.root} has no detokenize endpoint (tried /extras/detokenize, "
                         "/detokenize): pass tokenizer=PATH.gguf in the variant")

    @property
    def n_vocab(self) -> int:
        return 0  # unknown: servers return top-k log-probabilities only

    # -- the workload ----------------------------------------------------------------
    def _post_prompt(self, sequence: list[int], body: dict) -> tuple[dict, float, str]:
        """POST a completion whose prompt is ``sequence``, as token ids or as its text."""
        kind = self._prompt_format
        prompt = sequence if kind == "ids" else self.detokenize(sequence)
        data, seconds = self._complete({"prompt": prompt, **body})
        return data, seconds, kind

    def _generate(self, prompt: list[int], n_decode: int) -> tuple[list[int], StepTiming | None]:
        body = {"max_tokens": n_decode, "logprobs": 1, "echo": False, "repeat_penalty": 1.0,
                "frequency_penalty": 0.0, "presence_penalty": 0.0}
        data, seconds, kind = self._post_prompt(prompt, body)
        choice = data["choices"][0]
        pieces = (choice.get("logprobs") or {}).get("tokens") or []
        n_tokens = int((data.get("usage") or {}).get("completion_tokens") or len(pieces))
        timing = StepTiming("decode", n_tokens, seconds) if n_tokens else None
        if pieces and all(_TOKEN_ID.match(str(p)) for p in pieces):
            return [int(_TOKEN_ID.match(p).group(1)) for p in pieces], timing
        text = choice.get("text") or ""
        if not text:
            return [], timing
        full = self.tokenize(self.detokenize(prompt) + text)
        if full[:len(prompt)] != prompt:
            raise EngineError("the server's completion does not re-tokenize after the prompt (the prompt's last "
                              "token merges with the completion); the server must return token ids "
                              "(vLLM: return_tokens_as_token_ids) or use another prompt")
        return full[len(prompt):], timing

    def _reset(self, sequence: list[int]) -> None:
        """A one-token request sharing no prefix with ``sequence`` (see ``fresh``)."""
        if self._prompt_format == "text":
            first = self.detokenize(sequence[:1]).lstrip()[:1]
            self._complete({"prompt": "0" if first != "0" else "1", "max_tokens": 1})
        else:
            self._complete({"prompt": [sequence[0] - 1 if sequence[0] > 0 else sequence[0] + 1], "max_tokens": 1})

    def _score(self, sequence: list[int]):
        from logitlab.engines.topk import TopKRows

        data, seconds, kind = self._post_prompt(sequence, {"max_tokens": 1, "logprobs": self.k, "echo": True})
        logprobs = data["choices"][0].get("logprobs")
        entries = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(entries, list) or not any(isinstance(e, dict) for e in entries):
            raise EngineError(f"the server at {self.url} answered without logprobs: it must support "
                              "/completions with echo=true and logprobs=k (prompt log-probabilities)")
        n = len(sequence)
        hint = (": its tokenization of the text differs from logitlab's; use prompt_format=ids or "
                "tokenizer=PATH.gguf" if kind == "text" else "")
        counted = (data.get("usage") or {}).get("prompt_tokens")
        if counted is not None and int(counted) != n:
            raise EngineError(f"the server counted {counted} prompt tokens in a sequence of {n}{hint}")
        if not n - 1 <= len(entries) <= n + 1:
            raise EngineError(f"the server returned {len(entries)} log-probability entries for a sequence of {n} "
                              f"tokens (expected {n - 1} to {n + 1}){hint}")
        # N+1 entries: the OpenAI layout (entry j = the distribution that chose token j, i.e. after
        # position j-1; the last is the generated token's). N or N-1: llama-cpp-python's layout
        # (entry j = after position j; it drops the BOS entry, and the generated one on EOS).
        offset = -1 if len(entries) == n + 1 else 0
        rows: list[dict | None] = [None] * n
        for j, entry in enumerate(entries):
            position = j + offset
            if 0 <= position < n and isinstance(entry, dict) and entry:
                rows[position] = {_key(token): float(value) for token, value in entry.items()}
        return TopKRows.from_mappings(rows, self.k), seconds

    def run_workload(self, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None) -> Any:
        """Generate (reference) or take ``replay``, then score the whole sequence; returns a ``RunOutput``.

        ``logits`` is empty (``(n_positions, 0)``) and ``topk`` holds the data.
        Timings: ``prefill`` = the scoring request over all positions,
        ``decode`` = the greedy completion request (wall time, including HTTP).

        Raises:
            EngineError: the server failed, stopped answering, or answered without logprobs.
        """
        from logitlab.engines.workload import RunOutput

        prompt = [int(t) for t in prompt_ids]
        timings: list[StepTiming] = []
        if replay is None:
            generated, timing = self._generate(prompt, n_decode)
        else:
            generated = [int(t) for t in replay[:n_decode]]
            timing = self._generate(prompt, n_decode)[1] if self.options.get("decode_timing", True) else None
        sequence = prompt + generated
        if self.options.get("fresh", True):
            self._reset(sequence)
        topk, seconds = self._score(sequence)
        timings.append(StepTiming("prefill", len(sequence), seconds))
        if timing is not None:
            timings.append(timing)
        return RunOutput(np.empty((len(sequence), 0), np.float32), sequence, generated, timings, topk=topk)

    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "engine_version": f"OpenAI-compatible server at {self.url}",
            "url": self.url,
            "model": self.model,
            "served_models": self.served,
            "model_sha256": "n/a (remote server)",
            "options": {k: v for k, v in self.options.items() if k != "api_key"},
            "data": f"top-{self.k} log-probabilities per position (not logits)",
            "prompt_format": self._prompt_format,
            "timing": "prefill: wall time of the echo scoring request over all positions; decode: wall time of a "
                      "greedy completion of n_decode tokens (HTTP included)",
        }


def _key(token: str) -> int | str:
    match = _TOKEN_ID.match(token)
    return int(match.group(1)) if match else token
