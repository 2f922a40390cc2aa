"""criterion.rs output folders (``target/criterion``).

Layout (criterion.rs user guide, "Criterion.rs output" / "Command-line
options" ``--save-baseline``)::

    target/criterion/<group>/<function>[/<value>]/<baseline>/
        benchmark.json   {"group_id", "function_id", "value_str", "full_id", ...}
        estimates.json   {"mean": {"point_estimate": ns, ...}, "median": {...}, ...}
        sample.json      {"sampling_mode": ..., "iters": [...], "times": [...]}  (ns per sample)

``<baseline>`` is ``new`` for the latest run, ``base`` for the one before, or
a name given with ``--save-baseline NAME``. Samples are per-iteration times
``times[i] / iters[i]``, converted to seconds. Without ``sample.json`` the
median point estimate of ``estimates.json`` is used (summary only).
"""

from __future__ import annotations

from pathlib import Path

from logitlab.errors import InputError
from logitlab.perf.readers.base import (
    BenchmarkFile,
    items,
    load_json_text,
    make_scenario,
    number,
    require_scenarios,
)

FORMAT = "criterion"
_SKIP = {"report", "change"}


def looks_like(path: Path) -> bool:
    return path.is_dir() and any(p.name == "estimates.json" for p in path.rglob("estimates.json"))


def baselines(root: str | Path) -> list[str]:
    """Names of the baselines found under ``root`` (e.g. ``['base', 'main', 'new']``)."""
    return sorted({p.parent.name for p in Path(root).rglob("estimates.json") if p.parent.name not in _SKIP})


def read(root: str | Path, *, baseline: str = "new") -> BenchmarkFile:
    """Read every benchmark of one baseline under a criterion folder.

    Parameters
    ----------
    root : str or Path
        ``target/criterion`` or any folder inside it.
    baseline : str, optional
        Which saved baseline to read. Defaults to ``'new'`` (the latest run).

    Raises
    ------
    InputError
        If the folder has no such baseline (the message lists those it has),
        or a file is empty, malformed or holds a non-positive time.
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root} is not a folder: give criterion's output folder (target/criterion)")
    found = sorted(p for p in root.rglob("estimates.json") if p.parent.name == baseline)
    if not found:
        have = baselines(root)
        raise InputError(
            f"{root} has no criterion baseline {baseline!r}: it has {', '.join(have) or 'none'} "
            f"(save one with cargo bench -- --save-baseline NAME)"
        )
    scenarios = {}
    for estimates_path in found:
        folder = estimates_path.parent
        bench_path = folder / "benchmark.json"
        name = None
        if bench_path.is_file():
            meta = load_json_text(bench_path)
            name = meta.get("full_id") if isinstance(meta, dict) else None
        if not name:
            name = folder.parent.relative_to(root).as_posix() if folder.parent != root else root.name
        samples: list[float] = []
        sample_path = folder / "sample.json"
        if sample_path.is_file():
            sample = load_json_text(sample_path)
            if not isinstance(sample, dict) or "iters" not in sample or "times" not in sample:
                raise InputError(f"{sample_path} lacks 'iters' and 'times': not a criterion sample.json")
            iters = items(sample["iters"], sample_path, "iters", optional=False)
            times = items(sample["times"], sample_path, "times", optional=False)
            if len(iters) != len(times):
                raise InputError(f"{sample_path}: {len(iters)} iters but {len(times)} times")
            for i, (n, t) in enumerate(zip(iters, times)):
                count = number(n, sample_path, f"iters[{i}]")
                if not count > 0:
                    raise InputError(f"{sample_path}: iters[{i}] is {n!r}, not a positive count")
                samples.append(number(t, sample_path, f"times[{i}]") / count * 1e-9)
        estimates = load_json_text(estimates_path)
        summary = None
        if isinstance(estimates, dict):
            for stat in ("median", "mean"):
                if isinstance(estimates.get(stat), dict) and "point_estimate" in estimates[stat]:
                    summary = number(estimates[stat]["point_estimate"], estimates_path, f"{stat} point_estimate")
                    summary, statistic = summary * 1e-9, stat
                    break
        if summary is None and not samples:
            raise InputError(f"{estimates_path} has no median or mean point_estimate and there is no sample.json")
        scenarios[str(name)] = make_scenario(
            path=str(folder), name=str(name), unit="s", higher_is_better=False, samples=samples,
            summary=summary, summary_statistic=f"criterion {statistic if summary is not None else 'mean'} estimate",
        )
    return BenchmarkFile(f"{root} [{baseline}]", FORMAT, require_scenarios(str(root), FORMAT, scenarios),
                         {"baseline": baseline})

