"""The two llama.cpp library builds of ``tests/engines/test_llamacpp_builds.py``, built ahead in the background.

On a machine whose build cache is empty (a cold ``make test``), the two builds take about 1.5-2.5 min each on
2 cores, and a test session otherwise leaves a core idle for much of its time (one-threaded Python, servers and
hung engines waited for). So when the session will run those tests, :func:`start` builds both in a background
process at the lowest CPU priority (``nice 19``: it takes what the tests leave idle) and the session runs those
tests last; their fixtures :func:`wait` for it, then find both builds in the cache. When the builds are cached
already (a warm run), the background process finds them and exits at once.

The background process holds an exclusive ``flock`` on ``<builds cache>/.prefetch.lock`` while it builds: a
second session, or a pytest-xdist worker that replaced a crashed one, does not start another, and :func:`wait`
takes the same lock. A failed build there is not an error: the fixture then builds it itself, and that error is
the test's.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

#: The release before the installed one: its llama.cpp's C API differs from the installed bindings'.
PREVIOUS = "0.3.35"
#: The generic build's flags (not tuned to this CPU), for both releases.
GENERIC = ["-DGGML_NATIVE=OFF"]
#: The test module whose fixtures use the two builds.
MODULE = "test_llamacpp_builds.py"

_BUILD_BOTH = """
import fcntl, signal, sys
from logitlab.engines.llamacpp_build import build_library, builds_root, release_source
from logitlab.tools import llama_cpp_python_version
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ends a running cmake step with its compile jobs
lock = open(builds_root() / ".prefetch.lock", "a")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(0)  # another session builds them
for version in (llama_cpp_python_version(), sys.argv[1]):
    try:
        build_library(release_source(version), sys.argv[2:])
    except Exception as exc:  # the fixture builds it again and reports the error
        print(f"prefetch of {version}: {exc}", file=sys.stderr)
"""

_started: subprocess.Popen | None = None


def _lock_path() -> Path:
    from logitlab.engines.llamacpp_build import builds_root

    root = builds_root()
    root.mkdir(parents=True, exist_ok=True)
    return root / ".prefetch.lock"


def start() -> None:
    """Start building both libraries in a background process at ``nice 19`` (once per process)."""
    global _started
    if _started is not None:
        return
    _lock_path()
    _started = subprocess.Popen([sys.executable, "-c", _BUILD_BOTH, PREVIOUS, *GENERIC], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=lambda: os.nice(19))


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (from /proc: the compile jobs run in sessions of their own)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, grew = {root}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    return sorted(tree)


def wait() -> None:
    """Block until no background build holds the lock (none started: returns at once). A build this process
    started is reniced to 0 first, where the user may (root): a test now waits on it, so it no longer yields."""
    with open(_lock_path(), "a") as lock:
        if _started is not None:
            for pid in _descendants(_started.pid):
                try:
                    os.setpriority(os.PRIO_PROCESS, pid, 0)
                except OSError:  # not allowed to raise a priority, or already gone
                    pass
            _started.wait()
        fcntl.flock(lock, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_UN)


def stop() -> None:
    """End a background build still running when the session ends (SIGTERM: it ends its compile jobs)."""
    if _started is not None and _started.poll() is None:
        os.killpg(_started.pid, signal.SIGTERM)
        try:
            _started.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(_started.pid, signal.SIGKILL)


def last(items: list) -> bool:
    """Move the tests of :data:`MODULE` to the end of ``items`` (in place); True when there are any."""
    builds = [item for item in items if item.path.name == MODULE]
    if builds:
        items[:] = [item for item in items if item.path.name != MODULE] + builds
    return bool(builds)
