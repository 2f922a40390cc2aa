"""Background requests: other requests in flight on a server while a measured one runs.

The ``concurrent-requests`` ability of the ``openai`` engine
(:meth:`~logitlab.engines.openai.OpenAIEngine.background_requests`): ``count``
threads, each sending greedy completions of its own prompt (prose unlike the
measured one) one after another until the block ends, so that ``count``
requests are in flight whenever the measured request is. A server that batches
its slots then evaluates the measured request's tokens in one batch with
theirs.

On llama-server each thread is pinned to its own slot (``id_slot`` 1..count),
so that none of them takes slot 0, where the measured requests keep their
prefix cache (:mod:`~logitlab.engines.servers.dialects`): the server needs
``count + 1`` slots (``--parallel``, ``-np``). Other servers schedule the
requests themselves.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

from logitlab.engines.servers.dialects import GREEDY
from logitlab.engines.servers.http import ServerClient
from logitlab.errors import InputError

__all__ = ["BACKGROUND_PROMPTS", "BackgroundRequests", "check_slots"]

#: What the background requests complete, one prompt per thread (in turn when there are more threads).
BACKGROUND_PROMPTS = (
    "Write a short story about a cat who learns to play the piano.",
    "List the planets of the solar system and one fact about each.",
    "Explain how a bicycle works to a child.",
    "Describe the smell of rain on a summer afternoon.",
)


def check_slots(count: int, slots: int | None, url: str) -> None:
    """Raise InputError when a llama-server with ``slots`` slots cannot run ``count`` requests beside the
    measured one (slot 0); ``slots`` None (a server that does not say) passes."""
    if slots is not None and slots < count + 1:
        raise InputError(f"the server at {url} has {slots} slot(s): {count} background request(s) beside the "
                         f"measured one need {count + 1} (llama-server --parallel {count + 1})")


class BackgroundRequests:
    """A context manager: ``count`` threads sending greedy completions until the block ends.

    Args:
        make_client: a fresh :class:`~logitlab.engines.servers.http.ServerClient` per thread (no retries are
            shared with the measured requests).
        server_kind: the server's kind (``llama-server``: native ``/completion`` pinned to slots 1..count).
        model: the served model name.
        prompts: what the threads complete, as the server takes prompts (token ids or text); thread i sends
            ``prompts[i % len(prompts)]`` (the engine passes :data:`BACKGROUND_PROMPTS` tokenized).
        count: requests in flight (>= 1).
        n_predict: tokens each background completion generates.

    Attributes:
        completed: background requests answered (while the block ran, and the last ones after it).
        tokens: tokens they generated, where the server says.
        errors: the first failure of each thread that failed (its message), which stopped that thread.
    """

    def __init__(self, make_client: Callable[[], ServerClient], server_kind: str, model: str | None,
                 prompts: Sequence[Any], count: int, n_predict: int = 32):
        if count < 1:
            raise InputError(f"background requests: count must be at least 1, got {count}")
        self.make_client, self.server_kind, self.model, self.prompts = make_client, server_kind, model, list(prompts)
        self.count, self.n_predict = count, n_predict
        self.completed = 0
        self.tokens = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._started = threading.Barrier(count + 1)
        self._threads: list[threading.Thread] = []

    def _request(self, client: ServerClient, index: int) -> int:
        """One background completion; the tokens it generated (0 where the server does not say)."""
        prompt = self.prompts[index % len(self.prompts)]
        if self.server_kind == "llama-server":
            data, _ = client.post("/completion", {"prompt": prompt, "n_predict": self.n_predict, "id_slot": index + 1,
                                                  "cache_prompt": False, **GREEDY}, root=True)
            return int(data.get("tokens_predicted") or 0)
        data, _ = client.post("/completions", {"model": self.model, "prompt": prompt, "max_tokens": self.n_predict,
                                               **GREEDY})
        return int((data.get("usage") or {}).get("completion_tokens") or 0)

    def _loop(self, index: int) -> None:
        client = self.make_client()
        self._started.wait()
        while not self._stop.is_set():
            try:
                tokens = self._request(client, index)
            except Exception as exc:  # noqa: BLE001 - recorded, and the measured side reads it in summary()
                with self._lock:
                    self.errors.append(f"background request {index + 1}: {exc}")
                return
            with self._lock:
                self.completed += 1
                self.tokens += tokens

    def __enter__(self) -> "BackgroundRequests":
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"background-{i + 1}")
                         for i in range(self.count)]
        for thread in self._threads:
            thread.start()
        self._started.wait()  # every thread is about to send its first request
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def summary(self) -> dict[str, Any]:
        """``count``, ``completed``, ``tokens`` and ``errors`` (see the class), as JSON types."""
        with self._lock:
            return {"count": self.count, "completed": self.completed, "tokens": self.tokens,
                    "errors": list(self.errors)}
