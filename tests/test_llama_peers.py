"""llama.cpp's own tools, built from the installed llama-cpp-python's sources, run as real peers.

Each test runs one tool on the embedded model for a few seconds: llama-perplexity
(its PPL against ours on the same tokens, and its build's CPU features against
llama-cpp-python's), llama-quantize (a Q8_0 model the llamacpp engine loads) and
llama-server (started and stopped here, asked ``/v1/models``, ``/props`` and
``/completion`` with ``n_probs``). llama-bench is tested with its reader in
``tests/perf/test_llama_bench_peer.py``.

Marked ``peers``: without the tools (``make tools``) these tests fail with the hint.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import numpy as np
import pytest

from logitlab.engines import engine_class

from conftest import SHORT_PROMPT
from peers import PROSE, http_json, llama_server, run_tool

pytestmark = [pytest.mark.peers, pytest.mark.engine]
llama_cpp = pytest.importorskip("llama_cpp")
LlamaCppEngine = engine_class("llamacpp")

N_CTX = 64  # llama-perplexity's chunk: it scores the second half of each chunk
N_PREDICT = 4
TEXT = PROSE


def log_softmax(row: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of one row of logits."""
    shifted = row.astype(np.float64) - row.max()
    return shifted - np.log(np.exp(shifted).sum())


@pytest.fixture(scope="module")
def engine():
    engine = LlamaCppEngine(model=None, options={"n_batch": str(N_CTX), "n_threads": "1", "n_threads_batch": "1"})
    yield engine
    engine.close()


# -- llama-perplexity ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def perplexity_run(model_path, tmp_path_factory):
    text = tmp_path_factory.mktemp("ppl") / "text.txt"
    text.write_text(TEXT)
    # -b = -c: one sequence per llama_decode call, as the engine's prefill of one chunk; flash attention off,
    # as llama-cpp-python's default (llama.cpp's tools default to "auto", which turns it on for the CPU)
    proc = run_tool("llama-perplexity", "-m", model_path, "-f", str(text), "-c", str(N_CTX), "-b", str(N_CTX),
                    "-t", "1", "-fa", "off")
    return proc.stdout + proc.stderr


def our_perplexity(engine, text: str, n_ctx: int) -> tuple[float, int]:
    """llama-perplexity's recipe (tools/perplexity/perplexity.cpp, ``perplexity()``) on the engine's logits.

    The text is tokenized as llama.cpp does (BOS when the vocabulary asks for it) and cut into
    ``len // n_ctx`` chunks; each chunk is evaluated from an empty cache with its first token
    replaced by BOS when the vocabulary adds one; the tokens after position ``n_ctx // 2`` are
    scored: PPL = exp(mean NLL) over ``n_ctx - n_ctx // 2 - 1`` tokens a chunk.
    """
    tokens = engine.tokenize(text)
    add_bos = len(engine.llama.tokenize(b"x", add_bos=True)) > len(engine.llama.tokenize(b"x", add_bos=False))
    first = n_ctx // 2
    nll, count = 0.0, 0
    for c in range(len(tokens) // n_ctx):
        chunk = tokens[c * n_ctx:(c + 1) * n_ctx]
        fed = [engine.llama.token_bos()] + chunk[1:] if add_bos else chunk
        with engine.open_session() as session:
            logits = session.prefill(fed).astype(np.float64)
        rows = logits[first:n_ctx - 1]
        top = rows.max(axis=1, keepdims=True)
        log_z = np.log(np.exp(rows - top).sum(axis=1)) + top[:, 0]
        nll -= float(np.sum(rows[np.arange(len(rows)), chunk[first + 1:]] - log_z))
        count += len(rows)
    return float(np.exp(nll / count)), count


def test_perplexity_matches_ours_on_the_same_tokens(perplexity_run, engine):
    found = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", perplexity_run)
    assert found, perplexity_run[-1500:]
    theirs = float(found.group(1))
    chunks = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", perplexity_run)
    assert chunks and int(chunks.group(2)) == N_CTX and int(chunks.group(1)) >= 2, perplexity_run[-1500:]
    ours, count = our_perplexity(engine, TEXT, N_CTX)
    assert count == int(chunks.group(1)) * (N_CTX - N_CTX // 2 - 1)
    assert 1.0 < theirs < engine.n_vocab
    # printed to 4 decimals (±5e-5); the rest is llama.cpp's float expf sums against our float64 ones.
    # (With flash attention on in the tool only, the PPL moves by ~1%: this catches other kernels.)
    assert abs(ours - theirs) <= 6e-5, (ours, theirs)


def test_tools_are_built_with_llama_cpp_pythons_cpu_features(perplexity_run):
    """The build script mirrors llama-cpp-python's ggml options: both report the same CPU feature line."""
    ours = llama_cpp.llama_print_system_info().decode()
    found = re.search(r"system_info: .*?\| (CPU : [^\n]*)", perplexity_run)
    assert found, perplexity_run[:3000]
    def features(line: str) -> list[str]:
        return line.split("CPU : ", 1)[1].strip(" |").split(" | ")

    assert features(found.group(1)) == features(ours)
    assert "OPENMP = 1" in ours and "LLAMAFILE = 1" in ours


# -- llama-quantize ----------------------------------------------------------------------------
def test_quantize_requantizes_the_embedded_model_to_q8_0(model_path, tmp_path, engine):
    out = tmp_path / "smollm2-q8_0.gguf"
    run_tool("llama-quantize", "--allow-requantize", model_path, str(out), "Q8_0", "2")
    assert out.read_bytes()[:4] == b"GGUF"
    q8 = LlamaCppEngine(model=str(out), options={"n_batch": str(N_CTX)})
    try:
        assert q8.llama.metadata["general.file_type"] == "7"  # LLAMA_FTYPE_MOSTLY_Q8_0
        assert engine.llama.metadata["general.file_type"] == "3"  # LLAMA_FTYPE_MOSTLY_Q4_1
        ids = engine.tokenize(SHORT_PROMPT)
        assert q8.tokenize(SHORT_PROMPT) == ids
        with q8.open_session() as s:
            a = s.prefill(ids)
        with engine.open_session() as s:
            b = s.prefill(ids)
    finally:
        q8.close()
    assert a.shape == b.shape and np.isfinite(a).all()
    assert not np.array_equal(a, b)  # other weights, other logits
    log_p, log_q = log_softmax(b[-1]), log_softmax(a[-1])
    kld = float(np.sum(np.exp(log_p) * (log_p - log_q)))
    assert 0 < kld < 0.1  # the same model, re-quantised from Q4_1: close, not equal


# -- llama-server --------------------------------------------------------------------------------
def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/health", timeout=2)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


def test_server_answers_and_is_stopped_even_when_the_test_fails(model_path, tmp_path, engine):
    seen = {}
    with pytest.raises(RuntimeError, match="the test failed here"):
        with llama_server(model_path, tmp_path, ["-c", "256", "-np", "1", "-t", "1", "-fa", "off"]) as url:
            seen["url"] = url
            models = http_json(url + "/v1/models")
            props = http_json(url + "/props")
            done = http_json(url + "/completion", {
                "prompt": SHORT_PROMPT, "n_predict": N_PREDICT, "n_probs": 3, "temperature": 0,
                "return_tokens": True, "cache_prompt": False})
            raise RuntimeError("the test failed here")
    url = seen["url"]
    assert refused(url), f"llama-server at {url} still answers after the block"

    assert [m["id"] for m in models["data"]] and models["data"][0]["id"].endswith(".gguf")
    assert props["total_slots"] == 1
    # greedy through the server = greedy through llama-cpp-python, token for token
    ids = engine.tokenize(SHORT_PROMPT)
    greedy, rows = [], []
    with engine.open_session() as session:
        row = session.prefill(ids)[-1]
        for _ in range(N_PREDICT):
            rows.append(row)
            greedy.append(int(row.argmax()))
            row = session.decode([greedy[-1]])[-1]
    assert done["tokens"] == greedy, (done["tokens"], greedy, done["content"])
    assert done["content"] == engine.detokenize(greedy)
    probs = done["completion_probabilities"]
    assert [p["id"] for p in probs] == greedy and all(len(p["top_logprobs"]) == 3 for p in probs)
    for p, row, token in zip(probs, rows, greedy):
        top = p["top_logprobs"]
        assert [t["id"] for t in top] == np.argsort(-row, kind="stable")[:3].tolist()
        # the server's softmax sums 49,152 exp() in float32 in an unspecified order
        # (tools/server/server-common.cpp, get_token_probabilities): its normaliser is good to ~1e-4 ...
        assert p["logprob"] == pytest.approx(log_softmax(row)[token], abs=1e-3)
        # ... but differences of log-probabilities are differences of logits, where it cancels:
        # the same logits as llama-cpp-python's, to float32 rounding of log()
        gaps = [top[0]["logprob"] - t["logprob"] for t in top[1:]]
        assert gaps == pytest.approx([float(row[top[0]["id"]]) - float(row[t["id"]]) for t in top[1:]], abs=1e-6)
