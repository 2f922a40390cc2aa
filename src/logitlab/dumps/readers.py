"""Open a dump, whoever made it, as a list of tensors addressed by
``(name, layer, instance, position)``.

Accepted inputs (``open_dump(path, format=...)``):

- a **logitlab dump** folder (``manifest.json`` with ``"format":
  "logitlab-dump"``, one safetensors file per step; a folder whose
  ``manifest.json`` is not valid JSON but names that format or sits among
  ``step-*.safetensors`` files is one too, reported as unreadable);
- a **folder of raw files** as the dump-diff protocol of the first seed report
  writes them: ``<prefix>_<name>-<layer>_pos<pos>.bin`` (little-endian
  float32) or ``.i32`` (little-endian int32); ``-<layer>`` and ``_pos<pos>``
  may be missing;
- ``.npy`` and ``.safetensors`` files, alone or in a folder (a safetensors key
  or an ``.npy`` file name follows the same ``<name>-<layer>_pos<pos>``
  grammar).

Raw files carry no shape: it comes from a ``shapes.json`` (or a
``manifest.json`` with a ``"shapes"`` object) in the folder, mapping
``name`` or ``name-layer`` to a list of dims; else from ``--shape``
(:class:`ShapeSpec`); else the tensor is a flat vector. Tensors are compared
as flat vectors either way; the shape only checks sizes and labels output.

**The prefix.** ``<prefix>_`` is not part of the tensor name, but names
contain underscores too (``attn_norm``). Unless given, the prefix of a folder
is the longest common prefix of its file names cut at an underscore, then
shortened one ``_``-separated part at a time while that makes more names
known llama.cpp names (``result_output``, not ``output``).

**Order.** A logitlab dump knows the execution order. Raw folders do not: they
are walked layer by layer, within a layer in llama.cpp's op order for known
names (then by name), then by position — a causally minimal order, so the
first divergence found is one no earlier tensor can explain.

Problems with single files (unreadable, truncated, a size that does not fit
the shape, a name that does not parse) do not raise: each becomes one line in
``Dump.problems`` and the rest of the dump stays usable.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.dumps.format import (
    MANIFEST_NAME,
    NP_DTYPES,
    UNFINISHED_SUFFIXES,
    DumpManifest,
    claims_logitlab_dump,
    format_label,
    is_logitlab_dump,
    load_npy,
    np_dtype,
    read_manifest,
    SafetensorsFiles,
    read_safetensors_header,
)
from logitlab.errors import InputError

FORMATS = ("auto", "logitlab", "raw-f32", "raw-i32", "npy", "safetensors")
RAW_EXTENSIONS = {".bin": "float32", ".f32": "float32", ".i32": "int32"}
SHAPES_FILE = "shapes.json"

#: Names llama.cpp's graph builders give tensors, in the order a layer computes them.
LLAMACPP_NAMES = (
    "inp_embd", "embd", "inp_scaled", "inp_pos", "inp_out_ids",
    "norm", "attn_norm", "wqkv", "bqkv", "Qcur", "Kcur", "Vcur", "Qcur_normed", "Kcur_normed",
    "q", "k", "v", "kq", "kq_scaled", "kq_masked", "kq_soft_max", "kq_soft_max_ext", "__fattn__", "fattn",
    "kqv", "kqv_merged", "kqv_merged_cont", "kqv_out", "kqv_wo", "attn_out", "attn_post_norm", "sa_out",
    "ffn_inp", "ffn_norm", "ffn_up", "ffn_up_b", "ffn_gate", "ffn_gate_b", "ffn_gate_par", "ffn_act",
    "ffn_silu", "ffn_gelu", "ffn_relu", "ffn_swiglu", "ffn_geglu", "ffn_down", "ffn_out", "ffn_post_norm",
    "ffn_moe_logits", "ffn_moe_probs", "ffn_moe_topk", "ffn_moe_weights", "ffn_moe_out", "ffn_shexp",
    "l_out", "result_norm", "result_output",
)
_RANK = {name: i for i, name in enumerate(LLAMACPP_NAMES)}
_BEFORE_LAYERS = {"inp_embd", "embd", "inp_scaled", "inp_pos", "inp_out_ids"}
#: Sort key of a layer: tensors before the layers first, then 0, 1, ..., then the output.
LAYER_BEFORE, LAYER_AFTER = -1, 1 << 30
_POS = re.compile(r"^(?P<stem>.+?)_pos(?P<pos>\d+)$")
_LAYER = re.compile(r"^(?P<pn>.+?)-(?P<layer>\d+)(?:#(?P<inst>\d+))?$")


def layer_sort_key(name: str, layer: int | None) -> int:
    """Where a tensor's layer sorts: before all layers, its layer, or after them."""
    if layer is not None:
        return layer
    return LAYER_BEFORE if name in _BEFORE_LAYERS or name.startswith("inp_") else LAYER_AFTER


def name_rank(name: str) -> int:
    """Position of ``name`` in llama.cpp's op order within a layer (unknown names last)."""
    return _RANK.get(name, len(_RANK))


# --------------------------------------------------------------------------- shapes
@dataclass(frozen=True)
class ShapeSpec:
    """Shapes for raw tensors: one for all, or per ``name`` / ``name-layer``.

    Parsed from ``--shape`` items: ``576``, ``9x64``, ``attn_norm=576``,
    ``result_output-0=49152``.
    """

    default: tuple[int, ...] | None = None
    by_name: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @staticmethod
    def _dims(text: str, item: str) -> tuple[int, ...]:
        try:
            dims = tuple(int(d) for d in re.split(r"[x,×*]", text.strip()) if d.strip())
        except ValueError:
            dims = ()
        if not dims or any(d < 1 for d in dims):
            raise InputError(f"bad --shape {item!r}: expected DIMS like 576 or 9x64, optionally NAME=DIMS")
        return dims

    @classmethod
    def parse(cls, items: Sequence[str] | None) -> "ShapeSpec":
        """Build from ``--shape`` items.

        Raises:
            InputError: an item that is not ``DIMS`` or ``NAME=DIMS``, or two default shapes.
        """
        default, by_name = None, {}
        for item in items or ():
            name, sep, dims = item.rpartition("=")
            if sep:
                by_name[name.strip()] = cls._dims(dims, item)
            elif default is not None:
                raise InputError(f"--shape {item!r}: a shape for all tensors was already given; "
                                 "use NAME=DIMS for per-tensor shapes")
            else:
                default = cls._dims(dims, item)
        return cls(default, by_name)

    def merged(self, other: dict[str, tuple[int, ...]]) -> "ShapeSpec":
        """This spec with ``other`` (from a shapes file) underneath it."""
        return ShapeSpec(self.default, {**other, **self.by_name})

    def lookup(self, name: str, layer: int | None) -> tuple[int, ...] | None:
        label = format_label(name, layer)
        return self.by_name.get(label) or self.by_name.get(name) or self.default


# --------------------------------------------------------------------------- tensors
@dataclass
class TensorRef:
    """One tensor at one position (or one position span) of a dump.

    Attributes:
        name, layer, instance, position: the alignment key (``position`` None
            for a tensor that is not split by position; then ``span``, the
            positions it covers, if known, is part of the key).
        order: sort key giving the execution order within its dump.
        dtype: numpy dtype name.
        shape: shape of the loaded array (None: not known until loaded).
        source: file (and key) it comes from, for messages.
        defect: why it cannot be compared (truncated, mis-sized...), or None.
    """

    name: str
    layer: int | None
    instance: int
    position: int | None
    span: tuple[int, int] | None
    order: tuple
    dtype: str
    shape: tuple[int, ...] | None
    source: str
    loader: Callable[[], np.ndarray] = field(repr=False, default=None)  # type: ignore[assignment]
    defect: str | None = None

    @property
    def key(self) -> tuple:
        where = self.position if self.position is not None else self.span
        return (self.name, self.layer, self.instance, where)

    @property
    def positions(self) -> range:
        """The token positions this tensor covers (empty when not known)."""
        if self.position is not None:
            return range(self.position, self.position + 1)
        return range(*self.span) if self.span is not None else range(0)

    @property
    def label(self) -> str:
        text = format_label(self.name, self.layer, self.instance, self.position)
        if self.position is None and self.span is not None:
            text += f"@pos{self.span[0]}-{self.span[1] - 1}"
        return text

    def load(self) -> np.ndarray:
        """The tensor's data (an array the caller may keep).

        Raises:
            InputError: the file cannot be read or is not what the index says.
        """
        return self.loader()


@dataclass
class Dump:
    """An opened dump: its tensors in execution order, and what was wrong with it.

    Attributes:
        path: what was opened.
        kind: ``logitlab``, ``raw-f32``, ``raw-i32``, ``npy``, ``safetensors`` or ``mixed``.
        refs: tensors, sorted by ``order``.
        problems: one line per problem found while opening.
        manifest: the logitlab manifest, if any.
    """

    path: str
    kind: str
    refs: list[TensorRef] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    manifest: DumpManifest | None = None

    def describe(self) -> dict[str, Any]:
        """Path, kind, tensor count and, for logitlab dumps, the engine, variant and inputs."""
        info: dict[str, Any] = {"path": self.path, "kind": self.kind, "n_tensors": len(self.refs)}
        if self.manifest is not None:
            m = self.manifest
            info.update({
                "engine": m.engine.get("engine"), "engine_version": m.engine.get("engine_version"),
                "model": m.engine.get("model"), "model_sha256": m.engine.get("model_sha256"),
                "variant": m.variant, "options": m.engine.get("options", {}),
                "n_prompt": len(m.prompt_ids), "n_generated": len(m.generated),
                "input_ids": m.input_ids, "complete": m.complete, "stopped": m.stopped,
            })
        return info


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


# --------------------------------------------------------------------------- entry point
def open_dump(path: str | Path, *, format: str = "auto", shapes: ShapeSpec | None = None,
              prefix: str | None = None) -> Dump:
    """Open a dump folder or file; problems are collected, not raised.

    Parameters
    ----------
    path : str or Path
        A logitlab dump folder, a folder of raw/.npy/.safetensors files, or
        one such file.
    format : str
        One of ``FORMATS``. ``auto`` tells by the manifest and file
        extensions; ``raw-f32``/``raw-i32`` read every non-JSON file of the
        folder as that dtype, whatever its extension.
    shapes : ShapeSpec, optional
        Shapes for raw files (overrides the folder's shapes file).
    prefix : str, optional
        File-name prefix to strip before ``<name>`` (default: inferred).

    Returns
    -------
    Dump
        With ``problems`` naming every file that could not be indexed; an
        unknown format or a bad ``path`` gives a Dump with no tensors and
        one problem.
    """
    if format not in FORMATS:
        raise InputError(f"unknown dump format {format!r}; valid formats: {', '.join(FORMATS)}")
    shapes = shapes or ShapeSpec()
    p = Path(path)
    if not p.exists():
        return Dump(str(path), "missing", problems=[f"{path}: no such file or folder"])
    if p.is_dir() and format in ("auto", "logitlab") and claims_logitlab_dump(p):
        return _open_logitlab(p)
    if format == "logitlab":
        return Dump(str(path), "logitlab", problems=[f"{path}: not a logitlab dump (no {MANIFEST_NAME} with "
                                                    "\"format\": \"logitlab-dump\"); try --format auto"])
    files = sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
    files = [f for f in files if not f.name.startswith(".") and f.suffix.lower() != ".json"
             and not f.name.endswith(UNFINISHED_SUFFIXES)]
    dump = Dump(str(path), format)
    if p.is_dir():
        shapes = shapes.merged(_folder_shapes(p, dump.problems))
    if not files:
        dump.problems.append(f"{path}: empty folder (no dump files)" if p.is_dir() else _not_a_dump_file(p))
        return dump
    raw_dtype = {"raw-f32": "float32", "raw-i32": "int32"}.get(format)
    kinds: set[str] = set()
    plain: list[tuple[Path, str]] = []  # raw and .npy files: named by file name
    for f in files:
        ext = f.suffix.lower()
        if raw_dtype is not None:
            plain.append((f, raw_dtype))
            kinds.add(format)
        elif ext in RAW_EXTENSIONS and format in ("auto",):
            plain.append((f, RAW_EXTENSIONS[ext]))
            kinds.add("raw-f32" if RAW_EXTENSIONS[ext] == "float32" else "raw-i32")
        elif ext == ".npy" and format in ("auto", "npy"):
            plain.append((f, "npy"))
            kinds.add("npy")
        elif ext == ".safetensors" and format in ("auto", "safetensors"):
            _index_safetensors(f, dump, shapes)
            kinds.add("safetensors")
        else:
            want = {"auto": ".bin, .f32, .i32, .npy or .safetensors", "npy": ".npy",
                    "safetensors": ".safetensors"}[format]
            dump.problems.append(f"{f}: skipped, not a {want} file")
    if plain:
        _index_plain(plain, dump, shapes, prefix)
    dump.kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else format)
    dump.refs.sort(key=lambda r: r.order)
    if not dump.refs and not any("no tensors" in line for line in dump.problems):
        dump.problems.append(f"{path}: no tensors could be read")
    return dump


def _not_a_dump_file(p: Path) -> str:
    """Why a single file that is not read as tensors (a .json, a hidden or .part file) is no dump."""
    try:
        size = p.stat().st_size
    except OSError as exc:
        return f"{p}: cannot read ({exc.strerror})"
    if size == 0:
        return f"{p}: empty file, not a dump"
    if p.suffix.lower() == ".json":
        if p.name == MANIFEST_NAME and is_logitlab_dump(p.parent):
            return f"{p}: a dump's manifest; give its folder, {p.parent}"
        return (f"{p}: a JSON file, not a dump: give a dump folder, or a .bin/.f32/.i32/.npy/.safetensors "
                "file")
    if p.name.endswith(UNFINISHED_SUFFIXES):
        return f"{p}: an unfinished step file ({p.suffix}) of a capture that did not end, not a dump"
    return f"{p}: a hidden file, not read as a dump"


# --------------------------------------------------------------------------- logitlab
def _open_logitlab(folder: Path) -> Dump:
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


# --------------------------------------------------------------------------- raw, npy, safetensors
def _folder_shapes(folder: Path, problems: list[str]) -> dict[str, tuple[int, ...]]:
    for name in (SHAPES_FILE, MANIFEST_NAME):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: cannot read shapes ({exc}); shapes ignored")
            return {}
        shapes = data.get("shapes", data if name == SHAPES_FILE else None) if isinstance(data, dict) else None
        if shapes is None:
            continue
        try:
            return {str(k): tuple(int(d) for d in v) for k, v in shapes.items()}
        except (TypeError, ValueError, AttributeError, OverflowError):
            problems.append(f"{path}: \"shapes\" must map names to lists of ints; shapes ignored")
            return {}
    return {}


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
    """The file-name prefix to strip from ``prefix+name`` stems (see the module docstring).

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
        known = sum(s[len(prefix):] in _RANK for s in stems)
        return known, (-len(prefix) if known else len(prefix))

    return max(candidates, key=score)


def _index_plain(files: list[tuple[Path, str]], dump: Dump, shapes: ShapeSpec, prefix: str | None) -> None:
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
        order = (layer_sort_key(name, layer), name_rank(name), name, instance,
                 position if position is not None else -1)
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


def _index_safetensors(f: Path, dump: Dump, shapes: ShapeSpec) -> None:
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
        order = (layer_sort_key(name, layer), name_rank(name), name, instance,
                 position if position is not None else -1)
        defect = None
        if data_start + info.get("data_offsets", [0, 0])[1] > size:
            defect = f"{f}:{key}: truncated (the file ends before the tensor's data)"
        dump.refs.append(TensorRef(
            name, layer, instance, position, None, order, dtype, shape, f"{f}:{key}",
            lambda key=key: files.get(f, key), defect))
        if defect:
            dump.problems.append(defect)


__all__ = ["FORMATS", "Dump", "ShapeSpec", "TensorRef", "infer_prefix", "layer_sort_key", "name_rank",
           "open_dump", "np_dtype"]
