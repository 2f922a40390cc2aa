"""An engine whose probe is vacuous by construction: llama.cpp with a decode step served from a stale prefix cache.

Registered as ``stale-llamacpp`` by ``register()`` (``unregister()`` takes it out again). A prefill stores each of
its rows under the tokens before that row; a decode step then returns the stored row for the tokens before it,
*ignoring the token it was fed* (it still runs llama.cpp, so the session's state stays what it would be). An
``invariance prefill-decode`` probe of it compares a prefill row with a copy of itself: bit-exact whatever the
decode kernels do, and the inverse control of ``--self-check`` (a planted decode token) is not seen. This is the
stale-cache bug class: a cache keyed on less than what the result depends on.

A worker process imports this module by its name (``stale_engine``): tests put ``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import numpy as np

from logitlab.engines import register_engine
from logitlab.engines.llamacpp import LlamaCppEngine, LlamaCppSession

NAME = "stale-llamacpp"


class StaleSession(LlamaCppSession):
    engine: "StaleLlamaCpp"

    def __init__(self, engine: "StaleLlamaCpp"):
        super().__init__(engine)
        self.history: list[int] = []

    def _decode(self, tokens: list[int]) -> np.ndarray:
        rows = super()._decode(tokens)
        before = list(self.history)
        self.history += tokens
        cache = self.engine.cache
        if len(tokens) > 1:  # a prefill: each row under the tokens before it
            for i in range(len(tokens)):
                cache[tuple(before + tokens[:i])] = rows[i].copy()
            return rows
        stale = cache.get(tuple(before))
        return rows if stale is None else stale[None, :].copy()


class StaleLlamaCpp(LlamaCppEngine):
    name = NAME

    def _load(self) -> None:
        self.cache: dict[tuple[int, ...], np.ndarray] = {}
        super()._load()

    def _open_session(self) -> StaleSession:
        return StaleSession(self)

    def describe(self) -> dict:
        return {**super().describe(), "engine": NAME}


def register() -> None:
    register_engine(NAME, "stale_engine:StaleLlamaCpp")


def unregister() -> None:
    from logitlab.engines import ENGINES

    ENGINES.pop(NAME, None)
