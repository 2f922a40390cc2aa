"""The ``openai`` engine against stub servers: the documented layouts of servers not run here, and broken servers.

vLLM (``prompt_logprobs``), SGLang (``/generate`` with ``return_logprob``) and TGI
(``/generate`` with ``top_n_tokens``) are not installed here: their stubs follow each
server's documentation (``server_stubs.py``). The broken servers shift their rows by one
position, return no log-probabilities, or tokenize differently; each must end in one
``error:`` line and exit status 2. Real servers: ``test_openai.py`` (llama-cpp-python's)
and ``test_openai_llama_server.py`` (llama.cpp's llama-server); real vLLM, SGLang and TGI
answers from public material, replayed: ``test_openai_real_responses.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logitlab.engines.variant import parse_variant
from logitlab.engines.workload import run_workload
from logitlab.errors import EngineError
from logitlab.experiments.isolation import load_engine, run_in_subprocess
from logitlab.models import default_model_path

from server_stubs import (ContentStub, DroppedEntryStub, NoLogprobsStub, SglangStub, Stub, TgiStub, VllmStub, dist,
                          stub_server)

pytestmark = pytest.mark.engine

PY = sys.executable
N_DECODE = 3


def variant(url: str, **options: object):
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return parse_variant(f"?{query}" if query else "", "control", default_engine=f"openai:{url}")


def ab_cli(url: str, tmp_path, *extra: str, prompt: str = "hello", quiet: bool = True) -> subprocess.CompletedProcess:
    """``logitlab ab`` against ``url``; ``quiet=False`` for a test that reads the report on stdout."""
    return subprocess.run([PY, "-m", "logitlab", "ab", "--engine", f"openai:{url}", "--prompt", prompt, "--tokens",
                           str(N_DECODE), "--repeats", "1", "--warmup", "0", *(["--quiet"] if quiet else []), *extra],
                          capture_output=True, text=True, cwd=tmp_path)


LAYOUTS = [  # stub, options, the server kind it answers as, the mode the probe must pick
    (VllmStub, {}, "vllm", "prompt_logprobs"),
    (SglangStub, {}, "sglang", "return_logprob"),
    (Stub, {}, "unknown", "echo"),
    (ContentStub, {}, "unknown", "teacher-forced"),
    (TgiStub, {"tokenizer": None}, "tgi", "teacher-forced"),
]


@pytest.mark.parametrize("cls, options, kind, mode", LAYOUTS, ids=[m for *_, m in LAYOUTS[:4]] + ["tgi"])
def test_each_documented_layout_is_probed_and_read_position_by_position(cls, options, kind, mode):
    options = {k: (default_model_path() if k == "tokenizer" else v) for k, v in options.items()}
    prompt_text = "count: one two" if cls is TgiStub else "hello"
    with stub_server(cls) as (url, handler):
        engine = load_engine(variant(url, **options))
        described = engine.describe()
        prompt = engine.tokenize(prompt_text)
        out = run_workload(engine, prompt, N_DECODE)
    assert (described["server"]["kind"], described["scoring"]["mode"]) == (kind, mode)
    assert described["scoring"]["probe_alignment"]["checked"]
    # the probe skipped the modes this server does not have, saying why
    skipped = [t["mode"] for t in described["scoring"]["tried_before"]]
    assert skipped == (["prompt_logprobs", "return_logprob"] if mode == "echo" else
                       ["prompt_logprobs", "return_logprob", "echo"] if kind == "unknown" else [])
    seq = prompt + out.generated
    assert out.input_ids == seq and len(out.generated) == N_DECODE
    model = TgiStub.dist if cls is TgiStub else dist
    # row p is the distribution after position p: its top-1 is the stub model's next token after seq[:p+1]
    for p, keys in enumerate(out.topk.keys):
        expected = max(model(seq[:p + 1]).items(), key=lambda kv: kv[1])[0]
        assert keys is not None and keys[0] == expected, (p, keys)
    assert out.topk.values[-1][:2] == (-0.25, -2.0)
    scoring = out.scoring
    assert scoring["mode"] == mode and scoring["positions"] == len(seq)
    assert scoring["requests"] == (len(seq) if mode == "teacher-forced" else 1)
    assert scoring["alignment"]["checked"] and scoring["alignment"]["agree"] == scoring["alignment"]["confident"]
    assert scoring["alignment"]["agree_shifted"] == {"-1": 0, "1": 0}


def test_tgi_is_sent_text_and_its_tokenization_is_checked():
    with stub_server(TgiStub) as (url, handler):
        engine = load_engine(variant(url, tokenizer=default_model_path()))
        out = run_workload(engine, engine.tokenize("count: one two"), N_DECODE)
    generates = [body for path, body in handler.requests if path == "/generate"]
    assert generates and all(isinstance(body["inputs"], str) for body in generates)
    assert all(body["parameters"]["decoder_input_details"] and body["parameters"]["top_n_tokens"] == 20
               for body in generates)
    assert out.generated == [TgiStub.word_ids()[i] for i in (2, 3, 4)]  # " three four five"


def test_forcing_a_mode_uses_it_and_a_mode_the_server_lacks_is_an_error():
    with stub_server(VllmStub) as (url, _):
        probed = load_engine(variant(url, logprobs=3))
        forced = load_engine(variant(url, logprobs=3, mode="teacher-forced"))
        prompt = probed.tokenize("hello")
        a = run_workload(probed, prompt, N_DECODE)
        b = run_workload(forced, prompt, N_DECODE, replay=a.generated)
    assert (a.scoring["mode"], b.scoring["mode"]) == ("prompt_logprobs", "teacher-forced")
    assert forced.describe()["scoring"]["chosen"] == "forced (mode=)"
    assert b.topk.keys == a.topk.keys and b.topk.same_bits(a.topk)  # two modes, one stub model: the same rows
    with stub_server(ContentStub) as (url, _):
        with pytest.raises(EngineError, match=r"supports none of the scoring modes tried — echo: echo=true gave "
                                              r"log-probabilities of 1 token\(s\) for a prompt of \d+ "
                                              r"\(the generated token only: echo ignored\)"):
            load_engine(variant(url, mode="echo"))


def test_rows_shifted_by_one_position_are_one_error_line_exit_2(tmp_path):
    """A server whose one-token answers score the prefix without its last token: teacher-forced rows off by one."""
    with stub_server(ContentStub, shifted=True) as (url, _):
        proc = ab_cli(url, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {url} in teacher-forced mode (probe: '1, 2, 3, 4, 5, 6,' + 4 greedy tokens): the scored rows do "
        "not line up with the server's own greedy completion: top-1 agrees at 0 of 4 positions where the completion "
        "was confident (gap ≥ 1 nats), first disagreement at position 16; they agree at 4 shifted by +1 position: "
        "the rows are off by one"]


SHIFTED = [  # a stub whose rows are off by one position, and the words the error must contain
    (DroppedEntryStub, {}, r"in echo mode \(probe: .*\): the scored rows do not line up with the server's own greedy completion: "
                           r"top-1 agrees at 0 of 4 positions .* they agree at 4 shifted by \+1 position"),
    (VllmStub, {"shift": 1}, r"prompt_logprobs does not line up with the tokens sent: entry 1 does not hold token "
                             r"\d+ \(\d+ of \d+ entries lack their token\); they hold the tokens shifted by \+1 position"),
]


@pytest.mark.parametrize("cls, attributes, message", SHIFTED, ids=["echo", "prompt_logprobs"])
def test_a_shift_is_caught_in_every_mode(cls, attributes, message):
    """An echo that drops the generated entry (N entries in the OpenAI meaning, read as llama-cpp-python's), and
    a prompt_logprobs list moved by one entry."""
    with stub_server(cls, **attributes) as (url, _):
        with pytest.raises(EngineError, match=message):
            load_engine(variant(url))


def test_server_without_logprobs_names_every_mode_tried_exit_2(tmp_path):
    with stub_server(NoLogprobsStub) as (url, _):
        proc = ab_cli(url, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: the server at {url} (unknown server) supports none of the scoring modes tried — prompt_logprobs: "
        "no choices[0].prompt_logprobs in the answer; return_logprob: HTTP 404: {\"detail\": \"Not Found\"}; echo: "
        "answered without logprobs; "
        "teacher-forced: answered without log-probabilities of the generated token; it must return "
        "log-probabilities of prompt tokens (echo, prompt_logprobs, return_logprob) or of a generated token "
        "(teacher-forced)"]


class ShiftedTokenizerStub(Stub):
    """Another tokenizer under the same model name: every id one higher."""

    def tokenize(self, body: dict) -> None:
        self.send({"tokens": [ord(c) - 31 for c in body.get("prompt") or body.get("content") or ""]})


def test_server_whose_tokenizer_disagrees_with_the_controls_is_one_error_line_exit_2(tmp_path):
    with stub_server(Stub) as (control, _), stub_server(ShiftedTokenizerStub) as (candidate, _):
        out = tmp_path / "ab.json"
        proc = ab_cli(control, tmp_path, "--candidate", f"openai:{candidate}", "--json", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: the tokenizers differ on the prompt at token position 0: control (openai) has id 72 'h', candidate "
        "(openai) has id 73 'i' (5 vs 5 tokens); cross-engine ab needs identical token ids: use the same model "
        "files, or a prompt both engines tokenize alike"]


def test_process_isolation_carries_the_topk_data_and_how_it_was_scored():
    with stub_server(Stub) as (url, _):
        v = variant(url, logprobs=3)
        engine = load_engine(v)
        prompt = engine.tokenize("hello")
        here = run_workload(engine, prompt, 2)
        there = run_in_subprocess(v, prompt, 2, None)
    assert there.topk is not None and there.same_bits(here) and there.generated == here.generated
    assert {k: v for k, v in there.scoring.items() if k != "seconds"} == \
        {k: v for k, v in here.scoring.items() if k != "seconds"}


def test_ab_json_keeps_scoring_and_row_offsets_per_run_and_renders_again(tmp_path):
    from logitlab import report
    from logitlab.experiments.ab import RunRecord
    from logitlab.jsonio import to_jsonable
    from logitlab.numerics.topk_offsets import RowOffsets

    saved, run_md, again_md = tmp_path / "ab.json", tmp_path / "run.md", tmp_path / "again.md"
    with stub_server(VllmStub) as (url, _):
        proc = ab_cli(url, tmp_path, "--json", str(saved), "--markdown", str(run_md), quiet=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(saved.read_text())
    reference, *others = data["runs"]
    assert reference["is_reference"] and reference["scoring"]["mode"] == "prompt_logprobs"
    assert reference["row_offsets"] is None  # nothing to compare the reference with
    for run in others:
        assert run["scoring"]["requests"] == 1 and run["comparison"]["differing_entries"] == 0
        offsets = run["row_offsets"]
        assert offsets["max_abs_offset"] == 0 and offsets["max_residual"] == 0
        assert offsets["positions"] == list(range(len(data["prompt_ids"]) + N_DECODE))
    assert data["manifest"]["engine"]["server"] == {"kind": "vllm", "build": "0.0.0-stub", "model_path": None,
                                                    "n_ctx": None, "slots": None, "asked": "GET /version"}
    assert "prompt_logprobs (probed): POST /v1/completions, 1 request per scoring" in proc.stdout
    # the saved result loads back typed and renders the same report (no server needed)
    result = report.load_result(data)
    assert all(isinstance(r, RunRecord) for r in result.runs)
    assert all(isinstance(r.row_offsets, RowOffsets) for r in result.runs[1:])
    assert to_jsonable(result.to_dict()) == data
    again = subprocess.run([PY, "-m", "logitlab", "report", str(saved), "--markdown", str(again_md)],
                           capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode == 0 and again_md.read_bytes() == run_md.read_bytes()
    assert "per-row offsets" in run_md.read_text() and "scoring, this run" in run_md.read_text()
