"""Run logs (logitlab.runlog): written line by line, read back after a kill, shown by ``logitlab report``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logitlab.errors import InputError
from logitlab.runlog import RunLog, check_appendable, read_run_log


def write_log(path, runs=3, end="complete"):
    with RunLog(path, "bench-run", {"config": {"x": 1}}) as log:
        for i in range(runs):
            log.run({"index": i})
            if i == 0:
                log.update(first=True)
        if end:
            log.end(end, {"summary": 7}, error=None if end == "complete" else "boom")
    return path


def test_header_runs_updates_and_end_read_back(tmp_path):
    log = read_run_log(write_log(tmp_path / "r.jsonl"))
    assert (log.kind, log.header, log.ending, log.final) == ("bench-run", {"config": {"x": 1}, "first": True},
                                                            "complete", {"summary": 7})
    assert [r["index"] for r in log.records] == [0, 1, 2] and not log.interrupted and log.notes == []


def test_a_torn_last_line_is_ignored_with_a_note_and_the_log_reads_as_interrupted(tmp_path):
    path = write_log(tmp_path / "r.jsonl", end=None)
    path.write_bytes(path.read_bytes() + b'{"index": 3, "wall')
    log = read_run_log(path)
    assert [r["index"] for r in log.records] == [0, 1, 2] and log.interrupted
    assert log.notes == ["line 6 is cut short (a torn last line: the writer was stopped mid-line); ignored"]


def test_a_damaged_middle_line_is_skipped_and_named(tmp_path):
    path = write_log(tmp_path / "r.jsonl")
    lines = path.read_text().splitlines()
    lines[3] = "not json"  # header, run 0, update, run 1, ...
    path.write_text("\n".join(lines) + "\n")
    log = read_run_log(path)
    assert log.notes == ["line 4 is not JSON; ignored"] and [r["index"] for r in log.records] == [0, 2]
    assert log.ending == "complete"


def test_a_log_path_given_twice_shows_the_last_experiment(tmp_path):
    path = write_log(tmp_path / "r.jsonl", runs=2)
    write_log(path, runs=4, end=None)
    log = read_run_log(path)
    assert len(log.records) == 4 and log.interrupted
    assert log.notes[0].startswith("the log holds 1 earlier experiment(s)")


@pytest.mark.parametrize("content, message", [
    (b"", "holds no logitlab runs"),
    (b'{"log":"logitlab-run-log","version":1,"ki', r"holds no logitlab runs \(line 1 is cut short"),
])
def test_nothing_readable_is_one_input_error(tmp_path, content, message):
    path = tmp_path / "r.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_run_log(path)


def test_report_of_a_log_from_before_headers_says_why_it_cannot(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"slot": 0, "variant": "control", "is_reference": True}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "logitlab", "report", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {path} is a run log written before logitlab put "
                                                           "a header line in its logs: it holds 1 run line(s)")


def test_an_unwritable_log_is_one_input_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="cannot write the run log .*file/r.jsonl"):
        RunLog(tmp_path / "file" / "r.jsonl", "ab", {})


def test_a_run_log_is_appended_only_to_a_run_log(tmp_path):
    """``check_appendable``: a missing or empty file, a run log, or an ``ab`` log older than the header line may
    get more runs; a file that holds anything else is refused (appending would damage it)."""
    check_appendable(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    check_appendable(tmp_path / "empty.jsonl")
    with RunLog(tmp_path / "log.jsonl", "ab", {"config": {}}) as log:
        log.run({"slot": 0})
    check_appendable(tmp_path / "log.jsonl")
    (tmp_path / "old.jsonl").write_text(json.dumps({"slot": 0, "variant": "control", "is_reference": True}) + "\n")
    check_appendable(tmp_path / "old.jsonl")
    for name, text in (("notes.txt", "hello\n"), ("result.json", json.dumps({"kind": "ab"}) + "\n"),
                       ("bin.jsonl", "\x00\x01")):
        (tmp_path / name).write_text(text)
        with pytest.raises(InputError, match=rf"^--log {tmp_path / name} exists and is not a logitlab run log"):
            check_appendable(tmp_path / name)
