"""Step files written: tensors streamed into one safetensors file, one tensor in memory at a time.

A step file appears whole or not at all (written as ``.part``, then ``.tmp``,
then renamed); a write that fails (a full disk) is a :class:`DumpWriteError`
that names the file.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np

from logitlab.dumps.format import ST_DTYPES
from logitlab.errors import InputError

#: Suffixes of files a capture writes on its way to a step file (never read as tensors).
UNFINISHED_SUFFIXES = (".part", ".tmp")


class DumpWriteError(InputError):
    """A dump file could not be written (a full disk, a quota, an I/O error)."""


def write_error(path: str | Path, exc: OSError) -> DumpWriteError:
    """An OSError while writing ``path`` as the error to raise."""
    reason = exc.strerror or str(exc)
    hint = " (the disk is full: free space or choose another --out)" if exc.errno in (28, 122) else ""
    return DumpWriteError(f"cannot write {path}: {reason}{hint}")


class StepWriter:
    """Stream tensors into one safetensors file.

    Each :meth:`add` appends the array's bytes to ``<path>.part``;
    :meth:`close` writes the header (8-byte little-endian length + JSON,
    padded to 8 bytes) and then the data into ``<path>.tmp``, and renames it
    to ``path``: a step file that exists is whole, whenever the process stops.
    Memory use is one tensor at a time. A write that fails (a full disk)
    raises :class:`InputError` and leaves no file behind.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._part = self.path.with_name(self.path.name + ".part")
        try:
            self._file = self._part.open("wb")
        except OSError as exc:
            raise write_error(self._part, exc) from None
        self._header: dict[str, Any] = {}
        self.nbytes = 0

    def add(self, key: str, array: np.ndarray) -> int:
        """Append ``array`` under ``key``; returns its size in bytes.

        Raises:
            InputError: a key given twice, or a dtype safetensors cannot hold.
        """
        if key in self._header:
            raise InputError(f"tensor key {key!r} written twice to {self.path.name}")
        array = np.ascontiguousarray(array)
        code = ST_DTYPES.get(array.dtype.name)
        if code is None:
            raise InputError(f"cannot store dtype {array.dtype} in safetensors (tensor {key})")
        start = self.nbytes
        try:
            self._file.write(array.view(np.uint8).reshape(-1).data if array.size else b"")
        except OSError as exc:
            self.abort()
            raise write_error(self._part, exc) from None
        self.nbytes += array.nbytes
        self._header[key] = {"dtype": code, "shape": list(array.shape), "data_offsets": [start, self.nbytes]}
        return array.nbytes

    def close(self, metadata: dict[str, str] | None = None) -> Path:
        """Write the final file (via ``<path>.tmp`` and a rename) and remove the part file; returns the path.

        Raises:
            InputError: a write failed (full disk); no part, temporary or final file is left.
        """
        tmp = self.path.with_name(self.path.name + ".tmp")
        header = dict(self._header)
        if metadata:
            header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}, **header}
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)
        try:
            self._file.close()
            with tmp.open("wb") as out, self._part.open("rb") as data:
                out.write(struct.pack("<Q", len(text)))
                out.write(text)
                shutil.copyfileobj(data, out, 1 << 22)
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            self.abort()
            raise write_error(self.path, exc) from None
        os.unlink(self._part)
        return self.path

    def abort(self) -> None:
        """Close and delete the part file (capture failed)."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:  # the last buffered bytes could not be written (full disk): the file goes anyway
                pass
        self._part.unlink(missing_ok=True)
