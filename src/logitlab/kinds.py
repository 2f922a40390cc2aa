"""The registry of result kinds: kind -> (result class, document builder), one line per kind.

Every top-level result is a :class:`~logitlab.jsonio.ResultRecord` whose
``KIND`` names its line here; ``report`` builds its document with the
builder, and loads a saved result (or a run log) back with the class. The
entries are ``"module:name"`` strings, imported when first used, so this
module imports nothing: any layer may read which kinds exist, and a caller
loads only classes of its own layer or those to its left (every result class
lives in ``perf/``, ``dumps/`` or ``experiments/``; the builders, which only
``report`` loads, in ``report/``).

What a kind can do beyond its report is a method of its class, not another
table (see :class:`~logitlab.jsonio.ResultRecord`): :func:`kinds_with` lists
the kinds whose class defines one, for the error that names them.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["KINDS", "load", "result_class", "kinds_with"]

#: result kind -> (result class, document builder)
KINDS: dict[str, tuple[str, str]] = {
    "ab": ("logitlab.experiments.ab_results:AbResult", "logitlab.report.ab:ab_document"),
    "verify": ("logitlab.experiments.verify.results:VerifyResult", "logitlab.report.verify:verify_document"),
    "invariance": ("logitlab.experiments.invariance_results:InvarianceResult",
                   "logitlab.report.invariance:invariance_document"),
    "invariance-matrix": ("logitlab.experiments.invariance_matrix:InvarianceMatrixResult",
                          "logitlab.report.invariance_matrix:matrix_document"),
    "bench-run": ("logitlab.perf.commands:BenchRunResult", "logitlab.report.bench:run_document"),
    "bench-compare": ("logitlab.perf.compare_files:FileComparison", "logitlab.report.bench:compare_document"),
    "logitlab-bench-noise": ("logitlab.perf.calibration:NoiseProfile", "logitlab.report.bench:calibration_document"),
    "dump-diff": ("logitlab.dumps.diff_results:DumpDiffResult", "logitlab.report.dumps:dump_diff_document"),
    "sweep": ("logitlab.experiments.sweep.summary:SweepResult", "logitlab.report.sweep:sweep_document"),
    "sweep-job": ("logitlab.experiments.sweep.job:SweepJobResult", "logitlab.report.sweep:sweep_job_document"),
    "golden": ("logitlab.dumps.golden_format:GoldenManifest", "logitlab.report.golden:golden_document"),
    "golden-check": ("logitlab.experiments.golden.results:GoldenCheckResult", "logitlab.report.golden:golden_check_document"),
    "golden-kld": ("logitlab.experiments.golden.kld:KldCheckResult", "logitlab.report.golden:golden_kld_document"),
    "history": ("logitlab.experiments.history.show:HistoryResult", "logitlab.report.history:history_document"),
    "bisect": ("logitlab.experiments.bisect.run:BisectResult", "logitlab.report.bisect:bisect_document"),
    "explain": ("logitlab.experiments.explain_results:ExplainResult", "logitlab.report.explain:explain_document"),
    "doctor": ("logitlab.experiments.doctor:DoctorResult", "logitlab.report.doctor:doctor_document"),
}


def load(target: str) -> Any:
    """The object a ``"module:name"`` string names (its module imported now)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def result_class(kind: str) -> Any:
    """The result class of ``kind`` (a key of :data:`KINDS`; KeyError for another)."""
    return load(KINDS[kind][0])


def kinds_with(method: str) -> list[str]:
    """The kinds whose result class defines ``method`` (e.g. ``"history_metrics"``), sorted.

    Every result class is imported: for the error that lists what can be
    done, not for a hot path.
    """
    return sorted(kind for kind in KINDS if callable(getattr(result_class(kind), method, None)))
