"""Shapes of raw tensors, which carry none: ``--shape`` items and a folder's ``shapes.json``.

Tensors are compared as flat vectors either way; a shape only checks sizes and
labels output (see :mod:`~logitlab.dumps.readers`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from logitlab.dumps.format import MANIFEST_NAME, format_label
from logitlab.errors import InputError

SHAPES_FILE = "shapes.json"


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


def folder_shapes(folder: Path, problems: list[str]) -> dict[str, tuple[int, ...]]:
    """The shapes a dump folder gives its raw tensors (``shapes.json``, or a ``manifest.json`` with ``"shapes"``).

    Parameters
    ----------
    folder : Path
        The dump folder.
    problems : list of str
        Gets one line if the file cannot be read or its shapes are not lists of ints (then no shapes).

    Returns
    -------
    dict of str to tuple of int
        ``name`` or ``name-layer`` -> dims; empty when the folder gives none.
    """
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
