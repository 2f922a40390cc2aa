"""Real vLLM, SGLang and TGI answers, from public material, replayed against the ``openai`` engine's readers.

The stubs (``server_stubs.py``) answer in each server's *documented* layout; these
tests read answers those servers really gave (``tests/data/servers/``: where each
comes from, and what was trimmed, is in its ``SOURCES.md``). Their models are not
ours, so what is tested is the reading of the layout: the ids, the log-probabilities
at given positions, the top-k sets, the first-token nulls, and the checks that the
entries name or hold the tokens sent. Where a reader needs HTTP (a scoring mode, a
dialect), the body is served as recorded by :class:`server_stubs.ReplayStub`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logitlab.engines.servers.alignment import check_held_tokens, check_named_tokens
from logitlab.engines.servers.dialects import TgiDialect
from logitlab.engines.servers.http import ServerClient
from logitlab.engines.servers.layouts import completion_entries, sglang_entries, tgi_entries, vllm_prompt_entries
from logitlab.engines.servers.modes import ModeContext, ReturnLogprobMode
from logitlab.engines.topk import TopKRows
from logitlab.errors import EngineError

from server_stubs import ReplayStub, stub_server

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def test_every_fixture_is_cited():
    sources = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    for path in DATA.glob("*.json"):
        assert f"`{path.name}`" in sources, path.name


# -- vLLM ------------------------------------------------------------------------------------------------------------

def test_vllm_prompt_logprobs_entries_hold_the_prompt_token_even_far_outside_the_top_k():
    """vLLM 0.8.3 (V1), ``prompt_logprobs=1``: keys are ids as strings; an entry holds its prompt token besides
    the top 1 even at rank 2163, and the rows keep only the top k."""
    listed = recorded("vllm_prompt_logprobs_excerpt.json")["prompt_logprobs"]
    entries = vllm_prompt_entries(listed)
    assert [e.top for e in entries] == [
        {430: -0.26888129115104675},
        {279: -1.257411241531372, 281: -10.421473503112793},
        {604: -2.302626848220825, 613: -6.669814109802246},
    ]
    assert all(e.token is None and e.logprob is None for e in entries)  # the list does not say which one it scored
    # the prompt tokens are the ones held besides the top 1 (rank 1: it is the top 1 itself)
    check_held_tokens([e.top for e in entries], [430, 281, 613], where="prompt_logprobs")
    # the same entries moved up by one (a list off by one position): caught, and the shift named
    with pytest.raises(EngineError, match=r"entry 0 does not hold token 430 .* shifted by \+1 position"):
        check_held_tokens([e.top for e in entries[1:]] + [None], [430, 281, 613], where="prompt_logprobs")
    rows = TopKRows.from_mappings([e.top for e in entries], 1)
    assert rows.keys == ((430,), (279,), (604,))  # the held 281 (rank 2163) and 613 (rank 116) are dropped
    assert rows.values == ((-0.26888129115104675,), (-1.257411241531372,), (-2.302626848220825,))


def test_vllm_echo_in_the_legacy_layout_keyed_by_text():
    """vLLM 0.16.0, ``echo`` + ``logprobs=5`` without ``return_tokens_as_token_ids``: text keys, the first entry
    null, each entry holding its own token besides the top 5."""
    choice = recorded("vllm_completions_echo.json")["choices"][0]
    entries = completion_entries(choice)
    assert [e.token for e in entries] == ["The", " step", " of", " boiling"]
    assert [e.logprob for e in entries] == [None, -8.818763732910156, -1.552642822265625, -13.55989933013916]
    assert entries[0].top is None
    assert entries[1].top == {" step": -8.818763732910156, " is": -0.7875133752822876, " ": -1.9750133752822876,
                              " are": -2.600013256072998, " type": -4.100013256072998, ":": -4.350013256072998}
    assert all(e.token in e.top and e.top[e.token] == e.logprob for e in entries[1:])
    rows = TopKRows.from_mappings([e.top for e in entries], 5)
    assert rows.keys[1] == (" is", " ", " are", " type", ":")  # " step" (6th, not in the top 5) dropped
    assert rows.keys[2] == (" of", " in", " that", " response", "wise")  # a tie at -2.5526 keeps the answer's order
    assert rows.keys[3][0] == " the" and rows.values[3][0] == -0.23177461326122284


# -- SGLang ----------------------------------------------------------------------------------------------------------

SGLANG_INPUT = [6722, 315, 9625, 374]  # the input tokens the answer names (logprob_start_len 1 of 5)


def test_sglang_meta_info_triples_read_ids_logprobs_and_top_k():
    meta = recorded("sglang_generate_return_logprob.json")["meta_info"]
    entries = sglang_entries(meta, "input")
    assert [e.token for e in entries] == SGLANG_INPUT
    assert [e.logprob for e in entries] == [None, -0.58203125, -3.53125, -2.84375]  # the first: null
    assert entries[0].top is None
    assert entries[2].top == {279: -1.0390625, 9625: -3.53125, 5616: -3.96875}
    assert entries[3].top == {13: -2.09375, 58883: -2.34375, 11: -2.40625}  # 374 itself not in the top 3
    check_named_tokens([e.token for e in entries], SGLANG_INPUT, where="SGLang's input_token_logprobs")
    output = sglang_entries(meta, "output")
    assert [(e.token, e.logprob) for e in output] == [(12095, -0.73046875), (13, -0.9765625)]
    assert output[0].top == {12095: -0.73046875, 2130: -2.734375, 32671: -3.046875}


def test_sglang_return_logprob_mode_scores_the_recorded_answer_row_by_row():
    body = recorded("sglang_generate_return_logprob.json")
    with stub_server(ReplayStub, bodies={"/generate": body}) as (url, handler):
        ctx = ModeContext(ServerClient(url, retries=0), None, 3, None, "ids", list, "sglang")
        scored = ReturnLogprobMode(ctx).score(SGLANG_INPUT)
    asked = handler.requests[-1][1]
    assert asked["input_ids"] == SGLANG_INPUT and asked["return_logprob"] and asked["top_logprobs_num"] == 3
    # row i: the distribution after position i; the last row is the generated token's
    assert scored.rows == [{315: -0.58203125, 3283: -2.140625, 374: -3.765625},
                           {279: -1.0390625, 9625: -3.53125, 5616: -3.96875},
                           {13: -2.09375, 58883: -2.34375, 11: -2.40625},
                           {12095: -0.73046875, 2130: -2.734375, 32671: -3.046875}]
    with stub_server(ReplayStub, bodies={"/generate": body}) as (url, _):
        ctx = ModeContext(ServerClient(url, retries=0), None, 3, None, "ids", list, "sglang")
        with pytest.raises(EngineError, match=r"at position 1 it names 315, the sequence has 316"):
            ReturnLogprobMode(ctx).score([6722, 316, 9625, 374])


# -- TGI -------------------------------------------------------------------------------------------------------------

TGI_PROMPT = [1, 4321, 2009]  # "<s>", "Test", "request": the prefill TGI 2.x recorded


def tgi_dialect(url: str) -> TgiDialect:
    return TgiDialect(ServerClient(url, retries=0), 3, None, list, "tgi", detokenize=lambda ids: "Test request")


def test_tgi_details_prefill_and_generated_tokens():
    details = recorded("tgi_generate_prefill.json")["details"]
    prefill, generated = tgi_entries(details)
    assert [(e.token, e.logprob) for e in prefill] == [(1, None), (4321, -8.6875), (2009, -11.546875)]
    assert all(e.top is None for e in prefill)
    assert [e.token for e in generated] == [363, 847, 2754, 29914, 29894, 29896, 29914, 16418, 29914, 29896]
    assert generated[0].logprob == -1.5351562 and generated[3].logprob == -0.03414917
    assert all(e.top is None for e in generated)  # top_tokens null: no top_n_tokens was asked


def test_tgi_dialect_reads_a_recorded_generate_answer():
    with stub_server(ReplayStub, bodies={"/generate": recorded("tgi_generate_prefill.json")}) as (url, handler):
        generation = tgi_dialect(url).generate(TGI_PROMPT, 10)
    assert handler.requests[-1][1]["inputs"] == "Test request"
    assert generation.tokens == [363, 847, 2754, 29914, 29894, 29896, 29914, 16418, 29914, 29896]
    assert generation.text == " for /api/v1/projects/1" and generation.n_tokens == 10
    with stub_server(ReplayStub, bodies={"/generate": recorded("tgi_generate_prefill.json")}) as (url, _):
        with pytest.raises(EngineError, match=r"TGI's decoder_input_details .* at position 1 it names 4321"):
            tgi_dialect(url).generate([1, 4322, 2009], 10)


def test_tgi_3_without_prefill_logprobs_is_named_not_taken_for_a_tokenization_mismatch():
    """TGI 3.0 and later answer ``decoder_input_details`` with ``"prefill": []`` unless the server was started
    with ``--enable-prefill-logprobs`` (the same test's snapshot, before and after TGI's #2797)."""
    with stub_server(ReplayStub, bodies={"/generate": recorded("tgi_generate_prefill_off.json")}) as (url, _):
        with pytest.raises(EngineError, match=r"/generate answered decoder_input_details with no prefill tokens: "
                                              r"TGI 3.0 and later return them only when started with "
                                              r"--enable-prefill-logprobs"):
            tgi_dialect(url).generate(TGI_PROMPT, 10)
