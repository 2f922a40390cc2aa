"""explain's memory bound (#31): the pair's two runs are kept on disk where they are large (what explain holds that
the kernel cannot drop is then the run being made), and the alone-vs-in-a-batch control brings back two rows, its
worker holding the batch's last rows only — before, every row of every sequence of the batch came back (B + 1
runs), explain's peak on a long prompt."""

import numpy as np
import pytest

from logitlab.engines.tokenizers import GgufTokenizer
from logitlab.engines.variant import parse_variant
from logitlab.experiments import explain as explain_module
from logitlab.experiments.explain import ExplainConfig, run_explain
from logitlab.engines.spill import SPILL_BYTES, is_spilled, spill_folder
from logitlab.models import default_model_path

from conftest import SHORT_PROMPT


@pytest.mark.engine
def test_a_long_prompt_s_explain_keeps_its_pair_on_disk_and_its_batch_control_to_two_rows(monkeypatch):
    kept, answers = [], []
    spill_run, call_engine = explain_module.spill_run, explain_module.call_engine

    def spilled(output):
        kept.append(spill_run(output))
        return kept[-1]

    def called(engine, function, *args, **kwargs):
        answer = call_engine(engine, function, *args, **kwargs)
        if function is explain_module._alone_and_batched:
            answers.append(answer)
        return answer

    monkeypatch.setattr(explain_module, "spill_run", spilled)
    monkeypatch.setattr(explain_module, "call_engine", called)
    tokenizer = GgufTokenizer(default_model_path())
    prompt = tokenizer.detokenize(tokenizer.tokenize(" ".join([SHORT_PROMPT] * 40))[:400])
    result = run_explain(ExplainConfig(
        control=parse_variant("n_ctx=1024", "control", default_engine="llamacpp"),
        candidate=parse_variant("flash_attn=1,n_ctx=1024", "candidate", default_engine="llamacpp"),
        prompt=prompt, n_decode=2, max_positions=1, dump=False))
    assert len(result.positions) == 1 and result.positions[0].cause  # a flip or a position outside the floor
    n_vocab = result.comparison.n_vocab
    # the pair: both runs over the spill size, both mappings of unlinked files on disk (page cache)
    assert [o.logits.shape for o in kept] == [(len(result.prompt_ids) + 2, n_vocab)] * 2
    assert kept[0].logits.nbytes > SPILL_BYTES and spill_folder(kept[0].logits.nbytes) is not None
    assert all(is_spilled(o.logits) for o in kept)
    # the batch control, once per side: two (n_vocab,) rows each, not the batch's (B, p + 1, n_vocab)
    assert len(answers) == 2
    assert all([row.shape for row in answer] == [(n_vocab,), (n_vocab,)] for answer in answers)
    batch = [c for c in result.positions[0].controls if c.control == "alone vs in a batch"]
    assert len(batch) == 2 and all(c.available and "outputs on the last tokens" in c.note for c in batch)
    assert all(np.isfinite(row).all() for answer in answers for row in answer)


@pytest.mark.engine
def test_the_batch_control_asks_the_engine_for_the_last_rows_only(monkeypatch):
    """What runs in the worker, run here: both batch runs ask for ``outputs="last"`` (llama.cpp then holds B rows,
    not B runs), and the rows it gives back are the alone sequence's and the chosen batch sequence's."""
    from logitlab.engines import engine_class
    from logitlab.engines.llamacpp_batch import LlamaCppBatch

    asked = []
    run = LlamaCppBatch.run

    def recorded(self, sequences, padding="none", *, outputs="all"):
        asked.append((len(sequences), outputs))
        return run(self, sequences, padding, outputs=outputs)

    monkeypatch.setattr(LlamaCppBatch, "run", recorded)
    engine = engine_class("llamacpp")(model=None, options={})
    try:
        seq = engine.tokenize(SHORT_PROMPT)
        alone, inside = explain_module._alone_and_batched(engine, seq, [seq] * 4, 3)
        n_vocab = engine.n_vocab
        with engine.open_batch(4, 4 * len(seq)) as backend:
            every = run(backend, [seq] * 4, "none")
    finally:
        engine.close()
    assert asked == [(1, "last"), (4, "last")]
    assert alone.shape == inside.shape == (n_vocab,) and alone.dtype == inside.dtype == np.float32
    assert int(inside.argmax()) == int(every[3][-1].argmax())
    assert np.max(np.abs(inside - every[3][-1])) < 0.5  # the last row of the batch's sequence 3, up to rounding
