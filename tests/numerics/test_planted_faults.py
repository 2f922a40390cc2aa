"""Verdicts on real engine runs with faults planted at a known place and size: answers known without logitlab.

One real run of the embedded model (llama.cpp, 64 greedy decode tokens) is the reference; each candidate is
a copy of it with one planted change whose nature is fixed by construction (issue #35 item 4: the verdict pins
elsewhere were set from logitlab's own output; these are not). Where the truth depends on the run (whether a
planted noise moved an argmax), it is read from the arrays with numpy, not from logitlab.
"""

from __future__ import annotations

import numpy as np
import pytest

from logitlab.engines.variant import Variant
from logitlab.engines.workload import run_workload
from logitlab.experiments.isolation import load_engine
from logitlab.experiments.prompts import DEFAULT_PROMPT
from logitlab.numerics import Thresholds, classify, compare_logits

pytestmark = pytest.mark.engine

T = Thresholds()


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    engine = load_engine(Variant("control", "llamacpp"))
    try:
        return run_workload(engine, engine.tokenize(DEFAULT_PROMPT), 64).logits
    finally:
        engine.close()


def margins(x: np.ndarray) -> np.ndarray:
    top2 = np.sort(x, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def verdict(reference: np.ndarray, candidate: np.ndarray):
    v = classify(compare_logits(reference, candidate), T)
    print(f"\n{v.word}: " + "\n  ".join(v.evidence))
    return v


def test_the_run_itself_is_bit_exact(reference):
    assert verdict(reference, reference.copy()).word == "bit-exact"


def test_every_logit_one_ulp_away_is_ulp_noise(reference):
    rng = np.random.default_rng(1)
    direction = np.where(rng.random(reference.shape) < 0.5, -np.inf, np.inf).astype(np.float32)
    candidate = np.nextafter(reference, direction)  # each logit moved by exactly one float32 ULP, either way
    assert np.all(candidate != reference)
    assert verdict(reference, candidate).word == "ulp-noise"


@pytest.mark.parametrize("sigma", [1e-3, 2e-2])
def test_gaussian_noise_is_noise_or_near_tie_by_whether_an_argmax_moved(reference, sigma):
    """Noise far below the near-tie margin: `noise` when no argmax moved (numpy says), `near-tie` when one did
    (and then only where the reference's top-2 gap was within a few sigma)."""
    rng = np.random.default_rng(2)
    candidate = (reference + rng.normal(0, sigma, reference.shape)).astype(np.float32)
    flipped = np.flatnonzero(reference.argmax(1) != candidate.argmax(1))
    assert np.all(margins(reference)[flipped] < 10 * sigma)
    assert verdict(reference, candidate).word == ("near-tie" if flipped.size else "noise")


def test_the_same_constant_added_to_every_logit_is_a_systematic_offset(reference):
    candidate = reference + np.float32(0.75)  # softmax-invariant; every row moved by the same amount
    assert np.array_equal(candidate.argmax(1), reference.argmax(1))
    assert verdict(reference, candidate).word == "systematic-offset"


def test_top2_swapped_at_a_nearly_tied_position_is_a_fault_alone_and_a_near_tie_inside_row_wide_noise(reference):
    """The swap alone changes two entries of one row — a targeted fault, not rounding, which moves every logit of
    a row: `divergent` at that position. The same swap under row-wide noise larger than its own size (as a
    reassociation gives) cannot be told from that noise: `near-tie`."""
    m = margins(reference)
    position = int(np.argmin(m))
    assert m[position] < T.near_tie_margin / 10  # the run has a near tie (64 decode tokens of a 135M model)
    first, second = np.argsort(reference[position])[-2:][::-1]
    swapped = reference.copy()
    swapped[position, [first, second]] = reference[position, [second, first]]
    v = verdict(reference, swapped)
    assert v.word == "divergent" and v.outside == [position]
    noise = np.random.default_rng(3).normal(0, 2e-2, reference.shape)
    # the two swapped entries move together (by the first one's noise), so that the noise cannot undo the swap
    # itself — the tie is closer than the noise, and which seed undid it depended on the CPU's logits
    noise[position, second] = noise[position, first]
    noisy = (swapped + noise).astype(np.float32)
    flipped = np.flatnonzero(reference.argmax(1) != noisy.argmax(1))
    assert position in flipped and np.all(m[flipped] < T.near_tie_margin)
    assert verdict(reference, noisy).word == "near-tie"


@pytest.mark.parametrize("size", [3.0, -3.0])
def test_one_logit_of_one_confident_position_moved_far_is_divergent_there(reference, size):
    confident = np.flatnonzero(margins(reference) > 2 * T.near_tie_margin)
    position = int(confident[len(confident) // 2])
    candidate = reference.copy()
    token = int(reference[position].argmax()) if size < 0 else int(np.argsort(reference[position])[-2])
    candidate[position, token] += np.float32(size)  # a confident argmax taken over (+) or lost (-)
    assert candidate[position].argmax() != reference[position].argmax()
    v = verdict(reference, candidate)
    assert v.word == "divergent"
    assert v.outside == [position]


def test_row_wide_noise_as_large_as_the_margins_is_lossy(reference):
    """Every logit moved by noise of sd 0.5 logits (the near-tie margin): argmaxes change where the reference was
    confident (numpy counts them), yet no position stands out from the others — a lossy change, not a bug at a
    place, and not rounding."""
    candidate = (reference + np.random.default_rng(4).normal(0, 0.5, reference.shape)).astype(np.float32)
    flipped = np.flatnonzero(reference.argmax(1) != candidate.argmax(1))
    assert np.any(margins(reference)[flipped] >= T.near_tie_margin)
    assert verdict(reference, candidate).word == "lossy"
