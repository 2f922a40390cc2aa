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

The readers themselves: :mod:`~logitlab.dumps.read_logitlab` (logitlab dump
folders) and :mod:`~logitlab.dumps.read_files` (raw, ``.npy`` and
``.safetensors`` files); what they build, :mod:`~logitlab.dumps.dump`.
"""

from __future__ import annotations

from pathlib import Path

from logitlab.dumps.dump import Dump
from logitlab.dumps.format import MANIFEST_NAME
from logitlab.dumps.manifest import claims_logitlab_dump, is_logitlab_dump
from logitlab.dumps.read_files import index_plain, index_safetensors
from logitlab.dumps.read_logitlab import open_logitlab
from logitlab.dumps.shapes import ShapeSpec, folder_shapes
from logitlab.dumps.step_writer import UNFINISHED_SUFFIXES
from logitlab.errors import InputError

FORMATS = ("auto", "logitlab", "raw-f32", "raw-i32", "npy", "safetensors")
RAW_EXTENSIONS = {".bin": "float32", ".f32": "float32", ".i32": "int32"}


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
        return open_logitlab(p)
    if format == "logitlab":
        return Dump(str(path), "logitlab", problems=[f"{path}: not a logitlab dump (no {MANIFEST_NAME} with "
                                                    "\"format\": \"logitlab-dump\"); try --format auto"])
    files = sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
    files = [f for f in files if not f.name.startswith(".") and f.suffix.lower() != ".json"
             and not f.name.endswith(UNFINISHED_SUFFIXES)]
    dump = Dump(str(path), format)
    if p.is_dir():
        shapes = shapes.merged(folder_shapes(p, dump.problems))
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
            index_safetensors(f, dump, shapes)
            kinds.add("safetensors")
        else:
            want = {"auto": ".bin, .f32, .i32, .npy or .safetensors", "npy": ".npy",
                    "safetensors": ".safetensors"}[format]
            dump.problems.append(f"{f}: skipped, not a {want} file")
    if plain:
        index_plain(plain, dump, shapes, prefix)
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


__all__ = ["FORMATS", "open_dump"]
