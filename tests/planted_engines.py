"""Fake engines with one planted fault each, that one invariance-matrix axis alone must find.

``fake-verify`` (:class:`VerifyBumpEngine`)
    The fake engine (``conftest.FakeEngine``) whose sessions have a verify kernel of their own (a ``verify``
    hook, as :func:`~logitlab.experiments.verify.run.verify_call` uses): it raises every 7th logit of every row by
    :data:`BUMP`. Prefill and decode are the fake's own bits: only the ``verify`` axis (M=1 vs M=K) can see it.
``fake-widest`` (:class:`WidestBatchEngine`)
    The fake engine whose logit 2 of every row moves with the widest forward (tokens in one call) the engine has
    run so far, as a compute buffer sized once to the largest batch would change a kernel's blocking: a process
    that has served a longer prompt computes the same run differently. Repeated runs of one prompt, its decode
    steps and its verify blocks (each probe loads its own engine) never widen it past that prompt: only the
    ``process`` axis (a fresh process vs one warmed on another, longer prompt) can see it.

Use :func:`registered` (a context manager); a worker process imports this module by its name
(``planted_engines``) from ``tests/``, which is on the supervised worker's path as ``conftest`` is.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from conftest import FakeEngine, FakeSession

#: Added to every 7th logit of every verify row (``fake-verify``).
BUMP = np.float32(1e-3)
#: Added to logit 2 of every row per token of the widest forward so far (``fake-widest``).
WIDEST_STEP = np.float32(1e-4)


class VerifySession(FakeSession):
    def verify(self, tokens: list[int]) -> np.ndarray:
        """The M=K verify path: the decode rows, every 7th logit raised by :data:`BUMP`."""
        rows = self.decode(tokens)
        rows[:, ::7] += BUMP
        return rows


class VerifyBumpEngine(FakeEngine):
    name = "fake-verify"

    def _open_session(self) -> FakeSession:
        self.sessions_opened += 1
        return VerifySession(self)


class WidestSession(FakeSession):
    def _decode(self, tokens: list[int]) -> np.ndarray:
        self.engine.widest = max(self.engine.widest, len(tokens))
        rows = super()._decode(tokens)
        rows[:, 2] += WIDEST_STEP * np.float32(self.engine.widest)
        return rows


class WidestBatchEngine(FakeEngine):
    name = "fake-widest"

    def _load(self) -> None:
        super()._load()
        self.widest = 0

    def _open_session(self) -> FakeSession:
        self.sessions_opened += 1
        return WidestSession(self)


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """``fake-verify`` and ``fake-widest`` in the engine registry while the block runs."""
    from logitlab.engines import ENGINES, register_engine

    names = {"fake-verify": "planted_engines:VerifyBumpEngine", "fake-widest": "planted_engines:WidestBatchEngine"}
    for name, target in names.items():
        register_engine(name, target)
    try:
        yield
    finally:
        for name in names:
            ENGINES.pop(name, None)
