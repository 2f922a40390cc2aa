"""What ``--resume`` keeps: a finished result for the same spec; what it runs: the rest (no engine runs here)."""

from __future__ import annotations

import pytest

from logitlab.errors import InputError
from logitlab.experiments.sweep.matrix_file import parse_matrix
from logitlab.experiments.sweep.run import JOBS, MANIFEST, finished_results, load_sweep, plan
from logitlab.experiments.sweep.job import SweepJobResult, failed_job, worker_info
from logitlab.experiments.sweep.summary import summarize
from logitlab.jsonio import write_json


def _matrix(tokens=8):
    return parse_matrix({"name": "p", "prompts": ["a b", "c d"], "axes": {"options.flash_attn": [0, 1]},
                         "experiment": {"tokens": tokens}})


def _record(spec, status="ok"):
    """A job record as a worker writes it (its experiment result left out: nothing here is a measurement)."""
    if status == "failed":
        return failed_job(spec, "worker died", worker_info("local", lane=0))
    return SweepJobResult(spec=spec, spec_hash=spec.spec_hash, status="ok", error=None, where=worker_info("local"),
                          started_at="2026-01-01T00:00:00+00:00", seconds=1.0, logits_hash="ab" * 32)


def test_resume_keeps_finished_jobs_of_the_same_spec(tmp_path):
    matrix = _matrix()
    specs = matrix.jobs()
    out = tmp_path / "runs"
    write_json(out / MANIFEST, summarize("p", matrix.to_dict(), {}, specs, {}).to_dict())
    write_json(out / JOBS / f"{specs[0].key}.json", _record(specs[0]).to_dict())
    write_json(out / JOBS / f"{specs[1].key}.json", _record(specs[1], "failed").to_dict())
    (out / JOBS / f"{specs[2].key}.json").write_text("{damaged")
    _, done = plan(matrix, out, resume=True)
    assert list(done) == [specs[0].key]  # failed, damaged and missing results run again
    changed = _matrix(tokens=9)  # same keys, other settings: nothing is finished for them
    assert [s.key for s in changed.jobs()] == [s.key for s in specs]
    assert finished_results(out, changed.jobs()) == {}
    with pytest.raises(InputError, match="already holds a sweep"):
        plan(matrix, out, resume=False)
    shown = load_sweep(out)
    assert [j.status for j in shown.jobs] == ["ok", "failed", "pending", "pending"]
    assert [c.status for c in shown.cells] == ["incomplete", "pending"]
    assert shown.cells[0].logits_hash is None  # a cell's hash needs every job
