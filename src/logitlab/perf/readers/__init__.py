"""Readers for the files benchmark tools write, behind one entry point.

>>> from logitlab.perf.readers import read_benchmark_file      # doctest: +SKIP
>>> bench = read_benchmark_file("base.json")                  # doctest: +SKIP
>>> bench.format, list(bench.scenarios)[:2]                    # doctest: +SKIP

Formats: Google Benchmark JSON (``gbench``), criterion.rs folders
(``criterion``), pytest-benchmark JSON, pyperf JSON (``.json.gz`` too),
hyperfine ``--export-json``, llama-bench JSON/JSONL. Every reader returns a
:class:`BenchmarkFile` whose scenarios carry raw samples where the file has
them, else one summary statistic that is named.

Nothing here prints or logs.
"""

from __future__ import annotations

import dataclasses

import gzip
import zlib
from pathlib import Path

from logitlab.errors import InputError
from logitlab.perf.readers import criterion, gbench, hyperfine, llama_bench, pyperf, pytest_benchmark
from logitlab.perf.readers.base import BenchmarkFile, Scenario, load_json_text

__all__ = ["FORMATS", "BenchmarkFile", "Scenario", "detect_format", "read_benchmark_file"]

#: Format names accepted by ``--format`` and returned by :func:`detect_format`.
FORMATS = ("gbench", "criterion", "pytest-benchmark", "pyperf", "hyperfine", "llama-bench")

_JSON_READERS = (  # order matters: pytest-benchmark and pyperf also have a 'benchmarks' list
    (pytest_benchmark.FORMAT, pytest_benchmark),
    (gbench.FORMAT, gbench),
    (pyperf.FORMAT, pyperf),
    (hyperfine.FORMAT, hyperfine),
    (llama_bench.FORMAT, llama_bench),
)


def _load(path: Path) -> tuple[str | None, object]:
    """(format, parsed data) of a file; format None if unrecognised."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path} looks gzipped but cannot be read ({exc})") from None
    text = raw.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise InputError(f"{path} is empty: give the file the benchmark tool wrote")
    try:
        data = load_json_text(path, text)
    except InputError:
        rows = llama_bench.parse_jsonl(str(path), text)
        if rows is not None:
            return llama_bench.FORMAT, rows
        raise
    for name, module in _JSON_READERS:
        if module.looks_like(data):
            return name, data
    return None, data


def _unknown(path: Path, data: object) -> InputError:
    """The error for a file of no known format; a logitlab result (``kind`` + ``schema_version``) is named as one."""
    known = f"expected one of {', '.join(FORMATS)}"
    if isinstance(data, dict) and isinstance(data.get("kind"), str) and "schema_version" in data:
        return InputError(f"{path} is a logitlab {data['kind']} result, not a benchmark tool's output ({known}): "
                          "it holds its own comparison already (logitlab report shows it again)")
    return InputError(f"{path} is not a known benchmark format: {known}")


def detect_format(path: str | Path) -> str:
    """The benchmark tool that wrote ``path``.

    Parameters
    ----------
    path : str or Path
        A file, or a criterion output folder.

    Returns
    -------
    str
        One of :data:`FORMATS`.

    Raises
    ------
    InputError
        If the path does not exist, is empty, or matches no known format (the
        message lists them).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if path.is_dir():
        if criterion.looks_like(path):
            return criterion.FORMAT
        raise InputError(f"{path} is a folder without criterion estimates.json files: give a benchmark file or "
                         f"target/criterion")
    fmt, data = _load(path)
    if fmt is None:
        raise _unknown(path, data)
    return fmt


#: What ``time="cpu"`` reads in each format that records CPU time (the others record wall time only).
CPU_TIME_FORMATS = {"gbench": "cpu_time per repetition", "hyperfine": "user + system time (mean per command)"}
#: The clocks ``read_benchmark_file`` can read.
TIMES = ("real", "cpu")


def read_benchmark_file(path: str | Path, *, format: str | None = None, baseline: str = "new",
                        time: str = "real") -> BenchmarkFile:
    """Read a benchmark tool's output.

    Parameters
    ----------
    path : str or Path
        The file (or criterion folder).
    format : str, optional
        One of :data:`FORMATS`; detected when None. A given format that does
        not match the file is an error.
    baseline : str, optional
        criterion only: the saved baseline to read. Defaults to ``'new'``.
    time : {'real', 'cpu'}, optional
        Wall-clock time (default) or CPU time, for the formats that record it
        (:data:`CPU_TIME_FORMATS`). On a loaded machine CPU time can show a
        change that wall time hides in the scheduler's noise.

    Returns
    -------
    BenchmarkFile

    Raises
    ------
    InputError
        On a missing, empty, malformed or unrecognised file, a format that
        does not match, bad values (non-positive times), or ``time='cpu'``
        for a format that records wall time only.
    """
    if time not in TIMES:
        raise InputError(f"--time {time!r} is not known: use one of {', '.join(TIMES)}")
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise InputError(f"format {format!r} is not known: use one of {', '.join(FORMATS)}")
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if path.is_dir():
        if format not in (None, criterion.FORMAT):
            raise InputError(f"{path} is a folder, but --format {format} reads files")
        _check_cpu(time, criterion.FORMAT, path)
        return criterion.read(path, baseline=baseline)
    if format == criterion.FORMAT:
        raise InputError(f"{path} is a file: criterion's output is a folder (target/criterion)")
    detected, data = _load(path)
    if detected is None:
        raise _unknown(path, data)
    if format is not None and format != detected:
        raise InputError(f"{path} looks like {detected} output, not {format}: drop --format or fix it")
    _check_cpu(time, detected, path)
    module = dict(_JSON_READERS)[detected]
    if time == "cpu":
        return dataclasses.replace(module.read(str(path), data, time="cpu"), time="cpu")
    return module.read(str(path), data)


def _check_cpu(time: str, fmt: str, path: Path) -> None:
    if time == "cpu" and fmt not in CPU_TIME_FORMATS:
        raise InputError(f"--time cpu: {path} is {fmt} output, which records wall-clock time only (CPU time is "
                         f"recorded by {' and '.join(sorted(CPU_TIME_FORMATS))})")
