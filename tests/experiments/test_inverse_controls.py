"""Could a probe have failed? What it exercised, its inverse controls (--self-check), and `vacuous` (issue #32)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from logitlab.engines.variant import parse_variant
from logitlab.experiments.invariance import InvarianceConfig, run_invariance

from conftest import SHORT_PROMPT

TESTS = Path(__file__).resolve().parents[1]
LLAMA = "n_threads=1,n_threads_batch=1"


def probe(name, spec=LLAMA, engine="llamacpp", **kwargs):
    return run_invariance(InvarianceConfig(
        probe=name, variant=parse_variant(spec, "probe", default_engine=engine), prompt=SHORT_PROMPT,
        self_check=True, **kwargs))


@pytest.mark.engine
def test_llamacpp_batch_exercises_a_larger_forward_and_its_control_is_caught():
    result = probe("batch", batch_sizes=(1, 4))
    n = len(result.prompt_ids)
    b4 = next(c for c in result.checks if c.name == "B=4")
    assert b4.details["exercised"] == f"the prompt alone: one forward of {n} rows; B=4: one forward of {4 * n} rows"
    assert "vacuous" not in b4.details and "limited" not in b4.details
    once = next(c for c in result.checks if c.name == "B=1 again")
    assert once.details["vacuous"].startswith("B=1 is the prompt alone")
    [control] = result.controls
    assert control.caught and control.position == n - 1 and "0 earlier position(s) differ" in control.evidence
    assert result.vacuous is None and result.status in ("invariant", "not invariant")
    assert result.to_dict()["status"] == result.status
    # the worst check's detection limits (issue #32 item 1: every comparison reports one)
    limit = result.detection.shape("argmax-up")
    assert result.detection.verdict == result.worst.word and limit.caught == limit.probed == 4 * n
    assert limit.above == "divergent" and 0 < limit.limit < 10
    assert "arrays" not in vars(result.worst)  # the arrays are not kept past the measurement


@pytest.mark.engine
def test_a_batch_with_the_same_row_counts_is_limited_not_vacuous():
    """n_ubatch=1: every forward is one row, alone and in the batch; the batch's attention still differs."""
    result = probe("batch", spec=LLAMA + ",n_ubatch=1", batch_sizes=(4,))
    [check] = result.checks
    assert check.details["limited"].startswith("the same forward row counts as the prompt alone")
    assert result.vacuous is None or result.checks[0].word == "bit-exact"


@pytest.mark.engine
def test_prefill_one_row_per_forward_is_the_decode_path_itself_and_the_probe_is_vacuous():
    result = probe("prefill-decode", spec=LLAMA + ",n_ubatch=1", n_decode=2)
    assert all(c.word == "bit-exact" for c in result.checks)
    assert result.vacuous.startswith("the prefill also ran one row per forward")
    assert result.status == "vacuous" and not result.invariant
    assert all(c.caught for c in result.controls)  # the rows follow their input: vacuous by what ran


@pytest.mark.engine
def test_an_engine_with_a_stale_decode_cache_misses_the_inverse_control(monkeypatch):
    """The probe reads bit-exact by construction; only the planted decode token shows that it could not fail."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    import stale_engine

    stale_engine.register()
    try:
        result = probe("prefill-decode", engine=stale_engine.NAME, n_decode=2)
    finally:
        stale_engine.unregister()
    assert [c.word for c in result.checks] == ["bit-exact"]
    [control] = result.controls
    assert not control.caught and "0 of 49152 logits differ" in control.evidence
    assert result.vacuous.startswith("inverse control not caught") and result.status == "vacuous"


@pytest.mark.engine
def test_determinism_control_is_one_more_run_with_a_planted_token():
    result = probe("determinism", runs=2, n_decode=2)
    [control] = result.controls
    assert control.caught and control.check == "runs"
    assert result.status == "invariant" and result.invariant


@pytest.mark.engine
def test_require_fails_a_vacuous_probe_with_one_line(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "invariance", "prefill-decode", "--variant",
                           LLAMA + ",n_ubatch=1", "--tokens", "2", "--prompt", SHORT_PROMPT, "--require",
                           "bit-exact", "--json", str(out), "-q"], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: the probe is vacuous: the prefill also ran")
    assert '"status": "vacuous"' in out.read_text()
