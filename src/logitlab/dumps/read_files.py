"""Read dumps made elsewhere: raw float32/int32 files, ``.npy`` and ``.safetensors`` files.

A tensor's name, layer and position come from its file name (or safetensors
key), ``<prefix>_<name>-<layer>_pos<pos>``; the prefix is inferred unless
given (:func:`infer_prefix`). Such dumps record no execution order: they are
walked in :func:`~logitlab.dumps.tensor_names.walk_order`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from logitlab.dumps.dump import Dump, TensorRef
from logitlab.dumps.format import NP_DTYPES
from logitlab.dumps.safetensors_io import SafetensorsFiles, read_safetensors_header
from logitlab.dumps.shapes import ShapeSpec
from logitlab.dumps.tensor_names import is_llamacpp_name, walk_order
from logitlab.errors import InputError

_POS = re.compile(r"^(?P<stem>.+?)_pos(?P<pos>\d+)$")
_LAYER = re.compile(r"^(?P<pn>.+?)-(?P<layer>\d+)(?:#(?P<inst>\d+))?$")


def load_npy(path: str | Path, *, mmap: bool = False) -> np.ndarray:
    """``np.load`` of an ``.npy`` file, pickles refused; any failure as one InputError.

    numpy parses the header with Python's literal parser, so a damaged header
    can raise nearly any exception (SyntaxError, EOFError, MemoryError for a
    huge shape...); all of them mean the file is not readable as ``.npy``.

    Raises:
        InputError: naming the file and what numpy said.
    """
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many kinds; all are "bad file"
        raise InputError(f"{path}: not a readable .npy file ({type(exc).__name__}: {exc})") from None


def _parse_stem(stem: str) -> tuple[str, int | None, int, int | None]:
    """``prefix_name-3_pos5`` -> (``prefix_name``, 3, 0, 5)."""
    position = None
    match = _POS.match(stem)
    if match:
        stem, position = match.group("stem"), int(match.group("pos"))
    match = _LAYER.match(stem)
    if match:
        return match.group("pn"), int(match.group("layer")), int(match.group("inst") or 0), position
    return stem, None, 0, position


def infer_prefix(stems: Sequence[str]) -> str:
    """The file-name prefix to strip from ``prefix+name`` stems (see :mod:`~logitlab.dumps.readers`).

    Candidates are the longest common prefix cut at an underscore and every
    shorter cut down to ``""`` that leaves each stem a non-empty name. The one
    that makes the most names known llama.cpp names wins; among equals, the
    shortest if any name is known (``p_attn_norm`` -> ``p_``), else the longest.

    >>> infer_prefix(["ds4a_result_output"])
    'ds4a_'
    >>> infer_prefix(["run_a_attn_norm", "run_a_ffn_out"])
    'run_a_'
    """
    if not stems:
        return ""
    common = os.path.commonprefix(list(stems))
    common = common[: common.rfind("_") + 1]
    candidates = []
    while True:
        if all(s != common for s in stems):
            candidates.append(common)
        if not common:
            break
        common = common[: common[:-1].rfind("_") + 1]

    def score(prefix: str) -> tuple[int, int]:
        known = sum(is_llamacpp_name(s[len(prefix):]) for s in stems)
        return known, (-len(prefix) if known else len(prefix))

    return max(candidates, key=score)


def index_plain(files: list[tuple[Path, str]], dump: Dump, shapes: ShapeSpec, prefix: str | None) -> None:
    """Add raw and ``.npy`` files, named ``<prefix>_<name>-<layer>_pos<pos>``, to ``dump``.

    Parameters
    ----------
    files : list of (Path, str)
        Each file with its dtype name (raw files) or ``"npy"``.
    dump : Dump
        Gets one :class:`~logitlab.dumps.dump.TensorRef` per file, and one line in ``problems``
        per file skipped (another prefix, no name, the same tensor twice, unreadable) or defective.
    shapes : ShapeSpec
        Shapes for raw files.
    prefix : str or None
        File-name prefix to strip (None: :func:`infer_prefix`).
    """
    parsed = [(f, kind, *_parse_stem(f.stem)) for f, kind in files]
    stems = [pn for _, _, pn, *_ in parsed]
    if prefix is None:
        strip = infer_prefix(stems)
    else:
        strip = prefix if not prefix or prefix.endswith("_") else prefix + "_"
    seen: dict[tuple, Path] = {}
    for f, kind, pn, layer, instance, position in parsed:
        if strip and not pn.startswith(strip):
            dump.problems.append(f"{f}: name does not start with the prefix {strip!r}; skipped")
            continue
        name = pn[len(strip):]
        if not name:
            dump.problems.append(f"{f}: cannot tell a tensor name in {f.name!r} (expected "
                                 "<prefix>_<name>-<layer>_pos<pos>.bin); skipped")
            continue
        key = (name, layer, instance, position)
        if key in seen:
            dump.problems.append(f"{f}: same tensor as {seen[key].name}; skipped")
            continue
        seen[key] = f
        order = walk_order(name, layer, instance, position)
        if kind == "npy":
            ref = _npy_ref(f, name, layer, instance, position, order, dump.problems)
        else:
            ref = _raw_ref(f, kind, name, layer, instance, position, order, shapes)
        if ref is not None:
            if ref.defect:
                dump.problems.append(ref.defect)
            dump.refs.append(ref)


def _raw_ref(f: Path, dtype: str, name: str, layer: int | None, instance: int, position: int | None,
             order: tuple, shapes: ShapeSpec) -> TensorRef:
    itemsize = np.dtype(dtype).itemsize
    size = f.stat().st_size
    shape = shapes.lookup(name, layer)
    defect = None
    count = size // itemsize
    if size == 0:
        defect = f"{f}: empty file"
    elif size % itemsize:
        defect = f"{f}: truncated ({size} bytes is not a multiple of {itemsize}, the size of {dtype})"
    elif shape is not None and int(np.prod(shape)) != count:
        need = int(np.prod(shape))
        what = "truncated" if count < need else "mis-sized"
        defect = (f"{f}: {what}: {count} {dtype} values, shape {'x'.join(map(str, shape))} needs {need}")
    if shape is None or defect:
        shape = (count,)

    def read() -> np.ndarray:
        try:
            data = np.fromfile(f, dtype=np.dtype(dtype).newbyteorder("<"))
        except OSError as exc:
            raise InputError(f"{f}: cannot read ({exc.strerror})") from None
        data = data.astype(dtype, copy=False)
        return data.reshape(shape) if data.size == int(np.prod(shape)) else data

    return TensorRef(name, layer, instance, position, None, order, dtype, tuple(shape), str(f), read, defect)


def _npy_ref(f: Path, name: str, layer: int | None, instance: int, position: int | None, order: tuple,
             problems: list[str]) -> TensorRef | None:
    try:
        head = load_npy(f, mmap=True)
    except InputError as exc:
        problems.append(f"{exc}; skipped")
        return None
    dtype = head.dtype.name
    shape = tuple(head.shape)
    del head

    def read() -> np.ndarray:
        return np.array(load_npy(f))

    return TensorRef(name, layer, instance, position, None, order, dtype, shape, str(f), read)


def index_safetensors(f: Path, dump: Dump, shapes: ShapeSpec) -> None:
    """Add the tensors of one ``.safetensors`` file, keyed ``<name>-<layer>_pos<pos>``, to ``dump``.

    An unreadable header skips the file, a tensor whose data the file does not hold whole is
    defective: one line in ``dump.problems`` each.
    """
    try:
        header, data_start = read_safetensors_header(f)
    except (InputError, OSError) as exc:
        dump.problems.append(f"{exc}; skipped")
        return
    size = f.stat().st_size
    files = SafetensorsFiles()
    for index, (key, info) in enumerate(k for k in header.items() if k[0] != "__metadata__"):
        name, layer, instance, position = _parse_stem(key)
        dtype = NP_DTYPES.get(info.get("dtype"), str(info.get("dtype")))
        shape = tuple(info.get("shape", ()))
        order = walk_order(name, layer, instance, position)
        defect = None
        if data_start + info.get("data_offsets", [0, 0])[1] > size:
            defect = f"{f}:{key}: truncated (the file ends before the tensor's data)"
        dump.refs.append(TensorRef(
            name, layer, instance, position, None, order, dtype, shape, f"{f}:{key}",
            lambda key=key: files.get(f, key), defect))
        if defect:
            dump.problems.append(defect)
