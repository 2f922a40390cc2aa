"""The manifest of a logitlab dump (``manifest.json``): its entries, reading and checking it, writing it.

The fields are described in :mod:`~logitlab.dumps.format`. A manifest is
checked (:func:`manifest_problem`) before it is used, so a damaged one is one
clear :class:`~logitlab.errors.InputError`, not an exception deep inside a
reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from logitlab.dumps.format import FORMAT_NAME, MANIFEST_NAME, SCHEMA_VERSION, ST_DTYPES, is_int, np_dtype
from logitlab.dumps.step_writer import write_error
from logitlab.errors import InputError


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


def _span_problem(value: Any) -> str | None:
    if not (isinstance(value, list) and len(value) == 2 and all(is_int(v) for v in value)
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
    if not (isinstance(shape, list) and all(is_int(d) and d >= 0 for d in shape)):
        return f"shape {shape!r} of {t['key']!r} is not a list of sizes"
    if t["dtype"] not in ST_DTYPES:
        return f"dtype {t['dtype']!r} of {t['key']!r} is not one of {', '.join(ST_DTYPES)}"
    for key, optional in (("layer", True), ("instance", True), ("order", False), ("step", True)):
        value = t.get(key)
        if not (is_int(value) or optional and value is None and (key == "layer" or key not in t)):
            return f"{key} {value!r} of {t['key']!r} is not a whole number"
    if not isinstance(t.get("op", ""), str):
        return f"op of {t['key']!r} is not a string"
    span = _span_problem(t.get("positions"))
    if span:
        return f"{span} ({t['key']!r})"
    axis = t.get("token_axis")
    if axis is not None:
        start, stop = t["positions"]
        if not (is_int(axis) and 0 <= axis < len(shape) and shape[axis] == stop - start):
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
        if value is not None and not (isinstance(value, list) and all(is_int(v) for v in value)):
            return f"{key} is not a list of token ids"
    for key in ("complete",):
        if key in data and not isinstance(data[key], bool):
            return f"{key} is not true or false"
    for key in ("stopped", "created_at", "logitlab_version"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"{key} is not a string"
    for key in ("estimate_bytes", "bytes_written"):
        if data.get(key) is not None and not is_int(data[key]):
            return f"{key} is not a whole number"
    for key in ("steps", "tensors"):
        if data.get(key) is not None and not isinstance(data[key], list):
            return f"{key} is not a list"
    for step in data.get("steps") or []:
        if not isinstance(step, dict):
            return "a step is not an object"
        if not is_int(step.get("index")) or not isinstance(step.get("kind"), str):
            return f"step {step.get('index')!r} has no whole-number index or no kind"
        if any(k in step and not is_int(step[k]) for k in ("n_tensors", "nbytes")):
            return f"step {step['index']} n_tensors/nbytes is not a whole number"
        problem = _span_problem(step.get("positions")) or _file_problem(step.get("file"))
        if problem:
            return f"step {step['index']}: {problem}"
    for entry in data.get("tensors") or []:
        problem = _entry_problem(entry)
        if problem:
            return f"tensor entry: {problem}"
    return None
