"""The supervised engine's logits buffer: a small run's logits cross from the worker through one file mapped for
the worker's life, copied out once here (issue #29's cost); a large run's in a file of its own that this process
keeps, never copied (issue #31's memory bound).

A crash in the worker is tested in tests/experiments/test_crashes.py; here, that what comes back is the engine's
own logits, bit for bit, as the buffer grows and (for large runs) is given back.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from logitlab.engines import supervised, worker_folders
from logitlab.engines.supervised import load_supervised
from logitlab.engines.variant import Variant
from logitlab.engines.workload import run_workload
from logitlab.experiments.isolation import load_engine

from conftest import SHORT_PROMPT

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engines():
    variant = Variant("control", "llamacpp")
    plain, worker = load_engine(variant), load_supervised(variant)
    yield plain, worker
    plain.close()
    worker.close(wait=True)


def test_runs_of_growing_and_shrinking_size_come_back_bit_exact_and_owned(engines):
    plain, worker = engines
    prompt = plain.tokenize(SHORT_PROMPT)
    outputs = []
    for n_decode in (2, 9, 4):  # the buffer grows for the second run; the third uses its first rows
        expected = run_workload(plain, prompt, n_decode)
        got = worker.run_workload(prompt, n_decode, expected.generated)
        assert got.logits.shape == (len(prompt) + n_decode, plain.n_vocab) and got.logits.dtype == np.float32
        assert got.same_bits(expected), f"supervised run of {n_decode} decode tokens differs from the engine's own"
        assert got.logits.flags.owndata and got.logits.flags.writeable
        outputs.append(got)
    # an earlier run is not overwritten by a later one that reused the buffer
    again = run_workload(plain, prompt, 2)
    assert outputs[0].same_bits(again)
    buffer = worker._folder / "logits.f32"
    assert os.stat(buffer).st_size == (len(prompt) + 9) * plain.n_vocab * 4  # grown to the largest run, kept
    assert os.stat(buffer).st_blocks * 512 >= (len(prompt) + 4) * plain.n_vocab * 4  # its pages stay for the next


def test_a_large_run_that_does_not_fit_the_free_shared_memory_is_copied_and_its_pages_given_back(engines,
                                                                                                monkeypatch):
    """Where /dev/shm has no room for a large run's own file, the run goes through the buffer as a small one does,
    and the buffer's pages are given back once it is copied out (held once, here, not twice, after the copy)."""
    plain, worker = engines
    prompt = plain.tokenize(SHORT_PROMPT)
    monkeypatch.setattr(supervised, "KEEP_BUFFER_BYTES", 1 << 20)  # this run's 1.2+ MB counts as large
    real = os.statvfs

    class Full:
        def __init__(self, path):
            self.f_frsize, self.f_bavail = real(path).f_frsize, 0

    monkeypatch.setattr(supervised.os, "statvfs", Full)
    expected = run_workload(plain, prompt, 3)
    got = worker.run_workload(prompt, 3, expected.generated)
    assert got.same_bits(expected) and got.logits.flags.owndata  # a copy
    assert os.stat(worker._folder / "logits.f32").st_blocks == 0  # held once, here, not twice
    got = worker.run_workload(prompt, 3, expected.generated)  # the worker writes into fresh pages again
    assert got.same_bits(expected)


def test_ctrl_c_while_a_run_is_awaited_ends_the_worker_and_the_next_call_gets_its_own_answer(engines):
    """Ctrl-C leaves the stopped run's answer still to come: the worker is ended (not a crash), so that the next
    call — a detokenize, as a stopped experiment's report needs — starts a new one and reads its own answer."""
    import signal

    plain, worker = engines
    prompt = plain.tokenize(SHORT_PROMPT)
    restarts = worker.restarts

    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # while the worker runs 200 decode steps (about 2 s)
        with pytest.raises(KeyboardInterrupt):
            worker.run_workload(prompt, 200)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert worker.detokenize(prompt) == plain.detokenize(prompt)
    assert worker.restarts == restarts + 1
    expected = run_workload(plain, prompt, 2)
    assert worker.run_workload(prompt, 2, expected.generated).same_bits(expected)


#: A process that loads a supervised engine, prints its worker's folder, then leaves it in one of three ways.
_LEAVER = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from logitlab.engines.supervised import load_supervised
from logitlab.engines.variant import Variant
from logitlab.errors import EngineCrashed
how = sys.argv[1]
if how == "crashed":
    import crash_engine
    crash_engine.register()
    worker = load_supervised(Variant("crash", "crashing-llamacpp", None, {{"crash_phase": "prefill"}}))
else:
    worker = load_supervised(Variant("control", "llamacpp"))
ids = worker.tokenize("Hello there")
print(worker._folder, flush=True)
if how == "closed":
    worker.close()  # returns at once; the thread that waits for the worker is cut off when this process exits
elif how == "killed":
    time.sleep(3600)  # the test kills this process (SIGKILL: no clean-up of its own runs)
elif how == "killed-mid-run":
    worker.run_workload(worker.tokenize("Hello there. " * 20), 400)  # the test kills this process meanwhile
elif how == "crashed":
    try:
        worker.run_workload(ids, 1)
    except EngineCrashed:
        print("crashed", flush=True)  # the folder is kept for the evidence (and a restart); never closed
"""


@pytest.mark.parametrize("how", ["closed", "killed", "killed-mid-run", "crashed"])
def test_a_worker_s_folder_is_removed_however_its_parent_leaves(how, tmp_path):
    """The worker's folder (in /dev/shm: its logits buffer, phase file and stderr) is removed when the parent
    closes the engine and exits at once, when the parent is killed while the worker waits (it sees its standard
    input end) or while it runs (its answer finds the pipe broken), and when the worker crashed and the parent
    exits without closing it (kept for the evidence until then). The first three left the folder behind before
    (about 150 folders a test suite run, 13 GB of /dev/shm on this machine; then 16 a run, phase "returning the
    run", "returning the call" or a call's own phase, from a parent killed mid-run)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", _LEAVER.format(tests=tests), how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        folder = Path(proc.stdout.readline().strip())
        # (a "closed" leaver may have removed its folder already: closing is what it does next)
        assert folder.name.startswith("logitlab-engine-") and (how == "closed" or folder.is_dir()), proc.stderr.read()
        if how == "killed-mid-run":
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (folder / "phase").read_text().startswith("decode step"):
                time.sleep(0.02)
            assert (folder / "phase").read_text().startswith("decode step")
        if how.startswith("killed"):
            proc.kill()
        out, err = proc.communicate(timeout=60)
        if how == "crashed":
            assert "crashed" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 20  # the killed parent's worker notices its standard input end
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists(), f"{how}: the worker's folder {folder} was left behind: {sorted(os.listdir(folder))}"


def test_a_folder_whose_parent_and_worker_were_killed_together_goes_when_the_next_worker_starts(tmp_path):
    """A SIGKILL of the parent and its worker together (a whole process tree: a test harness, a scheduler, the OOM
    killer) leaves the worker's folder: neither can remove it. The next process that starts a worker removes it,
    since its owner file names two processes that are gone; a folder whose owner lives, and one without an owner
    file (a worker starting), stay."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}

    def leaver(how: str) -> tuple[subprocess.Popen, Path]:
        proc = subprocess.Popen([sys.executable, "-c", _LEAVER.format(tests=tests), how], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        folder = Path(proc.stdout.readline().strip())
        # (a "closed" leaver may have removed its folder already)
        assert folder.name.startswith(worker_folders.FOLDER_PREFIX) and (how == "closed" or folder.is_dir()), \
            proc.stderr.read()
        return proc, folder

    proc, stale = leaver("killed")
    pids = [int(p) for p in (stale / worker_folders.OWNER_FILE).read_text().split()]
    assert pids[0] == proc.pid and len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 20
    while worker_folders.alive(pids[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not worker_folders.alive(pids[1])
    assert (stale / "phase").exists()  # left behind: nobody could remove it
    proc, folder = leaver("closed")  # the next process to start a worker
    proc.communicate(timeout=60)
    assert not stale.exists(), f"the stale folder {stale} is still there"

    # the rule on folders of its own making: only both-gone owners go
    for name, owner in [("gone", f"{pids[0]} {pids[1]}"), ("parent-alive", f"{os.getpid()} {pids[1]}"),
                        ("starting", None)]:
        (tmp_path / (worker_folders.FOLDER_PREFIX + name)).mkdir()
        if owner is not None:
            (tmp_path / (worker_folders.FOLDER_PREFIX + name) / worker_folders.OWNER_FILE).write_text(owner)
    (tmp_path / "other-gone").mkdir()
    (tmp_path / "other-gone" / worker_folders.OWNER_FILE).write_text(f"{pids[0]} {pids[1]}")
    assert worker_folders.remove_stale(str(tmp_path)) == [tmp_path / (worker_folders.FOLDER_PREFIX + "gone")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [worker_folders.FOLDER_PREFIX + "parent-alive", worker_folders.FOLDER_PREFIX + "starting", "other-gone"])


def _maps(pid: int | str) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def test_a_long_run_is_kept_from_the_file_the_worker_wrote_never_copied():
    """The memory bound's mechanism across the process boundary (#31): a 700-token run (137 MB of logits, over
    KEEP_BUFFER_BYTES) is written by the worker into a file of its own, which this process then maps and keeps as
    the run's array: no run-sized allocation here, no mapping of it left in the worker, nothing in the shared
    buffer; the bits are the engine's own, a later run does not overwrite them; a run nobody views any more has its
    pages written again by the next run of its size, and they go with the engine's close."""
    import gc
    import mmap
    import tracemalloc

    variant = Variant("control", "llamacpp", options={"n_ctx": "1024"})
    plain, worker = load_engine(variant), load_supervised(variant)
    try:
        ids = plain.tokenize(" ".join([SHORT_PROMPT] * 100))[:700]
        expected = run_workload(plain, ids, 2)
        assert expected.logits.nbytes > supervised.KEEP_BUFFER_BYTES
        tracemalloc.start()
        try:
            got = worker.run_workload(ids, 2, expected.generated)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert got.same_bits(expected)
        assert peak < 16 << 20, f"{peak / 1e6:.0f} MB allocated here for a {got.logits.nbytes / 1e6:.0f} MB run"
        base = got.logits
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(getattr(base, "obj", base), mmap.mmap) and got.logits.flags.writeable  # a mapping, not a copy
        kept = [line for line in _maps("self").splitlines() if "/run-" in line and line.endswith("(deleted)")]
        assert any(str(worker._folder) in line for line in kept)  # held here, by a file already removed from the folder
        assert "/run-" not in _maps(worker._proc.pid)  # and not by the worker
        assert not list(worker._folder.glob("run-*"))
        assert os.stat(worker._folder / "logits.f32").st_blocks == 0  # the shared buffer was not used
        again = worker.run_workload(ids, 2, expected.generated)
        assert got.same_bits(expected) and again.same_bits(expected)  # each run its own pages

        folder = str(worker._folder)

        def run_files() -> int:  # this worker's run files mapped here (not another test's)
            return sum(f"{folder}/run-" in line for line in _maps("self").splitlines())

        assert run_files() == 2
        # a run nobody views is kept, and the next run of its size is written into its pages (run_files.py): no new
        # file; a run still viewed, even by one row, is never written into
        other = ids[1:] + ids[:1]  # the same length, other logits
        row = again.logits[3:4]
        del got, base, again
        gc.collect()
        moved = worker.run_workload(other, 2, expected.generated)
        assert run_files() == 2 and not np.array_equal(moved.logits.view(np.uint32), expected.logits.view(np.uint32))
        assert np.array_equal(row.view(np.uint32), expected.logits[3:4].view(np.uint32))
        del moved, row
        gc.collect()
        assert run_files() == 2  # both kept, free, until a run of another size or the engine's close
        last = worker.run_workload(ids, 2, expected.generated)
        assert last.same_bits(expected) and run_files() == 1  # one written again, the other freed
        del last
        gc.collect()
        worker.close(wait=True)
        assert run_files() == 0  # the pages went with the engine's close
    finally:
        plain.close()
        worker.close(wait=True)
