"""Read log-probabilities out of inference servers' answers, whatever their layout.

Every reader returns a list of :class:`Entry`: one per token the answer
covers, with the token it scored, that token's log-probability and the top-k
``{key: logprob}`` mapping of the distribution that scored it (None where the
answer has none, e.g. the first token of an echoed prompt). A key is the token
id when the answer gives one (``id`` fields, vLLM's ``token_id:N`` strings,
SGLang's and TGI's ids), else the token's text.

Layouts read (which server writes which: see the README's server table):

``legacy``
    OpenAI's completions lists: ``logprobs.tokens``, ``token_logprobs``,
    ``top_logprobs`` (one ``{token: logprob}`` dict per token).
``content``
    the chat-style list ``logprobs.content[]`` of ``{id?, token, logprob,
    top_logprobs: [{id?, token, logprob}]}`` (llama-server on
    ``/v1/completions``); llama-server's native ``/completion`` writes the same
    items as ``completion_probabilities``.
``vllm-prompt``
    vLLM's ``prompt_logprobs``: one ``{"<id>": {logprob, rank,
    decoded_token}}`` dict per prompt token (the first ``null``); each dict
    holds the prompt token itself besides the top k.
``sglang``
    SGLang's ``meta_info``: ``*_token_logprobs`` as ``[logprob, id, text]``,
    ``*_top_logprobs`` as lists of those.
``tgi``
    TGI's ``details``: ``prefill`` and ``tokens`` as ``{id, text, logprob}``,
    ``top_tokens`` as lists of those (generated tokens only).

Nothing here sends requests.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from logitlab.engines.topk import Key
from logitlab.errors import EngineError

__all__ = ["Entry", "token_key", "completion_entries", "vllm_prompt_entries",
           "sglang_entries", "tgi_entries", "llama_native_entries"]

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


@dataclass(frozen=True)
class Entry:
    """One token of a server's log-probability list.

    Attributes:
        token: the token it scored (id or text; None when the answer does not say).
        logprob: that token's log-probability (nats; None when not given).
        top: the k largest ``{key: logprob}`` of the distribution that scored
            ``token``; None when the answer has none for it.
    """

    token: Key | None
    logprob: float | None
    top: dict[Key, float] | None


def token_key(token: Any, token_id: Any = None) -> Key:
    """The key of a token: its id when given (``token_id`` or a ``token_id:N`` string), else its text."""
    if token_id is not None and not isinstance(token_id, bool):
        return int(token_id)
    if isinstance(token, int) and not isinstance(token, bool):
        return token
    text = str(token)
    match = _TOKEN_ID.match(text)
    return int(match.group(1)) if match else text


def _value(x: Any) -> float:
    if x is None:
        return -math.inf
    return float(x)


def _items(top: Any) -> dict[Key, float] | None:
    """A top-k mapping from a dict ``{token: logprob}`` or a list of ``{id?, token, logprob}`` items."""
    if top is None:
        return None
    if isinstance(top, Mapping):
        return {token_key(t): _value(v) for t, v in top.items()}
    if isinstance(top, list):
        row = {}
        for item in top:
            if not isinstance(item, Mapping) or "logprob" not in item:
                raise EngineError(f"a top log-probability item without logprob: {str(item)[:120]}")
            row[token_key(item.get("token", item.get("text")), item.get("id"))] = _value(item["logprob"])
        return row
    raise EngineError(f"top log-probabilities of an unknown shape: {str(top)[:120]}")


def _content(items: Sequence[Any]) -> list[Entry]:
    entries = []
    for item in items:
        if not isinstance(item, Mapping):
            raise EngineError(f"a log-probability item that is not an object: {str(item)[:120]}")
        token = item.get("token", item.get("text"))
        entries.append(Entry(None if token is None and item.get("id") is None else token_key(token, item.get("id")),
                             None if item.get("logprob") is None else float(item["logprob"]),
                             _items(item.get("top_logprobs"))))
    return entries


def _legacy(logprobs: Mapping[str, Any]) -> list[Entry]:
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or [None] * len(tokens)
    tops = logprobs.get("top_logprobs")
    if tops is None:
        tops = [None] * len(tokens)
    n = max(len(tokens), len(tops))
    tokens = list(tokens) + [None] * (n - len(tokens))
    values = list(values) + [None] * (n - len(values))
    return [Entry(None if t is None else token_key(t), None if v is None else float(v), _items(top))
            for t, v, top in zip(tokens, values, list(tops) + [None] * (n - len(tops)))]


def completion_entries(choice: Mapping[str, Any]) -> list[Entry]:
    """The entries of an OpenAI completions choice, legacy or ``content`` layout (``[]`` without logprobs).

    Raises:
        EngineError: ``logprobs`` of neither layout.
    """
    logprobs = choice.get("logprobs")
    if not logprobs:
        return []
    if not isinstance(logprobs, Mapping):
        raise EngineError(f"logprobs of an unknown shape: {str(logprobs)[:120]}")
    if isinstance(logprobs.get("content"), list):
        return _content(logprobs["content"])
    if "top_logprobs" in logprobs or "tokens" in logprobs:
        return _legacy(logprobs)
    raise EngineError(f"logprobs of an unknown layout (keys {sorted(logprobs)}): expected tokens/token_logprobs/"
                      "top_logprobs lists or a content[] list")


def vllm_prompt_entries(prompt_logprobs: Sequence[Any]) -> list[Entry]:
    """vLLM's ``prompt_logprobs`` list: entry j scores prompt token j (the token is not marked; see
    :func:`~logitlab.engines.servers.alignment.check_held_tokens`)."""
    entries = []
    for item in prompt_logprobs:
        if item is None:
            entries.append(Entry(None, None, None))
            continue
        if not isinstance(item, Mapping):
            raise EngineError(f"a prompt_logprobs entry that is not an object: {str(item)[:120]}")
        top = {}
        for token, info in item.items():  # keys are token ids (JSON object keys, so strings)
            value = info.get("logprob") if isinstance(info, Mapping) else info
            top[int(token) if str(token).isdigit() else token_key(token)] = _value(value)
        entries.append(Entry(None, None, top))
    return entries


def _triples(items: Any) -> dict[Key, float]:
    row = {}
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) < 2:
            raise EngineError(f"an SGLang log-probability item that is not [logprob, id, text]: {str(item)[:120]}")
        row[int(item[1])] = _value(item[0])
    return row


def sglang_entries(meta_info: Mapping[str, Any], which: str) -> list[Entry]:
    """SGLang's ``meta_info`` for ``which`` = ``"input"`` or ``"output"`` tokens.

    ``{which}_token_logprobs[j] = [logprob, id, text]`` names token j;
    ``{which}_top_logprobs[j]`` is the top k that scored it (``null`` for the
    first input token).
    """
    tokens = meta_info.get(f"{which}_token_logprobs") or []
    tops = meta_info.get(f"{which}_top_logprobs") or []
    n = max(len(tokens), len(tops))
    entries = []
    for j in range(n):
        token = tokens[j] if j < len(tokens) else None
        top = tops[j] if j < len(tops) else None
        entries.append(Entry(None if token is None else int(token[1]),
                             None if token is None or token[0] is None else float(token[0]),
                             None if not top else _triples(top)))
    return entries


def tgi_entries(details: Mapping[str, Any]) -> tuple[list[Entry], list[Entry]]:
    """TGI's ``details``: (prefill entries, generated entries).

    Prefill entries name their token and its log-probability but carry no top k
    (TGI returns ``top_tokens`` for generated tokens only).
    """
    prefill = [Entry(int(t["id"]), None if t.get("logprob") is None else float(t["logprob"]), None)
               for t in details.get("prefill") or []]
    tops = details.get("top_tokens") or []
    generated = []
    for j, token in enumerate(details.get("tokens") or []):
        top = _items(tops[j]) if j < len(tops) else None
        generated.append(Entry(int(token["id"]), None if token.get("logprob") is None else float(token["logprob"]),
                               top))
    return prefill, generated


def llama_native_entries(data: Mapping[str, Any]) -> list[Entry]:
    """llama-server's native ``/completion`` answer: its ``completion_probabilities`` (``[]`` if absent)."""
    items = data.get("completion_probabilities")
    return _content(items) if isinstance(items, list) else []
