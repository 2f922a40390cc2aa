"""Speed statistics: the counterbalanced ABBA/BAAB design (:mod:`~logitlab.perf.design`),
the per-block ratios (:mod:`~logitlab.perf.block_ratios`), the paired comparison
(:mod:`~logitlab.perf.paired`), the equivalence call (:mod:`~logitlab.perf.equivalence`),
power and MDE (:mod:`~logitlab.perf.power`), the between-run variance of many runs' estimates
(:mod:`~logitlab.perf.between_runs`), benchmark files (:mod:`~logitlab.perf.readers`,
:mod:`~logitlab.perf.compare_files`, :mod:`~logitlab.perf.calibration`) and ``bench run``
(:mod:`~logitlab.perf.commands`, its process runner :mod:`~logitlab.perf.process`).
Nothing here prints or logs.
"""

from __future__ import annotations

from logitlab.lazy import lazy_exports

#: Public names by defining module, each imported on first access (PEP 562), so that a light module of
#: this package (e.g. :mod:`~logitlab.perf.changepoint_defaults`) loads without scipy.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "logitlab.perf.equivalence": ("CALLS", "DEFAULT_MARGIN", "MARGIN_SOURCES", "MAX_AA_MARGIN", "MIN_AA_MARGIN"),
    "logitlab.perf.design": ("PATTERNS", "Block", "block_patterns"),
    "logitlab.perf.paired": ("SCHEMA_VERSION", "PairedComparison", "PositionEffect", "paired_comparison",
                             "slot_position_effect"),
    "logitlab.perf.block_ratios": ("aa_log_ratios", "aa_margin", "block_log_ratios"),
    "logitlab.perf.power": ("blocks_needed", "minimum_detectable_effect"),
    "logitlab.perf.between_runs": ("BetweenRuns", "between_run_variance"),
    "logitlab.perf.simulate": ("simulate_blocks", "simulate_calls"),
})
