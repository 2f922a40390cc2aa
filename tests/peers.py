"""Real llama.cpp tools as test peers: locate them, run them, start and stop ``llama-server``.

The tools are built once by ``scripts/build-llama-tools.sh`` (``make tools``;
``make test`` runs it) and found by :func:`logitlab.tools.llama_tool`. A test
that needs one is marked ``peers`` and calls :func:`tool`: when the tools are
missing the test *fails* with the build hint (it is never skipped quietly);
deselect them with ``-m "not peers"``.

Every tool is started with the weight repacking of the llamacpp engine's
default on this machine (:func:`machine_args`), so that the peers compute
what the engine computes and do not crash where the AMX repack path does.

``llama_server(...)`` starts ``llama-server`` on 127.0.0.1 on a free port,
waits for ``/health``, yields the base URL and stops the process (terminate,
then kill) when the ``with`` block ends, also when the test fails inside it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from logitlab.engines.llamacpp_repack import default_tool_args
from logitlab.errors import InputError
from logitlab.tools import llama_tool

#: Plain prose written for the peer tests (about 300 tokens: four chunks of 64 for llama-perplexity).
PROSE = (
    "The harbour town woke slowly on the first cold morning of the year. Fishermen pulled their boats up the "
    "shingle, gulls argued over the scraps, and the baker on the corner opened his shutters to let the smell of "
    "bread drift down towards the water. Children walked to school in pairs, kicking stones and talking about the "
    "storm that had kept them awake. By nine o'clock the market square was full. A woman sold apples from a cart, "
    "an old man mended nets beside the fountain, and the mayor stood on the steps of the town hall reading a "
    "letter that had arrived with the night train. The letter said that the railway company would close the line "
    "in the spring, because too few people used it. The mayor folded the letter, put it in his pocket, and "
    "decided to say nothing until he had spoken to the council. That afternoon the council met in the long room "
    "above the library. They argued for three hours. Some wanted to write to the newspaper, others wanted to send "
    "a delegation to the capital, and one member suggested that the town should buy the railway itself. Everyone "
    "laughed at first, but by the evening the idea no longer seemed so strange. They counted the money in the "
    "town's accounts, asked the bank for a loan, and wrote a careful offer to the company. Three weeks later the "
    "answer came back: the company accepted, and the little railway became the property of the town."
)
READY_TIMEOUT = 120.0  # s: model load on a busy 2-core machine
STOP_TIMEOUT = 15.0  # s: between terminate and kill


def tool(name: str) -> str:
    """Path of a built llama.cpp tool; fails the calling test (never skips) with the build hint when missing."""
    try:
        return str(llama_tool(name))
    except InputError as exc:
        pytest.fail(f"peer tool missing: {exc}", pytrace=False)


def machine_args(name: str, args: Sequence[str]) -> list[str]:
    """``args`` with the weight repacking of the llamacpp engine's default on this machine (``--no-repack`` on
    AMX CPUs, where the repack path crashes: logitlab.engines.llamacpp_repack), unless ``args`` set it."""
    if any(a in ("--no-repack", "-nr", "--repack") for a in args):
        return list(args)
    return [*default_tool_args(name), *args]


def run_tool(name: str, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """Run a tool to completion, with :func:`machine_args`; fail the test with the tail of its output on a
    non-zero exit."""
    proc = subprocess.run([tool(name), *machine_args(name, args)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{name} {' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}", pytrace=False)
    return proc


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, payload: dict | None = None, timeout: float = 60.0) -> Any:
    """GET (``payload`` None) or POST JSON to ``url``; the decoded JSON answer."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def llama_server(model: str | Path, log_dir: Path, args: Sequence[str] = (), *,
                 ready_timeout: float = READY_TIMEOUT) -> Iterator[str]:
    """Run ``llama-server -m model`` on 127.0.0.1 for the duration of a ``with`` block.

    Parameters
    ----------
    model : path
        GGUF file (the embedded model in most tests).
    log_dir : Path
        Where ``llama-server.log`` (stdout + stderr) goes; its tail is shown
        when the server exits early or is not ready in time.
    args : sequence of str
        Extra command-line arguments, e.g. ``["-c", "512", "-t", "2"]``.
    ready_timeout : float
        Seconds to wait for ``GET /health`` to answer 200 (it answers 503
        while the model loads).

    Yields
    ------
    str
        The base URL, ``http://127.0.0.1:PORT`` (no trailing slash).
    """
    port = free_port()
    log = Path(log_dir) / f"llama-server-{port}.log"
    cmd = [tool("llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
           *machine_args("llama-server", args)]
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited with {proc.returncode} before it was ready:\n"
                            f"{log.read_text()[-1500:]}", pytrace=False)
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except (OSError, urllib.error.HTTPError):
                pass  # not listening yet, or 503 while loading
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server not ready after {ready_timeout:g} s:\n{log.read_text()[-1500:]}",
                            pytrace=False)
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)
