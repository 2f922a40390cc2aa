"""A worker call's large arrays cross the process boundary in files of their own, not inside its pickle.

:meth:`~logitlab.engines.supervised.SupervisedEngine.call_in_worker` runs a function in the engine's worker and
pickles its return value back: for ``invariance batch`` the prompt alone and every batch's rows, for ``invariance
prefill-decode`` each way of computing every position, several runs' logits at once. Pickled whole, each array is
held four times at the peak: the worker's array, the pickle file (in ``/dev/shm``: memory), the parent's read of
that file, and the array unpickled from it. With pickle protocol 5's out-of-band buffers (PEP 574,
https://peps.python.org/pep-0574/) each array buffer over :data:`OUT_OF_BAND_BYTES` is written by the worker into
a file of its own instead (:class:`OutOfBand`), and the parent maps that file as the array's memory
(:func:`map_buffers`): one copy, where the worker's own is freed as the call returns.

The files go to the spill folder on disk where the parent names one (:func:`~logitlab.engines.spill.spill_folder`)
and it has room — the arrays are then page cache the kernel can drop and read again, as a spilled run's — else the
worker's own folder (``/dev/shm``: memory, but held once); a buffer that fits neither stays in the pickle, as
before. Each file is unlinked as soon as the worker has created it and reaches the parent as
``/proc/<worker pid>/fd/<fd>`` (as :mod:`~logitlab.engines.run_files` hands a run file back): nothing is left on
disk however either process ends — the worker closes its descriptors at its next request, or when it exits, and
the parent's mapping keeps the pages until it goes.
"""

from __future__ import annotations

import mmap
import os
import pickle
import shutil
from typing import Any, Sequence

from logitlab.engines.spill import spill_map, unlinked_file
from logitlab.errors import EngineError

__all__ = ["OUT_OF_BAND_BYTES", "OutOfBand", "map_buffers"]

#: Buffers of this many bytes or fewer stay inside the pickle (the size at which a run crosses in a file of its
#: own: :data:`~logitlab.engines.supervised.KEEP_BUFFER_BYTES`).
OUT_OF_BAND_BYTES = 64 << 20
#: Free space kept on a folder beyond the buffer written there.
_ROOM = 1.01


class OutOfBand:
    """The worker's side of one call: the ``buffer_callback`` of :func:`pickle.dump` (protocol 5), and the files
    it wrote, open until :meth:`close`.

    Args:
        spill: the spill folder on disk (None: none, ``LOGITLAB_SPILL=off`` or a memory file system).
        own: the worker's own folder (``/dev/shm`` where it exists).
    """

    def __init__(self, spill: str | None, own: str | None):
        self.folders = [(f, f == spill) for f in (spill, own) if f]
        #: one entry per buffer given out of band, in the order :func:`pickle.loads` takes them back:
        #: ``{"path": "/proc/<pid>/fd/<fd>", "readonly": bool, "spilled": bool}``
        self.buffers: list[dict[str, Any]] = []
        self._fds: list[int] = []

    def __call__(self, buffer: pickle.PickleBuffer) -> bool:
        """True (keep the buffer in the pickle) for one of :data:`OUT_OF_BAND_BYTES` or fewer, or where no folder
        has room or the write fails; else False, the buffer's bytes in a new unlinked file."""
        raw = buffer.raw()
        if raw.nbytes <= OUT_OF_BAND_BYTES:
            return True
        for folder, spilled in self.folders:
            try:
                if shutil.disk_usage(folder).free < raw.nbytes * _ROOM:
                    continue
                fd = unlinked_file(folder, [raw], prefix="call-", suffix=".buf")
            except OSError:
                continue
            self._fds.append(fd)
            self.buffers.append({"path": f"/proc/{os.getpid()}/fd/{fd}", "readonly": bool(raw.readonly),
                                 "spilled": spilled})
            return False
        return True

    def close(self) -> None:
        """Close the files (the parent has mapped them: their pages go with its mappings)."""
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def map_buffers(buffers: Sequence[dict[str, Any]]) -> list[mmap.mmap]:
    """Each file of :class:`OutOfBand` mapped here: read-only (``ACCESS_READ``) for a buffer that was read-only in
    the worker — a spilled one's mapping is then a :func:`~logitlab.engines.spill.is_spilled` one — and
    copy-on-write (``ACCESS_COPY``: writable, nothing written back) for the others.

    Raises:
        EngineError: a file cannot be opened or mapped (the worker is gone, or no longer holds the file).
    """
    maps = []
    for buffer in buffers:
        try:
            with open(buffer["path"], "rb") as f:
                if buffer["readonly"]:
                    maps.append(spill_map(f.fileno(), buffer["spilled"]))
                else:
                    maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))
        except OSError as e:
            raise EngineError(f"cannot map the engine worker's array file {buffer['path']}: {e}") from None
    return maps
