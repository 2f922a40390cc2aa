"""The floating-point dtypes logits come in, with bfloat16 loaded only when one is met.

``ml_dtypes`` (numpy's bfloat16) takes about 0.6 s to import here (its extension registers its dtypes and
casts), more than the rest of a command's start-up; every CLI command and engine worker imported it. An array
of bfloat16 can only exist once ``ml_dtypes`` is imported (by whoever made it), so the tables below add their
bfloat16 entry on the first lookup of a dtype named ``bfloat16``, and a comparison of float32 logits never
loads it.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["bfloat16", "as_dtype", "DtypeTable"]


@functools.cache
def bfloat16() -> np.dtype:
    """``ml_dtypes.bfloat16`` as a numpy dtype (imports ml_dtypes on the first call)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def as_dtype(value: Any) -> np.dtype:
    """``np.dtype(value)``, where the name ``"bfloat16"`` also works before ml_dtypes is imported.

    Raises:
        TypeError: as ``np.dtype`` for an unknown name.
    """
    return bfloat16() if isinstance(value, str) and value == "bfloat16" else np.dtype(value)


class DtypeTable(dict):
    """A dict keyed by numpy dtype whose bfloat16 entry (``bfloat16_value``) is added on the first lookup of a
    key named ``bfloat16`` (``in``, ``[]``, ``get``)."""

    def __init__(self, entries: dict, bfloat16_value: Any) -> None:
        super().__init__(entries)
        self._pending = bfloat16_value

    def _load(self, key: Any) -> None:
        if self._pending is not None and getattr(key, "name", key) == "bfloat16":
            self[bfloat16()], self._pending = self._pending, None

    def __contains__(self, key: object) -> bool:
        self._load(key)
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        self._load(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._load(key)
        return super().get(key, default)
