"""The supervised engine's logits buffer: a run's logits cross from the worker through one file mapped for the
worker's life, copied out once here (issue #29's cost).

A crash in the worker is tested in tests/experiments/test_crashes.py; here, that what comes back is the engine's
own logits, bit for bit, as the buffer grows and (for large runs) is given back.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from logitlab.engines import supervised
from logitlab.engines.supervised import load_supervised
from logitlab.engines.variant import Variant
from logitlab.engines.workload import run_workload
from logitlab.experiments.isolation import load_engine

from conftest import SHORT_PROMPT

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engines():
    variant = Variant("control", "llamacpp")
    plain, worker = load_engine(variant), load_supervised(variant)
    yield plain, worker
    plain.close()
    worker.close(wait=True)


def test_runs_of_growing_and_shrinking_size_come_back_bit_exact_and_owned(engines):
    plain, worker = engines
    prompt = plain.tokenize(SHORT_PROMPT)
    outputs = []
    for n_decode in (2, 9, 4):  # the buffer grows for the second run; the third uses its first rows
        expected = run_workload(plain, prompt, n_decode)
        got = worker.run_workload(prompt, n_decode, expected.generated)
        assert got.logits.shape == (len(prompt) + n_decode, plain.n_vocab) and got.logits.dtype == np.float32
        assert got.same_bits(expected), f"supervised run of {n_decode} decode tokens differs from the engine's own"
        assert got.logits.flags.owndata and got.logits.flags.writeable
        outputs.append(got)
    # an earlier run is not overwritten by a later one that reused the buffer
    again = run_workload(plain, prompt, 2)
    assert outputs[0].same_bits(again)
    buffer = worker._folder / "logits.f32"
    assert os.stat(buffer).st_size == (len(prompt) + 9) * plain.n_vocab * 4  # grown to the largest run, kept
    assert os.stat(buffer).st_blocks * 512 >= (len(prompt) + 4) * plain.n_vocab * 4  # its pages stay for the next


def test_a_large_run_s_pages_are_given_back_once_copied(engines, monkeypatch):
    plain, worker = engines
    prompt = plain.tokenize(SHORT_PROMPT)
    monkeypatch.setattr(supervised, "KEEP_BUFFER_BYTES", 1 << 20)  # this run's 1.2+ MB counts as large
    expected = run_workload(plain, prompt, 3)
    got = worker.run_workload(prompt, 3, expected.generated)
    assert got.same_bits(expected)
    assert os.stat(worker._folder / "logits.f32").st_blocks == 0  # held once, here, not twice
    got = worker.run_workload(prompt, 3, expected.generated)  # the worker writes into fresh pages again
    assert got.same_bits(expected)


def test_ctrl_c_while_a_run_is_awaited_ends_the_worker_and_the_next_call_gets_its_own_answer(engines):
    """Ctrl-C leaves the stopped run's answer still to come: the worker is ended (not a crash), so that the next
    call — a detokenize, as a stopped experiment's report needs — starts a new one and reads its own answer."""
    import signal

    plain, worker = engines
    prompt = plain.tokenize(SHORT_PROMPT)
    restarts = worker.restarts

    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # while the worker runs 200 decode steps (about 2 s)
        with pytest.raises(KeyboardInterrupt):
            worker.run_workload(prompt, 200)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert worker.detokenize(prompt) == plain.detokenize(prompt)
    assert worker.restarts == restarts + 1
    expected = run_workload(plain, prompt, 2)
    assert worker.run_workload(prompt, 2, expected.generated).same_bits(expected)
