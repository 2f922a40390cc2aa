"""Speed statistics: the counterbalanced ABBA/BAAB design (:mod:`~logitlab.perf.design`),
the paired comparison (:mod:`~logitlab.perf.paired`), the equivalence call
(:mod:`~logitlab.perf.equivalence`), power and MDE (:mod:`~logitlab.perf.power`),
benchmark files (:mod:`~logitlab.perf.readers`, :mod:`~logitlab.perf.compare_files`)
and ``bench run`` (:mod:`~logitlab.perf.commands`). Nothing here prints or logs.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it; imported on first access (PEP 562), so that a light
#: module of this package (e.g. :mod:`~logitlab.perf.changepoint_defaults`) loads without scipy.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("PATTERNS", "Block", "block_patterns"), "logitlab.perf.design"),
    **dict.fromkeys(("CALLS", "DEFAULT_MARGIN", "MARGIN_SOURCES", "MAX_AA_MARGIN", "MIN_AA_MARGIN"),
                    "logitlab.perf.equivalence"),
    **dict.fromkeys(("SCHEMA_VERSION", "PairedComparison", "PositionEffect", "aa_log_ratios", "aa_margin",
                     "block_log_ratios", "paired_comparison", "slot_position_effect"), "logitlab.perf.paired"),
    **dict.fromkeys(("blocks_needed", "minimum_detectable_effect"), "logitlab.perf.power"),
    **dict.fromkeys(("simulate_blocks", "simulate_calls"), "logitlab.perf.simulate"),
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
