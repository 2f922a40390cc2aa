"""Option types of the sequential runs: ``--repeats auto`` / ``--blocks auto`` and ``--max-time 10m``."""

from __future__ import annotations

import math
import re
from typing import Any

import click

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


class CountOrAuto(click.ParamType):
    """A positive number of blocks, or ``auto`` (the sequential rule decides when to stop)."""

    name = "N|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        if isinstance(value, int) or value == "auto":
            return value
        try:
            return int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number of blocks nor 'auto'", param, ctx)


class Duration(click.ParamType):
    """A duration in seconds: ``90``, ``90s``, ``10m``, ``1.5h``."""

    name = "DURATION"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h)?\s*", str(value))
        if not match:
            self.fail(f"{value!r} is not a duration: use e.g. 90s, 10m or 1.5h", param, ctx)
        seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive duration", param, ctx)
        return seconds
