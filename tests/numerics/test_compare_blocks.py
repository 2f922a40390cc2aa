"""compare_blocks: the comparison of an observed array asked for one block of rows at a time (issue #31: the
detection limits plant a fault into one row, or shift every row, without a planted copy of the run), bit for bit
compare_logits of the whole array."""

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import Thresholds, classify, compare_logits
from logitlab.numerics.compare import compare_blocks
from logitlab.numerics.detection import _full_word, _planter, _shift_limit, CLASSIFY


def _pair(n=37, v=300, seed=0):
    rng = np.random.default_rng(seed)
    ref = (rng.standard_normal((n, v)) * 3).astype(np.float32)
    obs = ref.copy()
    obs[5:9] += (rng.standard_normal((4, v)) * 1e-3).astype(np.float32)  # noise in a few rows
    obs[20, :3] = np.nextafter(obs[20, :3], np.float32(np.inf))  # ULP-sized differences
    obs[30, 7] = np.nan  # a row for the float64 path
    obs[31, 11] = np.inf
    obs[12, np.argmax(ref[12])] -= 50  # an argmax flip
    return ref, obs


@pytest.mark.parametrize("chunk_rows, workers", [(None, None), (1, 1), (4, 2), (7, 3), (64, 1)])
def test_blocks_give_the_whole_comparison_bit_for_bit(chunk_rows, workers):
    ref, obs = _pair()
    asked = []

    def rows(start, stop):
        asked.append((start, stop))
        return obs[start:stop]

    ids = list(range(ref.shape[0]))
    whole = compare_logits(ref, obs, top_k=4, token_ids=ids, chunk_rows=chunk_rows, workers=workers)
    blocks = compare_blocks(ref, rows, top_k=4, token_ids=ids, chunk_rows=chunk_rows, workers=workers)
    assert blocks.to_dict() == whole.to_dict()
    assert not blocks and blocks.first_mismatch["position"] == 5 and blocks.flips
    # the rows were asked for in blocks of chunk_rows, each once: never the whole array at once
    limit = chunk_rows or ref.shape[0]
    assert sorted(asked) == [(a, min(a + limit, ref.shape[0])) for a in range(0, ref.shape[0], limit)]


def test_a_bit_exact_pair_and_a_block_of_another_shape():
    ref, _ = _pair()
    assert bool(compare_blocks(ref, lambda a, b: ref[a:b], chunk_rows=5))
    with pytest.raises(InputError, match=r"observed rows 0:5 have shape \(4, 300\)"):
        compare_blocks(ref, lambda a, b: ref[a:b - 1], chunk_rows=5)
    with pytest.raises(InputError, match="dtype float64"):
        compare_blocks(ref, lambda a, b: ref[a:b].astype(np.float64), chunk_rows=5)


def _noisy(seed):
    """A pair whose every row differs by rounding-sized noise: a verdict below divergent, with floors."""
    rng = np.random.default_rng(seed)
    ref = (rng.standard_normal((37, 300)) * 3).astype(np.float32)
    return ref, (ref + rng.standard_normal(ref.shape).astype(np.float32) * np.float32(1e-4)).astype(np.float32)


@pytest.mark.parametrize("shape", ["argmax-up", "tail-up", "row-noise"])
def test_the_planted_full_verdict_is_the_one_of_a_planted_copy(shape):
    """detection's check at the worst position plants into one block, not into a copy of the run: the same word."""
    ref, obs = _noisy(3)
    thresholds = Thresholds()
    words = set()
    for position, s in ((0, 1e-7), (17, 1e-3), (36, 40.0)):
        copy = obs.copy()
        row = slice(position, position + 1)
        _planter(np.ascontiguousarray(ref[row]), shape, position)(np.ascontiguousarray(obs[row]), copy[row],
                                                                   np.array([s]))
        expected = classify(compare_logits(ref, copy, top_k=5), thresholds).word
        assert _full_word(ref, obs, shape, position, s, 5, thresholds, CLASSIFY) == expected
        words.add(expected)
    assert len(words) > 1  # the sizes cross the limit: the word is not the same everywhere


def test_the_all_rows_shift_limit_is_the_one_of_shifted_copies():
    ref, obs = _noisy(4)
    thresholds = Thresholds()
    verdict = classify(compare_logits(ref, obs), thresholds).word
    got = _shift_limit(ref, obs, verdict, 5, thresholds, CLASSIFY)
    assert got.limit is not None
    for s in (got.limit, got.limit * 1.02, got.limit / 2):
        whole = compare_logits(ref, obs + np.float32(s), top_k=5)
        blocks = compare_blocks(ref, lambda a, b: obs[a:b] + np.asarray(s, dtype=np.float32), top_k=5)
        assert blocks.to_dict() == whole.to_dict()
    assert got.above == classify(compare_logits(ref, obs + np.asarray(got.limit * 1.02, np.float32)), thresholds).word
