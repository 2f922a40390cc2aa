"""Supervised workers forked from a fork server (engines/forkserver.py): the same bits as a new process, crashes
and hangs seen as from a new process, and an environment knob never set after the imports.

The hf engine (its PRELOAD: PyTorch and transformers) on the embedded model; crashes with the crashing llamacpp
engine of tests/crash_engine.py in its forked form (PRELOAD: llama-cpp-python and that module).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines import forkserver
from logitlab.engines.supervised import call_engine, load_supervised
from logitlab.engines.variant import Variant
from logitlab.errors import EngineCrashed, LogitlabError

from conftest import SHORT_PROMPT

pytestmark = pytest.mark.engine

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def crashing(monkeypatch):
    """The forked crashing engine registered, tests/ on the workers' path, and no server left from another test."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    import crash_engine

    crash_engine.register()
    forkserver.close_servers()
    yield crash_engine
    forkserver.close_servers()
    crash_engine.unregister()


def _server_of(engine) -> subprocess.Popen:
    """The fork server whose child the engine's worker is."""
    ppid = int(Path(f"/proc/{engine._proc.pid}/stat").read_text().rpartition(")")[2].split()[1])
    servers = [s.proc for s in forkserver._SERVERS.values() if s.proc.pid == ppid]
    assert len(servers) == 1, (ppid, [s.proc.pid for s in forkserver._SERVERS.values()])
    return servers[0]


def _run(variant: Variant) -> tuple[np.ndarray, str]:
    engine = load_supervised(variant)
    try:
        ids = engine.tokenize(SHORT_PROMPT)
        return np.array(engine.run_workload(ids, 6).logits), type(engine._proc).__name__
    finally:
        engine.close(wait=True)


def test_a_forked_hf_worker_computes_the_bits_a_new_process_computes(monkeypatch):
    forkserver.close_servers()
    variant = Variant("control", "hf", options={"threads": 2})
    forked, kind = _run(variant)
    again, kind_again = _run(variant)  # the server's second worker
    monkeypatch.setenv("LOGITLAB_FORKSERVER", "0")
    fresh, fresh_kind = _run(variant)
    assert (kind, kind_again, fresh_kind) == ("ForkedWorker", "ForkedWorker", "Popen")
    assert forked.shape == fresh.shape and forked.tobytes() == fresh.tobytes() == again.tobytes()
    forkserver.close_servers()


def test_a_forked_worker_that_segfaults_is_a_crash_with_its_signal_phase_and_stack_then_a_new_worker(crashing):
    engine = load_supervised(Variant("candidate", crashing.FORKED, options={"crash_phase": "decode",
                                                                             "crash_step": 1}))
    try:
        ids = engine.tokenize(SHORT_PROMPT)
        assert type(engine._proc).__name__ == "ForkedWorker"
        server = _server_of(engine)
        with pytest.raises(EngineCrashed) as caught:
            engine.run_workload(ids, 4)
        evidence = caught.value.evidence
        assert evidence.phase == "decode step 1" and evidence.signal == signal.SIGSEGV, evidence
        assert evidence.stack[0].startswith("Fatal Python error: Segmentation fault"), evidence.stack
        assert any("crash_engine.py" in line and "segfault" in line for line in evidence.stack), evidence.stack
        # the next run starts a new worker from the same server (it counts its runs from 1 again: it crashes too)
        with pytest.raises(EngineCrashed) as again:
            engine.run_workload(ids, 4)
        assert again.value.evidence.signal == signal.SIGSEGV and engine.restarts == 1
        assert engine.tokenize(SHORT_PROMPT) == ids  # a third worker
        assert engine.restarts == 2 and _server_of(engine) is server and len(forkserver._SERVERS) == 1
    finally:
        engine.close(wait=True)


def test_a_forked_worker_past_its_timeout_is_killed_with_its_process_group(crashing):
    engine = load_supervised(Variant("candidate", crashing.FORKED, options={"crash_phase": "prefill",
                                                                             "crash_how": "hang"}), timeout=8)
    try:
        ids = engine.tokenize(SHORT_PROMPT)
        proc = engine._proc
        assert os.getpgid(proc.pid) == proc.pid  # a session of its own, as start_new_session gives
        with pytest.raises(EngineCrashed) as caught:
            engine.run_workload(ids, 2)
        assert caught.value.evidence.status == "hung: killed after 8 s" and caught.value.evidence.phase == "prefill"
        assert proc.returncode == -signal.SIGKILL
        with pytest.raises(ProcessLookupError):
            os.kill(proc.pid, 0)  # reaped by its server, not left a zombie
    finally:
        engine.close(wait=True)


def test_an_environment_knob_gets_a_server_of_its_own_and_the_test_name_does_not(crashing, monkeypatch):
    names = ["LOGITLAB_TEST_KNOB", "PYTEST_CURRENT_TEST"]
    engines = []
    try:
        for knob, test_name in [(None, "first"), (None, "second"), ("1", "third")]:
            monkeypatch.setenv("PYTEST_CURRENT_TEST", test_name)
            engines.append(load_supervised(Variant("v", crashing.FORKED, env={} if knob is None
                                                   else {"LOGITLAB_TEST_KNOB": knob})))
        facts = [call_engine(e, crashing.worker_facts, names, phase="facts") for e in engines]
        servers = [_server_of(e) for e in engines]
        assert servers[0] is servers[1] and servers[2] is not servers[0]
        # each worker has its exact environment; the knob was there when its server imported the libraries
        assert [f["env"] for f in facts] == [{"LOGITLAB_TEST_KNOB": None, "PYTEST_CURRENT_TEST": "first"},
                                             {"LOGITLAB_TEST_KNOB": None, "PYTEST_CURRENT_TEST": "second"},
                                             {"LOGITLAB_TEST_KNOB": "1", "PYTEST_CURRENT_TEST": "third"}]
        server_env = [Path(f"/proc/{s.pid}/environ").read_bytes().split(b"\0") for s in servers]
        assert b"LOGITLAB_TEST_KNOB=1" in server_env[2] and b"LOGITLAB_TEST_KNOB=1" not in server_env[0]
    finally:
        for engine in engines:
            engine.close(wait=True)


def test_a_worker_outlives_its_killed_server_and_the_next_worker_gets_a_new_one(crashing):
    variant = Variant("v", crashing.FORKED)
    engine = load_supervised(variant)
    try:
        ids = engine.tokenize(SHORT_PROMPT)
        server = _server_of(engine)
        server.send_signal(signal.SIGKILL)
        server.wait()
        assert engine.run_workload(ids, 2).logits.shape[0] == len(ids) + 2  # the worker does not need it
        proc = engine._proc
    finally:
        engine.close(wait=True)
    assert proc.returncode == -signal.SIGKILL  # no server left to tell its exit status: read as killed
    other = load_supervised(variant)
    try:
        assert other.n_vocab > 0 and _server_of(other) is not server
    finally:
        other.close(wait=True)


def test_forkserver_0_starts_a_new_process_per_worker(crashing, monkeypatch):
    monkeypatch.setenv("LOGITLAB_FORKSERVER", "0")
    engine = load_supervised(Variant("v", crashing.FORKED))
    try:
        assert engine.n_vocab > 0 and isinstance(engine._proc, subprocess.Popen) and not forkserver._SERVERS
    finally:
        engine.close(wait=True)


def test_a_load_error_in_a_forked_worker_is_raised_as_from_a_new_process(crashing, monkeypatch, tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but not really")
    raised = []
    for setting in ("1", "0"):
        monkeypatch.setenv("LOGITLAB_FORKSERVER", setting)
        engine = load_supervised(Variant("v", crashing.FORKED, model=str(bad)))
        kind = type(engine._proc).__name__
        try:
            with pytest.raises(LogitlabError) as caught:
                engine.tokenize("x")
            raised.append((kind, type(caught.value), str(caught.value)))
        finally:
            engine.close(wait=True)
    assert raised[0][1:] == raised[1][1:] and raised[0][1] is not EngineCrashed, raised
    assert [r[0] for r in raised] == ["ForkedWorker", "Popen"]


def test_a_module_changed_on_disk_is_never_forked_from_the_old_imports(crashing):
    """bisect rebuilds and reinstalls between probes: a server whose imported files changed refuses, the worker
    starts as a new process, and the next one comes from a new server; the old server still tells the exit
    status of the worker it forked before (a segfault reads as SIGSEGV, not as killed)."""
    source = Path(crashing.__file__)
    before = source.stat()
    first = load_supervised(Variant("v", crashing.FORKED, options={"crash_phase": "decode"}))
    try:
        ids = first.tokenize(SHORT_PROMPT)
        old = _server_of(first)
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        refused = load_supervised(Variant("v", crashing.FORKED))
        assert refused.n_vocab > 0 and isinstance(refused._proc, subprocess.Popen), type(refused._proc)
        refused.close(wait=True)
        again = load_supervised(Variant("v", crashing.FORKED))
        assert again.n_vocab > 0 and type(again._proc).__name__ == "ForkedWorker"
        assert _server_of(again) is not old
        again.close(wait=True)
        with pytest.raises(EngineCrashed) as caught:
            first.run_workload(ids, 2)
        assert caught.value.evidence.signal == signal.SIGSEGV, caught.value.evidence
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
        first.close(wait=True)


def test_a_worker_runs_in_the_callers_folder_and_another_folder_is_another_server(crashing, monkeypatch, tmp_path):
    engines = []
    try:
        for folder in (tmp_path, TESTS):
            monkeypatch.chdir(folder)
            engines.append(load_supervised(Variant("v", crashing.FORKED)))
        facts = [call_engine(e, crashing.worker_facts, [], phase="facts") for e in engines]
        assert [f["cwd"] for f in facts] == [str(tmp_path), str(TESTS)]
        assert _server_of(engines[0]) is not _server_of(engines[1])
    finally:
        for engine in engines:
            engine.close(wait=True)


def test_a_server_closed_for_a_newer_one_still_tells_its_worker_s_segfault(crashing):
    first = load_supervised(Variant("v", crashing.FORKED, options={"crash_phase": "decode"},
                                    env={"LOGITLAB_TEST_KNOB": "0"}))
    others = []
    try:
        ids = first.tokenize(SHORT_PROMPT)
        server = _server_of(first)
        for knob in ("1", "2"):  # MAX_SERVERS = 2: the first server is closed for the third
            others.append(load_supervised(Variant("v", crashing.FORKED, env={"LOGITLAB_TEST_KNOB": knob})))
            assert others[-1].n_vocab > 0
        assert forkserver.MAX_SERVERS == 2 and server not in [s.proc for s in forkserver._SERVERS.values()]
        assert server.poll() is None  # closed, but its worker still runs: it stays to tell its exit
        with pytest.raises(EngineCrashed) as caught:
            first.run_workload(ids, 2)
        assert caught.value.evidence.signal == signal.SIGSEGV, caught.value.evidence
        server.wait(timeout=30)  # its last worker gone, it ends
    finally:
        for engine in (first, *others):
            engine.close(wait=True)
