"""How to ask each kind of server for a greedy completion and for one next-token distribution.

Two requests every scoring mode builds on, in each server's own dialect:

``generate(prompt, n)``
    a greedy completion of ``n`` tokens with the top-k log-probabilities of
    each generated token (the reference run's decode tokens, the decode
    timing, and the *anchor* rows :mod:`~logitlab.engines.servers.alignment`
    checks the scoring rows against).
``step(prefix)``
    one next-token distribution after ``prefix`` (``max_tokens`` 1, top-k
    log-probabilities): the teacher-forced mode sends one per position.

Dialects:

``openai``
    ``POST /v1/completions`` (vLLM, SGLang, llama-cpp-python's server, any
    OpenAI-compatible server); either log-probability layout is read. vLLM is
    asked for ``token_id:N`` keys (``return_tokens_as_token_ids``).
``llama-server``
    llama.cpp's native ``POST /completion``: token-id prompts, ``n_probs``
    (not capped at 20), ids in every answer (``return_tokens``), the prefix
    cache (``cache_prompt``) pinned to slot 0 (``id_slot``) so that each
    teacher-forced request evaluates one new token on the KV cache of the
    previous one, and per-request ``timings`` (``prompt_n``: tokens evaluated,
    ``cache_n``: taken from the cache).
``tgi``
    TGI's native ``POST /generate``: text prompts (it takes no ids),
    ``details`` + ``top_n_tokens`` (top-k of generated tokens),
    ``decoder_input_details`` (the ids it tokenized the prompt into, checked
    against the ids meant; TGI 3.0 and later send them only when started with
    ``--enable-prefill-logprobs``). Written from TGI's documentation, not run
    here; real answers from TGI's own test snapshots are replayed in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from logitlab.engines.servers.alignment import check_named_tokens
from logitlab.engines.servers.http import ServerClient
from logitlab.engines.servers.layouts import Entry, completion_entries, llama_native_entries, tgi_entries
from logitlab.engines.topk import Key
from logitlab.errors import EngineError

__all__ = ["Generation", "Step", "Dialect", "dialect_for"]

#: Sampling settings that make every server's completion plain greedy.
GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}


@dataclass
class Generation:
    """A greedy completion.

    Attributes:
        tokens: the generated ids, when the server gives ids (else None: only ``text``).
        text: the generated text.
        entries: per generated token, its log-probability entry (``top``: the distribution that chose it).
        seconds: wall time of the request (HTTP included).
        n_tokens: tokens generated (the server's count where it gives one).
    """

    tokens: list[int] | None
    text: str
    entries: list[Entry]
    seconds: float
    n_tokens: int


@dataclass
class Step:
    """One next-token distribution.

    Attributes:
        top: its top-k ``{key: logprob}``.
        seconds: wall time of the request.
        evaluated: tokens the server evaluated for it (None where it does not say).
    """

    top: dict[Key, float] | None
    seconds: float
    evaluated: int | None


class Dialect:
    """A server's request shapes (see the module docstring). ``prompt_of`` turns ids into what it takes."""

    name = "openai"
    endpoint = "POST /v1/completions"

    def __init__(self, client: ServerClient, k: int, model: str | None, prompt_of: Callable[[list[int]], Any],
                 server_kind: str = "unknown"):
        self.client = client
        self.k = k
        self.model = model
        self.prompt_of = prompt_of
        self.server_kind = server_kind

    def completions(self, body: dict) -> tuple[dict, float]:
        data, seconds = self.client.post("/completions", {"model": self.model, **GREEDY, **body})
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{self.client.url}/completions answered without choices: {str(data)[:200]}")
        return data, seconds

    def extra(self) -> dict:
        """Extra body fields for ``/v1/completions`` on this server (vLLM: token ids as keys)."""
        return {"return_tokens_as_token_ids": True} if self.server_kind == "vllm" else {}

    def generate(self, prompt: list[int], n: int) -> Generation:
        data, seconds = self.completions({"prompt": self.prompt_of(prompt), "max_tokens": n, "logprobs": self.k,
                                  "echo": False, **self.extra()})
        choice = data["choices"][0]
        entries = completion_entries(choice)
        ids = [e.token for e in entries]
        tokens = ids if entries and all(isinstance(t, int) for t in ids) else None
        n_tokens = int((data.get("usage") or {}).get("completion_tokens") or len(entries))
        return Generation(tokens, choice.get("text") or "", entries, seconds, n_tokens)

    def step(self, prefix: list[int]) -> Step:
        data, seconds = self.completions({"prompt": self.prompt_of(prefix), "max_tokens": 1, "logprobs": self.k,
                                  "echo": False, **self.extra()})
        entries = completion_entries(data["choices"][0])
        timings = data.get("timings") or {}
        evaluated = timings.get("prompt_n")
        return Step(entries[0].top if entries else None, seconds, None if evaluated is None else int(evaluated))


class LlamaServerDialect(Dialect):
    name = "llama-server"
    endpoint = "POST /completion (llama-server native: n_probs, cache_prompt, id_slot 0)"

    def _native(self, prompt: list[int], n: int, cache: bool = True) -> tuple[dict, float]:
        body = {"prompt": [int(t) for t in prompt], "n_predict": n, "n_probs": self.k, "cache_prompt": cache,
                "id_slot": 0, "return_tokens": True, **GREEDY}
        return self.client.post("/completion", body, root=True)

    def generate(self, prompt: list[int], n: int, cache: bool = True) -> Generation:
        """``cache`` False: ``cache_prompt`` off, the whole prompt evaluated (a prefix-cache miss)."""
        data, seconds = self._native(prompt, n, cache)
        entries = llama_native_entries(data)
        tokens = [int(t) for t in data.get("tokens") or []]
        return Generation(tokens, data.get("content") or "", entries, seconds,
                          int(data.get("tokens_predicted", len(tokens))))

    def step(self, prefix: list[int]) -> Step:
        data, seconds = self._native(prefix, 1)
        if data.get("tokens_evaluated") is not None and int(data["tokens_evaluated"]) != len(prefix):
            raise EngineError(f"llama-server evaluated a prompt of {data['tokens_evaluated']} tokens for a prefix of "
                              f"{len(prefix)} (truncated? raise its context, -c)")
        entries = llama_native_entries(data)
        evaluated = (data.get("timings") or {}).get("prompt_n")
        return Step(entries[0].top if entries else None, seconds, None if evaluated is None else int(evaluated))


class TgiDialect(Dialect):
    name = "tgi"
    endpoint = "POST /generate (TGI native: top_n_tokens, decoder_input_details)"

    def __init__(self, *args: Any, detokenize: Callable[[Sequence[int]], str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.detokenize = detokenize

    def _native(self, prompt: list[int], n: int) -> tuple[dict, float]:
        body = {"inputs": self.detokenize(prompt),
                "parameters": {"max_new_tokens": n, "details": True, "decoder_input_details": True,
                               "top_n_tokens": self.k, "do_sample": False}}
        data, seconds = self.client.post("/generate", body, root=True)
        details = data.get("details")
        if not isinstance(details, dict):
            raise EngineError(f"{self.client.root}/generate answered without details: {str(data)[:200]}")
        prefill, _ = tgi_entries(details)
        if not prefill and prompt:
            raise EngineError(f"{self.client.root}/generate answered decoder_input_details with no prefill tokens: "
                              "TGI 3.0 and later return them only when started with --enable-prefill-logprobs "
                              "(needed here to check the ids TGI tokenized the prompt text into); restart it so")
        check_named_tokens([e.token for e in prefill], prompt, where="TGI's decoder_input_details (the ids it "
                           "tokenized the prompt text into)")
        if len(prefill) != len(prompt):
            raise EngineError(f"TGI tokenized the prompt text into {len(prefill)} tokens, {len(prompt)} were meant")
        return data, seconds

    def generate(self, prompt: list[int], n: int) -> Generation:
        data, seconds = self._native(prompt, n)
        _, generated = tgi_entries(data["details"])
        return Generation([int(e.token) for e in generated], data.get("generated_text") or "", generated, seconds,
                          int(data["details"].get("generated_tokens", len(generated))))

    def step(self, prefix: list[int]) -> Step:
        data, seconds = self._native(prefix, 1)
        _, generated = tgi_entries(data["details"])
        return Step(generated[0].top if generated else None, seconds, None)


def dialect_for(server_kind: str) -> type[Dialect]:
    """The dialect class for a :class:`~logitlab.engines.servers.identity.ServerInfo` kind."""
    return {"llama-server": LlamaServerDialect, "tgi": TgiDialect}.get(server_kind, Dialect)
