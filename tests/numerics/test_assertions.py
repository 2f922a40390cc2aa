"""Logit assertions (logitlab.numerics.assertions): pass/fail, exact failure text, inverse control."""

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.numerics import (assert_logits_close, assert_logits_equal, assert_probe_sensitive, assert_verdict,
                               classify, compare_logits)
from logitlab.numerics.assertions import perturb_ulps


def logits(n=4, v=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 2, (n, v)).astype(np.float32)
    x[:, 3] += 6  # a clear argmax everywhere
    return x


def test_equal_passes_and_returns_the_comparison():
    a = logits()
    c = assert_logits_equal(a, a.copy())
    assert c.bit_exact and c.n_positions == 4 and c.n_vocab == 8


def test_equal_failure_text_is_exact():
    a = np.zeros((2, 4), np.float32)
    a[:, 0] = 4.0
    b = a.copy()
    b[1, 2] = np.float32(0.25)
    with pytest.raises(AssertionError) as info:
        assert_logits_equal(a, b)
    lines = str(info.value).splitlines()
    assert lines[0] == ("noise: first divergence at position 1, token 2: reference 0x0p+0 (0x00000000), "
                        "observed 0x1p-2 (0x3e800000), 1048576000 ULP")
    assert lines[1] == "Mismatched elements: 1 / 8 (12.5 %) in 1 / 2 positions"
    assert lines[2] == "Greatest absolute difference: 0.25 at index (1, 2) (reference 0, observed 0.25)"
    assert lines[3] == ("Greatest ULP difference: 1048576000 at index (1, 2) element-wise; 524288 at the row's "
                        "scale (position 1)")
    assert lines[4].startswith("Top-1 agreement: 2 / 2 positions; KLD (nats) mean ")
    assert lines[5].startswith("Verdict evidence: max |Δ| = 5.243e+05 ULP at row scale > max_ulp = 16")
    assert lines[6] == ("Smallest tolerance that would have passed: allowed={'noise'} (assert_verdict); "
                        "max_ulp=524288 (assert_logits_close, ULPs at the row's scale); element-wise "
                        "max_ulp=1048576000 (assert_logits_equivalent)")


def test_close_tolerances_and_the_smallest_passing_one():
    a = logits()
    b = perturb_ulps(a, 3, position=2)  # 3 ULP at the row's argmax: 3 ULP at the row's scale
    c = assert_logits_close(a, b, max_ulp=3)
    assert c.max_scaled_ulp == 3
    with pytest.raises(AssertionError) as info:
        assert_logits_close(a, b, max_ulp=2)
    assert str(info.value).splitlines()[-1] == "Smallest tolerance that would have passed: max_ulp=3"
    far = a.copy()
    far[0] += np.linspace(0, 1, 8, dtype=np.float32)  # KLD > 0 at one position
    with pytest.raises(AssertionError) as info:
        assert_logits_close(a, far, kld_p99=1e-9)
    assert "kld_p99=" in str(info.value).splitlines()[-1]
    assert_logits_close(a, far, kld_p99=1.0)  # loose enough
    with pytest.raises(InputError, match="needs a tolerance"):
        assert_logits_close(a, b)


def test_verdict_word_means_at_most_a_set_means_exactly():
    a = logits()
    b = perturb_ulps(a, 3)
    assert_verdict(a, b, "ulp-noise")           # ulp-noise or better
    assert_verdict(a, a.copy(), "near-tie")     # bit-exact is better than near-tie
    with pytest.raises(AssertionError) as info:
        assert_verdict(a, a.copy(), {"near-tie"})  # a set lists exactly what passes
    assert info.value.args[0].startswith("bit-exact: no entry differs")
    with pytest.raises(AssertionError) as info:
        assert_verdict(a, b, "bit-exact")
    assert str(info.value).splitlines()[-1] == ("Smallest tolerance that would have passed: allowed={'ulp-noise'} "
                                                "(this run's verdict; allowed was {'bit-exact'})")
    with pytest.raises(InputError, match="unknown verdict"):
        assert_verdict(a, b, {"close-enough"})


def test_probe_sensitive_catches_a_check_that_cannot_fail():
    a = logits()
    caught = assert_probe_sensitive(assert_logits_equal, a)  # 1 ULP must be caught by a bit-exact check
    assert caught.args[0].startswith("ulp-noise: first divergence at position 3")

    def lenient(ref, obs):
        assert_logits_close(ref, obs, max_ulp=16)

    with pytest.raises(AssertionError, match="probe not sensitive: lenient passed on the reference with one entry "
                                             "moved by 1 ULP"):
        assert_probe_sensitive(lenient, a)
    assert_probe_sensitive(lenient, a, ulps=100)  # a big enough change is caught

    def always(ref, obs):
        raise AssertionError("no")

    with pytest.raises(AssertionError, match="probe not usable: always fails on an identical copy"):
        assert_probe_sensitive(always, a)


def test_perturb_ulps_moves_one_entry():
    a = logits()
    b = perturb_ulps(a, 5, position=1, token=0)
    diff = np.argwhere(a != b)
    assert diff.tolist() == [[1, 0]]
    assert abs(int(b.view(np.int32)[1, 0]) - int(a.view(np.int32)[1, 0])) == 5
    with pytest.raises(InputError):
        perturb_ulps(a, 0)


def test_one_position_arrays_are_accepted():
    a = logits(1)[0]
    assert assert_logits_equal(a, a.copy()).n_positions == 1


@pytest.mark.engine
def test_assert_verdict_carries_the_detection_limit_of_real_logits():
    """Issue #32: assert_verdict(..., detection=True) on llama.cpp's logits with and without flash attention:
    the returned comparison carries its verdict and detection limits, a fault planted at 1.1× the argmax-up
    limit at its hardest position fails the same assertion as divergent, and a failure's message states the
    limits. Without detection=True nothing is measured."""
    from logitlab.engines.variant import Variant
    from logitlab.engines.workload import run_workload
    from logitlab.experiments.isolation import load_engine

    from conftest import SHORT_PROMPT

    def run(options, replay=None):
        engine = load_engine(Variant("v", "llamacpp", options={"n_threads_batch": "1", **options}))
        try:
            return run_workload(engine, engine.tokenize(SHORT_PROMPT), 8, replay)
        finally:
            engine.close()

    reference = run({})
    observed = run({"flash_attn": "1"}, reference.generated).logits
    reference = reference.logits
    word = classify(compare_logits(reference, observed)).word
    assert word in ("noise", "near-tie")
    assert assert_verdict(reference, observed, word).detection is None  # off by default: no cost
    c = assert_verdict(reference, observed, word, detection=True)
    up = c.detection.shape("argmax-up")
    assert c.verdict.word == c.detection.verdict == word and up.caught == up.probed == c.n_positions
    assert 0 < up.limit < 10 and up.above == "divergent"
    planted = observed.copy()
    planted[up.position, reference[up.position].argmax()] += np.float32(1.1 * up.limit)
    with pytest.raises(AssertionError) as info:
        assert_verdict(reference, planted, word)
    assert info.value.args[0].startswith("divergent: ")
    with pytest.raises(AssertionError) as info:
        assert_verdict(reference, observed, "bit-exact", detection=True)
    line = next(x for x in str(info.value).splitlines() if x.startswith("Detection limit"))
    assert line == ("Detection limit (logits; the smallest planted fault that reads divergent wherever it lands): "
                    + c.detection.summary())
    assert f"argmax-up {up.limit:.4g}, " in line
