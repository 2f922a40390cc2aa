"""Shared fixtures: the real embedded model on llama.cpp, and a fake engine for harness edge cases."""

from __future__ import annotations

import time

import numpy as np
import pytest

from logitlab.engines import register_engine
from logitlab.engines.base import Engine, Session

SHORT_PROMPT = "The capital of France is Paris. The capital of Italy is"


class FakeSession(Session):
    engine: "FakeEngine"

    def _decode(self, tokens: list[int]) -> np.ndarray:
        rows = []
        time.sleep(self.engine.options.get("sleep", 0.0) * len(tokens))
        for offset, token in enumerate(tokens):
            position = self.n_past + offset
            row = np.random.default_rng(position * 7919 + token).normal(0, 3, self.engine.n_vocab)
            row = row.astype(np.float32) + np.float32(self.engine.options.get("offset", 0.0))
            if self.engine.options.get("leak"):  # state that outlives a session: the engine's session count
                row[0] += np.float32(1e-3 * self.engine.sessions_opened)
            if self.engine.options.get("nondeterministic"):  # differs on every run, whatever the isolation
                row[1] += np.float32(np.random.default_rng().uniform(0.5, 1.0) * 1e-3)
            if self.engine.options.get("nan_at") == position:
                row[3] = np.nan
            rows.append(row)
        return np.stack(rows)


class FakeEngine(Engine):
    """Deterministic pseudo-logits from (position, token): for harness edge cases only."""

    name = "fake"
    OPTIONS = {"offset": (float, "constant added to every logit"), "nan_at": (int, "position whose row gets a NaN"),
               "vocab": (int, "vocabulary size"), "leak": (int, "logits depend on sessions opened before"),
               "nondeterministic": (int, "random noise on every run"),
               "sleep": (float, "seconds slept per token (a known speed)")}

    def _load(self) -> None:
        self.sessions_opened = 0

    def _open_session(self) -> FakeSession:
        self.sessions_opened += 1
        return FakeSession(self)

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) % self.n_vocab for c in text]

    def detokenize(self, tokens) -> str:
        return "".join(chr(32 + t % 90) for t in tokens)

    @property
    def n_vocab(self) -> int:
        return int(self.options.get("vocab", 257))

    @property
    def n_ctx(self) -> int:
        return 4096


register_engine("fake", "conftest:FakeEngine")


@pytest.fixture(scope="session")
def model_path() -> str:
    from logitlab.models import default_model_path

    return str(default_model_path())


def pytest_terminal_summary(terminalreporter):
    """The fuzzers' per-reader tally (tests/fuzz/fuzzing.py), when fuzz tests ran."""
    import sys

    fuzzing = sys.modules.get("fuzzing")
    if fuzzing is not None:
        fuzzing.report(terminalreporter)
