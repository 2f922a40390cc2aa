"""Golden folder format and llama.cpp KLD base files (logitlab.dumps.golden_format, logitlab.dumps.llamacpp_kld).

Crafted arrays; the real engines and llama-perplexity are in tests/experiments/test_golden.py and
tests/test_llamacpp_kld_peer.py.
"""

import numpy as np
import pytest

from logitlab.dumps.golden_format import (
    GoldenLogits,
    GoldenWriter,
    logits_topk,
    parse_store,
    sha256_file,
    store_bytes,
)
from logitlab.dumps.llamacpp_kld import kld_base_size, read_kld_base, write_kld_base
from logitlab.errors import InputError
from logitlab.numerics.llamacpp_kld import quantize_log_probs, row_width


def test_parse_store_and_sizes():
    assert parse_store("full") == ("full", None)
    assert parse_store("topk:64") == ("topk", 64)
    for bad in ("topk", "topk:0", "half", "topk:-1"):
        with pytest.raises(InputError):
            parse_store(bad)
    assert store_bytes("full", 10, 100) == 10 * 4 + 10 * 100 * 4
    assert store_bytes("topk:5", 10, 100) == 10 * 4 + 10 * (5 * 4 + 5 * 4 + 8)


def test_logits_topk_orders_by_value_then_lower_id():
    x = np.array([[1.0, 3.0, 3.0, -1.0, 2.0]], np.float32)
    ids, values, lse = logits_topk(x, 3)
    assert ids.tolist() == [[1, 2, 4]] and values.tolist() == [[3.0, 3.0, 2.0]]
    assert lse[0] == pytest.approx(np.log(np.exp(x.astype(np.float64)).sum()))


def test_logits_topk_of_a_long_run_takes_block_sized_work_memory_and_changes_no_bit():
    """#31: the top-k of a run are selected a block of rows at a time: bit for bit the whole-run selection (ties,
    NaN rows, -inf, a block boundary inside), while the work arrays stay one block's (the whole-run selection
    allocated about 12 run-sized float32 arrays: `golden record --store topk` peaked at F 18.4)."""
    import tracemalloc

    from logitlab.dumps import golden_format

    rng = np.random.default_rng(5)
    x = rng.normal(size=(3 * golden_format.TOPK_BLOCK_ROWS + 7, 301)).astype(np.float32)
    x[5, 7:11] = 9.0  # a tie of four for the top
    x[17, :] = np.nan
    x[18, 3] = np.nan
    x[40, ::2] = -np.inf
    got = logits_topk(x, 8)
    whole = golden_format._topk_block(x, 8)  # the whole run in one block: the selection as it was
    for a, b in zip(got, whole):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert got[0][5, :4].tolist() == [7, 8, 9, 10]

    big = rng.normal(size=(4096, 2048)).astype(np.float32)  # 33.6 MB
    tracemalloc.start()
    try:
        ids, values, lse = logits_topk(big, 64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    results = ids.nbytes + values.nbytes + lse.nbytes
    block = golden_format.TOPK_BLOCK_ROWS * big.shape[1] * 8  # one block of float64
    assert peak - results < 10 * block < 0.2 * big.nbytes, f"{(peak - results) / block:.1f} blocks of work memory"


def test_writer_and_reader_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 7)).astype(np.float32), rng.normal(size=(5, 7)).astype(np.float32)
    writer = GoldenWriter(tmp_path, "full")
    writer.add([1, 2, 3], a)
    writer.add([4, 5, 6, 7, 8], b)
    sha, size = writer.close()
    assert sha == sha256_file(tmp_path / "logits.safetensors") and size > a.nbytes + b.nbytes

    class Manifest:  # the two fields GoldenLogits reads
        folder = str(tmp_path)

    with GoldenLogits(Manifest()) as reader:
        assert reader.ids(1).tolist() == [4, 5, 6, 7, 8]
        assert reader.logits(0).tobytes() == a.tobytes() and reader.logits(1).dtype == np.float32
        # the logits are a read-only mapping of the file (page cache), not a copy held in memory (issue #31)
        mapped = reader.logits(1)
        assert isinstance(mapped, np.memmap) and not mapped.flags.writeable and mapped.tobytes() == b.tobytes()
        with pytest.raises(InputError, match="no such tensor"):
            reader._files.map(reader.path, "p0099.logits")
    path = tmp_path / "logits.safetensors"
    path.write_bytes(path.read_bytes()[:-8])  # the last tensor cut short
    with GoldenLogits(Manifest()) as reader, pytest.raises(InputError, match="truncated"):
        reader.logits(1)
    with pytest.raises(InputError, match="token ids for logits"):
        GoldenWriter(tmp_path / "x", "topk:2").add([1], a)


def _kld_file(tmp_path, n_ctx=8, n_vocab=11, n_chunk=2):
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, n_vocab, (n_chunk, n_ctx))
    logits = [rng.normal(size=(n_ctx, n_vocab)).astype(np.float32) for _ in range(n_chunk)]
    first = n_ctx // 2
    path = write_kld_base(tmp_path / "base.kld", tokens, n_vocab,
                          (quantize_log_probs(x[first:n_ctx - 1]) for x in logits))
    return path, tokens, logits


def test_kld_base_round_trip(tmp_path):
    path, tokens, logits = _kld_file(tmp_path)
    assert path.stat().st_size == kld_base_size(8, 11, 2)
    base = read_kld_base(path)
    assert (base.n_ctx, base.n_vocab, base.n_chunk, base.first, base.n_scored) == (8, 11, 2, 4, 3)
    assert np.array_equal(base.tokens, tokens)
    assert base.rows.shape == (2, 3, row_width(11))
    assert np.array_equal(base.rows[1], quantize_log_probs(logits[1][4:7]))
    assert base.next_tokens(0).tolist() == tokens[0, 5:].tolist()


def test_kld_base_bad_files_are_input_errors(tmp_path):
    path, _, _ = _kld_file(tmp_path)
    data = path.read_bytes()
    (tmp_path / "short.kld").write_bytes(data[:-10])
    with pytest.raises(InputError, match=r"is truncated: \d+ bytes, expected \d+ for 2 chunks of 8 tokens"):
        read_kld_base(tmp_path / "short.kld")
    (tmp_path / "long.kld").write_bytes(data + b"xx")
    with pytest.raises(InputError, match="longer than its header says"):
        read_kld_base(tmp_path / "long.kld")
    (tmp_path / "other.kld").write_bytes(b"GGUF" + data[4:])
    with pytest.raises(InputError, match="is not a llama.cpp KL-divergence base file"):
        read_kld_base(tmp_path / "other.kld")
    with pytest.raises(InputError, match="does not exist"):
        read_kld_base(tmp_path / "missing.kld")
    with pytest.raises(InputError, match="chunks of rows for"):
        write_kld_base(tmp_path / "x.kld", np.zeros((2, 8), int), 11, [np.zeros((3, row_width(11)), np.uint16)])
    assert not (tmp_path / "x.kld").exists() and not list(tmp_path.glob(".x.kld*"))
