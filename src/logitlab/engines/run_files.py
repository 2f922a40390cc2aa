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
buffer views it: its reference count says so (every numpy array, slice or memoryview of the mapping holds a
reference to it; CPython's count, checked when this module loads — where the check fails, nothing is reused),
and only a free one is written again, so a run still held anywhere (a reference, a view of a few rows) is never
overwritten.

Free mappings wait only until the next call into a supervised engine (:meth:`RunFiles.take` for a large run: the
one of its size is kept, the others closed; :meth:`RunFiles.release` for any other call, and at an engine's close):
the pages a run would have freed when it was dropped are the pages the next run writes, so no engine call
allocates beside a waiting run, and the peak memory is as before. The files are unlinked from the first: a
``kill -9`` of this process frees them with it, as before.

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

__all__ = ["RunFiles", "KeptRun", "RUN_FILES", "MAX_TRACKED", "REUSE", "keep_file"]

#: Kept mappings followed at once (free or in use): past it, the oldest in use is let go (its array keeps it).
MAX_TRACKED = 16


def _counts_views() -> bool:
    """Does a view of a mapping raise the mapping's reference count (CPython does), and dropping it lower it?"""
    probe = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        before = sys.getrefcount(probe)
        view = np.frombuffer(probe, dtype=np.uint8)
        during = sys.getrefcount(probe)
        del view
        return during > before == sys.getrefcount(probe)
    finally:
        probe.close()


#: Whether runs are written again at all: only where reference counts tell a free mapping (:func:`_counts_views`).
REUSE = _counts_views()


@dataclass
class KeptRun:
    """One kept run file: its descriptor (open while followed, for the worker's ``/proc`` path) and mapping.

    Attributes:
        fd: this process's descriptor of the (unlinked) file.
        map: the shared, writable mapping of the whole file.
        taken: handed out by :meth:`RunFiles.take` for the next run, its array not made yet.
    """

    fd: int
    map: mmap.mmap
    taken: bool = False

    @property
    def size(self) -> int:
        """Bytes of the file (and of the mapping)."""
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


def _free(kept: KeptRun) -> bool:
    """Not taken, and no array, memoryview or other buffer views ``kept.map``: its references are the record's and
    this call's (every view holds one: :func:`_counts_views`)."""
    return not kept.taken and sys.getrefcount(kept.map) <= 2


class RunFiles:
    """The run files this process keeps (:mod:`logitlab.engines.run_files`); one per process, :data:`RUN_FILES`."""

    def __init__(self) -> None:
        self._kept: list[KeptRun] = []
        self._lock = threading.Lock()

    def keep(self, path: Path, shape: tuple[int, int]) -> np.ndarray:
        """A run's logits from the file of its own that the worker wrote (and no longer maps), kept as they are.

        The file is mapped here (shared, writable) and removed from the folder at once: its pages belong to this
        mapping; it is followed for reuse (:meth:`take`). Nothing is copied.

        Returns:
            A float32 array of ``shape`` (n_positions, n_vocab), C order, a view of the mapping (``owndata`` False).

        Raises:
            OSError: the file cannot be opened or mapped (it is unlinked all the same).
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
            kept = KeptRun(fd, mmap.mmap(fd, 0))
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._drop_free()  # the run just kept is the one in use now: a free one would be a second run's pages
            self._kept.append(kept)
            self._trim()
        return kept.array(shape)

    def take(self, n_bytes: int) -> KeptRun | None:
        """A free kept mapping of exactly ``n_bytes`` to write the next run into, or None; the other free ones are
        closed (their pages freed), as the runs they held would have been. The one returned is taken until its
        :meth:`KeptRun.array` is made (the run was written into it), it is :meth:`put_back` or :meth:`forget`-ten.
        None always where :data:`REUSE` is off."""
        with self._lock:
            found = None
            for kept in list(self._kept):
                if not _free(kept):
                    continue
                if REUSE and found is None and kept.size == n_bytes:
                    found = kept
                else:
                    self._close(kept)
            if found is not None:
                found.taken = True
            return found

    def put_back(self, kept: KeptRun) -> None:
        """A mapping :meth:`take` handed out that the run was not written into, the worker done with it (it
        answered, crashed or was killed): free again."""
        with self._lock:
            kept.taken = False

    def forget(self, kept: KeptRun) -> None:
        """A mapping :meth:`take` handed out that a worker may still be writing into (interrupted before its
        answer): no longer followed or handed out; this process's mapping and descriptor are closed, the pages
        go when the worker's mapping does."""
        with self._lock:
            if kept in self._kept:
                kept.taken = False
                self._close(kept)

    def release(self) -> None:
        """Close every free kept mapping (the next call writes no large run, or an engine is closed). Skipped when
        the lock is held: a garbage-collected engine's close can run inside this object's own methods."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._drop_free()
        finally:
            self._lock.release()

    def followed(self) -> int:
        """How many mappings are followed (free, taken or in use)."""
        return len(self._kept)

    def _drop_free(self) -> None:
        for kept in list(self._kept):
            if _free(kept):
                self._close(kept)

    def _trim(self) -> None:
        """Past :data:`MAX_TRACKED`, let go of the oldest in use (never a taken one: a worker may open its fd)."""
        for kept in list(self._kept):
            if len(self._kept) <= MAX_TRACKED:
                return
            if not kept.taken and not _free(kept):
                self._kept.remove(kept)
                os.close(kept.fd)  # its arrays keep the mapping

    def _close(self, kept: KeptRun) -> None:
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
