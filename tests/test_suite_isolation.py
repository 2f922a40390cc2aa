"""The suite outlives a test that kills its process: the crash is that test's failure, the others still run.

An engine under test may segfault (llama.cpp's AMX repack path does on batched evaluation); pyproject's
``addopts`` runs the tests in a pytest-xdist worker, which pytest replaces when it dies. Checked by a real
segfault (``ctypes.string_at(0)``) in a pytest run with the project's own configuration.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CRASHING = '''
import ctypes


def test_before():
    assert sum(range(4)) == 6


def test_segfault():
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def test_after():
    assert "".join(["a", "b"]) == "ab"
'''


def test_a_segfaulting_test_is_its_own_failure_and_the_rest_still_run(tmp_path):
    (tmp_path / "test_crash.py").write_text(CRASHING)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                           str(tmp_path), "-p", "no:cacheprovider", "-q", str(tmp_path / "test_crash.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed, 2 passed" in out, out
    assert "crashed while running" in out and "test_crash.py::test_segfault" in out, out

