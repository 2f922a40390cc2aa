"""Sweep jobs run in this process on the embedded model: the engine cache, a job's record, the cell summary.

The executors and the command line are tested in ``test_sweep.py``; here the
job function itself (``run_job``), the summary it feeds, and the round trip of
both result kinds through JSON.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from logitlab import report
from logitlab.experiments.ab import speed_blocks
from logitlab.experiments.engine_cache import EngineCache
from logitlab.experiments.sweep.matrix_file import parse_matrix
from logitlab.experiments.sweep.job import SweepJobResult, run_job
from logitlab.experiments.sweep.summary import SweepResult, summarize
from logitlab.jsonio import to_jsonable
from logitlab.perf.paired import paired_comparison

from conftest import SHORT_PROMPT
from report.roundtrip_tools import typed_problems

pytestmark = pytest.mark.engine

#: One thread per llama.cpp context: on a busy 2-core machine two batch threads spin for seconds
#: (the thread count does not change llama.cpp's bits).
THREADS = {"n_threads": 1, "n_threads_batch": 1}


def _matrix(axes, experiment=None, prompts=(SHORT_PROMPT,)):
    return parse_matrix({"name": "t", "prompts": list(prompts), "control": {"options": THREADS}, "axes": axes,
                         "experiment": {"tokens": 8, **(experiment or {})}})


def test_engine_cache_keeps_reuses_and_drops():
    matrix = _matrix({"options.flash_attn": [0, 1]})
    control = matrix.control
    fa0, fa1 = (cell.candidate for cell in matrix.cells())
    cache = EngineCache(2)
    with cache.job():
        first = cache.load(control)
        cache.load(fa1)
        first.close()  # an experiment's close() leaves a kept engine loaded
    assert (cache.loads, cache.hits, len(cache)) == (2, 0, 2)
    with cache.job():
        again = cache.load(control)
        assert again.n_vocab == first.n_vocab and again._engine is first._engine
        cache.load(fa0)  # a third engine: kept until the job ends, then the least recently used goes
        assert len(cache) == 3
    assert (cache.loads, cache.hits, len(cache)) == (3, 1, 2)
    with cache.job() as job:
        cache.load(control)
        job.failed = True  # an engine of a failed job is not handed to the next one
    assert len(cache) == 1  # fa0 stays; the control was closed
    with cache.job():
        cache.load(fa0)
        cache.load(control)
    assert (cache.loads, cache.hits, len(cache)) == (4, 3, 2)
    cache.close()
    assert len(cache) == 0


def test_ab_job_is_a_function_of_its_spec():
    matrix = _matrix({"options.flash_attn": [0, 1]})
    fa0, fa1 = matrix.jobs()
    cache = EngineCache(2)
    kept = [run_job(spec, cache=cache) for spec in (fa0, fa1)]
    fresh = [run_job(spec) for spec in (fa0, fa1)]  # no cache: every engine loaded for the job
    assert [r.status for r in kept + fresh] == ["ok"] * 4
    assert kept[1].engines_kept == 1 and fresh[1].engines_kept == 0 and fresh[1].engines_loaded == 2
    assert [r.logits_hash for r in kept] == [r.logits_hash for r in fresh]
    a0, a1 = (r.experiment_result() for r in kept)
    assert a0.verdict.word == "bit-exact" and a0.control_reproducible
    assert a1.verdict.word == "near-tie"  # flash attention, llama.cpp CPU: the same bits every run
    assert kept[0].logits_hash != kept[1].logits_hash  # the hash sees the candidate's bits
    assert kept[0].where["executor"] == "inline" and kept[0].where["device"] == "cpu"


def test_a_failing_job_is_recorded_and_the_next_runs():
    matrix = _matrix({"options.n_ctx": [8, 64]})
    small, fits = matrix.jobs()
    cache = EngineCache(2)
    failed = run_job(small, cache=cache)
    assert failed.status == "failed" and failed.logits_hash is None
    assert "exceeds the candidate's context of 8 tokens" in failed.error
    ok = run_job(fits, cache=cache)
    assert ok.ok and ok.logits_hash
    summary = summarize("t", matrix.to_dict(), {}, matrix.jobs(), {failed.key: failed, ok.key: ok})
    assert [(c.status, c.verdict) for c in summary.cells] == [("failed", None), ("ok", "bit-exact")]
    assert summary.counts() == {"ok": 1, "failed": 1, "pending": 0}
    text = report.markdown(summary)
    assert "failed jobs (1)" in text and "exceeds the candidate's context of 8 tokens" in text


def test_verify_job_and_its_cell():
    matrix = _matrix({"options.n_ubatch": [512]}, {"kind": "verify", "ks": [1, 2]})
    (spec,) = matrix.jobs()
    first, second = run_job(spec, cache=EngineCache(1)), run_job(spec)
    assert first.ok and first.logits_hash == second.logits_hash and len(first.logits_hash) == 64
    result = first.experiment_result()
    assert [t.k for t in result.totals] == [1, 2] and result.totals[0].bit_exact_rows == 8
    summary = summarize("t", matrix.to_dict(), {}, [spec], {spec.key: first})
    (cell,) = summary.cells
    assert cell.verdict == result.classification.word and cell.cause == result.classification.cause
    assert cell.positions == 16 and cell.rows_differing == sum(t.rows - t.bit_exact_rows for t in result.totals)
    assert cell.flips == sum(t.flips for t in result.totals) and cell.kld_mean is None
    assert "cause" in report.markdown(summary)
    # issue #32: the cell's detection limit: the largest argmax-up limit over the job's K comparisons
    ups = [d.limits.shape("argmax-up").limit for d in result.detection]
    assert len(ups) == 2 and cell.detection_measured == 2 and cell.detection_limit == max(ups) > 0
    header, _, row = [line for line in report.markdown(summary).splitlines() if line.startswith("|")][:3]
    cells = dict(zip(re.split(r"(?<!\\)\|", header), re.split(r"(?<!\\)\|", row)))
    assert cells[" argmax-up limit "].strip() == f"{max(ups):.4g}"
    again = report.load_result(json.loads(json.dumps(to_jsonable(first.to_dict())))).experiment_result()
    assert typed_problems(again) == [] and again.detection == result.detection


def test_speed_is_pooled_over_the_cells_prompts():
    matrix = _matrix({"options.flash_attn": [1]}, {"speed": True, "repeats": 2, "warmup": 0},
                     prompts=(SHORT_PROMPT, "Once upon a time"))
    specs = matrix.jobs()
    cache = EngineCache(2)
    results = {spec.key: run_job(spec, cache=cache) for spec in specs}
    assert all(r.ok for r in results.values())
    summary = summarize("t", matrix.to_dict(), {}, specs, results)
    (cell,) = summary.cells
    abs_ = [results[s.key].experiment_result() for s in specs]
    blocks = [b for r in abs_ for b in speed_blocks(r.runs, "decode_tokens_per_second")]
    expected = paired_comparison(blocks, higher_is_better=True, metric="decode tokens/s", unit="tokens/s", seed=0)
    assert cell.speed["decode"].n_blocks == 4 and cell.speed["decode"].ratio == pytest.approx(expected.ratio)
    assert cell.speed["decode"].call == expected.call
    # KLD pooled over both prompts' verdict runs, as merge_comparisons pools rows
    rows = [x for r in abs_ for run in r.runs if run.slot == r.verdict_slot for x in run.comparison.row_kld]
    assert cell.kld_p99 == pytest.approx(float(np.percentile(np.array(rows, dtype=float), 99)))
    assert cell.positions == sum(len(r.prompt_ids) + 8 for r in abs_)
    text = report.markdown(summary)
    assert "decode (95% CI)" in text and f"**{expected.call}**" in text
    # the detection limit: the larger of the two verdict runs' argmax-up limits (a column of the matrix table)
    ups = [r.detection.shape("argmax-up").limit for r in abs_]
    assert cell.detection_measured == 2 and cell.detection_limit == max(ups) > 0
    assert "| argmax-up limit |" in text and f"| {max(ups):.4g} |" in text

    # both result kinds survive JSON: typed again, nothing lost, the same report
    data = json.loads(json.dumps(to_jsonable(summary.to_dict())))
    again = report.load_result(data)
    assert isinstance(again, SweepResult) and typed_problems(again) == []
    assert to_jsonable(again.to_dict()) == data and report.markdown(again) == text
    job = next(iter(results.values()))
    job_data = json.loads(json.dumps(to_jsonable(job.to_dict())))
    job_again = report.load_result(job_data)
    assert isinstance(job_again, SweepJobResult) and typed_problems(job_again) == []
    assert to_jsonable(job_again.to_dict()) == job_data
    assert report.markdown(job_again) == report.markdown(job)
    assert "logitlab ab: **" in report.markdown(job)  # the job's own ab report follows its header


def test_invariance_matrix_job_and_its_cell():
    """``kind = "invariance-matrix"``: a job is the matrix of the cell's variant on one prompt; the cell pools the
    jobs' axes over the prompts (status, worst verdict, bit-identical rows) and reads back from JSON."""
    matrix = parse_matrix({"name": "t", "prompts": ["hello world", "another prompt"],
                           "control": {"engine": "fake"}, "axes": {"options.sleep": ["0"]},
                           "experiment": {"kind": "invariance-matrix", "tokens": 2, "runs": 2,
                                          "axes": ["determinism", "batch", "prefill-decode"]}})
    specs = matrix.jobs()
    results = {spec.key: run_job(spec) for spec in specs}
    assert all(r.ok and r.logits_hash is None for r in results.values())
    summary = summarize("t", matrix.to_dict(), {}, specs, results)
    (cell,) = summary.cells
    axes = {a["axis"]: a for a in cell.invariance_axes}
    assert list(axes) == ["determinism", "batch", "prefill-decode"]
    assert axes["batch"]["status"] == "skipped" and axes["batch"]["skipped"].startswith("the fake engine does not")
    assert (axes["prefill-decode"]["status"], axes["prefill-decode"]["verdict"]) == ("invariant", "bit-exact")
    assert axes["prefill-decode"]["rows_identical"] == axes["prefill-decode"]["rows"] == (11 + 2) + (14 + 2)
    assert cell.verdict == "bit-exact" and cell.rows_differing == 0 and cell.logits_hash is None
    assert cell.positions == sum(a["rows"] for a in axes.values())
    md = report.markdown(summary)
    assert "| sleep | verdict | determinism | batch | prefill-decode | jobs |" in md
    assert "| skipped | invariant, 100.0 % | 2/2 |" in md
    again = report.load_result(json.loads(json.dumps(to_jsonable(summary.to_dict()))))
    assert isinstance(again, SweepResult) and report.markdown(again) == md
    job = report.load_result(json.loads(json.dumps(to_jsonable(results[specs[0].key].to_dict()))))
    assert "logitlab invariance matrix" in report.markdown(job)
