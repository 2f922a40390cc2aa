"""The reference run kept on disk (engines/spill.py, issue #31): the same bits, read-only, the file unlinked,
and kept in memory where a disk would gain nothing."""

import os
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines import spill


@pytest.fixture
def large(monkeypatch):
    monkeypatch.setattr(spill, "SPILL_BYTES", 1 << 16)
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((40, 1000), dtype=np.float32)
    logits[3, 5], logits[4, 6] = np.nan, -np.inf  # bits, not values: NaN and infinities survive as they are
    return logits


def test_a_spilled_run_has_the_same_bits_is_read_only_and_leaves_no_file(large, tmp_path, monkeypatch):
    monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path / "spill"))
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here: nothing to spill to")
    kept = spill.spill(large)
    assert spill.is_spilled(kept) and spill.is_spilled(kept[3:9]) and not spill.is_spilled(large)
    assert kept.shape == large.shape and kept.dtype == large.dtype
    assert np.array_equal(kept.view(np.uint32), large.view(np.uint32))
    with pytest.raises(ValueError, match="read-only"):
        kept[0, 0] = 1.0
    assert os.listdir(tmp_path / "spill") == []  # unlinked once open: nothing is left however the process ends
    maps = open("/proc/self/maps").read()
    assert f"{tmp_path / 'spill'}/run-" in maps and "(deleted)" in maps


@pytest.mark.parametrize("setting", ["off", "/dev/shm"])
def test_a_run_stays_in_memory_where_a_disk_gains_nothing(large, monkeypatch, setting):
    if setting == "/dev/shm" and spill._file_system(Path("/dev/shm")) is None:
        pytest.skip("no /proc/self/mounts here")
    monkeypatch.setenv("LOGITLAB_SPILL", setting)
    assert spill.spill_folder(large.nbytes) is None
    assert spill.spill(large) is large


def test_a_small_run_or_a_full_disk_stays_in_memory(large, tmp_path, monkeypatch):
    monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path))
    small = large[:1]
    assert spill.spill(small) is small  # under SPILL_BYTES
    monkeypatch.setattr(spill.shutil, "disk_usage", lambda path: type("U", (), {"free": large.nbytes // 2})())
    assert spill.spill(large) is large


def test_the_file_system_of_a_path_is_its_longest_mount_point():
    assert spill._file_system(Path("/proc/self")) == "proc"
    assert spill._file_system(Path("/dev/shm/x/y")) == "tmpfs"


def test_a_stack_of_runs_is_written_part_by_part_with_the_concatenation_s_bits(large, tmp_path, monkeypatch):
    """spill_stack (invariance batch's B copies stacked): the file holds np.concatenate(parts) bit for bit, with
    no stack built in memory; with nowhere to spill, the concatenation itself."""
    monkeypatch.setenv("LOGITLAB_SPILL", str(tmp_path / "spill"))
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here: nothing to spill to")
    parts = [large, large[::-1].copy(), large[5:12]]
    kept = spill.spill_stack(parts)
    assert spill.is_spilled(kept) and kept.shape == (87, 1000)
    assert np.array_equal(kept.view(np.uint32), np.concatenate(parts).view(np.uint32))
    assert os.listdir(tmp_path / "spill") == []
    monkeypatch.setenv("LOGITLAB_SPILL", "off")
    again = spill.spill_stack(parts)
    assert not spill.is_spilled(again) and np.array_equal(again.view(np.uint32), kept.view(np.uint32))
    with pytest.raises(ValueError, match="width or dtype"):
        spill.spill_stack([large, large[:, :10]])
    with pytest.raises(ValueError, match="at least one"):
        spill.spill_stack([])


def test_an_unlinked_file_that_fails_mid_write_leaves_no_name_and_no_descriptor(tmp_path):
    """unlinked_file (spill's and the worker calls' files): the bytes are there through the descriptor, no name
    in the folder; a write that fails half way closes the descriptor and raises, nothing left."""
    fd = spill.unlinked_file(tmp_path, [b"ab", memoryview(b"cd")], prefix="t-", suffix=".x")
    try:
        assert os.listdir(tmp_path) == [] and os.pread(fd, 10, 0) == b"abcd"
    finally:
        os.close(fd)
    opened = set(os.listdir("/proc/self/fd"))

    def failing():
        yield b"ab"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        spill.unlinked_file(tmp_path, failing(), prefix="t-", suffix=".x")
    assert os.listdir(tmp_path) == [] and set(os.listdir("/proc/self/fd")) <= opened
