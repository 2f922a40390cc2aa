"""pyperf JSON (``-o F``, ``--append F``; ``.json.gz`` too).

A suite has ``benchmarks``, each with ``runs``; every run (one worker
process) has ``values`` (calibration runs have none) and ``metadata`` with its
start ``date``. All values of all runs are the samples; the run's start time
is kept per sample, so base and candidate runs appended alternately
(``--append``) can be paired. Units come from the ``unit`` metadata
(``second`` by default).

Reference: pyperf docs, "JSON format" (version 1.0) and "Runner" (``--append``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from logitlab.errors import InputError
from logitlab.perf.readers.base import BenchmarkFile, items, make_scenario, mapping, require_scenarios

FORMAT = "pyperf"


def looks_like(data: Any) -> bool:
    if not (isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "version" in data):
        return False
    return all(isinstance(b, dict) and "runs" in b for b in data["benchmarks"])


def _timestamp(date: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(date)).timestamp()
    except (ValueError, OverflowError, OSError):  # not a date, or one out of the platform's range
        return None


def read(path: str, data: Any) -> BenchmarkFile:
    """Read a parsed pyperf suite.

    Raises
    ------
    InputError
        On a benchmark without a name or with a non-positive value.
    """
    common = mapping(data.get("metadata"), path, "the suite's metadata")
    scenarios = {}
    for i, bench in enumerate(data["benchmarks"]):
        meta = {**common, **mapping(bench.get("metadata"), path, f"benchmarks[{i}] metadata")}
        runs = items(bench.get("runs"), path, f"benchmarks[{i}] runs")
        for j, run in enumerate(runs):
            mapping(run, path, f"benchmarks[{i}] runs[{j}]", optional=False)
            mapping(run.get("metadata"), path, f"benchmarks[{i}] runs[{j}] metadata")
        name = meta.get("name") or next(((r.get("metadata") or {}).get("name") for r in runs
                                         if (r.get("metadata") or {}).get("name")), None)
        if not name:
            raise InputError(f"{path}: benchmarks[{i}] has no name in its metadata")
        unit = meta.get("unit", "second")
        if not isinstance(unit, str):
            raise InputError(f"{path}: benchmark {name!r} has unit {unit!r}, not a unit name")
        samples, groups = [], []
        for j, run in enumerate(runs):
            values = items(run.get("values"), path, f"benchmarks[{i}] runs[{j}] values")
            stamp = _timestamp((run.get("metadata") or {}).get("date"))
            samples += values
            groups += [stamp] * len(values)
        scenarios[str(name)] = make_scenario(
            path=path, name=str(name), unit="s" if unit == "second" else unit, higher_is_better=False,
            samples=samples, groups=groups if groups and None not in groups else None,
        )
    context = {k: common.get(k) for k in ("cpu_model_name", "cpu_count", "platform", "load_avg_1min",
                                          "perf_version", "python_version") if k in common}
    return BenchmarkFile(path, FORMAT, require_scenarios(path, FORMAT, scenarios), context)
