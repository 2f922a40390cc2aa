"""What a result contributes to the history: its metrics per variant, with their raw per-block samples.

:func:`record_from_result` turns any result that can be recorded into a
:class:`~logitlab.experiments.history.HistoryRecord` for one engine commit on
one machine. A result kind can be recorded when its result class defines
``history_metrics()``, returning variant -> metric name ->
:class:`~logitlab.perf.metrics.Metric` (its kind: higher-is-better,
lower-is-better or a fingerprint; its unit; its value and samples): today
``ab`` (:meth:`~logitlab.experiments.ab_results.AbResult.history_metrics`),
``verify`` (:meth:`~logitlab.experiments.verify.results.VerifyResult.history_metrics`),
``bench-run`` (:meth:`~logitlab.perf.commands.BenchRunResult.history_metrics`),
``bench-compare`` (:meth:`~logitlab.perf.compare_files.FileComparison.history_metrics`),
``golden-check`` (:meth:`~logitlab.experiments.golden.results.GoldenCheckResult.history_metrics`) and
``invariance-matrix`` (:meth:`~logitlab.experiments.invariance_matrix.InvarianceMatrixResult.history_metrics`);
each method's docstring says what it keeps. The helpers they share (a speed
metric from per-block values, a ratio, a comparison's KLD and bit-exact
share) are in :mod:`logitlab.perf.metrics`.

A crash of the engine under test is recorded as such: a fingerprint metric ``crashed`` of the variant that
crashed (``candidate`` for ``ab``, ``verify``, ``golden:NAME``) whose value names the phase and the status
(``decode step 2: killed by SIGSEGV (signal 11)``), so that the commit where an engine starts (or stops)
crashing shows in that series.

Another result kind joins by defining ``history_metrics()`` on its result class.

Nothing here prints or logs.
"""

from __future__ import annotations

from typing import Any

from logitlab.errors import InputError
from logitlab.experiments.history.store import HistoryRecord, new_record
from logitlab.jsonio import to_jsonable
from logitlab.perf.metrics import FINGERPRINT, HIGHER, LOWER, Metrics

__all__ = [
    "HIGHER",
    "LOWER",
    "FINGERPRINT",
    "recordable_kinds",
    "result_metrics",
    "result_manifest",
    "record_from_result",
    "is_numerics_metric",
]

#: Metric names (of the kinds' ``history_metrics``) that measure numerics, not speed.
NUMERICS_METRICS = ("logits", "greedy", "kld_mean", "kld_p99", "bit_exact_share")


def is_numerics_metric(name: str) -> bool:
    """True for a metric about the numbers an engine computes (fingerprints, KLD, bit-exact shares, flips),
    False for speed and resources: which ``bisect --probe`` finds its change."""
    return name in NUMERICS_METRICS or name.endswith((" bit_exact_share", " flips"))


def recordable_kinds() -> list[str]:
    """The result kinds that can be recorded (whose class defines ``history_metrics``), sorted."""
    from logitlab.kinds import kinds_with

    return kinds_with("history_metrics")


# ---------------------------------------------------------------------------
# The record


def result_metrics(result: Any) -> Metrics:
    """Variant -> metric name -> Metric of a result: its ``history_metrics()`` (see the module docstring).

    Raises
    ------
    InputError
        If the kind of result cannot be recorded, or it holds no metric
        (e.g. a run that measured nothing).
    """
    kind = getattr(result, "KIND", "")
    history_metrics = getattr(result, "history_metrics", None)
    if not callable(history_metrics):
        raise InputError(f"a {kind or 'non-logitlab'} result cannot be recorded in the history: results of "
                         f"{', '.join(recordable_kinds())} can")
    metrics = history_metrics()
    if not metrics:
        raise InputError(f"this {kind} result holds no metric to record (nothing was measured)")
    return metrics


def result_manifest(result: Any) -> dict[str, Any]:
    """What ran: the result's kind, its manifest (or host), and its configuration, as JSON types."""
    data: dict[str, Any] = {"result_kind": getattr(result, "KIND", "")}
    for name in ("manifest", "config", "host", "base_path", "candidate_path", "format", "base_context",
                 "candidate_context"):
        value = getattr(result, name, None)
        if value is not None and value != {}:
            data[name] = value
    return to_jsonable(data)


def record_from_result(result: Any, *, machine: str, commit: str, commit_date: str | None,
                       recorded_at: str | None = None) -> HistoryRecord:
    """A :class:`~logitlab.experiments.history.HistoryRecord` of ``result`` for one commit on one machine.

    Raises
    ------
    InputError
        If the result cannot be recorded (kind, no metric) or a key is not
        valid (machine, commit, dates).
    """
    return new_record(machine=machine, commit=commit, commit_date=commit_date, manifest=result_manifest(result),
                      metrics=result_metrics(result), recorded_at=recorded_at)
