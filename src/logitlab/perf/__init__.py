"""Speed statistics: the counterbalanced ABBA/BAAB design (:mod:`~logitlab.perf.design`),
the per-block ratios (:mod:`~logitlab.perf.block_ratios`), the paired comparison
(:mod:`~logitlab.perf.paired`), the equivalence call (:mod:`~logitlab.perf.equivalence`),
power and MDE (:mod:`~logitlab.perf.power`), benchmark files (:mod:`~logitlab.perf.readers`,
:mod:`~logitlab.perf.compare_files`, :mod:`~logitlab.perf.calibration`) and ``bench run``
(:mod:`~logitlab.perf.commands`, its process runner :mod:`~logitlab.perf.process`).
Nothing here prints or logs.
"""

from __future__ import annotations

from logitlab.lazy import lazy_exports

#: Public name -> the module that defines it; imported on first access (PEP 562), so that a light
#: module of this package (e.g. :mod:`~logitlab.perf.changepoint_defaults`) loads without scipy.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("PATTERNS", "Block", "block_patterns"), "logitlab.perf.design"),
    **dict.fromkeys(("CALLS", "DEFAULT_MARGIN", "MARGIN_SOURCES", "MAX_AA_MARGIN", "MIN_AA_MARGIN"),
                    "logitlab.perf.equivalence"),
    **dict.fromkeys(("aa_log_ratios", "aa_margin", "block_log_ratios"), "logitlab.perf.block_ratios"),
    **dict.fromkeys(("SCHEMA_VERSION", "PairedComparison", "PositionEffect", "paired_comparison",
                     "slot_position_effect"), "logitlab.perf.paired"),
    **dict.fromkeys(("blocks_needed", "minimum_detectable_effect"), "logitlab.perf.power"),
    **dict.fromkeys(("simulate_blocks", "simulate_calls"), "logitlab.perf.simulate"),
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "CALLS",
    "DEFAULT_MARGIN",
    "MARGIN_SOURCES",
    "MAX_AA_MARGIN",
    "MIN_AA_MARGIN",
    "PATTERNS",
    "SCHEMA_VERSION",
    "Block",
    "PairedComparison",
    "PositionEffect",
    "aa_log_ratios",
    "aa_margin",
    "block_log_ratios",
    "block_patterns",
    "blocks_needed",
    "minimum_detectable_effect",
    "paired_comparison",
    "slot_position_effect",
    "simulate_blocks",
    "simulate_calls",
]
