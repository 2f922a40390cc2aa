"""The ``openai`` engine against llama.cpp's own ``llama-server``, built from the installed llama-cpp-python's sources.

llama-server ignores ``echo`` and has no prompt log-probabilities: the engine must
find that out (the probe), score teacher-forced over its native ``/completion``
(``n_probs``, prefix cache pinned to one slot: one new token evaluated per request),
read its ids, and name its build (``/props``) in the manifest. Same kernels, same
batch shapes (``-fa off``; the in-process llamacpp engine with ``n_batch=1``, i.e. every
position an M=1 evaluation as over the prefix cache) must come out ULP-level on the
returned top-k once the per-row normaliser is taken out.

Every server is started here on 127.0.0.1 (``tests/peers.py``) and stopped when the
module ends. Marked ``peers``: without the tools (``make tools``) these tests fail.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logitlab.engines.variant import parse_variant
from logitlab.errors import EngineError
from logitlab.experiments.ab import AbConfig, run_ab
from logitlab.experiments.isolation import load_engine

from conftest import CPU_AVX512, SHORT_PROMPT
from peers import http_json, llama_server

pytestmark = [pytest.mark.peers, pytest.mark.engine]

N_DECODE = 8
#: llama-server flags that match llama-cpp-python's defaults where the kernels are concerned: flash attention off
#: (the tools default to "auto", on for the CPU); one slot, one thread (a busy 2-core machine)
SERVER = ["-c", "256", "-np", "1", "-t", "1", "-tb", "1"]


@pytest.fixture(scope="module")
def servers(model_path, tmp_path_factory):
    """Two llama-servers on the embedded model: flash attention off (``off``) and on (``on``); their root URLs."""
    logs = tmp_path_factory.mktemp("llama-server")
    with llama_server(model_path, logs, SERVER + ["-fa", "off"]) as off, \
            llama_server(model_path, logs, SERVER + ["-fa", "on"]) as on:
        yield {"off": off, "on": on}


def variant(root: str, label: str, **options: object):
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return parse_variant(f"?{query}" if query else "", label, default_engine=f"openai:{root}/v1")


def config(control, candidate) -> AbConfig:
    return AbConfig(control=control, candidate=candidate, prompt=SHORT_PROMPT, n_decode=N_DECODE, repeats=1, warmup=0)


def test_cli_aa_is_bit_exact_teacher_forced_with_the_build_in_the_manifest(servers, tmp_path):
    root = servers["off"]
    out = tmp_path / "aa.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "ab", "--engine", f"openai:{root}/v1", "--prompt",
                           SHORT_PROMPT, "--tokens", str(N_DECODE), "--repeats", "1", "--warmup", "0", "--json",
                           str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    props = http_json(root + "/props")
    engine = data["manifest"]["engine"]
    assert engine["server"]["kind"] == "llama-server" and engine["server"]["build"] == props["build_info"]
    assert engine["server"]["model_path"] == props["model_path"] and engine["server"]["n_ctx"] == 256
    assert engine["engine_version"].startswith(f"llama-server {props['build_info']} at {root}/v1")
    scoring = engine["scoring"]
    assert (scoring["mode"], scoring["chosen"], scoring["tried_before"]) == ("teacher-forced", "probed", [])
    assert scoring["endpoint"].startswith("POST /completion (llama-server native")
    assert scoring["probe_alignment"]["checked"] and scoring["probe_alignment"]["agree"] == 4
    assert data["verdict"]["word"] == "bit-exact" and data["aa"]["control_reproducible"]
    n_positions = len(data["prompt_ids"]) + N_DECODE
    for run in data["runs"]:
        # one request per position, each evaluating exactly one new token on the previous one's KV cache
        assert run["scoring"]["requests"] == n_positions and run["prefill_tokens"] == n_positions
        assert run["scoring"]["evaluated_per_request"] == {"1": n_positions}
        assert run["scoring"]["alignment"]["checked"]
    assert data["runs"][1]["comparison"]["positions_missing"] == []  # every position, the first included
    text = " ".join(proc.stdout.replace("│", " ").split())  # the terminal report, unwrapped
    assert f"teacher-forced: {n_positions} requests for {n_positions} positions" in text
    assert "each evaluated 1 new token (the server's count)" in text


def test_flash_attention_off_vs_on_is_a_near_tie_not_a_normaliser_offset(servers):
    result = run_ab(config(variant(servers["off"], "control"), variant(servers["on"], "candidate")))
    assert result.control_reproducible and result.candidate_reproducible is not False
    run = next(r for r in result.runs if r.slot == result.verdict_slot)
    c = run.comparison
    assert result.verdict.word == "near-tie", result.verdict.evidence
    assert c.differing_rows > 0 and all(f["margin_ref"] < 0.5 for f in c.flips)
    # other kernels: the within-row differences (logit gaps) move, not only the normaliser
    assert run.row_offsets.max_residual > 1e-3 and run.row_offsets.max_residual_ulp > 100
    assert result.manifest["candidate_engine"]["server"]["kind"] == "llama-server"


def test_llamacpp_in_process_vs_llama_server_is_ulp_level_with_the_same_batch_shapes(servers):
    """llamacpp with n_batch=1 (every position an M=1 decode) vs teacher-forced llama-server (every request one
    new token over its prefix cache): the same kernels on the same shapes. Their log-softmax normalisers differ
    per row (float64 here, float32 in the server's order); taken out, the returned top-k agree to ≤ 1 ULP."""
    same = run_ab(config(parse_variant("n_batch=1,n_threads=1,n_threads_batch=1", "control",
                                       default_engine="llamacpp"), variant(servers["off"], "candidate")))
    run = next(r for r in same.runs if r.slot == same.verdict_slot)
    assert same.verdict.word in ("bit-exact", "ulp-noise"), same.verdict.evidence
    assert run.comparison.argmax_agreement == 1.0 and run.comparison.max_ulp <= 1
    assert run.row_offsets.max_residual_ulp <= 1 and 0 < run.row_offsets.max_abs_offset < 1e-3
    assert run.scoring["evaluated_per_request"] == {"1": run.prefill_tokens}
    # the default llamacpp prefill evaluates the prompt in one batch of n_prompt rows: other shapes, other
    # roundings in the prompt's rows and the KV cache after them; the comparison sees it
    batched = run_ab(config(parse_variant("n_threads=1,n_threads_batch=1", "control", default_engine="llamacpp"),
                            variant(servers["off"], "candidate")))
    other = next(r for r in batched.runs if r.slot == batched.verdict_slot)
    print(f"\nllamacpp (one prompt batch) vs llama-server: {batched.verdict.word}; "
          f"flips {len(other.comparison.flips)}, max |Δ| {other.comparison.max_abs_diff:.3g}")
    # other batch shapes, other roundings: noise, or a flip at a near tie (measured: near-tie, 1 flip, max |Δ| 0.71)
    assert other.row_offsets.max_residual > 1e-3 and batched.verdict.word in ("noise", "near-tie"), \
        batched.verdict.evidence


def test_echo_forced_on_llama_server_is_an_error_that_says_echo_was_ignored(servers):
    with pytest.raises(EngineError, match=r"\(llama-server .*\) supports none of the scoring modes tried — echo: "
                                          r"echo=true gave log-probabilities of 1 token\(s\) for a prompt of \d+ "
                                          r"\(the generated token only: echo ignored\)"):
        load_engine(variant(servers["off"], "control", mode="echo"))


def test_llama_servers_normaliser_depends_on_the_k_asked(servers):
    """Its softmax sums expf over the vocabulary in the order std::partial_sort for the top k leaves
    (tools/server/server-common.cpp, get_token_probabilities): another k can give another float32 sum, so the
    log-probabilities move by a per-row constant while the gaps (logit differences) stay. Both sides of an A/A
    must therefore ask the same k (the engine always asks ``logprobs``, default 20)."""
    ids = load_engine(variant(servers["off"], "control")).tokenize(SHORT_PROMPT)
    moved, gap_spread = 0, 0.0
    for n in range(1, len(ids) + 1):
        rows = [http_json(servers["off"] + "/completion", {"prompt": ids[:n], "n_predict": 1, "n_probs": k,
                                                           "temperature": 0, "id_slot": 0})
                ["completion_probabilities"][0]["top_logprobs"] for k in (2, 100)]
        moved += rows[0][0]["logprob"] != rows[1][0]["logprob"]
        gaps = [row[0]["logprob"] - row[1]["logprob"] for row in rows]
        gap_spread = max(gap_spread, abs(gaps[0] - gaps[1]))
    assert moved > 0 and gap_spread < 1e-6, (moved, gap_spread)


def test_invariance_matrix_runs_determinism_and_skips_the_axes_a_server_cannot_run(servers, tmp_path):
    """``invariance matrix`` against llama-server (few tokens): determinism runs (R runs teacher-forced, compared
    on the returned top-k, bit-exact: one slot, prefix cache reset before each scoring); batch, prefill-decode,
    chunked-prefill, threads, verify and process are listed as skipped, with the reason, not run and not a crash."""
    out, page = tmp_path / "m.json", tmp_path / "m.html"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "invariance", "matrix", "--engine",
                           f"openai:{servers['off']}/v1", "--prompt", SHORT_PROMPT, "--tokens", "3", "--runs", "3",
                           "--axes", "determinism,batch,prefill-decode,chunked-prefill,threads,verify,process",
                           "--json", str(out), "--html", str(page), "--require", "bit-exact"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    summary = {a["axis"]: a for a in data["axes_summary"]}
    assert summary["determinism"]["status"] == "invariant" and summary["determinism"]["verdict"] == "bit-exact"
    assert summary["determinism"]["distinct"][0] | {"prompt": None} == {"prompt": None, "runs": 3, "logits": 1,
                                                                        "texts": 1}
    (probe,) = data["axes"][0]["probes"]
    assert probe["checks"][0]["comparison"]["scope"] == "top-k"
    assert summary["determinism"]["rows"] == len(probe["prompt_ids"]) + 3
    assert {a: s["skipped"] for a, s in summary.items() if s["status"] == "skipped"} == {
        "batch": "the openai engine does not declare the 'batch' ability",
        "prefill-decode": "the openai engine does not declare the 'sessions' ability",
        "chunked-prefill": "the openai engine does not declare the 'chunked-prefill' ability",
        "threads": "the openai engine does not declare the 'threads' ability",
        "verify": "the openai engine does not declare the 'sessions' ability",
        "process": "the openai engine runs each workload out of process by itself (a command run, a server request): "
                   "there is no engine process of logitlab's to start fresh or keep warm"}
    assert data["manifest"]["engine"]["server"]["kind"] == "llama-server"
    assert "the runs are compared on those (not on full logits)" in " ".join(proc.stdout.split())
    assert 'data-kind="invariance-matrix"' in page.read_text()


def test_a_prefix_cache_hit_that_changes_the_greedy_text_is_not_invariant(servers, tmp_path):
    """Measured on this server: run 1 generates the 17-token prompt's continuation cold, later runs hit the prefix
    cache and pick another token at decode step 4 (" had spent" vs " spent"), while every run's teacher-forced
    scores are bit-exact up to that token. The determinism axis reads "2 unique greedy texts" and is not invariant;
    --require bit-exact fails on it (it read invariant before: the compared rows are bit-exact)."""
    prompt = "The lighthouse keeper had kept a journal for thirty years. Every evening he wrote down the"
    out = tmp_path / "m.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "invariance", "matrix", "--engine",
                           f"openai:{servers['off']}/v1", "--axes", "determinism", "--prompt", prompt, "--tokens", "8",
                           "--runs", "3", "--quiet", "--json", str(out), "--require", "bit-exact"],
                          capture_output=True, text=True, cwd=tmp_path)
    data = json.loads(out.read_text())
    (probe,) = data["axes"][0]["probes"]
    if not CPU_AVX512 and probe["details"]["distinct_texts"] == 1:
        # this CPU's kernels give the hits the miss's tokens (an AVX2-only AMD EPYC, 2026-12-05: one text, the rows
        # bit-exact): then the axis must read what it compared, and --require bit-exact follow it
        assert (probe["status"] == "invariant") == (probe["verdict"]["word"] == "bit-exact"), probe
        assert proc.returncode == (0 if probe["status"] == "invariant" else 1), proc.stderr
        return
    assert probe["details"]["distinct_texts"] == 2 and probe["details"]["text_groups"][0]["runs"] == [1]
    assert probe["verdict"]["word"] == "bit-exact" and probe["status"] == "not invariant"
    assert probe["generation_differs"].startswith("2 unique greedy texts of 3 runs")
    assert data["status"] == "not invariant"
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        "error: not invariant: determinism: 2 unique greedy texts of 3 runs"), proc.stderr


#: The 17-token prompt of stop 49 (the first 17 tokens of the built-in prompt).
PROMPT_17 = "The lighthouse keeper had kept a journal for thirty years. Every evening he wrote down the"


@pytest.fixture(scope="module")
def parallel(model_path, tmp_path_factory):
    """A llama-server with 4 slots (``-np 4``, 256 tokens of context each): room for 3 requests beside a measured
    one; its root URL."""
    with llama_server(model_path, tmp_path_factory.mktemp("llama-server-np4"),
                      ["-c", "1024", "-np", "4", "-t", "1", "-tb", "1", "-fa", "off"]) as url:
        yield url


def test_server_axes_run_concurrent_requests_and_a_prefix_cache_hit_vs_a_miss(parallel, tmp_path):
    """``--axes concurrent,prefix-cache`` against a 4-slot llama-server, two prompts, 3 runs each.

    concurrent: run 1 alone, runs 2..3 each while 2 other requests (other prompts, slots 1..2) are in flight; the
    numbers are reported (measured here: bit-exact, 1 unique array of 3 runs: llama.cpp's CPU kernels gave the
    same rows for the measured slot's tokens batched with the others').
    prefix-cache: the stop-49 finding on its own axis: on the 17-token prompt, the request on a miss (the whole
    prompt evaluated in one batch) generates " number of hours he had spent at the", both hits (16 tokens from the
    cache, the last one evaluated alone) " number of hours he spent at the lighthouse": a different token at
    decode step 4, and the generation's rows differ from the first decode step on."""
    out, md = tmp_path / "m.json", tmp_path / "m.md"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "invariance", "matrix", "--engine",
                           f"openai:{parallel}/v1", "--axes", "concurrent,prefix-cache", "--prompt", PROMPT_17,
                           "--prompt", SHORT_PROMPT, "--tokens", "8", "--runs", "3", "--background", "2", "--quiet",
                           "--json", str(out), "--markdown", str(md)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    data = json.loads(out.read_text())
    summary = {a["axis"]: a for a in data["axes_summary"]}
    assert [a["axis"] for a in data["axes_summary"]] == ["concurrent", "prefix-cache"]
    # concurrent: every probe ran 3 runs, the loaded ones beside background requests that were answered
    concurrent = data["axes"][0]
    for probe in concurrent["probes"]:
        assert probe["details"]["runs"] == 3 and probe["details"]["alone"] == [1]
        assert probe["details"]["under_load"] == [2, 3] and probe["details"]["background"] == 2
        assert [load["errors"] for load in probe["details"]["loads"]] == [[], []]
        assert all(load["completed"] >= 1 for load in probe["details"]["loads"]), probe["details"]["loads"]
        assert probe["checks"] and probe["checks"][0]["comparison"]["scope"] == "top-k"
    assert summary["concurrent"]["rows"] > 0 and summary["concurrent"]["verdict"] is not None
    assert [d["runs"] for d in summary["concurrent"]["distinct"]] == [3, 3]
    # prefix-cache: the 17-token prompt's miss and hits part at decode step 4
    probe17, probe12 = data["axes"][1]["probes"]
    assert probe17["details"]["miss"] == [1] and probe17["details"]["hit"] == [2, 3]
    text = md.read_text()
    assert "| prefix-cache |" in text and "run 1 a prefix-cache miss vs runs 2..3 hits" in text
    if not CPU_AVX512 and len(probe17["details"]["text_groups"]) == 1:
        # an AVX2-only AMD EPYC (2026-12-05): the hits give the miss's tokens here; the axis reads what it compared
        print("prefix-cache, 17 tokens:", probe17["verdict"]["word"], probe17["status"])
        assert (probe17["status"] == "invariant") == (probe17["verdict"]["word"] == "bit-exact"), probe17
        return
    assert probe17["details"]["text_groups"] == [
        {"runs": [1], "text": " number of hours he had spent at the"},
        {"runs": [2, 3], "text": " number of hours he spent at the lighthouse"}]
    (check,) = probe17["checks"]
    assert check["name"] == "runs 2, 3" and check["details"]["first_differing_token"] == 4
    assert check["details"]["rows_compared"] == 5  # decode steps 0..4: the row that chose the other token included
    # the hits' argmax at decode step 4 flips where the miss's top two were 0.094 apart
    assert probe17["status"] == "not invariant" and probe17["verdict"]["word"] == "near-tie"
    first = summary["prefix-cache"]["first_divergence"]
    assert first["prompt"] == "prompt-1" and first["check"] == "runs 2, 3"
    print(f"prefix-cache, 17 tokens: {probe17['verdict']['word']}, first differing row: decode step "
          f"{first['position']}; 12 tokens: {probe12['verdict']['word']}, "
          f"{probe12['details']['distinct_texts']} greedy text(s)")
    assert "| prefix-cache |" in text and "decode step" in text
    assert "run 1 a prefix-cache miss vs runs 2..3 hits" in text


def test_concurrent_is_skipped_with_its_reason_on_a_one_slot_server(servers, tmp_path):
    """The openai engine declares concurrent requests, but a llama-server with one slot cannot run any beside the
    measured one: the axis is skipped with the reason (start it with --parallel), nothing is compared."""
    out = tmp_path / "m.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "invariance", "matrix", "--engine",
                           f"openai:{servers['off']}/v1", "--axes", "concurrent", "--prompt", SHORT_PROMPT,
                           "--tokens", "2", "--quiet", "--json", str(out)], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (axis,) = json.loads(out.read_text())["axes_summary"]
    assert axis["status"] == "skipped" and axis["skipped"] == (
        f"the server at {servers['off']}/v1 has 1 slot(s): 3 background request(s) beside the measured one need 4 "
        "(llama-server --parallel 4)")
