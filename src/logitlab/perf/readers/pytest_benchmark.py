"""pytest-benchmark JSON (``--benchmark-json=F``, or a ``--benchmark-save`` file).

Each entry of ``benchmarks`` has ``fullname`` and ``stats``. With
``stats['data']`` (``--benchmark-json`` writes it; saved runs only with
``--benchmark-save-data``) the per-round times are the samples; without it
the ``median`` is used (summary only). Times are in seconds.

Reference: pytest-benchmark docs, "Usage" (``--benchmark-json``,
``--benchmark-save-data``).
"""

from __future__ import annotations

from typing import Any

from logitlab.errors import InputError
from logitlab.perf.readers.base import BenchmarkFile, make_scenario, mapping, require_scenarios

FORMAT = "pytest-benchmark"


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "machine_info" in data


def read(path: str, data: Any) -> BenchmarkFile:
    """Read parsed pytest-benchmark JSON.

    Raises
    ------
    InputError
        On an entry without ``stats`` or a non-positive time.
    """
    scenarios = {}
    for i, entry in enumerate(data["benchmarks"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("stats"), dict):
            raise InputError(f"{path}: benchmarks[{i}] has no 'stats': not pytest-benchmark output")
        name = str(entry.get("fullname") or entry.get("name"))
        stats = entry["stats"]
        scenarios[name] = make_scenario(
            path=path, name=name, unit="s", higher_is_better=False, samples=stats.get("data") or (),
            summary=stats.get("median", stats.get("mean")), summary_statistic="pytest-benchmark median",
        )
    info = mapping(data.get("machine_info"), path, "machine_info")
    cpu = info.get("cpu")
    context = {"cpu": cpu.get("brand_raw") if isinstance(cpu, dict) else None, "node": info.get("node"),
               "python": info.get("python_version"), "datetime": data.get("datetime")}
    return BenchmarkFile(path, FORMAT, require_scenarios(path, FORMAT, scenarios),
                         {k: v for k, v in context.items() if v})
