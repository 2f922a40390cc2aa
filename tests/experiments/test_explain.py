"""``explain``: controls and one cause per position.

A toy engine gives each cause on purpose (crafted faults, deterministic
logits); the real embedded model on llama.cpp gives the flash-attention and
M=K cases.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from logitlab import report
from logitlab.engines import register_engine
from logitlab.engines.base import Engine, Session
from logitlab.engines.variant import parse_variant
from logitlab.errors import InputError
from logitlab.experiments.explain import CAUSES, ExplainConfig, ExplainResult, run_explain
from logitlab.experiments.prompts import DEFAULT_PROMPT
from logitlab.report.explain import position_lines
from conftest import CPU_AVX512

VOCAB = 64


def base_row(position: int, token: int) -> np.ndarray:
    """Deterministic logits with a clear top-2: top-1 at the higher id, top-2 (margin in [0, 1)) at the lower."""
    rng = np.random.default_rng(position * 1_000_003 + token)
    row = rng.normal(0, 1, VOCAB).astype(np.float32)
    a, b = sorted(rng.choice(VOCAB, 2, replace=False))
    row[b] = 6.0
    row[a] = 6.0 - rng.uniform(0.0, 1.0)
    return row


def noise(position: int, salt: int = 0) -> np.ndarray:
    return np.random.default_rng(77_000 + 31 * position + salt).normal(0, 1, VOCAB).astype(np.float32)


class ToySession(Session):
    """Options (all off by default):
      eps      every row + eps × noise(position): a deterministic change everywhere (the pair's floor)
      far, far_size   row ``far`` + far_size × noise(far, 1): one position far outside the floor
      tie      row ``tie``: its top-2 made exactly equal (the lower id wins the argmax)
      local    row ``local``: two entries moved by 0.8, the rest untouched
      nondet   every row + nondet × fresh random noise (differs on every run)
      batched  rows of calls with M > 1 (prefill and verify blocks) + batched × noise(position, 2)
      verify   rows of decode calls with M > 1 only (not prefill) + verify × noise(position, 3)
    """

    engine: "ToyEngine"

    def _prefill(self, tokens):
        return self._rows(tokens, prefill=True)

    def _decode(self, tokens):
        return self._rows(tokens, prefill=False)

    def _truncate(self, n_past):
        pass

    def _rows(self, tokens, prefill):
        o = self.engine.options
        rows = []
        for j, token in enumerate(tokens):
            p = self.n_past + j
            row = base_row(p, token)
            row = row + np.float32(o.get("eps", 0.0)) * noise(p)
            if o.get("far") == p:
                row = row + np.float32(o.get("far_size", 1.0)) * noise(p, 1)
            if o.get("tie") == p:
                top = np.argsort(row)[-2:]
                row[top] = row[top].max()
            if o.get("local") == p:
                row[[3, 4]] += np.float32(0.8)
            if o.get("nondet"):
                row = row + np.float32(o["nondet"]) * np.random.default_rng().normal(0, 1, VOCAB).astype(np.float32)
            if len(tokens) > 1 and o.get("batched"):
                row = row + np.float32(o["batched"]) * noise(p, 2)
            if len(tokens) > 1 and not prefill and o.get("verify"):
                row = row + np.float32(o["verify"]) * noise(p, 3)
            rows.append(row.astype(np.float32))
        return np.stack(rows)


class ToyEngine(Engine):
    name = "explain-toy"
    ABILITIES = frozenset({"logits", "sessions", "rollback"})
    OPTIONS = {key: (float, key) for key in ("eps", "far_size", "nondet", "batched", "verify")}
    OPTIONS.update({key: (int, key) for key in ("far", "tie", "local", "n_ctx")})

    def _load(self):
        pass

    def _open_session(self):
        return ToySession(self)

    def tokenize(self, text):
        return [ord(c) % VOCAB for c in text]

    def detokenize(self, tokens):
        return "".join(chr(48 + t % 64) for t in tokens)

    @property
    def n_vocab(self):
        return VOCAB

    @property
    def n_ctx(self):
        return self.options.get("n_ctx")


register_engine("explain-toy", f"{__name__}:ToyEngine")
PROMPT = "the quick brown fox jumps"  # 25 tokens


def explain(control="", candidate="", k=None, n=24, **kw):
    return run_explain(ExplainConfig(
        control=parse_variant(control, "control", default_engine="explain-toy"),
        candidate=None if k else parse_variant(candidate, "candidate", default_engine="explain-toy"),
        prompt=PROMPT, n_decode=n, k=k, dump=False, **kw))


def causes(result):
    return {e.position: e.cause for e in result.positions}


def test_one_position_far_outside_the_floor_is_a_kernel_path():
    result = explain("", "eps=0.0001,far=30,far_size=0.5")
    assert result.verdict.word == "divergent" and 30 in result.verdict.outside
    e = next(e for e in result.positions if e.position == 30)
    assert e.cause == "kernel-path", e.reason
    assert e.floor_factor > 100 and "another code path" in e.reason
    assert all(c.bit_exact for c in e.controls if c.available)  # deterministic, path- and width-invariant
    assert {c.control for c in e.controls} == {"rerun", "prefill vs decode", "alone vs in a batch", "M=1 vs M=4"}
    batch = next(c for c in e.controls if c.control == "alone vs in a batch")
    assert not batch.available and "does not run batches" in batch.note


def test_an_exact_tie_is_a_tie_break():
    result = explain("", "eps=0.0001,tie=33")
    e = next(e for e in result.positions if e.position == 33)
    assert e.exact_tie_obs and not e.exact_tie_ref and e.token_obs < e.token_ref
    assert e.cause == "tie-break" and "the first index wins" in e.reason


def test_a_change_confined_to_two_entries_is_a_bug():
    result = explain("", "local=28")
    assert result.verdict.word == "divergent" and result.verdict.outside == [28]
    e = result.positions[0]
    assert e.position == 28 and e.localized and e.differing_entries == 2
    assert e.cause == "bug" and "confined to 2 entries" in e.reason


def test_a_rerun_that_differs_is_nondeterministic():
    result = explain("", "nondet=0.3")
    assert result.positions, "the toy should flip near-ties"
    assert set(causes(result).values()) == {"nondeterministic"}
    e = result.positions[0]
    rerun = next(c for c in e.controls if c.control == "rerun" and c.side == "observed")
    assert rerun.available and not rerun.bit_exact


def test_verify_flips_that_prefill_also_makes_are_batch_variant():
    # every row computed in a call of M > 1 (prefill or verify) moves the same way: M=K rows equal prefill rows
    result = explain(k=4, control="batched=0.3")
    assert result.mode == "verify" and result.first_position == len(PROMPT)
    assert result.positions and set(causes(result).values()) == {"batch-variant"}, \
        [(e.position, e.cause, e.reason) for e in result.positions]
    e = result.positions[0]
    path = next(c for c in e.controls if c.control == "prefill vs decode" and c.side == "reference")
    assert not path.argmax_kept and path.accounts


def test_verify_flips_of_a_verify_only_kernel_are_width_variant():
    result = explain(k=4, control="verify=0.3")
    assert result.positions and set(causes(result).values()) == {"width-variant"}, \
        [(e.position, e.cause, e.reason) for e in result.positions]
    e = result.positions[0]
    path = next(c for c in e.controls if c.control == "prefill vs decode" and c.side == "reference")
    assert path.bit_exact  # prefill computes the row as M=1 does
    assert any(c.control == "M=1 vs M=4" and c.accounts for c in e.controls)


def test_near_ties_inside_the_floor_are_near_tie():
    result = explain("", "eps=0.1", n=40)
    assert result.verdict.word == "near-tie", result.verdict.evidence
    assert result.positions and set(causes(result).values()) == {"near-tie"}
    assert all(e.margin_ref < 0.5 and e.floor_factor <= 4 for e in result.positions)


def test_nothing_to_explain_and_limits():
    result = explain("", "")
    assert result.verdict.word == "bit-exact" and not result.positions
    assert result.notes == ["no argmax flip and no position outside the noise floor: nothing to explain"]
    limited = explain("", "eps=0.1", n=40, max_positions=2)
    assert len(limited.positions) == 2 and limited.candidates > 2


def test_report_json_round_trip_and_twenty_lines_per_position(tmp_path):
    result = explain("", "eps=0.0001,far=30,far_size=0.5")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["kind"] == "explain" and data["causes"] == result.causes()
    back = report.load_result(data)
    assert isinstance(back, ExplainResult) and back.positions[0].controls[0].control == "rerun"
    for e in back.positions:
        lines = position_lines(back, e)
        assert 8 <= len(lines) <= 20 and lines[0].startswith(f"position {e.position} (")
        assert lines[-1].startswith(f"cause: {e.cause} — ")
    md = report.markdown(back)
    assert md.startswith("## logitlab explain: **divergent**") and "kernel-path" in md


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 1}, "--k must be at least 2"),
    ({"k": 8, "n": 4}, "--k 8 exceeds --tokens 4: a verify block of K rows replays K decoded tokens"),
    ({"n": 0}, "--tokens must be at least 1"),
    ({"max_positions": 0}, "--max-positions must be at least 1"),
])
def test_bad_config(kwargs, message):
    with pytest.raises(InputError, match=message):
        explain(**kwargs)


def test_a_context_too_small_is_refused_before_any_run_naming_the_side():
    with pytest.raises(InputError, match=r"^the prompt \(25 tokens\) \+ --tokens 24 \+ 1 more = 50 exceeds the "
                                         r"candidate's context of 49 tokens; shorten the prompt or --tokens, or pass a "
                                         r"larger n_ctx=\.\.\. in the variant$"):
        explain("", "n_ctx=49")
    with pytest.raises(InputError, match=r"^the prompt \(25 tokens\) \+ --tokens 24 \+ 1 more = 50 exceeds the "
                                         r"context of 49 tokens; "):  # one engine (M=1 vs M=K): no side named
        explain("n_ctx=49", k=2)


def test_causes_are_the_issues_words():
    assert CAUSES == ("nondeterministic", "tie-break", "bug", "batch-variant", "width-variant", "kernel-path",
                      "near-tie")


# -- the real embedded model -----------------------------------------------------------------------
@pytest.mark.engine
def test_llamacpp_flash_attention_flips_are_explained():
    result = run_explain(ExplainConfig(
        control=parse_variant("n_threads_batch=1", "control", default_engine="llamacpp"),
        candidate=parse_variant("flash_attn=1,n_threads_batch=1", "candidate", default_engine="llamacpp"),
        prompt=DEFAULT_PROMPT, n_decode=8, max_positions=2, dump=False))
    assert result.verdict.word == "near-tie"
    positions = [e.position for e in result.positions]
    assert len(positions) == 2 and positions == sorted(positions)  # the first two flips of this workload
    if CPU_AVX512:  # measured on AVX-512; llama.cpp's AVX2 kernels flip other near ties
        assert positions == [33, 37]
    for e in result.positions:
        print("\n" + "\n".join(position_lines(result, e)))
        rerun = [c for c in e.controls if c.control == "rerun"]
        assert len(rerun) == 2 and all(c.bit_exact for c in rerun)  # llama.cpp on CPU reproduces itself
        assert e.floor_factor < 4 and e.cause in ("near-tie", "batch-variant")
    assert result.positions[0].cause == "near-tie"


def test_ab_explain_attaches_the_bundles_and_round_trips():
    from logitlab.experiments.ab import AbConfig, run_ab

    result = run_ab(AbConfig(control=parse_variant("", "control", default_engine="explain-toy"),
                             candidate=parse_variant("eps=0.0001,far=30,far_size=0.5", "candidate",
                                                     default_engine="explain-toy"),
                             prompt=PROMPT, n_decode=24, repeats=1, warmup=0, explain=4))
    assert result.verdict.word == "divergent" and result.verdict.outside == [30]
    assert [(e.position, e.cause) for e in result.explanation.positions] == [(30, "kernel-path")]
    back = report.load_result(json.loads(json.dumps(result.to_dict())))
    assert back.explanation.positions[0].cause == "kernel-path"
    md = report.markdown(back)
    assert "why (explain: controls per position)" in md and "cause: kernel-path — top-k Δ spread" in md
    quiet = run_ab(AbConfig(control=parse_variant("", "control", default_engine="explain-toy"),
                            candidate=parse_variant("", "candidate", default_engine="explain-toy"),
                            prompt=PROMPT, n_decode=8, repeats=1, warmup=0, explain=4))
    assert quiet.verdict.word == "bit-exact" and quiet.explanation is None  # nothing to explain: not run
