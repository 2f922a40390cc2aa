"""The common shape every benchmark-file reader returns.

A :class:`BenchmarkFile` is a set of named :class:`Scenario` objects; each
scenario holds the raw samples the tool recorded (when it recorded them) or
only a summary statistic (when that is all the file has), and says which.

Nothing here prints or logs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from logitlab.errors import InputError
from logitlab.jsonio import json_error_text

__all__ = ["Scenario", "BenchmarkFile", "TIME_UNITS", "load_json_text", "positive_values", "mapping", "items",
           "number", "integer"]

#: Seconds per time unit, for the units benchmark tools write.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class Scenario:
    """One benchmark of one run of a tool.

    Attributes
    ----------
    name : str
        The tool's name for it (Google Benchmark ``name``, criterion
        ``full_id``, pytest-benchmark ``fullname``, hyperfine ``command``...).
    unit : str
        ``'s'`` for times (always converted to seconds), else the tool's unit
        (``'tokens/s'`` for llama-bench).
    higher_is_better : bool
        False for times, True for throughputs.
    samples : tuple of float
        Raw per-sample values in ``unit`` (Google Benchmark repetitions,
        criterion per-iteration sample times, pytest-benchmark rounds, pyperf
        values, hyperfine runs, llama-bench repetitions); empty when the file
        holds only a summary.
    summary : float
        The value shown for this scenario: the geometric mean of ``samples``,
        or the tool's summary statistic named in ``statistic``.
    statistic : str
        How ``summary`` was obtained, e.g. ``'geometric mean of 20 samples'``
        or ``'median (summary only: no samples in the file)'``.
    groups : tuple of float or None
        Per sample, the start time (Unix seconds) of the run (process) it came
        from, where the tool records it (pyperf); None otherwise. Used to
        detect base and candidate runs that were interleaved in time.
    note : str
        Anything the reader had to drop or assume (e.g. failed runs).
    """

    name: str
    unit: str
    higher_is_better: bool
    samples: tuple[float, ...]
    summary: float
    statistic: str
    groups: tuple[float, ...] | None = None
    note: str = ""

    @property
    def has_samples(self) -> bool:
        return len(self.samples) > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "n_samples": len(self.samples),
            "summary": self.summary,
            "statistic": self.statistic,
            "note": self.note,
        }


@dataclass(frozen=True)
class BenchmarkFile:
    """What one benchmark file (or criterion folder) holds.

    Attributes
    ----------
    path : str
    format : str
        One of :data:`logitlab.perf.readers.FORMATS`.
    scenarios : dict of str to Scenario
        In file order.
    context : dict
        Host and run information the file carries (CPU, load, tool version),
        for the report; may be empty.
    time : {'real', 'cpu'}
        The clock of the times read: wall-clock (``real``) or CPU time.
    """

    path: str
    format: str
    scenarios: dict[str, Scenario]
    context: dict[str, Any] = field(default_factory=dict)
    time: str = "real"


def load_json_text(path: str | Path, text: str | None = None) -> Any:
    """Parse a JSON file, naming the file on failure.

    Raises
    ------
    InputError
        If the file is empty or not valid JSON.
    """
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}): give the JSON file the "
                             "benchmark tool wrote") from None
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise InputError(f"{path} is empty: give the JSON file the benchmark tool wrote")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON ({json_error_text(exc)}): give the file the tool wrote") \
            from None
    except RecursionError:
        raise InputError(f"{path} nests JSON arrays or objects too deeply to read: not a benchmark tool's file") \
            from None


def _container(value: Any, path: str | Path, what: str, optional: bool, kind: type, name: str) -> Any:
    """``value`` if it is a ``kind`` (JSON ``name``); an empty one for a missing (None) value when ``optional``."""
    if value is None and optional:
        return kind()
    if not isinstance(value, kind):
        raise InputError(f"{path}: {what} is {_kind(value)}, not a JSON {name}")
    return value


def mapping(value: Any, path: str | Path, what: str, *, optional: bool = True) -> dict:
    """``value`` if it is a JSON object; ``{}`` for a missing (None) one when ``optional``.

    Raises
    ------
    InputError
        Naming the file and the field, when ``value`` is something else.
    """
    return _container(value, path, what, optional, dict, "object")


def items(value: Any, path: str | Path, what: str, *, optional: bool = True) -> list:
    """``value`` if it is a JSON array; ``[]`` for a missing (None) one when ``optional``.

    Raises
    ------
    InputError
        As for :func:`mapping`.
    """
    return _container(value, path, what, optional, list, "array")


def number(value: Any, path: str | Path, what: str) -> float:
    """``value`` as a float, if it is a JSON number (not a boolean, not beyond a float's range).

    Raises
    ------
    InputError
        Naming the file and the field.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{path}: {what} is {_kind(value)}, not a number")
    try:
        return float(value)
    except OverflowError:
        raise InputError(f"{path}: {what} is {str(value)[:20]}..., beyond a float's range") from None


def integer(value: Any, path: str | Path, what: str) -> int:
    """``value`` as an int, if it is a whole JSON number (``4`` or ``4.0``).

    Raises
    ------
    InputError
        Naming the file and the field.
    """
    x = number(value, path, what)
    if not math.isfinite(x) or x != int(x):
        raise InputError(f"{path}: {what} is {value!r}, not a whole number")
    return int(x)


def _kind(value: Any) -> str:
    """``a string ('abc')``, ``null``, ``an array``... for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return f"a string ({value[:20]!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return repr(value)[:20]


def positive_values(values: Iterable[Any], *, path: str, name: str, what: str = "sample") -> tuple[float, ...]:
    """Floats, each finite and > 0, or an InputError naming the file, scenario and value."""
    out = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{path}: scenario {name!r} {what} {i} is {_kind(value)}, not a number")
        try:
            x = float(value)
        except OverflowError:
            x = math.inf
        if not math.isfinite(x) or x <= 0.0:
            raise InputError(
                f"{path}: scenario {name!r} {what} {i} is {str(value)[:24]}: times and rates must be positive and "
                "finite"
            )
        out.append(x)
    return tuple(out)


def make_scenario(
    *,
    path: str,
    name: str,
    unit: str,
    higher_is_better: bool,
    samples: Sequence[Any] = (),
    summary: Any = None,
    summary_statistic: str = "mean",
    groups: Sequence[float] | None = None,
    note: str = "",
) -> Scenario:
    """Build a validated :class:`Scenario` from samples, or from a summary alone.

    Raises
    ------
    InputError
        If a value is not positive and finite, or there is neither a sample
        nor a summary.
    """
    if isinstance(samples, (str, bytes, dict)) or not isinstance(samples, (list, tuple, np.ndarray)):
        raise InputError(f"{path}: scenario {name!r} samples are {_kind(samples)}, not an array of numbers")
    clean = positive_values(samples, path=path, name=name)
    if clean:
        summary_value = float(np.exp(np.mean(np.log(clean))))
        statistic = f"geometric mean of {len(clean)} sample{'s' if len(clean) != 1 else ''}"
    elif summary is not None:
        summary_value = positive_values([summary], path=path, name=name, what=summary_statistic)[0]
        statistic = f"{summary_statistic} (summary only: no samples in the file, so no CI)"
    else:
        raise InputError(f"{path}: scenario {name!r} has neither samples nor a summary value")
    return Scenario(
        name=name,
        unit=unit,
        higher_is_better=higher_is_better,
        samples=clean,
        summary=summary_value,
        statistic=statistic,
        groups=tuple(groups) if groups is not None and clean else None,
        note=note,
    )


def require_scenarios(path: str, fmt: str, scenarios: Mapping[str, Scenario]) -> dict[str, Scenario]:
    if not scenarios:
        raise InputError(f"{path} ({fmt}) holds no benchmark results: was the run empty or filtered out?")
    return dict(scenarios)
