"""The run files this process keeps for the next run (engines/run_files.py): what is free, what is written again,
what is closed. Real files in /dev/shm (else the temp folder) and a real second process writing through /proc."""

import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines import run_files
from logitlab.engines.run_files import RunFiles

SHAPE = (8, 1024)  # 32 KiB: the mechanism does not depend on the size


@pytest.fixture
def folder():
    where = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=where) as d:
        yield Path(d)


@pytest.fixture
def files():
    """A RunFiles of the test's own; at the end (the test's arrays gone) its mappings and descriptors are closed."""
    kept = RunFiles()
    yield kept
    gc.collect()
    kept.release()
    assert kept.followed() == 0


def _written(folder: Path, name: str, value: float) -> Path:
    """A run file as a worker leaves it: written at the run's size, not mapped."""
    path = folder / name
    np.full(SHAPE, value, dtype=np.float32).tofile(path)
    return path


def _taken(files: RunFiles, folder: Path):
    """A run kept, then dropped (nothing views it), then taken for the next run: the kept file and its bytes."""
    a = files.keep(_written(folder, "run-1.f32", 1.0), SHAPE)
    n = a.nbytes
    del a
    gc.collect()
    return files.take(n), n


def _mapping(array: np.ndarray):
    """The object at the end of ``array``'s chain of bases (a memoryview's, its exporter)."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return getattr(base, "obj", base)


def _open_maps() -> int:
    return sum(" (deleted)" in line and "/run-" in line for line in Path("/proc/self/maps").read_text().splitlines())


def test_a_kept_run_is_its_file_s_pages_unlinked_at_once(folder, files):
    a = files.keep(_written(folder, "run-1.f32", 1.5), SHAPE)
    assert a.shape == SHAPE and a.dtype == np.float32 and not a.flags.owndata and np.all(a == 1.5)
    assert not list(folder.iterdir()) and files.followed() == 1 and _open_maps() == 1


def test_only_a_mapping_nothing_views_is_taken_and_only_at_its_size(folder, files):
    a = files.keep(_written(folder, "run-1.f32", 1.0), SHAPE)
    n = a.nbytes
    assert files.take(n) is None  # the array views it
    row = a[3:4]
    del a
    gc.collect()
    assert files.take(n) is None  # a view of one row still does
    view = memoryview(row)
    del row
    assert files.take(n) is None  # so does a memoryview
    del view
    gc.collect()
    assert files.take(n + 4) is None and files.followed() == 0  # free, but of another size: closed, pages freed
    assert _open_maps() == 0


def test_a_taken_mapping_is_written_again_through_proc_by_another_process(folder, files):
    kept, n = _taken(files, folder)
    assert kept is not None and kept.proc_path == f"/proc/{os.getpid()}/fd/{kept.fd}"
    assert files.take(n) is None  # taken: not handed out twice, not closed by a second take
    child = ("import mmap, os, sys, numpy as np\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "m = mmap.mmap(fd, int(sys.argv[2]), flags=mmap.MAP_SHARED | getattr(mmap, 'MAP_POPULATE', 0))\n"
             "np.frombuffer(m, dtype=np.float32)[:] = 7.25\n")
    subprocess.run([sys.executable, "-c", child, kept.proc_path, str(n)], check=True)
    b = kept.array(SHAPE)
    assert np.all(b == 7.25) and _mapping(b) is kept.map  # the same pages, no new file
    assert files.followed() == 1 and _open_maps() == 1


def test_put_back_frees_a_taken_mapping_and_release_closes_the_free_ones(folder, files):
    kept, n = _taken(files, folder)
    b = files.keep(_written(folder, "run-2.f32", 2.0), SHAPE)
    files.put_back(kept)
    assert files.take(n) is kept  # free again
    files.put_back(kept)
    files.release()
    assert files.followed() == 1 and np.all(b == 2.0)  # b is in use: kept, untouched
    del b
    gc.collect()
    files.release()
    assert files.followed() == 0 and _open_maps() == 0


def test_keeping_a_run_closes_the_free_ones_so_that_one_run_s_pages_wait_at_most(folder, files):
    first = files.keep(_written(folder, "run-1.f32", 1.0), SHAPE)
    del first
    gc.collect()
    second = files.keep(_written(folder, "run-2.f32", 2.0), SHAPE)  # the worker could not reuse: a new file
    assert files.followed() == 1 and np.all(second == 2.0) and _open_maps() == 1


def test_past_max_tracked_the_oldest_run_in_use_is_let_go_and_keeps_its_bits(folder, files, monkeypatch):
    monkeypatch.setattr(run_files, "MAX_TRACKED", 3)
    fds = len(os.listdir("/proc/self/fd"))
    runs = [files.keep(_written(folder, f"run-{i}.f32", float(i)), SHAPE) for i in range(5)]
    assert files.followed() == 3
    assert all(np.all(r == float(i)) for i, r in enumerate(runs)) and _open_maps() == 5
    del runs
    gc.collect()
    assert _open_maps() == 3  # the two let go went with their arrays
    files.release()
    assert files.followed() == 0 and _open_maps() == 0 and len(os.listdir("/proc/self/fd")) == fds  # no descriptor left


def test_an_empty_run_is_an_empty_array_and_leaves_nothing(folder, files):
    path = folder / "run-1.f32"
    path.write_bytes(b"")
    a = files.keep(path, (0, 1024))
    assert a.shape == (0, 1024) and files.followed() == 0 and not path.exists()


def test_reference_counts_tell_a_free_mapping_here():
    """The module's load-time check: on CPython a view raises the mapping's count (else nothing would be reused)."""
    assert run_files.REUSE is True


def test_a_forgotten_mapping_is_closed_and_never_handed_out_again(folder, files):
    """What a run interrupted before its answer leaves: the worker may still write into the file."""
    fds = len(os.listdir("/proc/self/fd"))
    kept, n = _taken(files, folder)
    files.forget(kept)
    assert files.followed() == 0 and files.take(n) is None and _open_maps() == 0
    assert len(os.listdir("/proc/self/fd")) == fds


def test_release_waits_for_nothing_when_the_lock_is_held(folder, files):
    """An engine's close run by the garbage collector inside RunFiles' own methods must not block on their lock."""
    a = files.keep(_written(folder, "run-1.f32", 1.0), SHAPE)
    del a
    gc.collect()
    with files._lock:
        files.release()  # returns at once, closes nothing
        assert files.followed() == 1
    files.release()
    assert files.followed() == 0


def test_a_taken_mapping_is_never_let_go_past_max_tracked(folder, files, monkeypatch):
    """Its descriptor must stay open: the worker opens the file through it."""
    monkeypatch.setattr(run_files, "MAX_TRACKED", 1)
    kept, n = _taken(files, folder)
    others = [files.keep(_written(folder, f"run-{i}.f32", float(i)), SHAPE) for i in (2, 3)]
    assert kept in files._kept and os.fstat(kept.fd).st_size == n
    assert files.followed() == 2  # the taken one and the run just kept (no view of it yet when trimmed)
    files.put_back(kept)
    del others
    gc.collect()
    files.release()
    assert files.followed() == 0
