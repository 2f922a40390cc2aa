"""Fuzz ``read_kld_base``: llama-perplexity's ``--kl-divergence-base`` files, written by it and by logitlab.

Seed: a file ``llama-perplexity --kl-divergence-base`` wrote (``make_seeds.py kld``: two chunks of 4
tokens of the embedded model). Properties:

- round trip: a file :func:`write_kld_base` writes (Hypothesis draws the dimensions, tokens and 16-bit
  rows) reads back with the same dimensions, tokens and rows, byte for byte;
- agreement: a damaged file either raises :class:`~logitlab.errors.InputError` naming the file, or
  reads, and then what it reads is what the bytes say under the layout llama.cpp documents
  (decoded here independently, with :mod:`struct`): a reader may not accept a file of the wrong size,
  a token outside the vocabulary, or return other numbers than the file holds;
- truncation: the seed cut at any byte is an ``InputError`` naming the file (every byte counts).
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, strategies as st

from fuzzing import DATA, outcome, tally
from mutate import byte_edits
from logitlab.dumps.llamacpp_kld import MAGIC, kld_base_size, read_kld_base, write_kld_base
from logitlab.errors import InputError
from logitlab.numerics.llamacpp_kld import row_width

SEED = DATA / "fuzz" / "kld" / "llama-perplexity.kld"


def decode(raw: bytes) -> tuple[int, int, int, list[int], bytes]:
    """n_ctx, n_vocab, n_chunk, the tokens and the row bytes, by the layout in llamacpp_kld's docstring."""
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, len(MAGIC))
    start = len(MAGIC) + 12
    tokens = list(struct.unpack_from(f"<{n_chunk * n_ctx}i", raw, start))
    return n_ctx, n_vocab, n_chunk, tokens, raw[start + 4 * n_chunk * n_ctx:]


def assert_reads_as_the_bytes_say(path: Path, raw: bytes) -> None:
    """``read_kld_base(path)`` returns exactly the file's header, tokens and rows."""
    base = read_kld_base(path)
    n_ctx, n_vocab, n_chunk, tokens, rows = decode(raw)
    assert raw[:len(MAGIC)] == MAGIC and len(raw) == kld_base_size(n_ctx, n_vocab, n_chunk)
    assert (base.n_ctx, base.n_vocab, base.n_chunk) == (n_ctx, n_vocab, n_chunk)
    assert base.tokens.dtype == np.int32 and base.tokens.reshape(-1).tolist() == tokens
    assert all(0 <= t < n_vocab for t in tokens)
    assert base.rows.shape == (n_chunk, n_ctx - 1 - n_ctx // 2, row_width(n_vocab))
    assert np.asarray(base.rows).astype("<u2").tobytes() == rows


@st.composite
def kld_contents(draw) -> tuple[np.ndarray, int, list[np.ndarray]]:
    """Tokens ``(n_chunk, n_ctx)``, a vocabulary size and each chunk's uint16 rows (any bits)."""
    n_ctx, n_vocab, n_chunk = draw(st.integers(3, 9)), draw(st.integers(2, 40)), draw(st.integers(1, 3))
    tokens = np.array(draw(st.lists(st.integers(0, n_vocab - 1), min_size=n_ctx * n_chunk,
                                    max_size=n_ctx * n_chunk)), np.int32).reshape(n_chunk, n_ctx)
    shape = (n_ctx - 1 - n_ctx // 2, row_width(n_vocab))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, 2**16, shape, dtype=np.uint16) for _ in range(n_chunk)]
    return tokens, n_vocab, rows


@given(contents=kld_contents())
def test_a_written_base_file_reads_back_equal(contents):
    tokens, n_vocab, rows = contents
    with tempfile.TemporaryDirectory() as folder:
        path = write_kld_base(Path(folder) / "base.kld", tokens, n_vocab, rows)
        base = read_kld_base(path)
        assert (base.n_ctx, base.n_vocab, base.n_chunk) == (tokens.shape[1], n_vocab, tokens.shape[0])
        assert np.array_equal(base.tokens, tokens)
        assert all(np.array_equal(base.rows[c], r) for c, r in enumerate(rows))
        assert_reads_as_the_bytes_say(path, path.read_bytes())
        tally("kld base: round trip", "read")


@given(data=st.data())
def test_a_damaged_base_file_reads_what_it_holds_or_raises_input_error_naming_it(data):
    raw = data.draw(byte_edits(SEED.read_bytes()))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / SEED.name
        path.write_bytes(raw)
        with outcome("kld base: damaged", names=[path], error=InputError):
            assert_reads_as_the_bytes_say(path, raw)


@given(data=st.data())
def test_a_base_file_cut_at_any_byte_is_an_input_error_naming_it(data):
    raw = SEED.read_bytes()
    cut = data.draw(st.one_of(st.integers(0, 64), st.integers(0, len(raw) - 1)))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / SEED.name
        path.write_bytes(raw[:cut])
        try:
            read_kld_base(path)
        except InputError as exc:
            assert str(path) in str(exc), exc
        else:
            raise AssertionError(f"{cut} of {len(raw)} bytes read as a whole file")
        tally("kld base: cut", "rejected")


def test_the_seed_reads_as_the_bytes_say():
    raw = SEED.read_bytes()
    assert_reads_as_the_bytes_say(SEED, raw)
    base = read_kld_base(SEED)
    assert (base.n_ctx, base.n_vocab, base.n_chunk) == (4, 49152, 2)
