"""Shared fixtures: the real embedded model on llama.cpp, and a fake engine for harness edge cases."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from logitlab.device import cpu_flags
from logitlab.engines import register_engine
from logitlab.engines.base import Engine, Session

SHORT_PROMPT = "The capital of France is Paris. The capital of Italy is"

#: Whether this CPU has AVX-512. Some real-engine tests pin figures (which positions flip, whether a batch is
#: bit-exact) that were measured on AVX-512 machines; llama.cpp's and torch's CPU kernels take other code paths on
#: a CPU without it (AVX2 only: measured on an AMD EPYC without AVX-512, 2026-12-02, where batched llama.cpp rows
#: differ from single-sequence rows by rounding and other positions flip). There those tests check the
#: property that holds on every CPU (the verdict class, flips only at near ties) instead of the pinned figure.
CPU_AVX512 = "avx512f" in cpu_flags()


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


# -- one marker for every test that loads an engine --------------------------------------------------------
#: CLI subcommands that load an engine (a test running one as a subprocess loads an engine too).
ENGINE_COMMANDS = {"ab", "verify", "invariance", "dump", "golden", "explain", "sweep", "bisect"}
#: Their subcommands that load none (``golden export-kld`` reads a golden's files and writes one).
ENGINE_FREE_SUBCOMMANDS = {("golden", "export-kld")}
#: Other programs that run a model.
MODEL_PROGRAMS = ("llama_cpp.server", "llama-server", "llama-perplexity", "llama-bench", "llama-quantize",
                  "onnxruntime_genai.models.builder")
#: Programs that read a binary without running it (``ldd llama-server`` loads no model).
INSPECTORS = {"ldd", "readelf", "nm"}


def _runs_a_model(argv) -> bool:
    if isinstance(argv, (str, bytes)):
        argv = str(argv).split()
    words = [str(a) for a in argv]
    if words and Path(words[0]).name in INSPECTORS:
        return False
    if any(p in w for w in words for p in MODEL_PROGRAMS):
        return True
    if "logitlab" in words:
        after = words[words.index("logitlab") + 1:]
        return (bool(after) and after[0] in ENGINE_COMMANDS and "--help" not in after
                and tuple(after[:2]) not in ENGINE_FREE_SUBCOMMANDS)
    return False


_LOADS: list[str] = []


def pytest_configure(config):
    """Watch, for the whole session, every real engine load in this process and every CLI or tool
    subprocess that runs a model; :func:`pytest_runtest_makereport` charges them to the running test
    (fixture setup included, so a module-scoped engine is charged to the first test that asks for it)."""
    import subprocess

    from logitlab.engines.base import Engine

    original_init, original_popen = Engine.__post_init__, subprocess.Popen.__init__

    def post_init(self):
        original_init(self)  # a load refused for bad options does not count
        if type(self).__module__.startswith("logitlab.engines."):
            _LOADS.append(f"{type(self).__name__} in this process")

    def popen(self, args, *a, **kw):
        if _runs_a_model(args):
            _LOADS.append(" ".join(map(str, [args] if isinstance(args, str) else args))[:120])
        return original_popen(self, args, *a, **kw)

    from logitlab.engines.supervised import SupervisedEngine

    original_supervised = SupervisedEngine.__init__

    def supervised_init(self, engine_cls, *a, **kw):  # a real adapter loaded in a supervised worker
        original_supervised(self, engine_cls, *a, **kw)
        if engine_cls.__module__.startswith("logitlab.engines."):
            _LOADS.append(f"{engine_cls.__name__} in a supervised worker")

    Engine.__post_init__ = post_init
    subprocess.Popen.__init__ = popen
    SupervisedEngine.__init__ = supervised_init


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail a test that ran a model without the ``engine`` marker, so that ``pytest -m "not engine"``
    really is the fast suite (maths, files, CLI errors)."""
    report = yield
    if call.when == "setup":
        item.stash.setdefault(_LOADS_KEY, [])
    loads = item.stash.setdefault(_LOADS_KEY, [])
    loads += _LOADS
    _LOADS.clear()
    if call.when == "teardown" and loads and item.get_closest_marker("engine") is None and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} runs a model ({loads[0]}) but is not marked @pytest.mark.engine: mark "
                           "it (or its module: pytestmark = pytest.mark.engine)")
    return report


_LOADS_KEY = pytest.StashKey[list]()


# -- no silent skips -------------------------------------------------------------------------------------------
#: Skip reasons that are facts of the machine, not of its setup: only the full-disk tests, which mount a real
#: tmpfs and so need root (or a container allowed to mount). The missing-device paths use a device that exists
#: nowhere (cuda:99) and the KLD accuracy tests an exact reference (mpmath): they run on every machine.
ALLOWED_SKIPS = ("mounting a small tmpfs needs root", "cannot mount a tmpfs here")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fuzzers' per-reader tally (tests/fuzz/fuzzing.py) when fuzz tests ran; the skipped tests by reason."""
    import sys

    fuzzing = sys.modules.get("fuzzing")
    if fuzzing is not None:
        fuzzing.report(terminalreporter)
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.section("skipped tests")
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        allowed = any(a in reason for a in ALLOWED_SKIPS)
        terminalreporter.write_line(f"{count:4d}  {reason}" + ("" if allowed else "   <- must not skip in CI"))


def pytest_collection_finish(session):
    """With LOGITLAB_WARM_CACHES=1 (``make test`` sets it), build the slow caches in the background at idle
    priority while the first tests run (``tests/warm_caches.py``)."""
    import warm_caches

    if session.items:
        warm_caches.start()


def pytest_sessionfinish(session, exitstatus):
    """With LOGITLAB_NO_SKIPS=1 (``make test`` sets it), a skip that is not a fact of the machine fails the run.
    The cache warm-up, if still running, is ended."""
    import os

    import warm_caches

    warm_caches.stop()

    if os.environ.get("LOGITLAB_NO_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    bad = [r for r in skipped
           if not any(a in (r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr)) for a in ALLOWED_SKIPS)]
    if bad and session.exitstatus == 0:
        session.exitstatus = 1
        if reporter:
            reporter.write_line(f"LOGITLAB_NO_SKIPS=1: {len(bad)} test(s) skipped that must run in CI (see above)",
                                red=True)

