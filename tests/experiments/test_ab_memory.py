"""ab's memory bound (#31): at most the reference and the run being compared are held, whole, at once; nothing in
this process copies a run (the supervised worker hands a long run over in its own file, the comparison and the
detection limits work in blocks of rows, the fingerprint reads the run in place)."""

import tracemalloc

import numpy as np
import pytest

from logitlab.engines.variant import parse_variant
from logitlab.experiments.ab import AbConfig, AbExperiment
from logitlab.engines.spill import is_spilled, spill_folder

from conftest import SHORT_PROMPT


def _config(control="", candidate="", *, engine="fake", prompt=SHORT_PROMPT, **kwargs):
    kwargs = {"n_decode": 4, "repeats": 2, "warmup": 0, **kwargs}
    return AbConfig(control=parse_variant(control, "control", default_engine=engine),
                    candidate=parse_variant(candidate, "candidate", default_engine=engine), prompt=prompt, **kwargs)


@pytest.mark.parametrize("candidate, exact", [("", True), ("leak=1", False)])
def test_the_first_candidate_run_is_not_kept_and_later_ones_are_checked_by_a_key_of_its_bits(candidate, exact):
    kept = AbExperiment(_config("", candidate), keep_first_candidate=True)
    kept_result = kept.run()
    lean = AbExperiment(_config("", candidate))
    result = lean.run()
    assert lean.first_candidate.logits.shape[0] == 0 and kept.first_candidate.logits.shape[0] > 0
    assert lean.first_candidate.logits.base is None  # not a view: a view would keep the run alive
    later = [r.candidate_self_exact for r in result.measured("candidate")][1:]
    assert later and all(x is exact for x in later)
    assert later == [r.candidate_self_exact for r in kept_result.measured("candidate")][1:]
    assert result.fingerprints == kept_result.fingerprints


@pytest.mark.engine
def test_a_long_prompt_s_ab_allocates_no_run_sized_array_in_this_process():
    """A 700-token A/A (138 MB a run, detection limits on): the runs are the workers' files, kept as they are; what
    this process allocates at its peak (tracemalloc: numpy's buffers) is the comparisons' per-row results and
    blocks, under 3/4 of a run — before #31 the copy out of the shared buffer, the fingerprint's bytes and the
    detection limits' planted copies were each a whole run, the NaN masks half of one."""
    from logitlab.engines.tokenizers import GgufTokenizer
    from logitlab.models import default_model_path

    from logitlab.numerics import compare_logits

    tokenizer = GgufTokenizer(default_model_path())
    ids = tokenizer.tokenize(" ".join([SHORT_PROMPT] * 70))[:700]
    prompt = tokenizer.detokenize(ids)
    config = _config("n_ctx=1024", "n_ctx=1024", engine="llamacpp", prompt=prompt, repeats=1, n_decode=2)
    compare_logits(np.zeros((2, 8), np.float32), np.zeros((2, 8), np.float32))  # the kernel loaded (~29 MB, once)
    tracemalloc.start()
    try:
        experiment = AbExperiment(config)
        result = experiment.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    run_bytes = experiment.reference.logits.nbytes
    assert run_bytes > 130e6 and result.verdict.word == "bit-exact" and result.control_reproducible
    assert result.detection is not None and result.detection.shapes  # the limits were measured
    assert all(r.candidate_self_exact for r in result.measured("candidate")[1:])
    # what is left is the blocks of 2**21 entries (8 MB) the comparisons and the fault search work on, a few at a
    # time (50-77 MB at the peak, measured: the top-2 swaps of one block), whatever the run's length; a copy of the
    # run would add its 138 MB to that
    assert peak < run_bytes * 3 / 4, f"{peak / 1e6:.0f} MB allocated here at the peak, one run is {run_bytes / 1e6:.0f} MB"
    # the reference is kept in a file on disk (page cache the kernel may drop), not in /dev/shm or anonymous memory:
    # what this process holds that the kernel cannot give back is under half a run (before: the whole reference)
    assert spill_folder(run_bytes) is not None  # logitlab's cache folder is on a disk here (CI's machine: ext4)
    assert is_spilled(experiment.reference.logits)
    with open("/proc/self/smaps_rollup") as f:
        held = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f
                if line.startswith(("Pss_Anon", "Pss_Shmem"))}
    assert held["Pss_Shmem"] < run_bytes / 2, f"{held} with one run of {run_bytes / 1e6:.0f} MB"


def test_a_large_first_candidate_kept_for_self_check_is_spilled_and_a_reference_left_in_memory_is_said(
        monkeypatch, tmp_path):
    """--self-check keeps the first candidate run whole (its inverse control replays it): on disk too, so that one
    run is held, not two; a large reference that stays in memory (LOGITLAB_SPILL=off) is a note of the result."""
    from logitlab.engines import spill

    monkeypatch.setattr(spill, "SPILL_BYTES", 1)  # every run counts as large (the fake engine's are kB)
    monkeypatch.setattr("logitlab.experiments.ab.SPILL_BYTES", 1)
    monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path))
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here: nothing to spill to")
    experiment = AbExperiment(_config(self_check=True))
    result = experiment.run()
    assert is_spilled(experiment.reference.logits) and is_spilled(experiment.first_candidate.logits)
    assert not any("held in memory" in note for note in result.notes)
    monkeypatch.setenv("LOGITLAB_SPILL", "off")
    experiment = AbExperiment(_config())
    result = experiment.run()
    assert not is_spilled(experiment.reference.logits)
    assert any(note.startswith("the reference run (") and "is held in memory, not on disk" in note
               for note in result.notes), result.notes
