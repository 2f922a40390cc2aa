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
from logitlab.perf.readers.base import BenchmarkFile, items, make_scenario, number, require_scenarios

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
            if entry.get("user") is None or entry.get("system") is None:
                raise InputError(f"{path}: command {name!r} has no user/system time: --time cpu needs hyperfine's "
                                 "user and system fields")
            cpu = (number(entry["user"], path, f"user time of {name!r}")
                   + number(entry["system"], path, f"system time of {name!r}"))
            scenarios[name] = make_scenario(path=path, name=name, unit="s", higher_is_better=False, summary=cpu,
                                            summary_statistic="hyperfine mean user + system (CPU) time")
            continue
        times = items(entry.get("times"), path, f"times of {name!r}")
        if not times:
            scenarios[name] = make_scenario(path=path, name=name, unit="s", higher_is_better=False,
                                            summary=entry.get("median", entry.get("mean")),
                                            summary_statistic="hyperfine median")
            continue
        codes = items(entry.get("exit_codes"), path, f"exit_codes of {name!r}") or [0] * len(times)
        if len(codes) != len(times):
            raise InputError(f"{path}: command {name!r} has {len(times)} times but {len(codes)} exit codes")
        ok = [t for t, c in zip(times, codes) if c == 0]
        failed = len(times) - len(ok)
        if not ok:
            raise InputError(f"{path}: every run of {name!r} exited non-zero ({codes[0]} first): nothing to compare")
        scenarios[name] = make_scenario(
            path=path, name=name, unit="s", higher_is_better=False, samples=ok,
            note=f"{failed} run(s) with a non-zero exit code dropped" if failed else "",
        )
    return BenchmarkFile(path, FORMAT, require_scenarios(path, FORMAT, scenarios), {})
