"""The files large runs cross the worker boundary in, kept by this process and written again by the next run.

A supervised engine's worker writes a run of over :data:`~logitlab.engines.supervised.KEEP_BUFFER_BYTES` into a
file of its own in the worker's folder (``/dev/shm``); this process maps the file and unlinks it, and the mapping
is the run's logits array (no copy). A new file per run costs its pages twice: the worker's writes fault in and
zero every page of a RAM file (0.42 s for a 2,016 × 49,152 run, 0.40 GB, on this project's 2-core AVX2 machine),
and the last view's end frees them (0.08 s) — about 4 % of that run, which the bare engine, writing into one
array it keeps, does not pay.

So the mapping of a run that is no longer used is kept (:class:`RunFiles`): the next run of the same size is
written into it (the worker opens the same unlinked file through ``/proc/<this pid>/fd/<fd>`` and maps its
pages, which exist: 0.03 s to map them, 0.03 s to write the rows). A kept mapping is free when no array or other
buffer views it: its reference count (CPython) says so, and only a free one is written again, so a run still held
anywhere (a reference, a view of a few rows) is never overwritten.

At most one free mapping is kept, and only until the next run asks for another size or every supervised engine
of this process is closed: the pages a run would have freed when it was dropped are the pages the next run
writes, so the peak memory is as before. The files are unlinked from the first: a ``kill -9`` of this process
frees them with it, as before.

Measured by ``benchmarks/bench_run_files.py``.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["RunFiles", "RUN_FILES", "MAX_TRACKED", "keep_file"]

#: Kept mappings followed at once (free or in use): past it, the oldest in use is let go (its array keeps it).
MAX_TRACKED = 16


@dataclass
class _Kept:
    """One kept run file: its descriptor (open while followed, for the worker's ``/proc`` path) and mapping."""

    fd: int
    map: mmap.mmap
    taken: bool = False  # handed out by RunFiles.take for the next run, its array not made yet

    @property
    def size(self) -> int:
        return len(self.map)

    @property
    def proc_path(self) -> str:
        """The path another process of this user opens the (unlinked) file by."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def array(self, shape: tuple[int, int]) -> np.ndarray:
        """A float32 ``shape`` view of the mapping's first bytes (the run's logits, not a copy); the mapping is in
        use from now on (the view holds it)."""
        count = int(np.prod(shape))
        out = np.frombuffer(self.map, dtype=np.float32, count=count).reshape(shape)
        self.taken = False
        return out


def _free(kept: _Kept) -> bool:
    """No array, memoryview or other buffer views ``kept.map``: the references are this record's and the call's.

    CPython's reference count: every view (numpy array made from the mapping, slice of one, memoryview) holds a
    reference to the mapping object.
    """
    return not kept.taken and sys.getrefcount(kept.map) <= 2


class RunFiles:
    """The run files this process keeps (:mod:`logitlab.engines.run_files`); one per process, :data:`RUN_FILES`."""

    def __init__(self) -> None:
        self._kept: list[_Kept] = []
        self._lock = threading.Lock()

    def keep(self, path: Path, shape: tuple[int, int]) -> np.ndarray:
        """A run's logits from the file of its own that the worker wrote (and no longer maps), kept as they are.

        The file is mapped here (shared, writable) and removed from the folder at once: its pages belong to this
        mapping; it is followed for reuse (:meth:`take`). Nothing is copied.

        Returns:
            A float32 array of ``shape`` (n_positions, n_vocab), C order, a view of the mapping (``owndata`` False).
        """
        count = int(np.prod(shape))
        try:
            fd = os.open(path, os.O_RDWR)
        finally:
            path.unlink(missing_ok=True)
        if not count:
            os.close(fd)
            return np.empty(shape, dtype=np.float32)
        try:
            kept = _Kept(fd, mmap.mmap(fd, 0))
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._drop_free()  # the run just kept is the one in use now: a free one would be a second run's pages
            self._kept.append(kept)
            self._trim()
        return kept.array(shape)

    def take(self, n_bytes: int) -> _Kept | None:
        """A free kept mapping of exactly ``n_bytes`` to write the next run into, or None; the other free ones are
        closed (their pages freed), as the runs they held would have been. The one returned is taken until its
        :meth:`_Kept.array` is made (the run was written into it) or it is :meth:`put_back`."""
        with self._lock:
            found = None
            for kept in list(self._kept):
                if not _free(kept):
                    continue
                if found is None and kept.size == n_bytes:
                    found = kept
                else:
                    self._close(kept)
            if found is not None:
                found.taken = True
            return found

    def put_back(self, kept: _Kept) -> None:
        """A mapping :meth:`take` handed out that the run was not written into (the worker failed, crashed or
        could not open it): free again."""
        with self._lock:
            kept.taken = False

    def release(self) -> None:
        """Close every free kept mapping (the supervised engines are closed: no run will follow)."""
        with self._lock:
            self._drop_free()

    def followed(self) -> int:
        """How many mappings are followed (free or in use)."""
        return len(self._kept)

    def _drop_free(self) -> None:
        for kept in list(self._kept):
            if _free(kept):
                self._close(kept)

    def _trim(self) -> None:
        while len(self._kept) > MAX_TRACKED:  # the oldest in use: let go, its arrays keep its mapping alive
            kept = self._kept.pop(0)
            os.close(kept.fd)

    def _close(self, kept: _Kept) -> None:
        self._kept.remove(kept)
        try:
            kept.map.close()
        except BufferError:  # a view appeared since the check: its array keeps the mapping
            pass
        os.close(kept.fd)


#: This process's kept run files.
RUN_FILES = RunFiles()


def keep_file(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """:meth:`RunFiles.keep` on :data:`RUN_FILES`."""
    return RUN_FILES.keep(path, shape)
