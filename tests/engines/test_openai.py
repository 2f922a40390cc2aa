"""The ``openai`` engine against real llama-cpp-python servers (``python -m llama_cpp.server``).

Each server runs the embedded model on 127.0.0.1, is started by the fixture
that needs it and stopped in its teardown. llama-cpp-python's server scores in
``echo`` mode (legacy layout, text keys, text prompts). llama.cpp's own
llama-server: ``test_openai_llama_server.py``; the layouts of servers not run
here, and broken servers: ``test_openai_stubs.py``.
"""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

import pytest

from logitlab.engines.variant import parse_variant
from logitlab.errors import EngineError
from logitlab.experiments.ab import AbConfig, AbExperiment, run_ab
from logitlab.experiments.isolation import load_engine
from logitlab.engines.workload import run_workload


PY = sys.executable
N_DECODE = 4
#: short: llama-cpp-python sorts the whole vocabulary in Python for every echoed position
PROMPT = "The capital of Italy is"
READY_TIMEOUT = 120.0

pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]: pip install 'logitlab[server]'")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_servers(model_path, tmp_path, *specs):
    """Start one ``llama_cpp.server`` per (alias, extra args) on 127.0.0.1; yield their /v1 URLs."""
    procs, urls, logs = [], [], []
    try:
        for alias, args in specs:
            port = free_port()
            log = tmp_path / f"server-{alias}.log"
            logs.append(log)
            procs.append(subprocess.Popen(
                [PY, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1", "--port", str(port),
                 "--n_ctx", "512", "--model_alias", alias, *args],
                stdout=log.open("w"), stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}/v1")
        deadline = time.monotonic() + READY_TIMEOUT
        for proc, url, log in zip(procs, urls, logs):
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"server {url} exited with {proc.returncode}: {log.read_text()[-800:]}")
                try:
                    with urllib.request.urlopen(url + "/models", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"server {url} not ready after {READY_TIMEOUT:g} s: {log.read_text()[-800:]}")
                time.sleep(0.25)
        yield urls, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def servers(model_path, tmp_path_factory):
    """Two instances of the same model: ``a`` as llama.cpp defaults, ``b`` with flash attention."""
    with llama_servers(model_path, tmp_path_factory.mktemp("servers"),
                       ("a", []), ("b", ["--flash_attn", "true"])) as (urls, _):
        yield urls


def openai_variant(url, label, model=None, **options):
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return parse_variant(f"?{query}" if query else "", label, default_engine=f"openai:{url}", default_model=model)


def config(control, candidate, **kwargs):
    return AbConfig(control=control, candidate=candidate, prompt=PROMPT,
                    **{"n_decode": N_DECODE, "repeats": 1, "warmup": 0, **kwargs})


# -- real servers -----------------------------------------------------------------------------
@pytest.mark.engine
def test_cli_ab_between_two_real_servers(servers, tmp_path):
    a, b = servers
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [PY, "-m", "logitlab", "ab", "--engine", f"openai:{a}", "--candidate", f"openai:{b}?decode_timing=0",
         "--control", "decode_timing=0",
         "--control-model", "a", "--candidate-model", "b", "--prompt", PROMPT, "--tokens", str(N_DECODE),
         "--repeats", "1", "--warmup", "0", "--json", str(out)],
        capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["manifest"]["engine"]["engine"] == "openai" and data["manifest"]["engine"]["model"] == "a"
    assert data["manifest"]["engine"]["scoring"]["mode"] == "echo"  # probed: llama-cpp-python echoes the prompt
    assert data["manifest"]["engine"]["server"]["kind"] == "unknown"  # it has none of the identity endpoints
    assert data["config"]["candidate"]["model"] == "b" and data["config"]["candidate"]["options"]["url"] == b
    assert data["aa"]["control_reproducible"]
    verdict = data["verdict"]
    # llama.cpp on this CPU gives the same bits every run (fixed threads), so the word is fixed: the top-k rows
    # differ inside their noise and the changes sit at small margins
    assert verdict["word"] == "near-tie"
    assert any("lower bound" in line for line in verdict["evidence"])
    run = next(r for r in data["runs"] if r["slot"] == data["verdict_slot"])
    c = run["comparison"]
    assert c["scope"] == "top-k" and c["kld_is_lower_bound"] and c["positions_missing"] == [0]
    assert c["differing_entries"] > 0 and c["n_vocab"] == 20
    assert "A/B verdict: " + verdict["word"] in proc.stdout
    # greedy through the server is llama.cpp's argmax path: the same text as the llamacpp engine's, in the
    # server's canonical tokenization (it may merge tokens the model produced one by one)
    native = load_engine(parse_variant("", "c", default_engine="llamacpp"))
    try:
        greedy = run_workload(native, data["prompt_ids"], N_DECODE).generated
        assert data["generated_text"] == native.detokenize(greedy)
        assert data["prompt_ids"] + data["generated_ids"] == native.tokenize(PROMPT + data["generated_text"])
    finally:
        native.close()


@pytest.mark.engine
def test_aa_on_one_server_is_bit_exact_on_the_returned_topk(servers):
    a, _ = servers
    result = run_ab(config(openai_variant(a, "control", "a"), openai_variant(a, "candidate", "a")))
    assert result.control_reproducible and result.verdict.word == "bit-exact"
    assert result.verdict.evidence[0].startswith("bit-exact on the returned top-k")
    assert result.manifest["engine"]["prompt_format"] == "text"  # llama-cpp-python's server takes text only
    assert set(result.speed) == {"prefill", "decode"}
    # a timed greedy completion in every run: N_DECODE tokens for the reference, then as many as the reference's
    # canonical tokenization of its text has (the server's text may merge tokens it produced one by one)
    replayed = len(result.generated_ids)
    assert [r.decode_tokens for r in result.runs] == [N_DECODE] + [replayed] * 3
    assert result.manifest["engine"]["scoring"]["probe_alignment"]["checked"]
    engine = load_engine(openai_variant(a, "control", "a", decode_timing=0))
    out = run_workload(engine, result.prompt_ids, N_DECODE, replay=result.generated_ids)
    assert out.input_ids == result.prompt_ids + result.generated_ids and out.topk.keys[0] is None


@pytest.mark.engine
def test_server_dying_mid_run_ends_it_with_partial_results(servers, model_path, tmp_path):
    a, _ = servers
    with llama_servers(model_path, tmp_path, ("doomed", [])) as ([doomed], [proc]):
        def on_event(kind, data):
            if kind == "slot" and data["slot"].index == 1:  # after the first candidate run
                proc.terminate()
                proc.wait(timeout=15)

        with pytest.raises(EngineError) as info:
            AbExperiment(config(openai_variant(a, "control", "a", decode_timing=0),
                                openai_variant(doomed, "candidate", retries=1, backoff=0.1)),
                         on_event=on_event).run()
    partial = info.value.partial
    assert [r.variant for r in partial.runs] == ["control", "candidate"] and partial.runs[0].is_reference
    assert re.match(rf"openai server {re.escape(doomed[:-3])}/\S+ did not answer after 2 attempt\(s\) "
                    r"\(timeout 120 s each\): ConnectionRefusedError", partial.error), partial.error


@pytest.mark.engine
def test_unreachable_url_is_one_line_exit_2(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = subprocess.run([PY, "-m", "logitlab", "ab", "--engine", f"openai:{url}", "--control", "retries=0",
                           "--prompt", "x", "--tokens", "1", "--repeats", "1", "--warmup", "0", "--quiet"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: openai server {url}/models did not answer after 1 attempt(s) (timeout 120 s each): "
        "ConnectionRefusedError: [Errno 111] Connection refused"]


def test_engine_target_and_model_parsing():
    v = parse_variant("", "control", default_engine="openai:http://h:1/v1", default_model="a")
    assert (v.engine, v.model, v.options) == ("openai", "a", {"url": "http://h:1/v1"})
    v = parse_variant("url=http://h:2/v1", "candidate", default_engine="openai:http://h:1/v1")
    assert v.options == {"url": "http://h:2/v1"}
    v = parse_variant("openai:http://h:3/v1?logprobs=5", "candidate", default_engine="llamacpp")
    assert (v.engine, v.options) == ("openai", {"url": "http://h:3/v1", "logprobs": "5"})


@pytest.mark.engine
def test_full_logits_against_a_server_are_compared_on_its_topk(servers):
    """The same model behind a server (top-k only) vs llamacpp (full logits): compared on the top-k.

    The server is the control, so the reference tokens are in the server's canonical tokenization (a text
    prompt re-tokenized by the server may merge tokens llama.cpp produced one by one). llama-cpp-python's
    server runs the same library with the same batch shapes, so once the llamacpp side is moved onto the
    server's per-row normaliser (its float32 log-softmax), the returned top-k agree to the ULP."""
    a, _ = servers
    native = parse_variant("", "candidate", default_engine="llamacpp")
    result = run_ab(config(openai_variant(a, "control", "a"), native))
    run = next(r for r in result.runs if r.slot == result.verdict_slot)
    assert result.control_reproducible and run.comparison.scope == "top-k"
    assert any("compared on the top-k the control returned" in note for note in result.notes)
    assert run.comparison.n_vocab == 20 and run.comparison.argmax_agreement == 1.0  # same kernels, same argmax
    assert result.verdict.word in ("bit-exact", "ulp-noise")
    assert run.comparison.dtype == "float32"  # the server's float32, though it returns no row for position 0
    offsets = run.row_offsets
    assert offsets.positions == run.comparison.positions_compared
    assert offsets.max_residual_ulp <= 1 and 0 < offsets.max_abs_offset < 1e-5  # float32 vs float64 normaliser
