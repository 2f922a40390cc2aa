"""The ``bench run`` result rebuilt from its run log (:mod:`logitlab.runlog`).

A finished log rebuilds the whole result; a log cut short by a kill is
analysed as ``bench run`` analyses its runs at the end — the paired calls over
the complete, successful blocks it logged — and says it was interrupted.
"""

from __future__ import annotations

import dataclasses

import dacite

from logitlab.errors import InputError
from logitlab.perf.commands import BenchRunConfig, BenchRunResult, CommandRun, _analyse
from logitlab.runlog import RunLogContents

__all__ = ["bench_run_from_log"]

_DACITE = dacite.Config(cast=[tuple], check_types=False)


def bench_run_from_log(log: RunLogContents) -> BenchRunResult:
    """The :class:`~logitlab.perf.commands.BenchRunResult` a ``bench run`` log holds.

    Raises
    ------
    InputError
        Not a ``bench-run`` log, no header, or a damaged header.
    """
    if log.kind != BenchRunResult.KIND:
        raise InputError(f"{log.path} is {'a ' + repr(log.kind) if log.kind else 'an old'} run log, not a "
                         f"{BenchRunResult.KIND!r} one")
    if not isinstance(log.header.get("config"), dict) or not isinstance(log.header.get("host"), dict):
        raise InputError(f"{log.path}: the run log's header lacks config or host: damaged log")
    runs, notes = [], []
    for i, record in enumerate(log.records, start=1):
        try:
            runs.append(dacite.from_dict(CommandRun, record, config=_DACITE))
        except (dacite.DaciteError, TypeError, ValueError, KeyError) as exc:
            notes.append(f"run {i} of the log is damaged ({exc}); left out")
    if not log.interrupted:
        data = {**log.header, **log.final, "runs": [], "kind": BenchRunResult.KIND,
                "schema_version": BenchRunResult.SCHEMA_VERSION}
        result = BenchRunResult.from_dict(data)
        error = log.error or result.error
    else:
        try:
            config = BenchRunConfig(**log.header["config"])
        except (TypeError, InputError) as exc:
            raise InputError(f"{log.path}: the run log's config does not load ({exc}): damaged log") from None
        result = _analyse(config, runs, log.header["host"], None)
        error = (f"interrupted: the run log {log.path} ends after {len(log.records)} run(s) without an end line "
                 "(the process was killed or lost); the calls below use the complete blocks it logged")
    extra = notes + log.notes
    error = "; ".join(([error] if error else []) + extra) or None
    return dataclasses.replace(result, runs=runs, error=error)
