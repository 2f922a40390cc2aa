"""Byte counts: ``--max-bytes`` values parsed (``500MB``, ``2GiB``), sizes shown (``1.2 GB``)."""

from __future__ import annotations

import re

from logitlab.errors import InputError

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
