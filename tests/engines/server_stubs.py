"""In-process stub servers for what no server run here does.

They answer in the layouts documented by servers not run here (vLLM's
``prompt_logprobs``, SGLang's ``/generate`` with ``return_logprob``, TGI's
``/generate`` with ``top_n_tokens``), and as broken servers do: rows shifted by
one position, no log-probabilities at all. Real servers (llama-server,
llama-cpp-python's) are tested against in the other files.

Real vLLM, SGLang and TGI answers, taken from public material (issues, pull
requests, TGI's integration-test snapshots: ``tests/data/servers/SOURCES.md``),
are replayed by ``test_openai_real_responses.py``, the readers called directly or
the body served as recorded by :class:`ReplayStub`; they checked these layouts
against the real ones (and found TGI 3's empty ``prefill``, see ``TgiStub``).

The stub "model": after a prefix of token ids, the next token is
``(last + 1) % VOCAB`` at log-probability -0.25, then ``(last + 8) % VOCAB`` at
-2.0 and ``(last + 10) % VOCAB`` at -3.5 (a confident top-1: a 1.75-nat gap).
Tokenizer: one token per printable character, id = ``ord(c) - 32``.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

VOCAB = 90


def dist(prefix: list[int]) -> dict[int, float]:
    """The stub's top-3 after ``prefix`` (see the module docstring)."""
    last = prefix[-1]
    return {(last + 1) % VOCAB: -0.25, (last + 8) % VOCAB: -2.0, (last + 10) % VOCAB: -3.5}


def greedy(prompt: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(max(dist(prompt + out).items(), key=lambda kv: kv[1])[0])
    return out


def text_of(ids: list[int]) -> str:
    return "".join(chr(t + 32) for t in ids)


def ids_of(text: str) -> list[int]:
    return [ord(c) - 32 for c in text]


class Stub(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that takes token-id prompts: legacy layout, ``token_id:N`` keys, echo in the
    OpenAI layout (N+1 entries, the first null). Subclasses change one thing each."""

    requests: list = []
    version_path: str | None = None
    version: dict = {}

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, payload: Any, status: int = 200) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        type(self).requests.append((self.path, None))
        if self.path == "/v1/models":
            return self.send({"data": [{"id": "stub"}]})
        if self.path == self.version_path:
            return self.send(self.version)
        self.send({"detail": "Not Found"}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        handler = {"/tokenize": self.tokenize, "/detokenize": self.detokenize,
                   "/v1/completions": self.completions, "/generate": self.generate}.get(self.path)
        if handler is None:
            return self.send({"detail": "Not Found"}, 404)
        handler(body)

    # -- endpoints ---------------------------------------------------------------------
    def tokenize(self, body: dict) -> None:
        self.send({"tokens": ids_of(body.get("prompt") or body.get("content") or "")})

    def detokenize(self, body: dict) -> None:
        self.send({"prompt": text_of(body["tokens"])})

    def generate(self, body: dict) -> None:
        self.send({"detail": "Not Found"}, 404)

    def key(self, token: int) -> str:
        return f"token_id:{token}"

    def top(self, prefix: list[int]) -> dict[str, float]:
        return {self.key(t): v for t, v in dist(prefix).items()}

    def completions(self, body: dict) -> None:
        prompt = body["prompt"]
        if not isinstance(prompt, list):
            return self.send({"error": "token ids only"}, 400)
        generated = greedy(prompt, body["max_tokens"])
        logprobs = self.logprobs(prompt, generated, body) if body.get("logprobs") else None
        choice = {"text": text_of(generated), "logprobs": logprobs}
        choice.update(self.extra_choice(prompt, body))
        self.send({"choices": [choice], "usage": {"completion_tokens": len(generated)}})

    def logprobs(self, prompt: list[int], generated: list[int], body: dict) -> dict | None:
        seq = prompt + generated
        start = 0 if body.get("echo") else len(prompt)
        tokens = seq[start:]
        tops = [None if i == 0 else self.top(seq[:i]) for i in range(start, len(seq))]
        values = [None if top is None else top.get(self.key(t), -9.0) for t, top in zip(tokens, tops)]
        return {"tokens": [self.key(t) for t in tokens], "token_logprobs": values, "top_logprobs": tops}

    def extra_choice(self, prompt: list[int], body: dict) -> dict:
        return {}


class VllmStub(Stub):
    """vLLM's documented ``prompt_logprobs``: one ``{"<id>": {logprob, rank, decoded_token}}`` per prompt token
    (the first null), each holding the prompt token itself; ``GET /version``. ``shift`` moves the list by that
    many positions (a broken server)."""

    version_path = "/version"
    version = {"version": "0.0.0-stub"}
    shift = 0

    def extra_choice(self, prompt: list[int], body: dict) -> dict:
        if not body.get("prompt_logprobs"):
            return {}
        entries: list = [None]
        for j in range(1, len(prompt)):
            src = j + self.shift
            if not 1 <= src < len(prompt):
                entries.append(None)
                continue
            top = dist(prompt[:src])
            held = {**top, prompt[src]: top.get(prompt[src], -7.0)}
            entries.append({str(t): {"logprob": v, "rank": 1, "decoded_token": text_of([t])} for t, v in held.items()})
        return {"prompt_logprobs": entries}


class SglangStub(Stub):
    """SGLang's native ``/generate`` with ``return_logprob``, ``logprob_start_len`` 0 and ``top_logprobs_num``;
    its OpenAI completions key tokens by text; ``GET /server_info``."""

    version_path = "/server_info"
    version = {"version": "0.0.0-stub", "model_path": "stub"}

    def key(self, token: int) -> str:
        return text_of([token])

    def generate(self, body: dict) -> None:
        ids = body["input_ids"]
        n = body["sampling_params"]["max_new_tokens"]
        out = greedy(ids, n)
        seq = ids + out

        def triples(prefix: list[int]) -> list:
            return [[v, t, None] for t, v in dist(prefix).items()]

        meta = {"prompt_tokens": len(ids), "completion_tokens": n}
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = [[None if j == 0 else dist(ids[:j]).get(t, -9.0), t, None]
                                            for j, t in enumerate(ids)]
            meta["input_top_logprobs"] = [None] + [triples(ids[:j]) for j in range(1, len(ids))]
            meta["output_token_logprobs"] = [[dist(seq[:len(ids) + i])[t], t, None] for i, t in enumerate(out)]
            meta["output_top_logprobs"] = [triples(seq[:len(ids) + i]) for i in range(len(out))]
        self.send({"text": text_of(out), "output_ids": out, "meta_info": meta})


class TgiStub(Stub):
    """TGI's documented native API: ``GET /info``, ``POST /tokenize`` (a list), ``POST /generate`` with text
    ``inputs``, ``details``, ``decoder_input_details`` (prefill ids and their log-probabilities, no top-n) and
    ``top_n_tokens`` (generated tokens only; TGI 3.0 and later fill ``prefill`` only when started with
    ``--enable-prefill-logprobs``, else it is ``[]``). No ``/v1/models``, no detokenize endpoint: the engine needs
    ``tokenizer=PATH.gguf``, so this stub tokenizes with the embedded model's GGUF vocabulary, and its model
    counts in English words (" one" → " two" → …), which re-tokenize to the same ids."""

    version_path = "/info"
    version = {"model_id": "stub/tgi", "version": "0.0.0-stub", "sha": None}
    WORDS = (" one", " two", " three", " four", " five", " six", " seven", " eight", " nine", " ten")
    _vocab: Any = None

    @classmethod
    def vocab(cls) -> Any:
        if TgiStub._vocab is None:
            from logitlab.engines.tokenizers import GgufTokenizer
            from logitlab.models import default_model_path

            TgiStub._vocab = GgufTokenizer(default_model_path())
        return TgiStub._vocab

    @classmethod
    def word_ids(cls) -> list[int]:
        return [cls.vocab().tokenize(w)[0] for w in cls.WORDS]

    @classmethod
    def dist(cls, prefix: list[int]) -> dict[int, float]:
        words = cls.word_ids()
        i = words.index(prefix[-1]) if prefix[-1] in words else -1
        return {words[(i + 1) % 10]: -0.25, words[(i + 3) % 10]: -2.0, words[(i + 5) % 10]: -3.5}

    def do_GET(self) -> None:
        type(self).requests.append((self.path, None))
        if self.path == "/info":
            return self.send(self.version)
        self.send({"detail": "Not Found"}, 404)

    def tokenize(self, body: dict) -> None:
        ids = self.vocab().tokenize(body["inputs"])
        self.send([{"id": t, "text": self.vocab().detokenize([t]), "start": 0, "stop": 0} for t in ids])

    def detokenize(self, body: dict) -> None:
        self.send({"detail": "Not Found"}, 404)

    def generate(self, body: dict) -> None:
        ids = self.vocab().tokenize(body["inputs"])
        p = body["parameters"]
        out: list[int] = []
        for _ in range(p["max_new_tokens"]):
            out.append(max(self.dist(ids + out).items(), key=lambda kv: kv[1])[0])
        seq = ids + out
        text = self.vocab().detokenize

        def item(t: int, v: float | None) -> dict:
            return {"id": t, "text": text([t]), "logprob": v, "special": False}

        details = {"finish_reason": "length", "generated_tokens": len(out),
                   "tokens": [item(t, self.dist(seq[:len(ids) + i])[t]) for i, t in enumerate(out)]}
        if p.get("decoder_input_details"):
            details["prefill"] = [item(t, None if j == 0 else self.dist(ids[:j]).get(t, -9.0))
                                  for j, t in enumerate(ids)]
        if p.get("top_n_tokens"):
            details["top_tokens"] = [[item(t, v) for t, v in self.dist(seq[:len(ids) + i]).items()]
                                     for i in range(len(out))]
        self.send({"generated_text": text(out), "details": details if p.get("details") else None})


class ContentStub(Stub):
    """llama-server's ``/v1/completions`` answer shape: ``logprobs.content[]`` items with ids, echo ignored.

    ``shifted``: its one-token answers score the prefix *without* its last token (a server whose rows are off
    by one position), while its longer completions are right."""

    shifted = False

    def completions(self, body: dict) -> None:
        prompt = body["prompt"]
        n = body["max_tokens"]
        generated = greedy(prompt, n)
        content = []
        for i, t in enumerate(generated):
            prefix = (prompt + generated)[:len(prompt) + i]
            if self.shifted and n == 1 and len(prefix) > 1:
                prefix = prefix[:-1]
            top = dist(prefix)
            content.append({"id": t, "token": text_of([t]), "logprob": top.get(t, -9.0),
                            "top_logprobs": [{"id": k, "token": text_of([k]), "logprob": v} for k, v in top.items()]})
        self.send({"choices": [{"text": text_of(generated), "logprobs": {"content": content} if body.get("logprobs")
                                else None}], "usage": {"completion_tokens": n, "prompt_tokens": len(prompt)}})


class DroppedEntryStub(Stub):
    """An echo in the OpenAI meaning (entry j chose token j) that leaves out the generated token's entry: N
    entries, which is also llama-cpp-python's count, where entry j is the row *after* token j."""

    def logprobs(self, prompt: list[int], generated: list[int], body: dict) -> dict | None:
        data = super().logprobs(prompt, generated, body)
        if body.get("echo"):
            data = {key: values[:len(prompt)] for key, values in data.items()}
        return data


class NoLogprobsStub(Stub):
    """Completions without any log-probabilities."""

    def logprobs(self, prompt: list[int], generated: list[int], body: dict) -> dict | None:
        return None


class ReplayStub(Stub):
    """Answers every ``POST`` to a path in ``bodies`` with that recorded body, whatever was asked (real servers'
    answers from public material: ``tests/data/servers/``, see its ``SOURCES.md``)."""

    bodies: dict = {}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        if self.path not in self.bodies:
            return self.send({"detail": "Not Found"}, 404)
        self.send(self.bodies[self.path])


@contextmanager
def stub_server(cls: type[Stub] = Stub, **attributes: Any) -> Iterator[tuple[str, type[Stub]]]:
    """Run ``cls`` on 127.0.0.1 (a free port) for a ``with`` block; yields its ``/v1`` URL and the handler class
    (its ``requests`` lists what was asked)."""
    handler = type(cls.__name__, (cls,), {"requests": [], **attributes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()
