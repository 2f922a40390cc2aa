"""Warm the suite's slow caches in the background while the first tests run (``make test``).

A cold ``make test`` builds, inside the tests that first need them: the embedded model's de-quantised
float32 folder (the hf engine) and its two ORT GenAI models (fp32, int4), the two llama.cpp library builds of
``tests/engines/test_llamacpp_builds.py`` (1.5-2.5 min each on 2 cores) and Gemma 3's de-quantised folder:
about 5 minutes of a 2-core machine, while the suite around them leaves about 0.7 of a core idle (a load of
~1.3). With ``LOGITLAB_WARM_CACHES=1`` (the Makefile sets it), ``tests/conftest.py`` starts this file as a
script when collection ends, at idle priority (``SCHED_IDLE``: it gets only the CPU time no test wants, and a
test's thread that wakes takes its core back at once) and on one core at most (one compile job, one thread
for torch and OpenMP), and ends it with SIGINT when the session ends. A test that needs a folder still being
built waits for it (the build lock of :func:`logitlab.engines.build_cache.exclusive`) instead of building it
a second time; a warm-up that fails changes nothing (the test builds it and says why). On warm caches every
step is a cache hit (~1 s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The release before the installed one: its llama.cpp's C API differs from the installed bindings'.
PREVIOUS = "0.3.35"
#: Generic flags (``GGML_NATIVE=OFF``: AVX2, no AVX-512), at ``-O1``: the tests build to load, compare and bisect
#: two builds, not to time them, and ``-O1`` compiles in two thirds of the CPU time of CMake's Release ``-O3``
#: (measured: 116 s of user time against 174 s for the installed release's sources on this 2-core machine).
GENERIC = ["-DGGML_NATIVE=OFF", "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"]

_background: subprocess.Popen | None = None
_log: Path | None = None


def _steps():
    """(name, callable) in the order the suite first needs them."""
    from logitlab.engines.hf import dequantised_folder
    from logitlab.engines.llamacpp_build import build_library, release_source
    from logitlab.engines.ortgenai import built_model
    from logitlab.models import default_model_path, gemma_model_path
    from logitlab.tools import llama_cpp_python_version

    model = Path(default_model_path())
    return [("hf de-quantised embedded model", lambda: dequantised_folder(model)),
            ("ORT GenAI fp32", lambda: built_model(model, {})),
            ("ORT GenAI int4", lambda: built_model(model, {"precision": "int4"})),
            ("llama.cpp library, installed release, generic",
             lambda: build_library(release_source(llama_cpp_python_version()), GENERIC, jobs=1)),
            ("llama.cpp library, previous release, generic",
             lambda: build_library(release_source(PREVIOUS), GENERIC, jobs=1)),
            ("hf de-quantised Gemma 3", lambda: dequantised_folder(Path(gemma_model_path())))]


def main() -> int:
    import torch

    torch.set_num_threads(1)  # one core at most, like the builds' one compile job: the tests keep the other
    for name, step in _steps():
        start = time.monotonic()
        try:
            step()
        except Exception as exc:  # the test that needs it builds it again and says why
            print(f"{name}: failed: {exc}", flush=True)
        else:
            print(f"{name}: {time.monotonic() - start:.1f} s", flush=True)
    return 0


def _idle() -> None:  # in the child, before exec
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def start() -> Path | None:
    """Start :func:`main` in the background at idle priority when ``LOGITLAB_WARM_CACHES=1``.

    Returns:
        The background's log, or None when nothing was started.
    """
    global _background, _log
    if _background is not None or os.environ.get("LOGITLAB_WARM_CACHES") != "1":
        return None
    _log = Path(tempfile.gettempdir()) / f"logitlab-warm-caches-{os.getpid()}.log"
    with open(_log, "wb") as handle:
        _background = subprocess.Popen([sys.executable, __file__], stdout=handle, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_idle,
                                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    return _log


def stop() -> str:
    """End the background (SIGINT: a build under way ends its compile step and removes its temporary folder).

    Returns:
        What it printed, one line per step done (empty when nothing was started).
    """
    global _background, _log
    if _background is None:
        return ""
    if _background.poll() is None:
        try:
            os.killpg(_background.pid, signal.SIGINT)
            _background.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    said = _log.read_text(errors="replace") if _log is not None and _log.exists() else ""
    if _log is not None:
        _log.unlink(missing_ok=True)
    _background = _log = None
    return said


if __name__ == "__main__":
    sys.exit(main())
