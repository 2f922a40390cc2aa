"""Large runs kept on disk, not in memory: the reference every later run is compared with, the runs kept to compare.

An experiment that compares each run with one reference (``ab``) holds two runs' logits at once: the reference
and the run being compared (``invariance determinism`` holds every run until they are all made; ``explain`` its
pair beside each run it makes next). A run is N positions × V vocabulary × 4 bytes (8,192 × 129,280: 4.2 GB), so
the second array sets how long a prompt fits the machine. :func:`spill` writes a kept run's logits to a file on
disk and returns them as a read-only memory mapping of that file: the same bits, read through the page cache.
The kernel keeps those pages while memory is free and drops them (they are clean file pages, as the model's own
weights are) when it is not, so what the command holds that the kernel cannot give back is one run, the one
being compared, not two.

The file is unlinked as soon as it is open: its space is freed when the mapping goes, or when the process ends
however it ends (on a local disk a ``kill -9`` leaves nothing behind; NFS keeps a ``.nfs…`` file until then).
It lives under ``$LOGITLAB_SPILL``, else
``spill/`` in logitlab's cache folder (:func:`~logitlab.engines.build_cache.cache_root`);
``LOGITLAB_SPILL=off`` keeps every run in memory. A folder on a
memory-backed file system (``tmpfs``, ``ramfs``: ``/dev/shm``, and ``/tmp`` on some systems) gains nothing,
and a disk without room for the run cannot take it: then the run stays in memory, as
:func:`spill_folder` tells before any work (the memory check counts the reference in memory then).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from logitlab.engines.workload import RunOutput

__all__ = ["SPILL_BYTES", "MEMORY_FILE_SYSTEMS", "OFF", "spill_folder", "spill", "spill_stack", "spill_run",
           "spill_map", "unlinked_file", "is_spilled"]

#: Runs of this size (bytes) or smaller stay in memory: the second copy of a small run costs less than a constant of
#: the memory bound, and writing it out costs time for nothing. The same size as the supervised engine's
#: :data:`~logitlab.engines.supervised.KEEP_BUFFER_BYTES` (a run that big crosses in a file of its own).
SPILL_BYTES = 64 << 20
#: File systems whose files are memory: a run spilled there is held as before.
MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"})
#: ``LOGITLAB_SPILL=off`` keeps every run in memory.
OFF = "off"
#: Bytes written at once (the file's bytes do not depend on it).
_WRITE_BYTES = 1 << 24


class _SpillMap(mmap.mmap):
    """The mapping of a spilled run (its own type, for :func:`is_spilled`)."""


def spill_map(fileno: int, spilled: bool) -> mmap.mmap:
    """A read-only mapping of the whole open file ``fileno``; one :func:`is_spilled` recognises where ``spilled``
    (a file on disk in the spill folder: :mod:`~logitlab.engines.call_buffers`' out-of-band arrays).

    Raises:
        OSError: the file cannot be mapped (an empty file among them).
    """
    return (_SpillMap if spilled else mmap.mmap)(fileno, 0, access=mmap.ACCESS_READ)


def _folder() -> Path | None:
    from logitlab.engines.build_cache import cache_root

    env = os.environ.get("LOGITLAB_SPILL", "").strip()
    if env.lower() == OFF:
        return None
    return Path(env) if env else cache_root() / "spill"


#: The escapes of /proc/self/mounts (space, tab, newline, backslash as ``\\ooo``).
_OCTAL = re.compile(r"\\([0-7]{3})")


def _file_system(path: Path) -> str | None:
    """The type of the file system holding ``path`` (``/proc/self/mounts``, the longest mount point above it);
    None where it cannot be read."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    path = path.resolve()
    best, kind = -1, None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[1]))
        # >=: of two mounts on one point the later listed is on top (a tmpfs mounted over a disk folder)
        if (path == point or point in path.parents) and len(point.parts) >= best:
            best, kind = len(point.parts), fields[2]
    return kind


def spill_folder(n_bytes: int) -> Path | None:
    """The folder a run of ``n_bytes`` would be spilled to, or None if it would stay in memory.

    None when the run is :data:`SPILL_BYTES` or smaller, ``LOGITLAB_SPILL`` is ``off``, the folder cannot be made,
    it is on a memory-backed file system (:data:`MEMORY_FILE_SYSTEMS`), or its disk has less than ``n_bytes`` + 1 %
    free. Creates the folder.
    """
    if n_bytes <= SPILL_BYTES:
        return None
    folder = _folder()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if _file_system(folder) in MEMORY_FILE_SYSTEMS or free < n_bytes * 1.01:
        return None
    return folder


def spill(logits: np.ndarray) -> np.ndarray:
    """``logits`` kept in an unlinked file on disk, as a read-only array mapping it; or ``logits`` itself.

    Args:
        logits: a C-contiguous ``(n_positions, n_vocab)`` array (float32 in practice; any dtype is kept as is).

    Returns:
        An array of the same shape, dtype and bits, read-only (writing to it raises ``ValueError``), backed by a
        shared read-only mapping of the file; ``logits`` itself when it is spilled already (:func:`is_spilled`),
        when :func:`spill_folder` gives no folder, or when writing or mapping the file fails (a full disk: the run
        stays in memory, nothing is lost).
    """
    if not logits.flags.c_contiguous or is_spilled(logits):
        return logits
    kept = _write([logits])
    return logits if kept is None else kept


def spill_stack(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` kept on disk as :func:`spill` keeps one array, without building it in memory.

    For a comparison over several runs' rows stacked (``invariance batch``: the B copies of the prompt in one
    batch against the prompt alone B times), which would otherwise hold the stack beside its parts.

    Args:
        parts: ``(n_i, n_vocab)`` arrays of one dtype and width (at least one).

    Returns:
        The ``(sum n_i, n_vocab)`` concatenation, read-only, mapping an unlinked file; where nothing is spilled
        (:func:`spill_folder` gives no folder, or writing fails) ``np.concatenate(parts)`` in memory.

    Raises:
        ValueError: no parts, or parts of other widths or dtypes.
    """
    if not parts:
        raise ValueError("spill_stack needs at least one array")
    first = parts[0]
    if any(p.ndim != 2 or p.shape[1] != first.shape[1] or p.dtype != first.dtype for p in parts):
        raise ValueError("spill_stack: the parts differ in width or dtype")
    kept = _write(parts)
    return np.concatenate(parts) if kept is None else kept


def _write(parts: Sequence[np.ndarray]) -> np.ndarray | None:
    """``parts`` (one dtype and width; each made C-contiguous as it is written) written one after another to an
    unlinked file in :func:`spill_folder`, as a read-only array mapping it; None where there is no folder or the
    write fails."""
    n_bytes = sum(int(p.nbytes) for p in parts)
    folder = spill_folder(n_bytes)
    if folder is None:
        return None

    def chunks():
        for part in parts:
            flat = np.ascontiguousarray(part).reshape(-1).view(np.uint8)
            for start in range(0, flat.size, _WRITE_BYTES):
                yield memoryview(flat[start:start + _WRITE_BYTES])

    try:
        handle = unlinked_file(folder, chunks(), prefix="run-", suffix=".logits")
    except OSError:
        return None
    try:
        mapped = _SpillMap(handle, n_bytes, access=mmap.ACCESS_READ)
    except OSError:
        return None
    finally:
        os.close(handle)  # the mapping keeps the file
    rows = sum(p.shape[0] for p in parts)
    return np.frombuffer(mapped, dtype=parts[0].dtype).reshape((rows, *parts[0].shape[1:]))


def unlinked_file(folder: Path | str, chunks: Iterable[Any], *, prefix: str, suffix: str) -> int:
    """A new file in ``folder`` holding ``chunks`` (bytes-like, one after another), unlinked as soon as it is
    created: the open descriptor is returned, and the file's space goes when the last descriptor or mapping of it
    does, however the process ends (:func:`spill` maps it; :mod:`~logitlab.engines.call_buffers` hands it to the
    parent process through ``/proc``).

    Raises:
        OSError: the file cannot be created or written (nothing named is left, no descriptor held). Anything else
            raised while writing closes the descriptor too, and goes on.
    """
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        os.unlink(name)
        # a buffered file: one write of several GB loops over the system's 2 GiB-a-call writes
        with os.fdopen(fd, "wb", closefd=False) as f:
            for chunk in chunks:
                f.write(chunk)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(name)
        except OSError:
            pass
        raise
    return fd


def spill_run(output: RunOutput) -> RunOutput:
    """``output`` with its logits :func:`spill`-ed (a copy of the record, the same ids and timings); ``output``
    itself where they stay in memory, or for an engine that returns top-k data (its rows are k wide)."""
    if output.topk is not None:
        return output
    kept = spill(output.logits)
    return output if kept is output.logits else dataclasses.replace(output, logits=kept)


def is_spilled(logits: np.ndarray) -> bool:
    """Does ``logits`` (or the array it views) map a spilled file (:func:`spill`)?"""
    base = logits
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, _SpillMap)
