"""``verify --positions`` (issue #31): the decode rows compared are a selection, named by their run positions.

On the real embedded model: the llama.cpp engine's M=K path gets one planted fault (a low-ranked token raised
above the argmax at one decode step), seen only when the selection holds that step; toy engines check the
in-block statistics of a selection and the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

from logitlab.engines import engine_class
from logitlab.engines.variant import Variant
from logitlab.errors import InputError
from logitlab.experiments.positions import Selected, decode_selection
from logitlab.experiments.prompts import Prompt
from logitlab.experiments.verify.run import VerifyConfig, VerifyExperiment

from conftest import SHORT_PROMPT

ONE_BATCH_THREAD = {"n_threads_batch": "1"}
#: The decode step (output index) whose M=K row the planted fault changes.
FAULT = 1


def planted_llamacpp(n_prompt: int):
    """The real llama.cpp engine whose sessions' ``verify`` (the M=K path) raises the lowest logit of decode step
    :data:`FAULT` 10 logits above that row's argmax: a flip to a token outside the M=1 top-k (divergent)."""
    engine = engine_class("llamacpp")(model=None, options=ONE_BATCH_THREAD)
    open_session = engine.open_session

    def planted_session():
        session = open_session()
        decode = session.decode

        def verify(tokens):
            first = session.n_past - n_prompt  # the output index of the block's first row
            rows = decode(tokens)
            for j, row in enumerate(rows):
                if first + j == FAULT:
                    row[int(np.argmin(row))] = row.max() + 10
            return rows

        session.verify = verify
        return session

    engine.open_session = planted_session
    return engine


@pytest.fixture(scope="module")
def fault_runs():
    """One planted engine; ``run(spec)`` verifies the short prompt (4 tokens, K = 1 2) with ``--positions spec``."""
    engine = planted_llamacpp(0)
    n_prompt = len(engine.tokenize(SHORT_PROMPT))
    engine.close()
    engine = planted_llamacpp(n_prompt)

    def run(spec: str):
        config = VerifyConfig(variant=Variant("verify", "llamacpp", options=ONE_BATCH_THREAD),
                              prompts=(Prompt("short", SHORT_PROMPT),), ks=(1, 2), n_decode=4, detection=False,
                              positions=spec)
        return VerifyExperiment(config, engine=engine).run()

    yield run, n_prompt
    engine.close()


@pytest.mark.engine
def test_a_fault_outside_the_selection_is_not_seen_and_one_inside_is_at_its_run_position(fault_runs):
    run, n_prompt = fault_runs
    every = run("all")
    assert every.positions is None and every.classification.word == "divergent"
    assert {(f.k, f.output_index, f.position) for f in every.flips} == {(1, FAULT, n_prompt + FAULT),
                                                                       (2, FAULT, n_prompt + FAULT)}

    last = run("last")  # the last decode step only: the fault is outside
    assert last.positions == Selected("last", 1, 4)
    assert [t.rows for t in last.totals] == [1, 1] and last.flips == []
    assert last.classification.word in ("bit-exact", "ulp-noise", "noise", "near-tie")
    assert last.config["positions"] == "last"

    inside = run(f"{n_prompt + FAULT},{n_prompt + 3}")  # run positions: decode steps 1 and 3
    assert inside.positions == Selected(f"{n_prompt + FAULT},{n_prompt + 3}", 2, 4)
    assert inside.classification.word == "divergent"
    assert [(f.k, f.output_index, f.position, f.block_start, f.row) for f in inside.flips] == [
        (1, FAULT, n_prompt + FAULT, FAULT, 0), (2, FAULT, n_prompt + FAULT, 0, 1)]
    k2 = inside.total(2)
    assert k2.rows == 2 and k2.first_divergence["position"] == n_prompt + FAULT
    assert [r.row for r in k2.in_block] == [1]  # output indices 1 and 3 are both in-block row 1 at K=2
    assert k2.in_block[0].rows == 2 and k2.in_block[0].flips == 1


def test_decode_selection_maps_run_positions_to_decode_steps():
    assert decode_selection("all", 12, 4, name="p") is None
    assert decode_selection("last", 12, 4, name="p").tolist() == [3]
    assert decode_selection("decode", 12, 4, name="p").tolist() == [0, 1, 2, 3]
    assert decode_selection("10-13", 12, 4, name="p").tolist() == [0, 1]  # prompt rows are not verify's
    assert decode_selection("every:5", 12, 4, name="p").tolist() == [3]  # run positions 0, 5, 10, 15
    with pytest.raises(InputError, match=r"^--positions 'prompt' selects no decode row of prompt 'p': the rows "
                                         r"compared are the decode steps', positions 12-15 \(12 prompt tokens\)$"):
        decode_selection("prompt", 12, 4, name="p")
    with pytest.raises(InputError, match="16 is past the run's last row 15"):
        decode_selection("16", 12, 4, name="p")
