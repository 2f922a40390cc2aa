"""The ``openai`` engine when the server fails: retried answers, persistent errors, broken bodies, no server.

Each server is a stub on 127.0.0.1 (``server_stubs.Stub``: a healthy OpenAI-compatible server of a
tiny counting model), started and stopped by the test, that fails on purpose from one request on:
an HTTP status (429 once, 500 for good), a dropped connection, a 200 whose body is cut short or has
no choices. Through ``logitlab ab`` a failure must end in one ``error:`` line and exit status 2,
keeping the runs measured before it in ``--json``; a retried request must work and be reported
(``scoring["retries"]`` of the run, ``retries_while_loading`` of the engine) without its wait
counting as the server's time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from logitlab.engines.variant import parse_variant
from logitlab.engines.workload import run_workload
from logitlab.experiments.isolation import load_engine

from server_stubs import Stub, stub_server

pytestmark = pytest.mark.engine

PY = sys.executable
#: decode tokens of the workload: its greedy completions are the only requests with max_tokens 3
#: (the probe asks 4, scoring and the reset 1), so a stub can fail from the n-th run on.
N_DECODE = 3
ERROR_BODY = {"error": {"message": "injected by the test", "type": "server_error"}}


class Faulty(Stub):
    """:class:`Stub` that fails from the ``fail_from``-th workload completion on (1 = the reference run's),
    for ``fail_count`` requests (None: every request after it), in the way ``fault`` says: ``status`` (an HTTP
    error with :data:`ERROR_BODY`), ``hangup`` (the connection closed without an answer), ``cut`` (a 200 whose
    JSON is cut short), ``no-choices`` (a 200 with an empty ``choices`` list)."""

    fault = "status"
    status = 500
    retry_after: str | None = None  # a Retry-After header on the error answer; "date+N": an HTTP-date N s ahead of
    # the moment of the answer (made then, not before the server starts: whole seconds, RFC 9110)
    fail_from = 1
    fail_count: int | None = None
    on_path: str | None = None  # fail this path's requests instead (GET or POST), from the first
    workload_seen = 0
    faults = 0

    def _faulting(self, path: str, body: dict | None) -> bool:
        cls = type(self)
        if cls.on_path is not None:
            armed = path == cls.on_path
        else:
            if path == "/v1/completions" and body and body.get("max_tokens") == N_DECODE:
                cls.workload_seen += 1
            armed = cls.workload_seen >= cls.fail_from and path == "/v1/completions"
        if not armed or (cls.fail_count is not None and cls.faults >= cls.fail_count):
            return False
        cls.faults += 1
        return True

    def _answer_fault(self) -> None:
        if self.fault == "status":
            body = json.dumps(ERROR_BODY).encode()
            self.send_response(self.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.retry_after is not None:
                value = self.retry_after
                if value.startswith("date+"):
                    from email.utils import formatdate

                    value = formatdate(time.time() + float(value[5:]), usegmt=True)
                self.send_header("Retry-After", value)
            self.end_headers()
            self.wfile.write(body)
            return None
        if self.fault == "hangup":
            self.close_connection = True
            return None
        raw = b'{"choices": [{"text": "abc", "logprobs' if self.fault == "cut" else b'{"choices": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self._faulting(self.path, None):
            return self._answer_fault()
        super().do_GET()

    def completions(self, body: dict) -> None:
        if self._faulting("/v1/completions", body):
            return self._answer_fault()
        super().completions(body)


def variant(url: str, **options: object):
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return parse_variant(f"?{query}" if query else "", "control", default_engine=f"openai:{url}")


def ab(url: str, tmp_path, *extra: str, options: str = "retries=1&backoff=0.01") -> subprocess.CompletedProcess:
    """``logitlab ab`` against ``url``: one ABBA block (4 measured runs: control, candidate, candidate, control)."""
    return subprocess.run([PY, "-m", "logitlab", "ab", "--engine", f"openai:{url}?{options}", "--prompt", "hello",
                           "--tokens", str(N_DECODE), "--repeats", "1", "--warmup", "0", "--quiet",
                           "--json", str(tmp_path / "ab.json"), *extra],
                          capture_output=True, text=True, cwd=tmp_path, check=False)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_429_is_retried_reported_and_its_wait_is_not_the_servers_time():
    with stub_server(Stub) as (url, _):
        engine = load_engine(variant(url))
        clean = run_workload(engine, engine.tokenize("hello"), N_DECODE)
    backoff = 1.0
    with stub_server(Faulty, status=429, fail_count=1) as (url, handler):
        engine = load_engine(variant(url, backoff=backoff))
        out = run_workload(engine, engine.tokenize("hello"), N_DECODE)
        again = run_workload(engine, engine.tokenize("hello"), N_DECODE)
    assert handler.faults == 1 and engine.describe()["retries_while_loading"] == []
    assert out.scoring["retries"] == [{"request": "POST /v1/completions", "attempt": 2, "waited_s": backoff,
                                       "failure": "HTTP 429: " + json.dumps(ERROR_BODY)}]
    assert again.scoring["retries"] == []  # per run: the next run had none
    # the retried run's data is the server's answer, as on a server that never failed
    assert out.generated == clean.generated and out.input_ids == clean.input_ids
    assert out.topk.keys == clean.topk.keys and out.topk.same_bits(clean.topk)
    # decode time is the answered attempt (a local stub: milliseconds), not the 1 s wait before it
    decode = next(t for t in out.timings if t.kind == "decode")
    assert decode.seconds < backoff / 2, decode


@pytest.mark.parametrize("header", ["1", "date"])
def test_a_429_with_retry_after_waits_what_the_server_asks_not_the_backoff(header):
    """RFC 9110: Retry-After is delay-seconds or an HTTP-date; the wait is the longer of it and the backoff."""
    value = "1" if header == "1" else "date+2.5"  # the date is made when the stub answers
    with stub_server(Faulty, status=429, fail_count=1, retry_after=value) as (url, handler):
        engine = load_engine(variant(url, backoff=0.01))
        start = time.perf_counter()
        out = run_workload(engine, engine.tokenize("hello"), N_DECODE)
        elapsed = time.perf_counter() - start
    [retry] = out.scoring["retries"]
    assert handler.faults == 1 and retry["failure"].startswith("HTTP 429: ")
    # an HTTP-date has a 1 s resolution: 2.5 s ahead of the answer asks for 1.5-2.5 s less the time to read it
    low, high = (1.0, 1.0) if header == "1" else (1.0, 2.5)
    assert low <= retry["retry_after_s"] <= high and retry["waited_s"] == retry["retry_after_s"], retry
    assert elapsed >= retry["waited_s"]  # it did wait, not just record
    decode = next(t for t in out.timings if t.kind == "decode")
    assert decode.seconds < 0.5, decode  # the wait is not the server's time


def test_retry_after_values_are_read_as_rfc_9110_says():
    from logitlab.engines.servers.http import retry_after_seconds

    now = 1_700_000_000.0
    assert retry_after_seconds("120") == 120.0 and retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds("Tue, 14 Nov 2023 22:13:50 GMT", now=now) == 30.0  # 22:13:20 GMT is `now`
    assert retry_after_seconds("Tue, 14 Nov 2023 22:00:00 GMT", now=now) == 0.0  # in the past
    for bad in (None, "", "soon", "-5", "1.5", "Tue, 14 Nov 2023 22:13:50"):  # the last: no zone
        assert retry_after_seconds(bad, now=now) is None, bad


def test_a_retry_while_loading_is_in_the_engine_description():
    with stub_server(Faulty, on_path="/v1/models", status=503, fail_count=2) as (url, handler):
        engine = load_engine(variant(url, backoff=0.01, retries=2))
    assert handler.faults == 2
    assert [(r["request"], r["attempt"], r["failure"][:8]) for r in engine.describe()["retries_while_loading"]] == [
        ("GET /v1/models", 2, "HTTP 503"), ("GET /v1/models", 3, "HTTP 503")]


def test_a_429_then_200_through_ab_exits_0_and_the_json_names_the_retried_run(tmp_path):
    with stub_server(Faulty, status=429, fail_count=1, fail_from=2) as (url, handler):
        proc = ab(url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((tmp_path / "ab.json").read_text())["runs"]
    retried = [(r["slot"], len(r["scoring"]["retries"])) for r in runs if r["scoring"]["retries"]]
    assert handler.faults == 1 and len(runs) == 4 and retried == [(runs[1]["slot"], 1)]  # the 2nd run measured
    assert runs[1]["scoring"]["retries"][0]["failure"].startswith("HTTP 429: ")
    # the report says so, in one header line (COLUMNS wide enough to keep it on one line)
    report = subprocess.run([PY, "-m", "logitlab", "report", str(tmp_path / "ab.json")], capture_output=True,
                            text=True, check=False, env={**os.environ, "COLUMNS": "400"})
    assert report.returncode == 0, report.stderr
    assert "1 retried request in 1 of 4 runs (HTTP 429 × 1), 0.01 s waited; the waits are not in the timings" \
        in report.stdout, report.stdout


@pytest.mark.parametrize("fault, message", [
    ("status", "POST {url}/completions answered HTTP 500 on all 2 attempts: " + json.dumps(ERROR_BODY)),
    ("hangup", ("openai server {url}/completions did not answer after 2 attempt(s) (timeout 120 s each): "
                "RemoteDisconnected: Remote end closed connection without response")),
])
def test_a_server_that_fails_for_good_mid_run_is_one_line_exit_2_and_keeps_the_runs(fault, message, tmp_path):
    """Runs 1 and 2 are answered; from the 3rd run's completion on every request fails, retried once."""
    with stub_server(Faulty, fault=fault, fail_from=3) as (url, handler):
        proc = ab(url, tmp_path)
    line = one_error_line(proc)
    assert line == "error: " + message.replace("{url}", url)
    assert handler.faults == 2  # the request and its one retry; nothing after it
    data = json.loads((tmp_path / "ab.json").read_text())
    assert len(data["runs"]) == 2 and data["error"] == message.replace("{url}", url)
    assert [r["is_reference"] for r in data["runs"]] == [True, False]
    assert all(r["scoring"]["retries"] == [] for r in data["runs"])
    # the candidate run measured before the failure keeps its verdict (the same stub on both sides)
    assert data["verdict"]["word"] == "bit-exact" and data["verdict_slot"] == data["runs"][1]["slot"]


@pytest.mark.parametrize("fault, message", [
    ("cut", ("POST {url}/completions answered something that is not JSON: "
             "b'{\"choices\": [{\"text\": \"abc\", \"logprobs'")),
    ("no-choices", "{url}/completions answered without choices: {'choices': []}"),
])
def test_a_broken_body_is_one_line_exit_2_and_not_retried(fault, message, tmp_path):
    """A 200 whose body is not the JSON asked for is a broken server, not a busy one: no retry."""
    with stub_server(Faulty, fault=fault) as (url, handler):
        proc = ab(url, tmp_path, options="retries=3&backoff=0.01")
    assert one_error_line(proc) == "error: " + message.replace("{url}", url)
    assert handler.faults == 1
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["runs"] == [] and data["error"] == message.replace("{url}", url)


def test_no_server_at_the_url_is_one_line_exit_2(tmp_path):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    proc = ab(url, tmp_path)
    assert one_error_line(proc) == (f"error: openai server {url}/models did not answer after 2 attempt(s) "
                                    "(timeout 120 s each): ConnectionRefusedError: [Errno 111] Connection refused")
