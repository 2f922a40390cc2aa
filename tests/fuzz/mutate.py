"""Hypothesis strategies that damage real files: byte edits, JSON edits, folder edits.

A fuzz input is a seed (a file a real tool wrote) plus a short list of edits
drawn by Hypothesis, so a failing input shrinks to the fewest, smallest edits
that still break the reader. Byte positions favour the head of a file (where
headers, magic numbers and lengths live) as much as anywhere in it.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

#: Bytes that matter to the formats read: JSON syntax, digits, signs, NUL/0xff, the .npy magic.
SPECIAL_BYTES = b'{}[]",:-+.eE0123456789\x00\xff\x7f\n \\\x93'

#: Values a JSON field may be replaced with: every JSON type, huge and non-finite numbers included
#: (Python's json reads NaN/Infinity, so readers see them).
json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.sampled_from([0, -1, 1, 2**31, 2**63, 2**64 + 1])
                | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=8) | st.sampled_from(["", "ns", "s", "F32", "BF16", "float32", "I64", "new"]))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=6), children, max_size=3), max_leaves=6)


def _position(draw: Any, size: int) -> int:
    """A byte offset in ``[0, size]``: half the time in the first 512 bytes."""
    if size == 0:
        return 0
    return draw(st.one_of(st.integers(0, min(size, 512)), st.integers(0, size)))


@st.composite
def byte_edits(draw: Any, data: bytes, max_edits: int = 4) -> bytes:
    """``data`` with 1..max_edits edits: set, flip, insert, delete, truncate, duplicate a span."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, max_edits))):
        op = draw(st.sampled_from(["set", "flip", "insert", "delete", "truncate", "duplicate", "special"]))
        at = _position(draw, len(buf))
        if op == "set" and buf:
            at = min(at, len(buf) - 1)
            buf[at] = draw(st.integers(0, 255))
        elif op == "flip" and buf:
            at = min(at, len(buf) - 1)
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "special" and buf:
            at = min(at, len(buf) - 1)
            buf[at] = draw(st.sampled_from(SPECIAL_BYTES))
        elif op == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[at:at + draw(st.integers(1, 64))]
        elif op == "truncate":
            del buf[at:]
        elif op == "duplicate" and buf:
            n = draw(st.integers(1, 64))
            buf[at:at] = buf[at:at + n]
    return bytes(buf)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) to a node of a parsed JSON document, the root included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, prefix + (i,))
    return out


def _get(node: Any, path: tuple) -> Any:
    for key in path:
        node = node[key]
    return node


@st.composite
def json_edits(draw: Any, doc: Any, max_edits: int = 3) -> Any:
    """A deep copy of the parsed JSON ``doc`` with 1..max_edits structural edits.

    Edits: replace a node by any JSON value, delete it, duplicate a list item,
    rename a key, wrap a node in a list, or nudge a number (negate, zero, x1e30,
    NaN, a numeric string).
    """
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, max_edits))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "duplicate", "rename", "wrap", "nudge"]))
        if not path:
            if op in ("replace", "wrap"):
                doc = draw(json_values) if op == "replace" else [doc]
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        value = parent[key]
        if op == "replace":
            parent[key] = draw(json_values)
        elif op == "delete":
            del parent[key]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, json.loads(json.dumps(value)))
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = parent.pop(key)
        elif op == "wrap":
            parent[key] = [value]
        elif op == "nudge" and isinstance(value, (int, float)) and not isinstance(value, bool):
            parent[key] = draw(st.sampled_from([-value, 0, value * 1e30 if math.isfinite(value) else 0.0,
                                                math.nan, str(value), int(value) if math.isfinite(value) else 1]))
    return doc


@st.composite
def json_file_edits(draw: Any, text: str) -> bytes:
    """Edited JSON text: structural edits (re-serialised, NaN allowed), sometimes then byte edits."""
    try:
        doc = json.loads(text)
    except ValueError:
        return draw(byte_edits(text.encode()))
    if draw(st.integers(0, 3)) == 0:
        return draw(byte_edits(text.encode()))
    out = json.dumps(draw(json_edits(doc)), allow_nan=True).encode()
    if draw(st.integers(0, 4)) == 0:
        out = draw(byte_edits(out, max_edits=2))
    return out


@st.composite
def jsonl_file_edits(draw: Any, text: str) -> bytes:
    """Edited JSON Lines: edit one line structurally, drop/duplicate lines, or edit bytes."""
    lines = text.splitlines()
    op = draw(st.sampled_from(["line", "drop", "duplicate", "bytes", "cut"]))
    if op == "bytes" or not lines:
        return draw(byte_edits(text.encode()))
    i = draw(st.integers(0, len(lines) - 1))
    if op == "line":
        lines[i] = draw(json_file_edits(lines[i])).decode("utf-8", "replace").replace("\n", " ")
    elif op == "drop":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "cut":  # a torn line, as a killed writer leaves it
        lines = lines[: i + 1]
        lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        return ("\n".join(lines)).encode()
    return ("\n".join(lines) + "\n").encode()


def file_edits(path: Path) -> st.SearchStrategy[bytes]:
    """Edits suited to the file: JSON-aware for .json, line-aware for .jsonl, byte edits otherwise."""
    data = path.read_bytes()
    if path.suffix == ".json":
        return json_file_edits(data.decode("utf-8", "replace"))
    if path.suffix == ".jsonl":
        return jsonl_file_edits(data.decode("utf-8", "replace"))
    return binary_edits(path)


@st.composite
def folder_edits(draw: Any, seed: Path, into: Path, max_edits: int = 2) -> Path:
    """Copy the folder ``seed`` to ``into`` and edit it: edit files, delete one, add a stray file.

    Returns ``into``.
    """
    shutil.copytree(seed, into)
    files = sorted(p for p in into.rglob("*") if p.is_file())
    for _ in range(draw(st.integers(1, max_edits))):
        op = draw(st.sampled_from(["edit", "edit", "edit", "delete", "add", "empty"]))
        files = sorted(p for p in into.rglob("*") if p.is_file())
        if op == "add" or not files:
            name = draw(st.sampled_from(["x.bin", "x.npy", "x.safetensors", "x.json", "shapes.json", ".hidden",
                                         "step-9999-decode.safetensors", "x_pos1.i32", "estimates.json"]))
            target = (draw(st.sampled_from(files)).parent if files else into) / name
            source = draw(st.sampled_from(files)) if files and draw(st.booleans()) else None
            target.write_bytes(draw(file_edits(source)) if source else draw(st.binary(max_size=64)))
            continue
        target = draw(st.sampled_from(files))
        if op == "edit":
            target.write_bytes(draw(file_edits(target)))
        elif op == "delete":
            target.unlink()
        elif op == "empty":
            target.write_bytes(b"")
    return into


@st.composite
def safetensors_edits(draw: Any, data: bytes) -> bytes:
    """A safetensors file with its JSON header edited (length prefix recomputed, or kept stale), or byte edits."""
    import struct

    if len(data) < 8 or draw(st.integers(0, 3)) == 0:
        return draw(byte_edits(data))
    (length,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + length])
    except ValueError:
        return draw(byte_edits(data))
    text = json.dumps(draw(json_edits(header)), allow_nan=True).encode()
    prefix = struct.pack("<Q", length if draw(st.integers(0, 5)) == 0 else len(text))
    body = data[8 + length:]
    if draw(st.integers(0, 3)) == 0:
        body = body[: draw(st.integers(0, len(body)))]
    return prefix + text + body


NPY_HEADER_VALUES = {
    "descr": ["'<f4'", "'<f2'", "'<f8'", "'>f4'", "'<i4'", "'|u1'", "'<c8'", "'O'", "'V4'", "'<U3'", "[('a', '<f4')]",
              "'<f4", "None", "'bfloat16'"],
    "fortran_order": ["True", "False", "1", "None"],
    "shape": ["()", "(0,)", "(1,)", "(1, 49152)", "(49152,)", "(2, 49152)", "(1, 1, 49152)", "(-1, 49152)",
              "(10**12, 10**12)", "(4, 4)", "(16,)", "(1.5,)", "'x'", "(4, 4, 0)"],
}


@st.composite
def npy_edits(draw: Any, data: bytes) -> bytes:
    """An .npy file with one header field rewritten (descr, fortran_order, shape), or byte edits."""
    import re

    if not data.startswith(b"\x93NUMPY") or draw(st.integers(0, 3)) == 0:
        return draw(byte_edits(data))
    header_len = int.from_bytes(data[8:10], "little")
    header = data[10:10 + header_len].decode("latin-1")
    key = draw(st.sampled_from(sorted(NPY_HEADER_VALUES)))
    value = draw(st.sampled_from(NPY_HEADER_VALUES[key]))
    header = re.sub(rf"'{key}': (\([^)]*\)|'[^']*'|\w+)", f"'{key}': {value}", header)
    encoded = header.encode("latin-1")
    return data[:8] + len(encoded).to_bytes(2, "little") + encoded + data[10 + header_len:]


def binary_edits(path: Path) -> st.SearchStrategy[bytes]:
    """Format-aware edits of a binary file: safetensors header edits, .npy header edits, else byte edits."""
    data = path.read_bytes()
    if path.suffix == ".safetensors":
        return safetensors_edits(data)
    if path.suffix == ".npy":
        return npy_edits(data)
    return byte_edits(data)
