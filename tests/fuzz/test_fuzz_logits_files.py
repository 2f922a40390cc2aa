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
from hypothesis import given, strategies as st

from fuzzing import DATA, tally
from mutate import binary_edits
from logitlab.engines.command import read_logits
from logitlab.errors import LogitlabError

SEEDS = sorted((DATA / "fuzz" / "logits").iterdir())
VOCAB = 49152  # the embedded model's


@given(data=st.data(), seed=st.sampled_from(SEEDS), vocab=st.sampled_from([None, VOCAB, 1, 7]))
def test_damaged_logits_files_read_or_raise_engine_error(data, seed, vocab):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(data.draw(binary_edits(seed)))
        try:
            logits = read_logits(path, vocab)
        except LogitlabError:
            tally(f"cmd logits: {seed.suffix}", "rejected")
            return
        tally(f"cmd logits: {seed.suffix}", "read")
        assert logits.dtype == np.float32 and logits.ndim == 2


def test_every_seed_reads():
    for seed in SEEDS:
        assert read_logits(seed, VOCAB).shape == (1, VOCAB), seed
