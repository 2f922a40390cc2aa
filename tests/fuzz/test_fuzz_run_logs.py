"""Fuzz ``logitlab report RUNS.jsonl``: run logs cut short, lines dropped, torn or edited.

Seeds: the run logs (``--log``) of a finished ``ab`` and ``verify`` on the
embedded model and a ``bench run`` of two shell commands. The property:
reading a damaged log and rendering its report (terminal and Markdown) either
works or raises a :class:`~logitlab.errors.LogitlabError`; a log cut at any
byte (what a kill leaves) always reads, keeping every whole run line before the cut.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from hypothesis import given, strategies as st
from rich.console import Console

from fuzzing import DATA, tally
from mutate import jsonl_file_edits
from logitlab import report
from logitlab.errors import LogitlabError
from logitlab.runlog import read_run_log

SEEDS = sorted((DATA / "fuzz" / "logs").glob("*.jsonl"))


def render(result) -> None:
    report.markdown(result)
    report.display(result, Console(file=io.StringIO(), width=120))


@given(data=st.data(), seed=st.sampled_from(SEEDS))
def test_damaged_run_logs_report_or_raise_a_logitlab_error(data, seed):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(data.draw(jsonl_file_edits(seed.read_text())))
        reader = f"run log: {seed.name.split('.')[0]}"
        try:
            render(report.read_result(path))
        except LogitlabError:
            tally(reader, "rejected")
            return
        tally(reader, "read")


@given(data=st.data(), seed=st.sampled_from(SEEDS))
def test_a_log_cut_at_any_byte_keeps_every_whole_run(data, seed):
    """What SIGKILL leaves: the file up to some byte. Every whole run line before the cut is in the report."""
    raw = seed.read_bytes()
    cut = data.draw(st.integers(raw.index(b"\n") + 1, len(raw)))  # the header line is written before any run
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(raw[:cut])
        whole = raw[:cut].decode().split("\n")[:-1] if not raw[:cut].endswith(b"\n") else \
            raw[:cut].decode().split("\n")
        runs = sum(1 for line in whole[1:] if line and not line.startswith(('{"log_update"', '{"log_end"')))
        log = read_run_log(path)
        assert len(log.records) == runs
        assert log.interrupted == (b'"log_end"' not in raw[:cut] or not raw[:cut].endswith(b"\n"))
        result = report.read_result(path)
        render(result)
        logged = getattr(result, "runs", None)
        if logged is None:  # verify: one line per prompt
            logged = result.prompts
        assert len(logged) == runs
        if log.interrupted:
            assert "interrupted" in result.error
        tally(f"run log cut: {seed.name.split('.')[0]}", "read")


def test_every_seed_is_a_complete_log():
    for seed in SEEDS:
        log = read_run_log(seed)
        assert log.ending == "complete" and log.records and not log.notes, seed
        assert report.read_result(seed).error is None
