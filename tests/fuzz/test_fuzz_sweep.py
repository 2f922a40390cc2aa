"""Fuzz sweep folders as ``logitlab report SWEEP_DIR`` reads them (``report.read_result``: ``load_sweep``).

Seed: a sweep folder written as ``run_sweep`` writes it (``sweep.json`` from ``summarize``, one
``jobs/<key>.json`` per finished job, by ``write_json``) for a 2 × 2 matrix: two jobs finished with the
real ``ab`` result of ``tests/data/fuzz/logs/ab.runs.jsonl``, one failed (its worker died), one
pending. No engine runs. Properties:

- round trip: the folder reads back as the summary written;
- agreement: a damaged folder either raises :class:`~logitlab.errors.InputError` naming the folder or
  a file in it, or reads as a summary that renders (Markdown, terminal), whose every job shown ``ok``
  has a result file that reads as a finished result of that very spec, and that round-trips as JSON;
- truncation: ``sweep.json`` cut at any byte is that ``InputError`` (or reads equal: white space).
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from rich.console import Console

from fuzzing import DATA, outcome, tally
from mutate import folder_edits
from logitlab import report
from logitlab.errors import InputError
from logitlab.experiments.sweep.job import SweepJobResult, failed_job, worker_info
from logitlab.experiments.sweep.matrix_file import parse_matrix
from logitlab.experiments.sweep.run import JOBS, MANIFEST, load_sweep
from logitlab.experiments.sweep.summary import SweepResult, summarize
from logitlab.jsonio import read_json, to_jsonable, write_json

AB = report.read_result(DATA / "fuzz" / "logs" / "ab.runs.jsonl")


def plain(result) -> str:
    return json.dumps(to_jsonable(result.to_dict()), sort_keys=True)


def write_sweep(out: Path) -> SweepResult:
    """The folder ``run_sweep`` leaves: the manifest and the job files, as its ``_Record`` writes them."""
    matrix = parse_matrix({"name": "fuzz", "prompts": ["a b", "c d"], "axes": {"options.flash_attn": [0, 1]},
                           "experiment": {"tokens": 4}})
    specs = matrix.jobs()
    where = {**worker_info("local", lane=0), "host": "fuzz-host", "pid": 1}
    results = {spec.key: SweepJobResult(spec=spec, spec_hash=spec.spec_hash, status="ok", error=None, where=where,
                                        started_at="2026-01-02T03:04:05+00:00", seconds=1.5, logits_hash="ab" * 32,
                                        engines_loaded=2, result=AB.to_dict())
               for spec in specs[:2]}
    results[specs[2].key] = failed_job(specs[2], "worker died", where, started_at="2026-01-02T03:04:07+00:00")
    for result in results.values():
        write_json(out / JOBS / f"{result.key}.json", result.to_dict())
    manifest = {"logitlab_version": "0.0", "driver": {"host": "fuzz-host"}, "started_at": "2026-01-02T03:04:00+00:00",
                "finished_at": None, "out": str(out), "resume": False, "executor": {"name": "local"}}
    summary = summarize(matrix.name, matrix.to_dict(), manifest, specs, results)
    write_json(out / MANIFEST, summary.to_dict())
    return summary


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> tuple[Path, SweepResult]:
    out = tmp_path_factory.mktemp("sweep") / "runs"
    return out, write_sweep(out)


def test_a_sweep_folder_reads_back_as_written(seed):
    out, summary = seed
    assert [j.status for j in summary.jobs] == ["ok", "ok", "failed", "pending"]
    assert plain(load_sweep(out)) == plain(summary)


def check_sweep(folder: Path) -> None:
    names = [folder] + [p for p in folder.rglob("*")]
    result = None
    with outcome("sweep folder: damaged", names=names, error=InputError):
        result = report.read_result(folder)  # what ``logitlab report SWEEP_DIR`` reads
        report.display(result, Console(file=io.StringIO(), width=120))
    if result is None:
        return
    for job in result.jobs:
        if job.status == "ok":
            finished = SweepJobResult.from_dict(read_json(folder / JOBS / f"{job.key}.json"))
            assert finished.ok and finished.spec_hash == job.spec.spec_hash
    assert plain(SweepResult.from_dict(json.loads(plain(result)))) == plain(result)


@given(data=st.data())
def test_a_damaged_sweep_folder_reads_as_its_files_say_or_raises_input_error_naming_it(seed, data):
    with tempfile.TemporaryDirectory() as tmp:
        check_sweep(data.draw(folder_edits(seed[0], Path(tmp) / "runs")))


@given(data=st.data())
def test_a_sweep_manifest_cut_at_any_byte_is_an_input_error_naming_it(seed, data):
    out, summary = seed
    raw = (out / MANIFEST).read_bytes()
    cut = data.draw(st.integers(0, len(raw)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "runs"
        folder.mkdir()
        (folder / JOBS).mkdir()
        for job in (out / JOBS).iterdir():
            (folder / JOBS / job.name).write_bytes(job.read_bytes())
        (folder / MANIFEST).write_bytes(raw[:cut])
        try:
            result = load_sweep(folder)
        except InputError as exc:
            assert str(folder) in str(exc), exc
            tally("sweep manifest: cut", "rejected")
        else:
            assert raw[:cut].strip() == raw.strip() and plain(result) == plain(summary)
            tally("sweep manifest: cut", "read")
