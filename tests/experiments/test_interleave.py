"""Interleaved decode steps (logitlab.experiments.interleave): the turn order, the planted slowdown's size, pinning,
bad input; on the fake engine (a known speed) and on the real embedded model, both arms supervised."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import FakeEngine, FakeSession

from logitlab.engines.supervised import call_engine, load_supervised
from logitlab.engines.variant import Variant
from logitlab.engines.workload import run_workload
from logitlab.errors import InputError
from logitlab.experiments import interleave
from logitlab.experiments.interleave import (close_stream, interleaved_block, open_stream, pin_process, renew_engine,
                                             warm_engine)

PROMPT = "The capital of France is Paris. The capital of Italy is"


class _LoggedSession(FakeSession):
    def _decode(self, tokens):
        self.engine.log.append((self.engine.options["arm"], len(tokens), self.n_past))
        return super()._decode(tokens)


class _LoggedEngine(FakeEngine):
    """The fake engine, every decode call logged (arm, tokens, position) in one list both arms share."""

    OPTIONS = {**FakeEngine.OPTIONS, "arm": (str, "name in the log")}
    log: list = []

    def _open_session(self):
        return _LoggedSession(self)


def _pair(sleep: float = 0.0):
    _LoggedEngine.log = []
    return (_LoggedEngine(model=None, options={"arm": "A", "sleep": sleep}),
            _LoggedEngine(model=None, options={"arm": "B", "sleep": sleep}))


@pytest.mark.parametrize("pattern", ["ABBA", "BAAB"])
@pytest.mark.parametrize("chunk", [1, 3])
def test_turns_follow_the_pattern_at_the_chunk_level_and_both_arms_decode_every_token_once(pattern, chunk):
    control, candidate = _pair()
    block = interleaved_block(control, candidate, [5, 6, 7], list(range(10, 22)), pattern=pattern, chunk=chunk)
    log = _LoggedEngine.log
    assert [arm for arm, n, _ in log[:2]] == list(pattern[:2])  # the prefills, in the pattern's order
    assert [n for _, n, _ in log[:2]] == [3, 3]
    turns = log[2:]
    assert all(n == 1 for _, n, _ in turns)
    # each arm's steps in order, positions 3..14, every token once
    for arm in "AB":
        assert [p for a, _, p in turns if a == arm] == list(range(3, 15))
    # the arms take turns of `chunk` steps in the pattern's order, ABBA ABBA ...; a turn is cut where the arm is done
    expected, done = [], {"A": 0, "B": 0}
    for i in range(2 * math.ceil(12 / chunk)):
        arm = pattern[i % 4]
        count = min(chunk, 12 - done[arm])
        expected += [arm] * count
        done[arm] += count
    assert [arm for arm, _, _ in turns] == expected
    assert block.control_steps.shape == block.candidate_steps.shape == (12,)
    assert block.control_steps.dtype == np.float64
    assert block.n_prompt == 3 and block.pattern == pattern and block.chunk == chunk


def test_adjacent_turns_of_one_arm_run_back_to_back_and_alternate_in_abba_order():
    control, candidate = _pair()
    interleaved_block(control, candidate, [1], list(range(8)), pattern="ABBA", chunk=1)
    arms = "".join(arm for arm, _, _ in _LoggedEngine.log[2:])
    assert arms == "ABBAABBAABBAABBA"


def test_the_planted_slowdown_is_at_least_its_size_in_wall_time_and_only_on_the_candidate():
    control, candidate = _pair(sleep=0.004)  # a known speed: 4 ms a token
    block = interleaved_block(control, candidate, [1, 2], list(range(8)), chunk=2, clock="wall", plant=0.5)
    ratio = block.candidate_steps / block.candidate_engine_steps
    # busy-waited to 1.5x the step's own time: never less (more where the wait was pre-empted: the wall clock
    # counts that; the real test below checks the upper side in CPU time, which does not)
    assert np.all(ratio >= 1.5)
    assert np.all(block.candidate_engine_steps >= 0.004)
    assert np.all(block.control_steps >= 0.004)  # the control's steps are the engine's: not planted
    assert block.decode_log_ratio() == pytest.approx(
        math.log(block.control_steps.sum() / block.candidate_steps.sum()))


def test_two_engines_in_this_process_pinned_for_the_steps_give_the_process_its_own_cpus_back():
    before = os.sched_getaffinity(0)
    interleaved_block(*_pair(), [1], [1, 2, 3, 4], cpus=[max(before)])
    assert os.sched_getaffinity(0) == before


def test_without_a_plant_the_candidates_steps_are_its_engines():
    control, candidate = _pair(sleep=0.001)
    block = interleaved_block(control, candidate, [1], list(range(4)))
    np.testing.assert_array_equal(block.candidate_steps, block.candidate_engine_steps)


def test_the_block_for_the_analysis_is_each_arms_halves_in_slot_order():
    control, candidate = _pair(sleep=0.002)
    block = interleaved_block(control, candidate, [1], list(range(6)), pattern="BAAB", plant=1.0)
    analysed = block.decode_block()
    a, b = block.control_steps, block.candidate_steps
    assert analysed.pattern == "BAAB"
    assert analysed.values == pytest.approx((3 / b[:3].sum(), 3 / a[:3].sum(), 3 / a[3:].sum(), 3 / b[3:].sum()))
    assert block.prefill_block()[0] == pytest.approx(1 / block.prefill_seconds[0])


@pytest.mark.parametrize("kwargs, message", [
    ({"pattern": "AB"}, "pattern must be one of ABBA, BAAB"),
    ({"clock": "tsc"}, "clock must be one of wall, cpu"),
    ({"chunk": 0}, "chunk must be a positive integer"),
    ({"chunk": True}, "chunk must be a positive integer"),
    ({"plant": -0.1}, "plant must be a finite fraction >= 0"),
    ({"plant": float("nan")}, "plant must be a finite fraction >= 0"),
    ({"cpus": []}, "cpus must be a non-empty set of this machine's CPUs"),
    ({"cpus": [10_000]}, "cpus must be a non-empty set of this machine's CPUs"),
])
def test_bad_arguments_are_one_input_error_before_anything_runs(kwargs, message):
    control, candidate = _pair()
    with pytest.raises(InputError, match=message):
        interleaved_block(control, candidate, [1], [1, 2], **kwargs)
    assert _LoggedEngine.log == []


@pytest.mark.parametrize("prompt, tokens, message", [
    ([], [1, 2], "the prompt needs at least one token"),
    ([1], [1, 2, 3], "an even number of steps, at least 2; got 3"),
    ([1], [], "an even number of steps, at least 2; got 0"),
])
def test_a_workload_that_cannot_be_halved_is_refused(prompt, tokens, message):
    with pytest.raises(InputError, match=message):
        interleaved_block(*_pair(), prompt, tokens)


class _NoSessions(FakeEngine):
    """An engine that declares no sessions (as ``openai``: whole requests only)."""

    ABILITIES = frozenset({"logits"})


def test_an_engine_without_sessions_is_refused_by_name():
    with pytest.raises(InputError, match="the candidate's engine has no sessions"):
        interleaved_block(FakeEngine(model=None), _NoSessions(model=None), [1], [1, 2])


@pytest.fixture(scope="module")
def real_pair():
    control = load_supervised(Variant("control", "llamacpp"))
    candidate = load_supervised(Variant("candidate", "llamacpp"))
    yield control, candidate
    control.close()
    candidate.close()


@pytest.mark.engine
def test_real_engines_supervised_a_planted_slowdown_is_exact_in_cpu_time_and_pinning_is_undone(real_pair):
    control, candidate = real_pair
    ids = control.tokenize(PROMPT)
    tokens = control.run_workload(ids, 8).generated
    before = call_engine(control, pin_process, sorted(os.sched_getaffinity(0)), phase="affinity")
    last = [max(before)]
    block = interleaved_block(control, candidate, ids, tokens, chunk=2, clock="cpu", plant=0.25, cpus=last)
    ratio = block.candidate_steps / block.candidate_engine_steps
    assert np.all(ratio >= 1.25) and np.all(ratio < 1.27)
    assert np.all(block.control_steps > 0) and np.all(np.isfinite(block.control_steps))
    assert all(s > 0 for s in block.prefill_seconds)
    # each worker's affinity is its own again after the block
    for engine in real_pair:
        assert call_engine(engine, pin_process, before, phase="affinity") == before
    # and during the steps it was the CPUs asked for: a worker pinned by hand reports them back
    assert call_engine(candidate, pin_process, last, phase="pin") == before
    assert call_engine(candidate, pin_process, before, phase="unpin") == last


@pytest.mark.engine
def test_real_engines_an_aa_block_decodes_the_same_tokens_at_about_the_same_speed(real_pair):
    control, candidate = real_pair
    ids = control.tokenize(PROMPT)
    tokens = control.run_workload(ids, 16).generated
    block = interleaved_block(control, candidate, ids, tokens, pattern="BAAB", chunk=4, clock="cpu")
    assert block.control_steps.shape == (16,)
    assert abs(block.decode_log_ratio()) < math.log(1.5)  # a loose sanity bound: the same engine on both sides


@pytest.mark.engine
def test_renewing_an_engine_loads_a_new_object_closes_its_streams_and_changes_no_logit():
    from logitlab.engines import engine_class

    engine = engine_class("llamacpp")(model=None, options={})
    try:
        ids = engine.tokenize(PROMPT)
        before = run_workload(engine, ids, 4)
        first = engine.llama
        open_stream(engine, "control", ids, "cpu")
        session = interleave._STREAMS["control"]
        renew_engine(engine, ids, 3)
        assert engine.llama is not None and engine.llama is not first
        assert session._closed and "control" not in interleave._STREAMS
        after = run_workload(engine, ids, 4)
        assert after.generated == before.generated
        assert np.array_equal(after.logits, before.logits)
    finally:
        close_stream(engine, "control")
        engine.close()


@pytest.mark.engine
def test_real_engines_supervised_renewed_or_warmed_in_their_workers_still_give_the_same_run_and_a_block(real_pair):
    control, candidate = real_pair
    ids = control.tokenize(PROMPT)
    before = control.run_workload(ids, 8)
    call_engine(control, renew_engine, ids, 3, phase="renew")
    call_engine(candidate, warm_engine, ids, 3, phase="warm-up")
    after = control.run_workload(ids, 8)
    assert after.generated == before.generated and np.array_equal(after.logits, before.logits)
    block = interleaved_block(control, candidate, ids, before.generated, chunk=2, clock="cpu")
    assert block.control_steps.shape == block.candidate_steps.shape == (8,)
    assert np.all(block.candidate_steps > 0)
