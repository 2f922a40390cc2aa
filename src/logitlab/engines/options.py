"""Converters for engine options given as command-line strings (``KEY=VALUE``).

Each raises ValueError with a short reason; ``Engine.validate_options`` turns
that into an InputError naming the option.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


def to_bool(value: Any) -> bool:
    """``1/0``, ``true/false``, ``on/off``, ``yes/no`` (any case) → bool."""
    text = str(value).strip().lower()
    if text in ("1", "true", "on", "yes"):
        return True
    if text in ("0", "false", "off", "no"):
        return False
    raise ValueError("expected 1/0, true/false, on/off")


def positive_int(value: Any) -> int:
    """An integer ≥ 1."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError("expected an integer >= 1") from None
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def positive_float(value: Any) -> float:
    """A number > 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number > 0") from None
    if not number > 0:
        raise ValueError("must be > 0")
    return number


def choice(valid: Sequence[Any], kind: Callable[[str], Any] = str) -> Callable[[Any], Any]:
    """A converter to one of ``valid``: the value's text, stripped and lower-cased, as ``kind`` (``str``, ``int``).

    The converter raises ValueError listing the valid values for anything else.
    """
    def convert(value: Any) -> Any:
        text = str(value).strip().lower()
        try:
            item = kind(text)
        except ValueError:
            item = None
        if item not in valid:
            raise ValueError(f"valid: {', '.join(str(v) for v in valid)}")
        return item

    return convert
