"""``logitlab explain`` from the command line: Ctrl-C keeps what was measured.

The pair is two real ``cmd`` engines (the shipped numpy engine); the candidate's is wrapped in a script that
marks its start and sleeps, so the test interrupts the run at a known step: after the control ran.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
ARGS = "--tokens {tokens} --logits {logits} --n-prompt {n_prompt} --n-decode {n_decode}"


def sigint_default() -> None:
    """In the child: SIGINT back to its default (a background job starts its children with it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def explain_until_the_candidate_runs(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    marker = tmp_path / "candidate-started"
    slow = tmp_path / "slow.sh"
    slow.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 120\nexec {sys.executable} "
                    f"{ROOT / 'examples' / 'numpy_cmd_engine.py'} \"$@\"\n")
    slow.chmod(0o755)
    control = f"cmd:{sys.executable} {ROOT / 'examples' / 'numpy_cmd_engine.py'} {ARGS}?vocab=4096"
    proc = subprocess.Popen([sys.executable, "-m", "logitlab", "explain", "--engine", control,
                             "--candidate", f"cmd:{slow} {ARGS}?vocab=4096", "--tokens", "4", "--quiet", *extra],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not marker.exists() and proc.poll() is None:
        time.sleep(0.1)
    assert marker.exists(), "the candidate never started"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), marker


def test_ctrl_c_writes_the_partial_result_and_exits_130(tmp_path):
    out = tmp_path / "why.json"
    proc, _ = explain_until_the_candidate_runs(tmp_path, "--json", str(out), "--markdown", str(tmp_path / "why.md"))
    assert proc.returncode == 130, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["error: interrupted; the positions explained so far are in the reports"], proc.stderr
    data = json.loads(out.read_text())
    assert data["kind"] == "explain" and data["error"] == "interrupted"
    assert data["config"]["candidate"]["options"]["command"].startswith(str(tmp_path / "slow.sh"))
    n = len(data["positions"])
    assert (f"**stopped early by the user (Ctrl-C) after {n} position{'s' * (n != 1)} (explained): the causes rest "
            "on those only**") in (tmp_path / "why.md").read_text()
