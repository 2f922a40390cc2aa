"""Faults of real parts in process-isolated slots: an engine that segfaults, aborts or hangs.

The engine is llama.cpp on the embedded model with a fault planted by an
environment knob on the candidate only (``crashy_engine.py``): the control's
slots run normally, the candidate's worker process dies of SIGSEGV/SIGABRT in
native code, or hangs. Documented behaviour (``experiments/isolation.py``): the
experiment stops cleanly — an :class:`EngineError` naming the slot and the
signal (or the slot timeout), every run measured before kept in the partial
result and in the run log, whose end line says ``error``.
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
def test_a_segfaulting_engine_stops_the_run_naming_slot_and_signal_and_keeps_what_ran(fault, signal_name, tmp_path):
    log = tmp_path / "runs.jsonl"
    with pytest.raises(EngineError, match=rf"^candidate slot 1 crashed in its subprocess \(killed by "
                                          rf"{signal_name.replace('(', '[(]').replace(')', '[)]')}\)") as info:
        run_ab(crashy_config(fault), log_path=log)
    partial = info.value.partial
    assert [(r.slot, r.variant, r.is_reference) for r in partial.runs] == [(0, "control", True)]
    logged = read_run_log(log)
    assert logged.ending == "error" and signal_name.split()[0] in logged.error
    assert [r["slot"] for r in logged.records] == [0]
    shown = report.read_result(log)
    assert shown.error == partial.error and len(shown.runs) == 1


def test_a_hanging_engine_is_killed_at_the_slot_timeout_with_every_process_it_started(tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("CRASHY_CHILD_PID_FILE", str(pid_file))
    log = tmp_path / "runs.jsonl"
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"^candidate slot 1 did not finish within --slot-timeout 40 s: its process "
                                          r"\(and every process it started\) was killed") as info:
        run_ab(crashy_config("hang-child", slot_timeout=40), log_path=log)
    assert time.monotonic() - start < 40 + 40 + 30  # the control's slot, then the timeout: no hour-long sleep
    assert [r.variant for r in info.value.partial.runs] == ["control"]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    status = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}").exists() else "gone"
    assert status in ("gone", "Z"), f"the hung engine's child {child} survived the slot timeout ({status})"
    assert read_run_log(log).ending == "error"


def test_slot_timeout_needs_process_isolation():
    with pytest.raises(InputError, match="--slot-timeout needs --isolation process"):
        dataclasses.replace(crashy_config(""), isolation="session", slot_timeout=5).validate()
    with pytest.raises(InputError, match="--slot-timeout must be positive seconds"):
        crashy_config("", slot_timeout=0).validate()


def test_cli_slot_timeout_is_one_error_line_and_keeps_the_partial_result(tmp_path):
    """The real llamacpp engine cannot even be imported in 0.05 s (numpy and llama_cpp alone take ~0.2 s here): the
    first slot passes the timeout. (0.5 s was too long: a quiet machine loaded and ran it in time.)"""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "ab", "--prompt", SHORT_PROMPT, "--tokens", "4",
                           "--repeats", "1", "--warmup", "0", "--isolation", "process", "--slot-timeout", "0.05",
                           "--json", str(out), "-q"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("error: control slot 0 did not finish within --slot-timeout 0.05 s: its process (and every "
                           "process it started) was killed\n")
    data = json.loads(out.read_text())
    assert data["runs"] == [] and data["error"].startswith("control slot 0 did not finish")
