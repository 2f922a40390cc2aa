"""Fuzz ``logitlab report RUNS.jsonl``: run logs cut short, lines dropped, torn or edited.

Seeds: the run logs (``--log``) of a finished ``ab`` and ``verify`` on the
embedded model and a ``bench run`` of two shell commands. The property:
reading a damaged log and rendering its report (terminal and Markdown) either
works or raises a :class:`~logitlab.errors.LogitlabError`; a log cut at any
byte (what a kill leaves) always reads, keeping every whole run line before the cut.
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
from mutate import jsonl_file_edits
from logitlab import report
from logitlab.runlog import read_run_log

SEEDS = sorted((DATA / "fuzz" / "logs").glob("*.jsonl"))


def render(result) -> None:
    report.markdown(result)
    report.display(result, Console(file=io.StringIO(), width=120))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
@given(data=st.data())
def test_damaged_run_logs_report_or_raise_a_logitlab_error(seed, data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(data.draw(jsonl_file_edits(seed.read_text())))
        with outcome(f"run log: {seed.name.split('.')[0]}"):
            render(report.read_result(path))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
@given(data=st.data())
def test_a_log_cut_at_any_byte_keeps_every_whole_run(seed, data):
    """What SIGKILL leaves: the file up to some byte. Every whole run line before the cut is in the report."""
    raw = seed.read_bytes()
    cut = data.draw(st.integers(raw.index(b"\n") + 1, len(raw)))  # the header line is written before any run
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(raw[:cut])
        lines = raw[:cut].decode("utf-8", "replace").split("\n")
        whole = [line for line in lines[1:] if line and _parses(line)]  # a line cut before its newline still parses
        runs = sum(1 for line in whole if not line.startswith(('{"log_update"', '{"log_end"')))
        log = read_run_log(path)
        assert len(log.records) == runs
        assert log.interrupted == (raw[:cut].rstrip(b"\n") != raw.rstrip(b"\n"))  # the end line is the last
        result = report.read_result(path)
        render(result)
        logged = result.prompts if hasattr(result, "prompts") else result.runs  # verify logs one line per prompt
        assert len(logged) == runs
        if log.interrupted:
            assert "interrupted" in result.error
        tally(f"run log cut: {seed.name.split('.')[0]}", "read")


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def test_every_seed_is_a_complete_log():
    for seed in SEEDS:
        log = read_run_log(seed)
        assert log.ending == "complete" and log.records and not log.notes, seed
        assert report.read_result(seed).error is None
