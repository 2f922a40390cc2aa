"""Saved results render again: ``logitlab report RESULT.json`` writes the Markdown (and the terminal
report) the run itself wrote, byte for byte, and ``report.load_result`` gives the typed objects back.

Each result kind has its own test function(s) below, on a real short run of the embedded model.
"""

import copy
import json
import math
import os
import subprocess
import sys

import pytest

from logitlab import report
from logitlab.jsonio import to_jsonable

from conftest import SHORT_PROMPT

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
#: One thread per llama.cpp context: on a busy 2-core runner two batch threads spin for seconds
#: (the thread count does not change llama.cpp's bits).
LLAMA_THREADS = "n_threads=1,n_threads_batch=1"


def logitlab(*args):
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          env=ENV)


def run_and_render_again(tmp_path, *command):
    """Run ``command`` with --json and --markdown, then ``logitlab report`` on the JSON.

    Asserts that the Markdown and the terminal report of the saved result equal the run's, and that
    the JSON survives load and dump unchanged; returns the typed result read back.
    """
    saved, run_md, again_md = tmp_path / "result.json", tmp_path / "run.md", tmp_path / "again.md"
    run = logitlab(*command, "--json", saved, "--markdown", run_md)  # not --quiet: its report is compared
    assert run.returncode == 0, run.stderr
    again = logitlab("report", saved, "--markdown", again_md)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert again_md.read_bytes() == run_md.read_bytes()
    assert again.stdout == run.stdout and again.stdout.strip()  # the terminal report too
    data = json.loads(saved.read_text())
    result = report.load_result(data)
    assert to_jsonable(result.to_dict()) == data  # nothing lost or changed by the typed objects
    assert report.markdown(result) == run_md.read_text()
    return result, data


# -- ab ---------------------------------------------------------------------------------------------
@pytest.mark.engine
def test_ab_round_trip(tmp_path):
    from logitlab.experiments.ab import RunRecord
    from logitlab.numerics import LogitComparison, Verdict
    from logitlab.perf.paired import PairedComparison

    result, data = run_and_render_again(
        tmp_path, "ab", "--candidate", f"flash_attn=1,{LLAMA_THREADS}", "--control", LLAMA_THREADS,
        "--tokens", "8", "--repeats", "2", "--warmup", "0", "--prompt", SHORT_PROMPT, "--log", tmp_path / "runs.jsonl")
    assert data["kind"] == "ab" and len(result.runs) == 8 and all(isinstance(r, RunRecord) for r in result.runs)
    compared = [r for r in result.runs if r.comparison is not None]
    assert len(compared) == 7 and all(isinstance(r.comparison, LogitComparison) for r in compared)
    assert isinstance(result.verdict, Verdict) and result.verdict.word == data["verdict"]["word"]
    assert set(result.speed) == {"decode", "prefill"}
    assert all(isinstance(p, PairedComparison) for p in result.speed.values())
    assert data["aa"]["control_reproducible"] is True


# -- verify ----------------------------------------------------------------------------------------
@pytest.mark.engine
def test_verify_round_trip_with_guard(tmp_path):
    from logitlab.experiments.verify.results import (
        FlipRecord,
        GuardPromptResult,
        GuardReport,
        InBlockRow,
        PromptRecord,
        SweepEntry,
        VerifyClassification,
    )

    result, data = run_and_render_again(
        tmp_path, "verify", "--k", "1", "2", "--tokens", "8", "--prompt", SHORT_PROMPT, "--prompt", "One, two, three,",
        "--options", LLAMA_THREADS, "--guard", "0.5", "--guard-k", "2")
    assert data["kind"] == "verify" and [t["k"] for t in data["totals"]] == [1, 2]
    assert all(isinstance(t, SweepEntry) for t in result.totals + result.sweep) and len(result.sweep) == 4
    assert isinstance(result.totals[1].in_block[0], InBlockRow) and len(result.totals[1].in_block) == 2
    assert all(isinstance(p, PromptRecord) for p in result.prompts) and len(result.prompts[0].generated_ids) == 8
    assert all(isinstance(f, FlipRecord) for f in result.flips) and len(result.flips) == len(data["flips"])
    assert isinstance(result.classification, VerifyClassification)
    assert result.classification.cause == data["classification"]["cause"]
    assert isinstance(result.guard, GuardReport) and result.guard.tau == 0.5
    assert all(isinstance(r, GuardPromptResult) for r in result.guard.results) and len(result.guard.results) == 4

    # An undefined fraction (a denominator of 0) is NaN in the run and null in the JSON: both read n/a.
    undefined = copy.deepcopy(result)
    undefined.guard.totals["resync"]["trigger_rate"] = math.nan
    undefined.guard.results[0].extra_rows = math.nan
    saved = json.loads(json.dumps(to_jsonable(undefined.to_dict()), allow_nan=False))
    assert saved["guard"]["results"][0]["extra_rows"] is None
    assert report.markdown(report.load_result(saved)) == report.markdown(undefined) != report.markdown(result)
    first = undefined.guard.results[0]
    row = next(line for line in report.markdown(undefined).splitlines()
               if line.startswith(f"| {first.prompt} | {first.fallback} | "))
    assert row.split(" | ")[5] == "n/a"  # the extra rows cell


@pytest.mark.engine
def test_verify_round_trip_with_positions(tmp_path):
    """Issue #31: a verify of a selection (``--positions``) records it, typed, and renders it again."""
    from logitlab.experiments.positions import Selected

    result, data = run_and_render_again(
        tmp_path, "verify", "--k", "1", "2", "--tokens", "4", "--prompt", SHORT_PROMPT, "--prompt", "One, two, three,",
        "--options", LLAMA_THREADS, "--positions", "last,7")
    # 12 + 4 rows: 7 is a prompt row, not verify's (the last row only); 6 + 4 rows: decode steps 1 and 3
    assert result.positions == Selected("last,7", 3, 8) and data["positions"]["of"] == 8
    assert [t.rows for t in result.totals] == [data["positions"]["compared"]] * 2


# -- invariance ------------------------------------------------------------------------------------
def _typed_checks(result, data):
    from logitlab.experiments.invariance import Check
    from logitlab.numerics import LogitComparison, Verdict

    assert data["kind"] == "invariance" and len(result.checks) == len(data["checks"]) >= 1
    for check in result.checks:
        assert isinstance(check, Check) and isinstance(check.comparison, LogitComparison)
        assert isinstance(check.verdict, Verdict)
    assert result.verdict.word == data["verdict"]["word"] and result.invariant == data["invariant"]


@pytest.mark.engine
def test_invariance_batch_round_trip(tmp_path):
    result, data = run_and_render_again(
        tmp_path, "invariance", "batch", "--batch", "1", "2", "--prompt", SHORT_PROMPT, "--variant", LLAMA_THREADS)
    _typed_checks(result, data)
    assert [c.name for c in result.checks] == ["B=1 again", "B=2"]
    assert result.checks[1].details["stacked"]["copies"] == 2


@pytest.mark.engine
def test_invariance_prefill_decode_round_trip(tmp_path):
    result, data = run_and_render_again(
        tmp_path, "invariance", "prefill-decode", "--tokens", "4", "--prompt", SHORT_PROMPT, "--variant", LLAMA_THREADS)
    _typed_checks(result, data)
    n = len(result.prompt_ids) + 4
    assert result.checks[0].comparison.n_positions == n and len(result.checks[0].comparison.row_differing) == n


@pytest.mark.engine
def test_invariance_matrix_round_trip(tmp_path):
    from logitlab.experiments.invariance import InvarianceResult
    from logitlab.experiments.invariance_matrix import AxisResult

    result, data = run_and_render_again(
        tmp_path, "invariance", "matrix", "--axes", "batch,threads", "--max-batch", "2", "--tokens", "2",
        "--prompt", SHORT_PROMPT, "--prompt", "One, two, three,", "--variant", LLAMA_THREADS)
    assert data["kind"] == "invariance-matrix" and [a["axis"] for a in data["axes_summary"]] == ["batch", "threads"]
    assert all(isinstance(a, AxisResult) and a.prompts == ["prompt-1", "prompt-2"] for a in result.axes)
    for axis in result.axes:
        assert all(isinstance(p, InvarianceResult) for p in axis.probes)
        _typed_checks(axis.probes[0], data["axes"][result.axes.index(axis)]["probes"][0])
    assert result.verdict_word == data["verdict"] and result.status == data["status"]
