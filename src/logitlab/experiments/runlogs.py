"""Results rebuilt from run logs (:mod:`logitlab.runlog`): ``ab`` and ``verify``.

A log whose experiment finished holds everything its ``--json`` result holds
(the end line carries the fields computed at the end), so the rebuilt result
is that result. A log cut short by a kill holds the header and every run that
finished: the rebuilt result is partial, says so in ``error``, and carries
what can be computed from those runs alone — for ``ab`` the A/A, the A/B
verdict over the candidate runs logged and the paired speed call over the
complete blocks; for ``verify`` the per-prompt sweep and flips (the totals and
the classification need every prompt's full comparison, which the log does
not hold).
"""

from __future__ import annotations

from typing import Any

import dacite

from logitlab.errors import InputError
from logitlab.experiments.ab_results import LOG_HEADER_FIELDS, AbResult, RunRecord, analyse_speed, worst_verdict
from logitlab.perf.design import CANDIDATE
from logitlab.experiments.verify.results import VerifyResult
from logitlab.numerics import LogitComparison, Thresholds, classify
from logitlab.numerics.topk import TopKComparison
from logitlab.runlog import RunLogContents

__all__ = ["ab_from_log", "verify_from_log", "interrupted_message"]

_DACITE = dacite.Config(cast=[tuple], check_types=False)


def interrupted_message(log: RunLogContents, what: str) -> str:
    """The ``error`` of a result rebuilt from a log that has no end line."""
    return (f"interrupted: the run log {log.path} ends after {len(log.records)} {what} without an end line (the "
            "process was killed or lost); this report shows the runs it logged")


def _require(log: RunLogContents, kind: str, fields: tuple[str, ...]) -> None:
    if log.kind is None:  # read_run_log has said so when the header line is there but damaged
        raise InputError(f"{log.path} is a run log written before logitlab put a header line in its logs: it holds "
                         f"{len(log.records)} run line(s) but not the experiment's config and manifest, so no report "
                         "can be built from it (each line is a run's JSON record; rerun to get a full log)")
    if log.kind != kind:
        raise InputError(f"{log.path} is a {log.kind!r} run log, not a {kind!r} one")
    missing = [f for f in fields if f not in log.header]
    if missing:
        raise InputError(f"{log.path}: the run log's header lacks {', '.join(missing)}: damaged log")


def _records(log: RunLogContents) -> tuple[list[RunRecord], list[str]]:
    """The log's run lines as :class:`RunRecord` objects; lines that do not fit are left out with a note."""
    out, notes = [], []
    for i, record in enumerate(log.records, start=1):
        try:
            run = dacite.from_dict(RunRecord, record, config=_DACITE)
        except (dacite.DaciteError, TypeError, ValueError, KeyError) as exc:
            notes.append(f"run {i} of the log is damaged ({exc}); left out")
            continue
        if not (run.comparison is None or isinstance(run.comparison, (LogitComparison, TopKComparison))):
            notes.append(f"run {i} of the log has a damaged comparison; left out")
            continue
        out.append(run)
    return out, notes


def ab_from_log(log: RunLogContents) -> AbResult:
    """The :class:`~logitlab.experiments.ab.AbResult` an ``ab`` run log holds.

    Raises:
        InputError: not an ``ab`` log, a log without a header (written before
            logitlab 0.1's run-log format), or a damaged header.
    """
    _require(log, AbResult.KIND, ("config", "manifest", "prompt_ids"))
    runs, notes = _records(log)
    data = {**{k: log.header.get(k) for k in LOG_HEADER_FIELDS if k in log.header},
            "generated_ids": log.header.get("generated_ids", []),
            "generated_text": log.header.get("generated_text", ""),
            **log.final, "runs": [], "kind": AbResult.KIND, "schema_version": AbResult.SCHEMA_VERSION}
    result = AbResult.from_dict(data)
    result.runs = runs
    if log.interrupted:
        result.error = interrupted_message(log, "run(s)")
        _recompute(result)
    result.notes = list(result.notes) + notes + log.notes
    return result


def _recompute(result: AbResult) -> None:
    """The A/B verdict and the speed calls from the runs alone (what ``ab`` computes at its end)."""
    cfg = result.config
    try:
        thresholds = dacite.from_dict(Thresholds, cfg.get("thresholds") or {}, config=_DACITE)
    except (dacite.DaciteError, TypeError, ValueError) as exc:
        raise InputError(f"damaged ab run log: its config's thresholds do not load ({exc})") from None
    verdicts = [(r.slot, classify(r.comparison, thresholds)) for r in result.measured(CANDIDATE)
                if r.comparison is not None]
    if verdicts:
        result.verdict_slot, result.verdict = worst_verdict(verdicts)
    margin, seed = cfg.get("margin"), cfg.get("seed", 0)
    result.speed = analyse_speed(result.runs, margin=margin if isinstance(margin, float) else None,
                                 seed=seed if isinstance(seed, int) else 0)


def verify_from_log(log: RunLogContents) -> VerifyResult:
    """The :class:`~logitlab.experiments.verify.results.VerifyResult` a ``verify`` run log holds.

    Raises:
        InputError: not a ``verify`` log, no header, or a damaged one.
    """
    _require(log, VerifyResult.KIND, ("config", "manifest"))
    data: dict[str, Any] = {"config": log.header["config"], "manifest": log.header["manifest"],
                            "kind": VerifyResult.KIND, "schema_version": VerifyResult.SCHEMA_VERSION,
                            "prompts": [], "sweep": [], "flips": []}
    guard = log.header.get("guard")
    results: list[Any] = []
    notes = []
    for i, record in enumerate(log.records, start=1):
        if not (isinstance(record, dict) and isinstance(record.get("prompt"), dict)
                and all(isinstance(record.get(k, []), list) for k in ("sweep", "flips", "guard_results"))):
            notes.append(f"prompt line {i} of the log is damaged; left out")
            continue
        data["prompts"].append(record["prompt"])
        data["sweep"] += record.get("sweep", [])
        data["flips"] += record.get("flips", [])
        results += record.get("guard_results", [])
        data["batch_invariant"] = record.get("batch_invariant")
    if isinstance(guard, dict):
        data["guard"] = {**guard, "results": results}
    data.update(log.final)
    result = VerifyResult.from_dict(data)
    if log.interrupted:
        result.error = interrupted_message(log, "prompt(s)")
    extra = notes + log.notes
    if extra:
        result.error = "; ".join(([result.error] if result.error else []) + extra)
    return result
