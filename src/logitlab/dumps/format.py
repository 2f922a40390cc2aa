"""The logitlab dump format: a folder with one safetensors file per captured
step and a JSON manifest that describes every tensor.

Layout of a dump folder::

    manifest.json                      what ran and what each tensor is
    step-0000-prefill.safetensors      tensors of the prompt (one engine call)
    step-0001-decode.safetensors       tensors of decode step 1
    ...

The manifest (``"format": "logitlab-dump"``, versioned by ``schema_version``)
holds the engine description, the variant, the model hash, the token ids, the
capture filter, the steps, and one entry per stored tensor: ``key`` (its name
in the step file), ``name``, ``layer`` (None for tensors outside the layers:
``embd``, ``result_norm``, ``result_output``), ``instance`` (0 for the first
tensor of that name and layer in a graph, 1 for the second — llama.cpp names
both RMS norms of a layer ``norm-L``), ``positions`` (the half-open range of
token positions the tensor covers), ``token_axis`` (the numpy axis that runs
over those positions, or None when it could not be told), ``dtype``,
``shape`` (numpy order: ggml's ``ne`` reversed), ``order`` (execution order
over the whole capture), ``step`` and ``op`` (the ggml op; for the hf engine,
the module and side the tensor was taken from, e.g.
``model.layers.3.self_attn.o_proj:input``).

Step files are written by :class:`StepWriter`, which streams each tensor to
disk as it arrives and writes the safetensors header at the end (the
``safetensors`` library itself needs every array in memory at once). The files
are plain safetensors: ``safetensors.safe_open(path, "numpy")`` reads them.

Format history:
    1 (logitlab 0.1): first version.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import ml_dtypes
import numpy as np

from logitlab.errors import InputError

FORMAT_NAME = "logitlab-dump"
SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"

#: numpy dtype name <-> safetensors dtype code
ST_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int32": "I32", "float64": "F64",
             "int64": "I64", "int16": "I16", "int8": "I8", "uint8": "U8"}
NP_DTYPES = {code: name for name, code in ST_DTYPES.items()}

_LABEL = re.compile(r"^(?P<name>.+?)(?:#(?P<instance>\d+))?(?:-(?P<layer>\d+))?(?:#(?P<instance2>\d+))?$")


def np_dtype(name: str) -> np.dtype:
    """numpy dtype for a dtype name (``bfloat16`` through ml_dtypes)."""
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


# --------------------------------------------------------------------------- names
def split_label(label: str) -> tuple[str, int | None, int]:
    """Split a llama.cpp tensor name into ``(name, layer, instance)``.

    ``"attn_norm-3"`` -> ``("attn_norm", 3, 0)``; ``"result_output"`` ->
    ``("result_output", None, 0)``; ``"norm-3#1"`` (the second ``norm-3`` of a
    graph, as logitlab labels it) -> ``("norm", 3, 1)``.
    """
    match = _LABEL.match(label)
    if match is None:  # pragma: no cover - the pattern matches any non-empty text
        return label, None, 0
    layer = match.group("layer")
    instance = match.group("instance") or match.group("instance2") or 0
    return match.group("name"), int(layer) if layer is not None else None, int(instance)


def format_label(name: str, layer: int | None, instance: int = 0, position: int | None = None) -> str:
    """``attn_norm-3``, ``norm-3#1``, ``result_output``; with a position, ``...@pos5``."""
    text = name + (f"-{layer}" if layer is not None else "") + (f"#{instance}" if instance else "")
    return text + (f"@pos{position}" if position is not None else "")


# --------------------------------------------------------------------------- ranges and sizes
#: Largest layer or position a filter takes (llama.cpp's positions, ``llama_pos``, and layer indices are int32).
MAX_INDEX = 2**31 - 1
#: Most values one ``--layers``/``--positions`` filter may cover (it is held as a set; no dump has that many).
MAX_FILTER_VALUES = 2**20


def parse_ranges(text: str | None, option: str) -> frozenset[int] | None:
    """Parse ``"0-3,7,10-12"`` (the value of ``option``, e.g. ``--layers``) into a set of ints; None -> None (all).

    Raises:
        InputError: naming ``option``: an empty value or item, a part that is not N or A-B with
            0 <= A <= B <= MAX_INDEX, or more than MAX_FILTER_VALUES values in all.
    """
    if text is None:
        return None
    parts = _items(str(text), option, "ranges like 0-3,7")
    spans = [_span(part, option) for part in parts]
    if sum(stop - start + 1 for start, stop in spans) > MAX_FILTER_VALUES:
        raise InputError(f"{option} {text} covers more than {MAX_FILTER_VALUES} values: give the ranges you need")
    return frozenset(v for start, stop in spans for v in range(start, stop + 1))


def _items(text: str, option: str, example: str) -> list[str]:
    """The comma-separated items of an option's value, stripped.

    Raises:
        InputError: the value or one item is empty.
    """
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InputError(f"{option} {text!r} is empty: give {example}, or leave {option} out for all")
    if not all(items):
        raise InputError(f"{option} {text!r} has an empty item: give {example}, one comma between items")
    return items


def _span(part: str, option: str) -> tuple[int, int]:
    """``"3"`` -> (3, 3), ``"0-3"`` -> (0, 3).

    Raises:
        InputError: not N or A-B with 0 <= A <= B <= MAX_INDEX.
    """
    lo, sep, hi = part.partition("-")
    try:
        start = int(lo)
        stop = int(hi) if sep else start
    except ValueError:
        raise InputError(f"bad {option} item {part!r}: expected N or A-B, e.g. 0-3,7") from None
    if start < 0 or stop < start:
        raise InputError(f"bad {option} range {part!r}: expected 0 <= A <= B")
    if stop > MAX_INDEX:
        raise InputError(f"bad {option} item {part!r}: beyond {MAX_INDEX}, the largest layer or position (int32)")
    return start, stop


def _check_glob(pattern: str) -> str:
    """``pattern`` if it is a well-formed glob.

    Raises:
        InputError: a ``[`` without its closing ``]`` (fnmatch would match a literal ``[``, which no tensor
            name holds).
    """
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "!")
            j = pattern.find("]", j + (pattern[j : j + 1] == "]"))
            if j < 0:
                raise InputError(f"bad --names glob {pattern!r}: '[' without a closing ']'")
            i = j
        i += 1
    return pattern


def format_ranges(values: Iterable[int]) -> str:
    """The inverse of :func:`parse_ranges`: ``{0, 1, 2, 3, 7}`` -> ``"0-3,7"``."""
    parts: list[list[int]] = []
    for v in sorted(set(values)):
        if parts and v == parts[-1][1] + 1:
            parts[-1][1] = v
        else:
            parts.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str | int | None) -> int | None:
    """Parse a byte count: ``1000``, ``500MB``, ``2GiB``, ``1.5g``; None -> None.

    Decimal units (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB,
    GiB, TiB) powers of 1024.

    Raises:
        InputError: not a size.
    """
    if text is None:
        return None
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise InputError(f"bad size {text!r}: expected e.g. 500MB, 2GiB or a byte count")
    number, unit, binary = match.groups()
    base = 1024 if binary else 1000
    power = " kmgt".index(unit.lower() or " ")
    return int(float(number) * base**power)


def format_bytes(n: float) -> str:
    """``1.2 GB`` style (decimal units)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


# --------------------------------------------------------------------------- filter
@dataclass(frozen=True)
class TensorFilter:
    """Which tensors a capture keeps, or a diff compares.

    Attributes:
        names: glob patterns on the name without the layer (``attn_*``,
            ``ffn_out``, ``result_output``) or with it (``kq-0``); empty = all.
        layers: layer numbers to keep; None = all. Tensors outside the layers
            (``embd``, ``result_output``) are kept whatever the layers.
        positions: token positions to keep; None = all.
    """

    names: tuple[str, ...] = ()
    layers: frozenset[int] | None = None
    positions: frozenset[int] | None = None

    @classmethod
    def parse(cls, names: str | Sequence[str] | None = None, layers: str | None = None,
              positions: str | None = None) -> "TensorFilter":
        """Build from command-line text: ``names`` comma-separated globs, ``layers``/``positions`` ranges.

        None means everything; an empty value is an error.

        Raises:
            InputError: an empty value or item, a malformed glob or range (naming the option).
        """
        if isinstance(names, str):
            names = [names]
        patterns = tuple(_check_glob(p) for item in (names or ()) for p in _items(item, "--names", "globs like "
                                                                                    "'attn_*,l_out'"))
        return cls(patterns, parse_ranges(layers, "--layers"), parse_ranges(positions, "--positions"))

    def keeps_name(self, name: str, layer: int | None) -> bool:
        if self.layers is not None and layer is not None and layer not in self.layers:
            return False
        if not self.names:
            return True
        full = format_label(name, layer)
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(full, p) for p in self.names)

    def keeps_position(self, position: int | None) -> bool:
        return self.positions is None or position is None or position in self.positions

    def keeps_span(self, start: int, stop: int) -> bool:
        return self.positions is None or any(p in self.positions for p in range(start, stop))

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names),
                "layers": sorted(self.layers) if self.layers is not None else None,
                "positions": sorted(self.positions) if self.positions is not None else None}


# --------------------------------------------------------------------------- manifest
@dataclass
class TensorEntry:
    """One stored tensor of a logitlab dump (a manifest ``tensors`` item)."""

    key: str
    name: str
    layer: int | None
    instance: int
    positions: tuple[int, int]
    token_axis: int | None
    dtype: str
    shape: tuple[int, ...]
    order: int
    step: int
    file: str
    op: str = ""

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np_dtype(self.dtype).itemsize

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "layer": self.layer, "instance": self.instance,
                "positions": list(self.positions), "token_axis": self.token_axis, "dtype": self.dtype,
                "shape": list(self.shape), "order": self.order, "step": self.step, "file": self.file,
                "op": self.op}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TensorEntry":
        return cls(key=str(data["key"]), name=str(data["name"]), layer=data.get("layer"),
                   instance=int(data.get("instance", 0)), positions=tuple(data["positions"]),
                   token_axis=data.get("token_axis"), dtype=str(data["dtype"]), shape=tuple(data["shape"]),
                   order=int(data["order"]), step=int(data.get("step", 0)), file=str(data["file"]),
                   op=str(data.get("op", "")))


@dataclass
class StepInfo:
    """One engine call of the capture: ``kind`` prefill/decode, token positions ``[start, stop)``."""

    index: int
    kind: str
    positions: tuple[int, int]
    file: str
    n_tensors: int = 0
    nbytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "positions": list(self.positions), "file": self.file,
                "n_tensors": self.n_tensors, "nbytes": self.nbytes}


@dataclass
class DumpManifest:
    """Everything ``manifest.json`` holds (see the module docstring)."""

    engine: dict[str, Any]
    variant: dict[str, Any]
    prompt_ids: list[int]
    generated: list[int]
    filter: dict[str, Any]
    steps: list[StepInfo] = field(default_factory=list)
    tensors: list[TensorEntry] = field(default_factory=list)
    complete: bool = True
    stopped: str | None = None
    estimate_bytes: int | None = None
    bytes_written: int = 0
    created_at: str = ""
    logitlab_version: str = ""

    @property
    def input_ids(self) -> list[int]:
        return list(self.prompt_ids) + list(self.generated)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME, "schema_version": SCHEMA_VERSION,
            "logitlab_version": self.logitlab_version, "created_at": self.created_at,
            "engine": self.engine, "variant": self.variant,
            "model_sha256": self.engine.get("model_sha256"),
            "prompt_ids": list(self.prompt_ids), "generated": list(self.generated),
            "input_ids": self.input_ids, "filter": self.filter,
            "complete": self.complete, "stopped": self.stopped,
            "estimate_bytes": self.estimate_bytes, "bytes_written": self.bytes_written,
            "steps": [s.to_dict() for s in self.steps],
            "tensors": [t.to_dict() for t in self.tensors],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DumpManifest":
        return cls(
            engine=dict(data.get("engine") or {}), variant=dict(data.get("variant") or {}),
            prompt_ids=list(data.get("prompt_ids") or []), generated=list(data.get("generated") or []),
            filter=dict(data.get("filter") or {}),
            steps=[StepInfo(int(s["index"]), str(s["kind"]), tuple(s["positions"]), str(s["file"]),
                            int(s.get("n_tensors", 0)), int(s.get("nbytes", 0))) for s in data.get("steps") or []],
            tensors=[TensorEntry.from_dict(t) for t in data.get("tensors") or []],
            complete=bool(data.get("complete", True)), stopped=data.get("stopped"),
            estimate_bytes=data.get("estimate_bytes"), bytes_written=int(data.get("bytes_written") or 0),
            created_at=str(data.get("created_at", "")), logitlab_version=str(data.get("logitlab_version", "")),
        )

    def write(self, folder: str | Path) -> Path:
        """Write ``manifest.json`` into ``folder`` (atomically: temp file + rename).

        Raises:
            InputError: the write failed (full disk); the manifest written before, if any, stays as it was.
        """
        from logitlab.jsonio import write_json

        path = Path(folder) / MANIFEST_NAME
        try:
            write_json(path, self.to_dict())
        except OSError as exc:
            raise write_error(path, exc) from None
        return path


def is_logitlab_dump(path: str | Path) -> bool:
    """True if ``path`` is a folder holding a logitlab ``manifest.json``."""
    manifest = Path(path) / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        with manifest.open(encoding="utf-8") as f:
            return json.load(f).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError):
        return False


def claims_logitlab_dump(path: str | Path) -> bool:
    """True if ``path`` is a logitlab dump folder, or one whose ``manifest.json`` is not valid JSON while it
    names the format or sits among ``step-*.safetensors`` files (a dump whose manifest was cut short)."""
    if is_logitlab_dump(path):
        return True
    try:
        text = (Path(path) / MANIFEST_NAME).read_text(encoding="utf-8", errors="replace")
        json.loads(text)
    except OSError:
        return False
    except ValueError:
        return FORMAT_NAME in text or any(Path(path).glob("step-*.safetensors"))
    return False


def read_manifest(folder: str | Path) -> DumpManifest:
    """Read a logitlab dump's manifest.

    Raises:
        InputError: missing, unreadable, not JSON, another format, or a newer schema.
    """
    path = Path(folder) / MANIFEST_NAME
    try:
        with path.open(encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InputError(f"{MANIFEST_NAME} of {folder} is not valid JSON ({exc}): not a readable logitlab dump "
                         "(cut short?)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise InputError(f"{path} is not a logitlab dump manifest (no \"format\": \"{FORMAT_NAME}\")")
    version = data.get("schema_version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise InputError(f"{path}: malformed manifest (schema_version {version!r} is not a whole number)")
    if version > SCHEMA_VERSION:
        raise InputError(f"{path} has schema_version {data['schema_version']}; this logitlab reads up to "
                         f"{SCHEMA_VERSION}: upgrade logitlab")
    problem = manifest_problem(data)
    if problem:
        raise InputError(f"{path}: malformed manifest ({problem})")
    return DumpManifest.from_dict(data)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _span_problem(value: Any) -> str | None:
    if not (isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value)
            and 0 <= value[0] <= value[1]):
        return f"positions {value!r} is not [start, stop] with 0 <= start <= stop"
    return None


def _file_problem(value: Any) -> str | None:
    """A step file must be a plain name inside the dump folder (never a path that leaves it)."""
    if not isinstance(value, str) or not value or value in (".", "..") or "/" in value or "\\" in value \
            or "\0" in value:
        return f"file {value!r} is not a file name inside the dump folder"
    return None


def _entry_problem(t: Any) -> str | None:
    """Why a manifest ``tensors`` item cannot be used, or None."""
    if not isinstance(t, dict):
        return "an item is not an object"
    for key in ("key", "name", "dtype", "file"):
        if not isinstance(t.get(key), str):
            return f"{key} {t.get(key)!r} is not a string"
    shape = t.get("shape")
    if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
        return f"shape {shape!r} of {t['key']!r} is not a list of sizes"
    if t["dtype"] not in ST_DTYPES:
        return f"dtype {t['dtype']!r} of {t['key']!r} is not one of {', '.join(ST_DTYPES)}"
    for key, optional in (("layer", True), ("instance", True), ("order", False), ("step", True)):
        value = t.get(key)
        if not (_is_int(value) or optional and value is None and (key == "layer" or key not in t)):
            return f"{key} {value!r} of {t['key']!r} is not a whole number"
    if not isinstance(t.get("op", ""), str):
        return f"op of {t['key']!r} is not a string"
    span = _span_problem(t.get("positions"))
    if span:
        return f"{span} ({t['key']!r})"
    axis = t.get("token_axis")
    if axis is not None:
        start, stop = t["positions"]
        if not (_is_int(axis) and 0 <= axis < len(shape) and shape[axis] == stop - start):
            return (f"token_axis {axis!r} of {t['key']!r} is not an axis of shape {shape} that runs over its "
                    f"{stop - start} positions")
    return _file_problem(t["file"])


def manifest_problem(data: dict[str, Any]) -> str | None:
    """What makes a parsed manifest unusable (a field of the wrong type or out of range), or None.

    Checked before :meth:`DumpManifest.from_dict`, so a damaged manifest is one clear error, not an exception
    deep inside a reader: every field the readers use has its type, spans are ``[start, stop]``, a token axis
    runs over the tensor's positions, and step files are plain names inside the dump folder.
    """
    for key in ("engine", "variant", "filter"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            return f"{key} is not an object"
    engine, variant = data.get("engine") or {}, data.get("variant") or {}
    for owner, key in ((engine, "options"), (variant, "env"), (variant, "options")):
        if owner.get(key) is not None and not isinstance(owner[key], dict):
            return f"{key} is not an object"
    for owner, key in ((engine, "model_sha256"), (engine, "engine"), (engine, "engine_version"), (engine, "model")):
        if owner.get(key) is not None and not isinstance(owner[key], str):
            return f"engine {key} is not a string"
    for key in ("prompt_ids", "generated"):
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and all(_is_int(v) for v in value)):
            return f"{key} is not a list of token ids"
    for key in ("complete",):
        if key in data and not isinstance(data[key], bool):
            return f"{key} is not true or false"
    for key in ("stopped", "created_at", "logitlab_version"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"{key} is not a string"
    for key in ("estimate_bytes", "bytes_written"):
        if data.get(key) is not None and not _is_int(data[key]):
            return f"{key} is not a whole number"
    for key in ("steps", "tensors"):
        if data.get(key) is not None and not isinstance(data[key], list):
            return f"{key} is not a list"
    for step in data.get("steps") or []:
        if not isinstance(step, dict):
            return "a step is not an object"
        if not _is_int(step.get("index")) or not isinstance(step.get("kind"), str):
            return f"step {step.get('index')!r} has no whole-number index or no kind"
        if any(k in step and not _is_int(step[k]) for k in ("n_tensors", "nbytes")):
            return f"step {step['index']} n_tensors/nbytes is not a whole number"
        problem = _span_problem(step.get("positions")) or _file_problem(step.get("file"))
        if problem:
            return f"step {step['index']}: {problem}"
    for entry in data.get("tensors") or []:
        problem = _entry_problem(entry)
        if problem:
            return f"tensor entry: {problem}"
    return None


# --------------------------------------------------------------------------- safetensors
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
    if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
        return f"tensor {key!r} has shape {shape!r}"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        return f"tensor {key!r} has data_offsets {offsets!r}"
    if dtype in NP_DTYPES:
        size = np_dtype(NP_DTYPES[dtype]).itemsize
        for d in shape:
            size *= d
        if size != offsets[1] - offsets[0]:
            return f"tensor {key!r} ({dtype} {shape}) needs {size} bytes, its data_offsets span {offsets[1] - offsets[0]}"
    return None


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
