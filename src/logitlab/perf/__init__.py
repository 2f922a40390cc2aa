"""Speed statistics: the counterbalanced ABBA/BAAB design (:mod:`~logitlab.perf.design`),
the paired comparison (:mod:`~logitlab.perf.paired`), the equivalence call
(:mod:`~logitlab.perf.equivalence`), power and MDE (:mod:`~logitlab.perf.power`),
benchmark files (:mod:`~logitlab.perf.readers`, :mod:`~logitlab.perf.compare_files`)
and ``bench run`` (:mod:`~logitlab.perf.commands`). Nothing here prints or logs.
"""

from logitlab.perf.design import PATTERNS, Block, block_patterns
from logitlab.perf.equivalence import CALLS, DEFAULT_MARGIN, MARGIN_SOURCES, MAX_AA_MARGIN, MIN_AA_MARGIN
from logitlab.perf.paired import (
    SCHEMA_VERSION,
    PairedComparison,
    PositionEffect,
    aa_log_ratios,
    aa_margin,
    block_log_ratios,
    paired_comparison,
    slot_position_effect,
)
from logitlab.perf.power import blocks_needed, minimum_detectable_effect
from logitlab.perf.simulate import simulate_blocks, simulate_calls

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
