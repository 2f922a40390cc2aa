"""Google Benchmark JSON (``--benchmark_out=F --benchmark_out_format=json``).

Each entry of ``benchmarks`` is either an ``iteration`` run (one per
repetition) or an ``aggregate`` (``mean``, ``median``, ``stddev``, ``cv``,
BigO/RMS). Repetitions are the samples (``real_time``, converted to seconds);
aggregates are used only when no repetition is in the file
(``--benchmark_report_aggregates_only``): the median if present, else the mean.
Entries with ``error_occurred`` are dropped and noted.

Reference: Google Benchmark ``docs/user_guide.md`` (output formats,
repetitions, aggregates).
"""

from __future__ import annotations

from typing import Any

from logitlab.errors import InputError
from logitlab.perf.readers.base import TIME_UNITS, BenchmarkFile, make_scenario, number, require_scenarios

FORMAT = "gbench"


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and isinstance(data.get("context"), dict)


def read(path: str, data: Any, *, time: str = "real") -> BenchmarkFile:
    """Read parsed Google Benchmark JSON.

    Parameters
    ----------
    path : str
        For messages.
    data : dict
        The parsed file.
    time : {'real', 'cpu'}, optional
        ``real_time`` (default; what compare.py reports first) or ``cpu_time``
        of each repetition.

    Raises
    ------
    InputError
        On a missing time or unit, an unknown ``time_unit``, or no results.
    """
    time_field = {"real": "real_time", "cpu": "cpu_time"}[time]
    iterations: dict[str, list[float]] = {}
    aggregates: dict[str, dict[str, float]] = {}
    errors: dict[str, int] = {}
    for i, entry in enumerate(data["benchmarks"]):
        if not isinstance(entry, dict) or "name" not in entry:
            raise InputError(f"{path}: benchmarks[{i}] has no 'name': not Google Benchmark output")
        name = str(entry.get("run_name", entry["name"]))
        if entry.get("error_occurred"):
            errors[name] = errors.get(name, 0) + 1
            continue
        unit = entry.get("time_unit", "ns")
        if not isinstance(unit, str) or unit not in TIME_UNITS:
            raise InputError(f"{path}: benchmark {name!r} has time_unit {unit!r}: expected one of ns, us, ms, s")
        if time_field not in entry:
            raise InputError(f"{path}: benchmark {name!r} has no {time_field!r}")
        seconds = number(entry[time_field], path, f"{time_field} of benchmark {name!r}") * TIME_UNITS[unit]
        if entry.get("run_type", "iteration") == "aggregate":
            if entry.get("aggregate_unit", "time") == "time":
                aggregates.setdefault(name, {})[str(entry.get("aggregate_name", ""))] = seconds
        else:
            iterations.setdefault(name, []).append(seconds)
    scenarios = {}
    for name in list(dict.fromkeys(list(iterations) + list(aggregates) + list(errors))):
        note = f"{errors[name]} repetition(s) with error_occurred dropped" if name in errors else ""
        samples = iterations.get(name, [])
        agg = aggregates.get(name, {})
        if not samples and not agg:
            raise InputError(f"{path}: benchmark {name!r} only has failed repetitions (error_occurred)")
        stat = "median" if "median" in agg else "mean"
        scenarios[name] = make_scenario(
            path=path, name=name, unit="s", higher_is_better=False, samples=samples,
            summary=agg.get(stat), summary_statistic=f"Google Benchmark {stat} aggregate ({time_field})", note=note,
        )
    context = {k: data["context"].get(k) for k in ("host_name", "num_cpus", "mhz_per_cpu", "load_avg",
                                                   "library_build_type", "date") if k in data["context"]}
    return BenchmarkFile(path, FORMAT, require_scenarios(path, FORMAT, scenarios), context)
