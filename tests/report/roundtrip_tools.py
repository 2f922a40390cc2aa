"""Helpers of the round-trip tests: run the CLI, render a saved result again, check the typed object it loads."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def logitlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m logitlab ARGS`` as a user runs it, in a fresh process (stdout is not a terminal)."""
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def typed_problems(value: Any, hint: Any = Any, path: str = "result") -> list[str]:
    """Where ``value`` (a result, recursively) does not hold what its annotations say.

    Checks every dataclass field against its type hint: ``float`` fields hold
    Python floats or ints (never None, never numpy scalars), lists hold lists,
    tuples hold tuples, nested results are their dataclasses, ``X | None``
    is X or None. Returns one ``path: what`` line per mismatch.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        if dataclasses.is_dataclass(value):
            return _fields(value, path)
        return [f"{path}: numpy {type(value).__name__}"] if type(value).__module__ == "numpy" else []
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None:
            return [] if type(None) in args else [f"{path}: None"]
        problems = [typed_problems(value, a, path) for a in options]
        return [] if any(not p for p in problems) else problems[0]
    if origin is list:
        if type(value) is not list:
            return [f"{path}: {type(value).__name__}, not a list"]
        return [p for i, v in enumerate(value) for p in typed_problems(v, args[0] if args else Any, f"{path}[{i}]")]
    if origin is tuple:
        if type(value) is not tuple:
            return [f"{path}: {type(value).__name__}, not a tuple"]
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return [p for i, (v, a) in enumerate(zip(value, items)) for p in typed_problems(v, a, f"{path}[{i}]")]
    if origin is dict:
        if type(value) is not dict:
            return [f"{path}: {type(value).__name__}, not a dict"]
        return [p for k, v in value.items() for p in typed_problems(v, args[1] if args else Any, f"{path}[{k!r}]")]
    if hint is float:
        ok = type(value) in (float, int)
    elif hint in (int, str, bool):
        ok = type(value) is hint
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if type(value) is not hint:
            return [f"{path}: {type(value).__name__}, not {hint.__name__}"]
        return _fields(value, path)
    else:
        ok = isinstance(value, hint) if isinstance(hint, type) else True
    return [] if ok else [f"{path}: {type(value).__name__} {value!r}, not {getattr(hint, '__name__', hint)}"]


def _fields(obj: Any, path: str) -> list[str]:
    hints = typing.get_type_hints(type(obj))
    return [p for f in dataclasses.fields(obj) for p in typed_problems(getattr(obj, f.name), hints[f.name],
                                                                       f"{path}.{f.name}")]


def assert_round_trip(json_path: Path, markdown_path: Path, run_stdout: str | None, tmp_path: Path,
                      kind_class: type) -> Any:
    """``logitlab report JSON --markdown Z`` writes Z equal to ``markdown_path`` byte for byte, prints the same
    terminal report as the run did (``run_stdout``, when given), and the saved result loads back typed.

    Returns the loaded result.
    """
    from logitlab import report
    from logitlab.jsonio import to_jsonable

    again = tmp_path / f"{markdown_path.stem}.again.md"
    proc = logitlab("report", json_path, "--markdown", again)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert again.read_bytes() == markdown_path.read_bytes()
    if run_stdout is not None:
        assert proc.stdout == run_stdout
    data = json.loads(json_path.read_text(encoding="utf-8"))
    result = report.load_result(data)
    assert type(result) is kind_class
    assert typed_problems(result) == []
    assert to_jsonable(result.to_dict()) == data  # the JSON is a fixed point of load + save
    assert report.markdown(result) == markdown_path.read_text(encoding="utf-8")
    return result
