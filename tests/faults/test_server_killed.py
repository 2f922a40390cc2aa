"""An OpenAI-compatible server killed (SIGKILL) in the middle of an ``ab``: one error line, nothing lost.

The server is llama-cpp-python's (``python -m llama_cpp.server``) on the
embedded model, started by the test on 127.0.0.1 and killed by it once the
run log holds a few runs. Expected: exit 2 with one ``error:`` line naming
the server, the partial ``--json`` result and the run log holding every run
finished before the kill, and ``logitlab report`` of the log showing them.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import SHORT_PROMPT
from logitlab.runlog import read_run_log

PY = sys.executable
pytestmark = pytest.mark.engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(model_path, tmp_path):
    """(url, process) of a llama-cpp-python server on 127.0.0.1; stopped after the test if still running."""
    port = free_port()
    log = tmp_path / "server.log"
    proc = subprocess.Popen([PY, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "512", "--model_alias", "m"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log.read_text()[-800:]
            try:
                with urllib.request.urlopen(url + "/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"server not ready: {log.read_text()[-800:]}"
            time.sleep(0.25)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_server_killed_mid_ab_is_one_error_line_and_keeps_every_finished_run(server, tmp_path):
    url, server_proc = server
    out, log = tmp_path / "partial.json", tmp_path / "runs.jsonl"
    ab = subprocess.Popen(
        [PY, "-m", "logitlab", "ab", "--engine", f"openai:{url}", "--control", "retries=1,backoff=0.1",
         "--control-model", "m", "--candidate-model", "m", "--prompt", SHORT_PROMPT, "--tokens", "4",
         "--repeats", "6", "--warmup", "0", "--no-escalate", "-q", "--json", str(out), "--log", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count('"slot":') < 3):
        assert ab.poll() is None, ab.communicate()
        time.sleep(0.02)
    server_proc.send_signal(signal.SIGKILL)
    server_proc.wait(timeout=30)
    killed_after = log.read_text().count('"slot":')
    _, stderr = ab.communicate(timeout=300)

    assert ab.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: openai server {url[:-3]}/") and "did not answer" in lines[0]
    partial = json.loads(out.read_text())
    logged = read_run_log(log)
    assert logged.ending == "error" and logged.error == partial["error"]
    assert [r["slot"] for r in logged.records] == [r["slot"] for r in partial["runs"]]
    assert len(logged.records) >= killed_after >= 3  # every run finished before the kill is kept
    shown = subprocess.run([PY, "-m", "logitlab", "report", str(log)], capture_output=True, text=True, cwd=tmp_path)
    assert shown.returncode == 0 and "did not answer" in shown.stdout, shown.stderr
