"""hyperfine JSON (``--export-json F``).

``results`` has one entry per command: ``command`` (or the
``--command-name``), ``times`` (seconds per run: the samples), ``exit_codes``.
Runs with a non-zero exit code (possible with ``--ignore-failure``) are
dropped and noted; a command none of whose runs succeeded is an error.

Reference: hyperfine README, "Exporting results".
"""

from __future__ import annotations

from typing import Any

from logitlab.errors import InputError
from logitlab.perf.readers.base import BenchmarkFile, make_scenario, require_scenarios

FORMAT = "hyperfine"


def looks_like(data: Any) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("results"), list)
            and all(isinstance(r, dict) and "command" in r for r in data["results"]))


def read(path: str, data: Any, *, time: str = "real") -> BenchmarkFile:
    """Read parsed hyperfine JSON: wall time per run (``times``), or with ``time='cpu'`` the mean
    ``user`` + ``system`` time per command (hyperfine records CPU time as a mean only: no samples, no CI).

    Raises
    ------
    InputError
        On a command without times, or whose every run failed.
    """
    scenarios = {}
    for entry in data["results"]:
        name = str(entry["command"])
        if time == "cpu":
            if not isinstance(entry.get("user"), (int, float)) or not isinstance(entry.get("system"), (int, float)):
                raise InputError(f"{path}: command {name!r} has no user/system time: --time cpu needs hyperfine's "
                                 "user and system fields")
            scenarios[name] = make_scenario(path=path, name=name, unit="s", higher_is_better=False,
                                            summary=float(entry["user"]) + float(entry["system"]),
                                            summary_statistic="hyperfine mean user + system (CPU) time")
            continue
        times = entry.get("times")
        if not times:
            scenarios[name] = make_scenario(path=path, name=name, unit="s", higher_is_better=False,
                                            summary=entry.get("median", entry.get("mean")),
                                            summary_statistic="hyperfine median")
            continue
        codes = entry.get("exit_codes") or [0] * len(times)
        ok = [t for t, c in zip(times, codes) if c == 0]
        failed = len(times) - len(ok)
        if not ok:
            raise InputError(f"{path}: every run of {name!r} exited non-zero ({codes[0]} first): nothing to compare")
        scenarios[name] = make_scenario(
            path=path, name=name, unit="s", higher_is_better=False, samples=ok,
            note=f"{failed} run(s) with a non-zero exit code dropped" if failed else "",
        )
    return BenchmarkFile(path, FORMAT, require_scenarios(path, FORMAT, scenarios), {})
