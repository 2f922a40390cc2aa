"""safetensors files read: headers checked against the format's rules, tensors read through the library.

Any file may be damaged or not safetensors at all: every failure is one
:class:`~logitlab.errors.InputError` that names the file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from logitlab.dumps.format import NP_DTYPES, is_int, np_dtype
from logitlab.errors import InputError


def read_safetensors_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and the byte offset where its data starts.

    Raises:
        InputError: too short, a header length beyond the file, or bad JSON.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InputError(f"{path} is not safetensors: {size} bytes, too short for a header")
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise InputError(f"{path} is truncated or not safetensors: header of {length} bytes in a "
                             f"{size}-byte file")
        try:
            header = json.loads(f.read(length))
        except (ValueError, RecursionError):
            raise InputError(f"{path} is not safetensors: its header is not JSON") from None
    if not isinstance(header, dict):
        raise InputError(f"{path} is not safetensors: its header is not a JSON object")
    for key, info in header.items():
        problem = _header_entry_problem(key, info)
        if problem:
            raise InputError(f"{path} is not valid safetensors: {problem}")
    return header, 8 + length


def _header_entry_problem(key: str, info: Any) -> str | None:
    """Why one safetensors header entry is malformed (the format's rules), or None.

    Rules (safetensors' format description): ``__metadata__`` maps strings to
    strings; every other entry has a string ``dtype``, a ``shape`` of
    non-negative sizes and ``data_offsets`` ``[begin, end]`` with
    ``0 <= begin <= end``; for a dtype this reader knows, ``end - begin`` is
    the tensor's size in bytes.
    """
    if key == "__metadata__":
        if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
            return "__metadata__ is not a map of strings"
        return None
    if not isinstance(info, dict):
        return f"tensor {key!r} is not described by an object"
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str):
        return f"tensor {key!r} has dtype {dtype!r}"
    if not (isinstance(shape, list) and all(is_int(d) and d >= 0 for d in shape)):
        return f"tensor {key!r} has shape {shape!r}"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        return f"tensor {key!r} has data_offsets {offsets!r}"
    if dtype in NP_DTYPES:
        size = np_dtype(NP_DTYPES[dtype]).itemsize
        for d in shape:
            size *= d
        if size != offsets[1] - offsets[0]:
            return f"tensor {key!r} ({dtype} {shape}) needs {size} bytes, its data_offsets span {offsets[1] - offsets[0]}"
    return None


class SafetensorsFiles:
    """Open safetensors files once and read tensors from them (the ``safetensors`` library, numpy).

    Opening a file parses its header; a dump reads thousands of small tensors
    from a few files, so the handles stay open until :meth:`close`.
    """

    def __init__(self) -> None:
        self._handles: dict[str, Any] = {}

    def get(self, path: str | Path, key: str) -> np.ndarray:
        """Read tensor ``key`` of ``path``.

        Raises:
            InputError: missing key, or a file the library rejects (truncated, corrupt).
        """
        from safetensors import SafetensorError, safe_open

        path = str(path)
        try:
            handle = self._handles.get(path)
            if handle is None:
                handle = self._handles[path] = safe_open(path, framework="numpy")
            return handle.get_tensor(key)
        except (SafetensorError, OSError, ValueError, TypeError, KeyError) as exc:
            raise InputError(f"{path}: cannot read tensor {key!r}: {exc}") from None

    def map(self, path: str | Path, key: str) -> np.ndarray:
        """Tensor ``key`` of ``path`` as a read-only memory mapping of the file's bytes, not a copy: its pages are
        page cache, which the kernel keeps while memory is free and drops when it is short (a golden's run of
        N × V logits is not held in memory beside the run checked against it: issue #31).

        Raises:
            InputError: missing key, a dtype numpy cannot map, or a header :func:`read_safetensors_header`
                rejects (truncated, corrupt).
        """
        header, start = read_safetensors_header(path)
        info = header.get(key)
        if not isinstance(info, dict) or key == "__metadata__":
            raise InputError(f"{path}: cannot read tensor {key!r}: no such tensor")
        if info["dtype"] not in NP_DTYPES:
            raise InputError(f"{path}: cannot map tensor {key!r}: dtype {info['dtype']}")
        dtype = np_dtype(NP_DTYPES[info["dtype"]]).newbyteorder("<")
        shape, (begin, end) = tuple(info["shape"]), info["data_offsets"]
        if start + end > Path(path).stat().st_size:
            raise InputError(f"{path} is truncated: tensor {key!r} ends at byte {start + end}")
        if begin == end:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=start + begin, shape=shape)

    def close(self) -> None:
        self._handles.clear()


def read_safetensors_tensor(path: str | Path, key: str) -> np.ndarray:
    """Read one tensor from a safetensors file (opens and closes the file).

    Raises:
        InputError: missing key, or a file the library rejects (truncated, corrupt).
    """
    files = SafetensorsFiles()
    try:
        return files.get(path, key)
    finally:
        files.close()


def tensor_keys(path: str | Path) -> Iterable[str]:
    header, _ = read_safetensors_header(path)
    return [k for k in header if k != "__metadata__"]
