"""A worker call's large arrays cross in files of their own (engines/call_buffers.py, issue #31): the pickle
protocol 5 round trip here with crafted arrays (which buffers go out of band, where, and that the bits, shapes and
read-only flags come back), then a real supervised llama.cpp worker's invariance batch call on a 400-token prompt:
its arrays come back as mappings of unlinked files on disk, bit for bit what the same call gives in this process."""

from __future__ import annotations

import mmap
import os
import pickle

import numpy as np
import pytest

from logitlab.engines import call_buffers, spill
from logitlab.engines.call_buffers import OutOfBand, map_buffers
from logitlab.errors import EngineError

from conftest import SHORT_PROMPT


def _round_trip(value, spilled, own):
    out_of_band = OutOfBand(spilled and str(spilled), own and str(own))
    data = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    try:
        return pickle.loads(data, buffers=map_buffers(out_of_band.buffers)), out_of_band.buffers, len(data)
    finally:
        out_of_band.close()


def _root(array):
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


def test_large_buffers_cross_in_unlinked_files_of_the_first_folder_with_room(tmp_path, monkeypatch):
    monkeypatch.setattr(call_buffers, "OUT_OF_BAND_BYTES", 1 << 16)
    rng = np.random.default_rng(3)
    big, small = rng.standard_normal((50, 1000), dtype=np.float32), np.arange(10, dtype=np.float32)
    frozen = big[::-1].copy()
    frozen.flags.writeable = False
    value = {"big": big, "small": small, "strided": big[:, ::2], "rows": [big[:20], big[20:]], "frozen": frozen}
    disk, own = tmp_path / "disk", tmp_path / "own"
    disk.mkdir(), own.mkdir()
    got, buffers, n_bytes = _round_trip(value, disk, own)
    # the contiguous large buffers (big, both slices of it, frozen) went out of band, into the spill folder, as
    # files already unlinked; the small array and the strided view (pickled as a copy) stayed in the pickle
    assert [(b["spilled"], b["readonly"]) for b in buffers] == [(True, False)] * 3 + [(True, True)]
    assert all(b["path"].startswith(f"/proc/{os.getpid()}/fd/") for b in buffers) and n_bytes < big.nbytes
    assert os.listdir(disk) == [] and os.listdir(own) == []
    for key in ("big", "small", "strided", "frozen"):
        assert np.array_equal(got[key].view(np.uint32), value[key].view(np.uint32))
    assert np.array_equal(np.concatenate(got["rows"]), big)
    assert isinstance(_root(got["big"]), mmap.mmap) and not isinstance(_root(got["small"]), mmap.mmap)
    got["big"][0, 0] = 7.0  # copy-on-write: writable, as it was in the worker; nothing written back
    assert got["big"][0, 0] == 7.0 and big[0, 0] != 7.0
    # read-only stays read-only, and a read-only buffer from the spill folder is a spilled array here
    assert not got["frozen"].flags.writeable and spill.is_spilled(got["frozen"])
    assert spill.spill(got["frozen"]) is got["frozen"]  # already on disk: not written again
    # no spill folder: the worker's own; no room anywhere: in the pickle
    _, buffers, _ = _round_trip({"big": big}, None, own)
    assert [b["spilled"] for b in buffers] == [False]
    monkeypatch.setattr(call_buffers.shutil, "disk_usage", lambda f: type("U", (), {"free": 0})())
    got, buffers, n_bytes = _round_trip({"big": big}, disk, own)
    assert buffers == [] and n_bytes > big.nbytes and not isinstance(_root(got["big"]), mmap.mmap)


def test_a_file_that_cannot_be_mapped_is_an_engine_error(tmp_path):
    with pytest.raises(EngineError, match="cannot map the engine worker's array file /proc/1/fd/999999"):
        map_buffers([{"path": "/proc/1/fd/999999", "readonly": True, "spilled": True}])


@pytest.mark.engine
def test_a_supervised_batch_call_s_runs_come_back_as_files_on_disk_with_the_engine_s_bits(tmp_path, monkeypatch):
    """invariance batch's worker step on a 400-token prompt (two runs of 79 MB: over OUT_OF_BAND_BYTES): in this
    process the arrays map unlinked files of the spill folder (page cache, not memory this process made), nothing
    is left in the spill or worker folders, and the bits are those of the same step run here."""
    from logitlab.engines.supervised import call_engine, load_supervised
    from logitlab.engines.variant import Variant
    from logitlab.experiments.invariance_steps import batch_rows
    from logitlab.experiments.isolation import load_engine

    folder = tmp_path / "spill"
    monkeypatch.setenv("LOGITLAB_SPILL", str(folder))  # before the worker starts: it inherits it
    if spill._file_system(tmp_path) in spill.MEMORY_FILE_SYSTEMS:
        pytest.skip(f"{tmp_path} is on a memory file system here: nothing to spill to")
    variant = Variant("control", "llamacpp", options={"n_ctx": "1024"})
    plain, worker = load_engine(variant), load_supervised(variant)
    try:
        ids = plain.tokenize(" ".join([SHORT_PROMPT] * 40))[:400]
        assert len(ids) * plain.n_vocab * 4 > call_buffers.OUT_OF_BAND_BYTES  # the case under test
        batches = {(1, 0): [ids]}
        got = call_engine(worker, batch_rows, ids, batches, None, phase="batches")
        want = batch_rows(plain, ids, batches, None)
        for mine, theirs in [(got["alone"], want["alone"]), (got["runs"][0][2][0], want["runs"][0][2][0])]:
            assert mine.shape == (400, plain.n_vocab)
            assert np.array_equal(mine.view(np.uint32), theirs.view(np.uint32))
            # spilled in the worker, so read-only and recognised as spilled here, as the same step's own
            assert spill.is_spilled(mine) and spill.is_spilled(theirs) and not mine.flags.writeable
        maps = open("/proc/self/maps").read()
        assert f"{folder}/call-" in maps and "(deleted)" in maps
        assert os.listdir(folder) == []
        assert not [p for p in os.listdir(worker._folder) if p.startswith("call-")]
    finally:
        plain.close()
        worker.close(wait=True)
