"""Read a logitlab dump folder: the manifest, its step files checked, one tensor-position per ref.

A step file that is missing, truncated or not listed, and an entry that the
file does not hold as the manifest says, each become one line of
``Dump.problems``; the rest of the dump stays usable.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from logitlab.dumps.dump import Dump, TensorRef
from logitlab.dumps.format import NP_DTYPES
from logitlab.dumps.manifest import read_manifest
from logitlab.dumps.safetensors_io import SafetensorsFiles, read_safetensors_header
from logitlab.dumps.step_writer import UNFINISHED_SUFFIXES
from logitlab.errors import InputError


class _ArrayCache:
    """The last few arrays read (a logitlab step tensor serves every position it covers)."""

    def __init__(self, size: int = 8):
        self.size = size
        self.items: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def get(self, key: tuple, read: Callable[[], np.ndarray]) -> np.ndarray:
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        value = read()
        self.items[key] = value
        if len(self.items) > self.size:
            self.items.popitem(last=False)
        return value


def open_logitlab(folder: Path) -> Dump:
    """Open a logitlab dump folder: its manifest, then the tensors of every whole step file.

    A tensor with a token axis becomes one :class:`~logitlab.dumps.dump.TensorRef` per position
    it covers; one without, a single ref over its span.

    Parameters
    ----------
    folder : Path
        A folder that claims to be a logitlab dump (``manifest.json``).

    Returns
    -------
    Dump
        Kind ``logitlab``; problems (an unreadable manifest, an incomplete capture, missing,
        truncated or unlisted step files, entries the file does not hold) are in ``problems``.
    """
    dump = Dump(str(folder), "logitlab")
    try:
        manifest = read_manifest(folder)
    except InputError as exc:
        dump.problems.append(str(exc))
        return dump
    dump.manifest = manifest
    if not manifest.complete:
        dump.problems.append(f"{folder}: incomplete dump ({manifest.stopped or 'capture did not finish'}); "
                             "tensors after that point are missing")
    cache = _ArrayCache()
    files = SafetensorsFiles()
    headers: dict[str, dict[str, Any] | None] = {}
    for entry in manifest.tensors:
        if entry.file not in headers:
            headers[entry.file] = _check_step_file(folder / entry.file, dump.problems)
        header = headers[entry.file]
        if header is None:
            continue
        source = f"{folder / entry.file}:{entry.key}"
        info = header.get(entry.key)
        defect = None
        if info is None:
            defect = f"{source}: listed in the manifest but not in the file"
        elif NP_DTYPES.get(info.get("dtype")) != entry.dtype or tuple(info.get("shape", ())) != entry.shape:
            defect = (f"{source}: file holds {info.get('dtype')} {tuple(info.get('shape', ()))}, manifest says "
                      f"{entry.dtype} {entry.shape}")
        if defect:
            dump.problems.append(defect)
            continue

        def read(path=folder / entry.file, key=entry.key) -> np.ndarray:
            return cache.get((str(path), key), lambda: files.get(path, key))

        start, stop = entry.positions
        if entry.token_axis is None:
            dump.refs.append(TensorRef(entry.name, entry.layer, entry.instance, None, (start, stop),
                                       (entry.order, start), entry.dtype, entry.shape, source, read))
            continue
        axis = entry.token_axis
        shape = entry.shape[:axis] + entry.shape[axis + 1 :]
        for i, pos in enumerate(range(start, stop)):
            dump.refs.append(TensorRef(
                entry.name, entry.layer, entry.instance, pos, None, (entry.order, pos), entry.dtype, shape,
                source, lambda read=read, i=i, axis=axis: np.take(read(), i, axis=axis)))
    dump.refs.sort(key=lambda r: r.order)
    if not manifest.tensors:
        dump.problems.append(f"{folder}: the manifest lists no tensors")
    listed = {entry.file for entry in manifest.tensors} | {step.file for step in manifest.steps}
    for f in sorted(folder.glob("step-*")):
        if f.name.endswith(UNFINISHED_SUFFIXES):
            dump.problems.append(f"{f}: an unfinished step file (the capture stopped while writing it); not read")
        elif f.name not in listed:
            dump.problems.append(f"{f}: a step file the manifest does not list (written after the manifest was "
                                 "last saved, by a capture that did not finish); not read")
    return dump


def _check_step_file(path: Path, problems: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        problems.append(f"{path}: step file missing; its tensors are skipped")
        return None
    try:
        header, data_start = read_safetensors_header(path)
    except (InputError, OSError) as exc:
        problems.append(f"{exc}; its tensors are skipped")
        return None
    size = path.stat().st_size
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if data_start + end > size:
        problems.append(f"{path}: truncated ({size} bytes, the header needs {data_start + end}); "
                        "its tensors are skipped")
        return None
    return header
