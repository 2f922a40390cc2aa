"""Folders that an engine builds once from a model and keeps: where they live, how one is published.

The hf engine de-quantises a GGUF into a Hugging Face model folder, the ORT GenAI engine builds an ONNX
model from that; both are slow, so each is built once under :func:`cache_root` and found again by its
``logitlab.json``. A folder is built in a temporary sibling (:func:`building`) and moved into place in
one ``os.replace`` (:func:`publish`), so a killed build leaves no half-written folder behind and two
concurrent builds do not mix their files. Where a build takes minutes (llama.cpp's), :func:`exclusive`
makes a second process wait for the first one's folder instead of building it again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from logitlab.errors import EngineError

__all__ = ["META", "cache_root", "read_meta", "building", "exclusive", "publish"]

#: The file in a built folder that says what built it (JSON).
META = "logitlab.json"


def cache_root() -> Path:
    """Folder of logitlab's caches: ``$LOGITLAB_CACHE``, else ``~/.cache/logitlab``."""
    return Path(os.environ.get("LOGITLAB_CACHE") or Path.home() / ".cache" / "logitlab")


def read_meta(folder: Path) -> dict[str, Any] | None:
    """The built folder's ``logitlab.json``, or None when it is missing, unreadable or not a JSON object."""
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


@contextmanager
def exclusive(folder: Path, what: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the build lock of ``folder`` for the block: one process at a time builds it.

    An advisory ``flock`` on the hidden file ``.<name>.lock`` beside ``folder`` (kept; released by the
    kernel when the holder exits, killed or not). A second process blocks until the first leaves the
    block, then finds the folder published and uses it. Locks are per host (``flock`` on a network file
    system may not be shared between hosts: builds there can still run twice, as before).

    Args:
        folder: the folder about to be built (its parent is created).
        what: names the cache in the error.
        on_wait: called once, before blocking, when another process holds the lock.

    Raises:
        EngineError: the lock file cannot be created (a full or read-only disk).
    """
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        handle = open(folder.parent / f".{folder.name}.lock", "a+b")
    except OSError as exc:
        raise EngineError(f"cannot write {what} under {folder.parent}: {exc}; "
                          "set LOGITLAB_CACHE to a writable folder") from exc
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def building(folder: Path, prefix: str, what: str) -> Iterator[Path]:
    """A fresh temporary folder beside ``folder`` to build into, removed when the block ends.

    Args:
        folder: where the built folder will live (its parent is created).
        prefix: the temporary folder's name prefix (hidden: start it with ``.``).
        what: names the cache in the error (``"the ORT GenAI model cache"``).

    Raises:
        EngineError: an ``OSError`` inside the block or when creating the folder (a full or
            read-only disk), naming ``what`` and ``LOGITLAB_CACHE``.
    """
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=folder.parent))
        yield tmp
    except OSError as exc:
        raise EngineError(f"cannot write {what} under {folder.parent}: {exc}; "
                          "set LOGITLAB_CACHE to a writable folder") from exc
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def publish(built: Path, folder: Path, meta: dict[str, Any]) -> None:
    """Write ``meta`` into ``built`` and move it to ``folder`` in one rename, replacing a stale one.

    When another process published ``folder`` first (the rename fails and ``folder`` has its
    ``logitlab.json``), that one is kept.

    Raises:
        OSError: the write or the rename failed otherwise.
    """
    (built / META).write_text(json.dumps(meta, indent=1))
    if folder.exists():  # stale version (or a concurrent build): replace it
        shutil.rmtree(folder, ignore_errors=True)
    try:
        os.replace(built, folder)
    except OSError:
        if not (folder / META).exists():
            raise
