"""Fuzz the ``cmd`` engine's logits-file reader on damaged copies of files a real engine command wrote.

Seeds: ``.npy``, ``.safetensors`` and raw ``.f32`` logits that
``examples/llamacpp_cmd_engine.py`` (llama.cpp on the embedded model, behind
the ``cmd`` protocol) wrote. The property: :func:`read_logits` returns a 2-D
float32 array or raises :class:`~logitlab.errors.EngineError`; nothing else.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzzing import DATA, outcome
from mutate import binary_edits
from logitlab.engines.command import read_logits

SEEDS = sorted((DATA / "fuzz" / "logits").iterdir())
VOCAB = 49152  # the embedded model's


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
@given(data=st.data(), vocab=st.sampled_from([None, VOCAB, 1, 7]))
def test_damaged_logits_files_read_or_raise_engine_error(seed, data, vocab):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(data.draw(binary_edits(seed)))
        with outcome(f"cmd logits: {seed.suffix}"):
            logits = read_logits(path, vocab)
            assert logits.dtype == np.float32 and logits.ndim == 2


def test_every_seed_reads():
    for seed in SEEDS:
        assert read_logits(seed, VOCAB).shape == (1, VOCAB), seed
