"""An in-process engine that really crashes: the llamacpp engine with a planted segfault at a chosen phase and run.

Registered as ``crashing-llamacpp`` by ``register()`` (and removed by ``unregister()``: a test that registers it
takes it out again, so that no other test sees it in the registry). Options: every llamacpp option, plus
``crash_phase`` (``load``, ``prefill`` or ``decode``), ``crash_step`` (the decode step, default 0) and
``crash_run`` (which run of this engine object crashes, counted from 1; default 1) and ``crash_how``
(``segv``, the default, or ``hang``). The crash is ``ctypes.string_at(0)``: a read of address 0, SIGSEGV, in
the engine's process — what a kernel reading out of bounds does; ``hang`` sleeps for an hour instead, as a
deadlocked kernel does. A supervised engine's worker counts its runs from 1 again after a restart.

A worker process imports this module by its name (``crash_engine``): tests put ``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import ctypes
import time

from logitlab.engines import register_engine
from logitlab.engines.llamacpp import LlamaCppEngine, LlamaCppSession
from logitlab.engines.options import positive_int

NAME = "crashing-llamacpp"
#: The same engine, its workers forked from a fork server that imported llama-cpp-python and this module
#: (:attr:`~logitlab.engines.base.Engine.PRELOAD`; tests/engines/test_forkserver.py).
FORKED = "crashing-llamacpp-forked"


def segfault(how: str = "segv") -> None:
    if how == "hang":
        time.sleep(3600)
    ctypes.string_at(0)


class CrashingSession(LlamaCppSession):
    engine: "CrashingLlamaCpp"

    def _decode(self, tokens: list[int]) -> "object":
        opts = self.engine.options
        if self.engine.runs == opts.get("crash_run", 1):
            phase = "prefill" if self.n_past == 0 else "decode"
            step = self.n_past - self.engine.prompt_length if phase == "decode" else None
            if opts.get("crash_phase") == phase and (phase == "prefill" or step == opts.get("crash_step", 0)):
                segfault(opts.get("crash_how", "segv"))
        if self.n_past == 0:
            self.engine.prompt_length = len(tokens)
        return super()._decode(tokens)


class CrashingLlamaCpp(LlamaCppEngine):
    name = NAME
    OPTIONS = {**LlamaCppEngine.OPTIONS,
               "crash_phase": (str, "load, prefill or decode"),
               "crash_step": (int, "the decode step that crashes"),
               "crash_run": (positive_int, "which run of this engine object crashes (from 1)"),
               "crash_how": (str, "segv (default) or hang")}

    def _load(self) -> None:
        if self.options.get("crash_phase") == "load":
            segfault(self.options.get("crash_how", "segv"))
        self.runs = 0
        self.prompt_length = 0
        clean = {k: v for k, v in self.options.items() if not k.startswith("crash_")}
        saved, self.options = self.options, clean
        try:
            super()._load()
        finally:
            self.options = saved

    def _open_session(self) -> CrashingSession:
        self.runs += 1
        return CrashingSession(self)

    def describe(self) -> dict:
        return {**super().describe(), "engine": NAME}


class ForkedCrashingLlamaCpp(CrashingLlamaCpp):
    name = FORKED
    PRELOAD = ("llama_cpp", "crash_engine")


def worker_facts(engine: object, names: list[str]) -> dict:
    """Run in a worker (``call_engine``): its pid, its parent's, its current folder and the environment variables
    ``names``."""
    import os

    return {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "env": {n: os.environ.get(n) for n in names}}


def register() -> None:
    register_engine(NAME, "crash_engine:CrashingLlamaCpp")
    register_engine(FORKED, "crash_engine:ForkedCrashingLlamaCpp")


def unregister() -> None:
    from logitlab.engines import ENGINES

    ENGINES.pop(NAME, None)
    ENGINES.pop(FORKED, None)
