"""Scoring modes: four ways to get the top-k log-probabilities of every position of a sequence from a server.

A *scoring* of a sequence of N tokens returns N rows: row i is the top-k of
the distribution after position i (the one that predicts token i+1), as
``{key: logprob}``, None where the server gives none.

``prompt_logprobs`` (vLLM)
    one ``POST /v1/completions`` with vLLM's extra parameter
    ``prompt_logprobs=k``: entry j of ``choices[0].prompt_logprobs`` scores
    prompt token j (row j-1) and holds that token (checked); the last row is
    the generated token's.
``return_logprob`` (SGLang)
    one ``POST /generate`` with ``input_ids``, ``return_logprob``,
    ``logprob_start_len`` 0, ``top_logprobs_num`` k: ``meta_info.input_top_logprobs[j]``
    is row j-1, ``input_token_logprobs[j]`` names token j (checked); the last
    row is ``output_top_logprobs[0]``.
``echo`` (OpenAI's legacy completions; llama-cpp-python's server, vLLM)
    one ``POST /v1/completions`` with ``echo`` true, ``max_tokens`` 1,
    ``logprobs`` k. With N+1 entries (OpenAI: one per prompt token, the first
    ``null``, then the generated token's) entry j is row j-1; with N or N-1
    (llama-cpp-python) entry j is row j (its first is ``null``).
``teacher-forced`` (any server that returns log-probabilities of generated tokens: llama-server, TGI, …)
    N requests: for each position i, the prefix (the first i+1 tokens,
    prompt then replayed decode tokens) with ``max_tokens`` 1 and k
    log-probabilities; the generated token's top-k is row i. On a server with
    a prefix cache (llama-server) each request evaluates one new token on the
    previous request's KV cache: every row comes from an M=1 evaluation. The
    server's count of tokens evaluated per request is recorded where it gives
    one.

Whichever mode is used, the rows are checked against the server's own greedy
completion (:mod:`~logitlab.engines.servers.alignment`) before they are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from logitlab.engines.servers.alignment import check_held_tokens, check_named_tokens
from logitlab.engines.servers.dialects import Dialect
from logitlab.engines.servers.http import HttpStatusError, ServerClient
from logitlab.engines.servers.layouts import completion_entries, sglang_entries, vllm_prompt_entries
from logitlab.engines.topk import Key
from logitlab.errors import EngineError

__all__ = ["MODES", "MODE_NAMES", "ModeUnsupported", "Scored", "ScoringMode", "preferred_modes"]


class ModeUnsupported(EngineError):
    """The server's answer does not carry what a scoring mode needs (the message says what was missing)."""

    @classmethod
    def refused(cls, exc: HttpStatusError) -> "ModeUnsupported":
        """The server refused the mode's request: its status and the start of its answer."""
        return cls(str(exc).split(" answered ", 1)[-1][:160])


@dataclass
class Scored:
    """One scoring of a sequence.

    Attributes:
        rows: per position, the top-k ``{key: logprob}`` after it (None: not returned).
        requests: requests sent for it.
        seconds: their summed wall time (s, HTTP included).
        evaluated: per request, the tokens the server says it evaluated (None where it does not say).
    """

    rows: list[dict[Key, float] | None]
    requests: int
    seconds: float
    evaluated: list[int | None]


@dataclass
class ModeContext:
    """What a mode needs from the engine: the client, the dialect, k, the model name and how prompts are sent."""

    client: ServerClient
    dialect: Dialect
    k: int
    model: str | None
    prompt_format: str
    prompt_of: Callable[[list[int]], Any]
    server_kind: str


class ScoringMode:
    """A way to score a sequence (see the module docstring)."""

    name: ClassVar[str] = ""
    #: requests per scoring, in words
    requests: ClassVar[str] = "1 request per scoring"

    def __init__(self, ctx: ModeContext):
        self.ctx = ctx

    @property
    def endpoint(self) -> str:
        return "POST /v1/completions"

    def score(self, sequence: list[int]) -> Scored:
        """Rows of every position of ``sequence``.

        Raises:
            ModeUnsupported: the server's answer lacks this mode's data.
            EngineError: the answer has the data but does not fit the sequence.
        """
        raise NotImplementedError

    def _hint(self) -> str:
        return (": its tokenization of the text differs from logitlab's; use prompt_format=ids or "
                "tokenizer=PATH.gguf" if self.ctx.prompt_format == "text" else "")

    def _post_v1(self, body: dict) -> tuple[dict, float]:
        try:
            return self.ctx.dialect.completions(body)
        except HttpStatusError as exc:
            raise ModeUnsupported.refused(exc) from None


class EchoMode(ScoringMode):
    name = "echo"

    def score(self, sequence: list[int]) -> Scored:
        data, seconds = self._post_v1({"prompt": self.ctx.prompt_of(sequence), "max_tokens": 1,
                                       "logprobs": self.ctx.k, "echo": True, **self.ctx.dialect.extra()})
        entries = completion_entries(data["choices"][0])
        n = len(sequence)
        if sum(1 for e in entries if e.top) <= 1:
            raise ModeUnsupported(f"echo=true gave log-probabilities of {len(entries)} token(s) for a prompt of "
                                  f"{n} (the generated token only: echo ignored)" if entries else
                                  "answered without logprobs")
        counted = (data.get("usage") or {}).get("prompt_tokens")
        if counted is not None and int(counted) != n:
            raise EngineError(f"the server counted {counted} prompt tokens in a sequence of {n}{self._hint()}")
        if not n - 1 <= len(entries) <= n + 1:
            raise EngineError(f"the server returned {len(entries)} log-probability entries for a sequence of {n} "
                              f"tokens (expected {n - 1} to {n + 1}){self._hint()}")
        # N+1 entries: the OpenAI layout (entry j chose token j, i.e. it is the row after position j-1; the last is
        # the generated token's). N or N-1: llama-cpp-python's (entry j = after position j; it drops the BOS
        # entry, and the generated one). Which rule holds is checked against the generation afterwards.
        offset = -1 if len(entries) == n + 1 else 0
        if offset == -1 and all(isinstance(e.token, int) for e in entries[:n]):
            check_named_tokens([e.token for e in entries[:n]], sequence, where="the echoed tokens")
        rows: list[dict | None] = [None] * n
        for j, entry in enumerate(entries):
            if 0 <= j + offset < n and entry.top:
                rows[j + offset] = entry.top
        return Scored(rows, 1, seconds, [None])


class PromptLogprobsMode(ScoringMode):
    name = "prompt_logprobs"

    def score(self, sequence: list[int]) -> Scored:
        data, seconds = self._post_v1({"prompt": self.ctx.prompt_of(sequence), "max_tokens": 1,
                                       "logprobs": self.ctx.k, "prompt_logprobs": self.ctx.k,
                                       **self.ctx.dialect.extra()})
        choice = data["choices"][0]
        listed = choice.get("prompt_logprobs", data.get("prompt_logprobs"))
        if not isinstance(listed, list):
            raise ModeUnsupported("no choices[0].prompt_logprobs in the answer")
        n = len(sequence)
        if len(listed) != n:
            raise EngineError(f"prompt_logprobs has {len(listed)} entries for a prompt of {n} tokens{self._hint()}")
        entries = vllm_prompt_entries(listed)
        check_held_tokens([e.top for e in entries], sequence, where="prompt_logprobs")
        generated = completion_entries(choice)
        rows: list[dict | None] = [entry.top for entry in entries[1:]]
        rows.append(generated[0].top if generated else None)
        return Scored(rows, 1, seconds, [None])


class ReturnLogprobMode(ScoringMode):
    name = "return_logprob"

    @property
    def endpoint(self) -> str:
        return "POST /generate (SGLang native: return_logprob, logprob_start_len 0, top_logprobs_num)"

    def score(self, sequence: list[int]) -> Scored:
        body = {"input_ids": [int(t) for t in sequence], "return_logprob": True, "logprob_start_len": 0,
                "top_logprobs_num": self.ctx.k, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        try:
            data, seconds = self.ctx.client.post("/generate", body, root=True)
        except HttpStatusError as exc:
            raise ModeUnsupported.refused(exc) from None
        meta = data.get("meta_info")
        if not isinstance(meta, dict) or not meta.get("input_top_logprobs"):
            raise ModeUnsupported("no meta_info.input_top_logprobs in the answer")
        entries = sglang_entries(meta, "input")
        n = len(sequence)
        if len(entries) != n:
            raise EngineError(f"SGLang returned {len(entries)} input log-probability entries for {n} tokens")
        check_named_tokens([e.token for e in entries], sequence, where="SGLang's input_token_logprobs")
        output = sglang_entries(meta, "output")
        rows: list[dict | None] = [entry.top for entry in entries[1:]]
        rows.append(output[0].top if output else None)
        return Scored(rows, 1, seconds, [None])


class TeacherForcedMode(ScoringMode):
    name = "teacher-forced"
    requests = "1 request per position"

    @property
    def endpoint(self) -> str:
        return self.ctx.dialect.endpoint

    def score(self, sequence: list[int]) -> Scored:
        rows: list[dict | None] = []
        evaluated: list[int | None] = []
        seconds = 0.0
        for i in range(len(sequence)):
            try:
                step = self.ctx.dialect.step(sequence[:i + 1])
            except HttpStatusError as exc:
                if i == 0:
                    raise ModeUnsupported.refused(exc) from None
                raise
            if not step.top:
                if i == 0:
                    raise ModeUnsupported("answered without log-probabilities of the generated token")
                raise EngineError(f"{self.endpoint} answered without log-probabilities for the prefix of {i + 1} "
                                  "tokens (it gave them for shorter prefixes)")
            rows.append(step.top)
            evaluated.append(step.evaluated)
            seconds += step.seconds
        return Scored(rows, len(sequence), seconds, evaluated)


MODES: dict[str, type[ScoringMode]] = {m.name: m for m in (PromptLogprobsMode, ReturnLogprobMode, EchoMode,
                                                           TeacherForcedMode)}
MODE_NAMES = tuple(MODES)

#: Order in which modes are tried, per server kind: a server's own prompt-scoring first, teacher-forced last
#: (it works everywhere but costs one request per position).
_PREFERRED = {
    "llama-server": ("teacher-forced",),  # it has no prompt log-probabilities (echo is ignored)
    "vllm": ("prompt_logprobs", "echo", "teacher-forced"),
    "sglang": ("return_logprob", "echo", "teacher-forced"),
    "tgi": ("teacher-forced",),
}


def preferred_modes(server_kind: str) -> tuple[str, ...]:
    """The modes to try, in order, on a server of ``server_kind`` (all four for an unknown server)."""
    return _PREFERRED.get(server_kind, MODE_NAMES)
