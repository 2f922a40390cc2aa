"""invariance's memory bound (#31): the batch probe's runs come back from the engine worker as files on disk and
its stacked comparison (B copies of the prompt against the prompt alone B times) is written to disk part by part,
not built in memory (before: the worker's runs pickled back whole, then 2 × B more runs for the stacks); the
prefill-decode probe fills one array per way of computing a position and keeps it on disk."""

import os

import numpy as np
import pytest

from logitlab.engines import spill
from logitlab.engines.tokenizers import GgufTokenizer
from logitlab.engines.variant import Variant, parse_variant
from logitlab.experiments import invariance as invariance_module
from logitlab.experiments.invariance import InvarianceConfig, prefill_decode_rows, run_invariance
from logitlab.models import default_model_path

from conftest import SHORT_PROMPT

pytestmark = pytest.mark.engine


def test_a_long_prompt_s_batch_probe_compares_runs_and_stacks_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path))  # the engine's worker inherits it
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here: nothing to spill to")
    stacks = []
    spill_stack = invariance_module.spill_stack

    def recorded(parts):
        stacks.append((parts, spill_stack(parts)))
        return stacks[-1][1]

    monkeypatch.setattr(invariance_module, "spill_stack", recorded)
    tokenizer = GgufTokenizer(default_model_path())
    prompt = tokenizer.detokenize(tokenizer.tokenize(" ".join([SHORT_PROMPT] * 40))[:400])
    result = run_invariance(InvarianceConfig(
        probe="batch", variant=parse_variant("n_ctx=1024", "v", default_engine="llamacpp"), prompt=prompt,
        batch_sizes=(1, 2), fill="same", detection=False))
    n, n_vocab = len(result.prompt_ids), result.checks[0].comparison.n_vocab
    assert n * n_vocab * 4 > spill.SPILL_BYTES and spill.spill_folder(n * n_vocab * 4) is not None  # the case
    assert [c.name for c in result.checks] == ["B=1 again", "B=2"]
    # B=2's check: the alone run twice and the batch's two copies, each stack one file on disk; its parts (the
    # runs the worker sent back) mappings of files on disk too, not arrays this process made
    assert [s.shape for _, s in stacks] == [(2 * n, n_vocab)] * 2 and all(spill.is_spilled(s) for _, s in stacks)
    parts = [p for ps, _ in stacks for p in ps]
    assert len(parts) == 4 and all(p.shape == (n, n_vocab) and spill.is_spilled(p) for p in parts)
    assert os.listdir(tmp_path) == []  # every file unlinked
    assert result.checks[1].comparison.n_positions == 2 * n
    assert result.checks[1].details["copies_bit_exact"] == [
        bool(np.array_equal(stacks[0][1][:n].view(np.uint32), stacks[1][1][i * n:(i + 1) * n].view(np.uint32)))
        for i in range(2)]


def test_prefill_decode_fills_one_array_per_path_and_keeps_it_on_disk(tmp_path, monkeypatch):
    """The step run here, with spilling from 64 KiB: every array it returns maps a spilled file, with the bits of
    the same step with spilling off."""
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here: nothing to spill to")
    from logitlab.experiments.isolation import load_engine

    engine = load_engine(Variant("v", "llamacpp"))
    try:
        ids, n_vocab = engine.tokenize(SHORT_PROMPT)[:12], engine.n_vocab
        monkeypatch.setenv("LOGITLAB_SPILL", "off")
        plain = prefill_decode_rows(engine, ids, 2)
        monkeypatch.setattr(spill, "SPILL_BYTES", 1 << 16)
        monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path))
        kept = prefill_decode_rows(engine, ids, 2)
    finally:
        engine.close()
    assert kept["sequence"] == plain["sequence"] and len(kept["sequence"]) == 14
    arrays = [(kept["full"], plain["full"])] + [(k[2], p[2]) for k, p in zip(kept["paths"], plain["paths"])]
    assert len(arrays) == 2 and all(k.shape == (14, n_vocab) for k, _ in arrays)
    assert all(spill.is_spilled(k) and not spill.is_spilled(p) for k, p in arrays)
    assert all(np.array_equal(k.view(np.uint32), p.view(np.uint32)) for k, p in arrays)
