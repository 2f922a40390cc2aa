"""Faults of real parts in process-isolated slots: an engine that segfaults, aborts or hangs.

The engine is llama.cpp on the embedded model with a fault planted by an
environment knob on the candidate only (``crashy_engine.py``): the control's
slots run normally, the candidate's worker process dies of SIGSEGV/SIGABRT in
native code, or hangs. Documented behaviour (``experiments/isolation.py``): each
such slot is a ``crashed`` run with its evidence (slot, phase, signal or the
slot timeout, the stack); the other slots run, and the verdict is ``crashed``.
A control that crashes before the reference leaves no baseline: one error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SHORT_PROMPT
from logitlab import report
from logitlab.engines.variant import parse_variant
from logitlab.errors import EngineError, InputError
from logitlab.experiments.ab import AbConfig, run_ab
from logitlab.runlog import read_run_log

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.engine


@pytest.fixture(autouse=True)
def worker_finds_the_engine(monkeypatch):
    """``crashy`` is registered for this module's tests only (other tests list the registered engines);
    the worker of a process-isolated slot imports ``crashy_engine`` from this folder."""
    from logitlab import engines

    monkeypatch.setitem(engines.ENGINES, "crashy", "crashy_engine:CrashyEngine")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


def crashy_config(fault: str, **kwargs) -> AbConfig:
    return AbConfig(
        control=parse_variant("", "control", default_engine="crashy"),
        candidate=parse_variant("", "candidate", default_engine="crashy", env={"CRASHY_FAULT": fault}),
        prompt=SHORT_PROMPT, n_decode=4, repeats=1, warmup=0, isolation="process", **kwargs)


@pytest.mark.parametrize("fault, signal_name", [("segv", "SIGSEGV (signal 11)"), ("abort", "SIGABRT (signal 6)")])
def test_a_segfaulting_candidate_is_a_crashed_run_naming_slot_phase_and_signal_and_every_slot_runs(
        fault, signal_name, tmp_path):
    log = tmp_path / "runs.jsonl"
    result = run_ab(crashy_config(fault), log_path=log)
    assert result.verdict.word == "crashed" and result.error is None
    assert [(r.slot, r.variant, bool(r.crash)) for r in result.runs] == [
        (0, "control", False), (1, "candidate", True), (2, "candidate", True), (3, "control", False)]
    evidence = result.runs[1].crash
    assert evidence["status"] == f"killed by {signal_name}" and evidence["phase"] == "decode step 0", evidence
    assert evidence["slot"] == 1 and evidence["variant"] == "candidate"
    assert evidence["stack"] and evidence["stack"][0].startswith("Fatal Python error"), evidence["stack"]
    assert result.control_reproducible  # the control's two slots ran and agree
    logged = read_run_log(log)
    assert logged.ending == "complete"
    assert [bool(r.get("crash")) for r in logged.records] == [False, True, True, False]
    shown = report.read_result(log)
    assert shown.verdict.word == "crashed" and len(shown.runs) == 4


def test_a_hanging_candidate_is_killed_at_the_slot_timeout_with_every_process_it_started(tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("CRASHY_CHILD_PID_FILE", str(pid_file))
    log = tmp_path / "runs.jsonl"
    start = time.monotonic()
    result = run_ab(dataclasses.replace(crashy_config("hang-child", slot_timeout=12), repeats=1), log_path=log)
    assert time.monotonic() - start < 2 * 12 + 60  # two hung candidate slots of 12 s each: no hour-long sleep
    assert result.verdict.word == "crashed"
    hung = [r.crash for r in result.runs if r.crash]
    assert [c["slot"] for c in hung] == [1, 2]
    assert hung[0]["status"] == "hung: killed after --slot-timeout 12 s with every process it started", hung[0]
    assert hung[0]["phase"] == "decode step 0" and hung[0]["signal"] is None
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    status = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}").exists() else "gone"
    assert status in ("gone", "Z"), f"the hung engine's child {child} survived the slot timeout ({status})"
    assert read_run_log(log).ending == "complete"


def test_slot_timeout_is_checked_before_any_run():
    with pytest.raises(InputError, match="--slot-timeout must be positive seconds"):
        crashy_config("", slot_timeout=0).validate()
    cmd = parse_variant("", "control", default_engine="cmd:true {tokens} {logits}")
    with pytest.raises(InputError, match="--slot-timeout at --isolation session stops a supervised in-process "
                                         "engine; the cmd engine runs out of process by itself"):
        dataclasses.replace(crashy_config(""), control=cmd, isolation="session", slot_timeout=5).validate()
    dataclasses.replace(crashy_config(""), isolation="session", slot_timeout=5).validate()  # supervised: allowed


def test_cli_slot_timeout_of_the_control_is_no_baseline_one_error_line_and_keeps_the_partial_result(tmp_path):
    """The real llamacpp engine cannot even be imported in 0.05 s (numpy and llama_cpp alone take ~0.2 s here): the
    first slot passes the timeout. (0.5 s was too long: a quiet machine loaded and ran it in time.)"""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "ab", "--prompt", SHORT_PROMPT, "--tokens", "4",
                           "--repeats", "1", "--warmup", "0", "--isolation", "process", "--slot-timeout", "0.05",
                           "--json", str(out), "-q"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("error: no baseline: control slot 0 crashed in start (hung: killed after --slot-timeout "
                           "0.05 s with every process it started); nothing can be compared\n")
    data = json.loads(out.read_text())
    assert [r["crash"]["phase"] for r in data["runs"]] == ["start"] and data["error"].startswith("no baseline")
