"""The real llama.cpp engine on the embedded model, with a fault planted by an environment knob.

``CRASHY_FAULT`` (read when a session decodes, so a process-isolated slot gets
it through ``--candidate-env``):

- ``segv``: dereference a NULL pointer through ctypes on the first decode — a
  real SIGSEGV in native code, as a crashing engine kernel gives;
- ``abort``: ``abort()`` from C (SIGABRT), as a failed ``GGML_ASSERT`` gives;
- ``hang``: sleep for an hour in the first decode, as a deadlocked engine does;
- ``hang-child``: start a child process that sleeps for an hour, then hang
  (to check that a slot timeout kills the whole process group).

Registered at run time as ``crashy`` (``register_engine``); the worker of a
process-isolated slot imports it from ``"crashy_engine:CrashyEngine"``, so
this folder must be on the worker's PYTHONPATH.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

from logitlab.engines.llamacpp import LlamaCppEngine, LlamaCppSession


def plant_fault() -> None:
    fault = os.environ.get("CRASHY_FAULT", "")
    if fault == "segv":
        ctypes.string_at(0)
    elif fault == "abort":
        ctypes.CDLL(None).abort()
    elif fault in ("hang", "hang-child"):
        if fault == "hang-child":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            marker = os.environ.get("CRASHY_CHILD_PID_FILE")
            if marker:
                with open(marker, "w") as f:
                    f.write(str(child.pid))
        time.sleep(3600)


class CrashySession(LlamaCppSession):
    def _decode(self, tokens):
        if self.n_past > 0:  # a decode step, not the prefill
            plant_fault()
        return super()._decode(tokens)


class CrashyEngine(LlamaCppEngine):
    name = "crashy"

    def _open_session(self) -> CrashySession:
        return CrashySession(self)
