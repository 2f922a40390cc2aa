"""The folders of supervised engines' workers in ``/dev/shm``: made, owned, and removed even when nobody is left.

A worker's folder (:data:`FOLDER_PREFIX`) holds its logits buffer, its run files, its phase and its standard
error (:mod:`logitlab.engines.supervised`). Three ways out, so that nothing is left in RAM after any ending:

- the worker removes its folder when it is closed or its standard input ends
  (:func:`logitlab.engines.supervised_worker.remove_folder`);
- this process removes the folders it still owns when the interpreter exits (:func:`_remove_owned`): a ``close``
  whose reaping thread was cut off, a worker that crashed and was not started again;
- the first worker a process starts sweeps the folders whose two processes are both gone (:func:`remove_stale`):
  a parent and worker killed together (a SIGKILL of a whole process tree), where neither of the others runs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["FOLDER_PREFIX", "OWNER_FILE", "alive", "new_folder", "remove_folder", "remove_stale", "write_owner"]

#: The prefix of a worker's folder (the worker removes only a folder so named).
FOLDER_PREFIX = "logitlab-engine-"
#: The file in a worker's folder naming its two processes, "PARENT_PID WORKER_PID" (:func:`remove_stale`); only
#: "PARENT_PID" while a forked worker's pid is not known yet (:mod:`logitlab.engines.forkserver`).
OWNER_FILE = "owner"
_SHM = "/dev/shm"
#: The worker folders this process made and has not removed yet (:func:`_remove_owned`).
_OWNED: set[Path] = set()
_STALE_SWEPT = False


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts: its parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(where: str) -> list[Path]:
    """Remove the worker folders in ``where`` whose parent and worker processes are both gone; returns them.

    A worker removes its folder when it is closed or its standard input ends, and a parent removes the folders
    it owns at exit; neither runs where both were killed together (a SIGKILL of a whole process tree: a test
    harness, a batch scheduler, the OOM killer). Each folder names its two processes in :data:`OWNER_FILE`; a
    folder without that file (a worker still starting, or an older logitlab's) is left alone. Called once per
    process, before its first worker starts (:func:`new_folder`). Assumes ``where`` is not shared with another
    PID namespace.
    """
    removed = []
    try:
        names = [n for n in os.listdir(where) if n.startswith(FOLDER_PREFIX)]
    except OSError:
        return removed
    for name in names:
        folder = Path(where, name)
        try:
            pids = [int(p) for p in (folder / OWNER_FILE).read_text().split()]
        except (OSError, ValueError):
            continue
        if pids and not any(alive(pid) for pid in pids):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def new_folder() -> Path:
    """A new worker folder, owned by this process: in ``/dev/shm`` where it is writable, else the temporary
    directory. The first call of a process sweeps the stale folders there first (:func:`remove_stale`)."""
    global _STALE_SWEPT
    where = _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK) else tempfile.gettempdir()
    if not _STALE_SWEPT:
        _STALE_SWEPT = True
        remove_stale(where)
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=where))
    _OWNED.add(folder)
    return folder


def write_owner(folder: Path, worker_pid: int | None) -> None:
    """Name this process and the worker (None: not known yet) in the folder's :data:`OWNER_FILE` (what
    :func:`remove_stale` reads)."""
    (folder / OWNER_FILE).write_text(f"{os.getpid()}{'' if worker_pid is None else f' {worker_pid}'}\n")


def remove_folder(folder: Path) -> None:
    """Remove a worker folder of this process (its worker is gone or closed) and stop owning it."""
    shutil.rmtree(folder, ignore_errors=True)
    _OWNED.discard(folder)


@atexit.register
def _remove_owned() -> None:
    """Remove every worker folder this process still owns (at interpreter exit)."""
    for folder in list(_OWNED):
        remove_folder(folder)
