"""Paired performance statistics: counterbalanced ABBA/BAAB blocks, geometric-mean
ratios with CIs, a faster/slower/equivalent/inconclusive call, MDE and slot-position
diagnostics. Nothing here prints or logs.
"""

from logitlab.perf.paired import (
    CALLS,
    DEFAULT_MARGIN,
    MARGIN_SOURCES,
    MAX_AA_MARGIN,
    MIN_AA_MARGIN,
    PATTERNS,
    SCHEMA_VERSION,
    Block,
    PairedComparison,
    PositionEffect,
    aa_log_ratios,
    aa_margin,
    block_log_ratios,
    block_patterns,
    blocks_needed,
    minimum_detectable_effect,
    paired_comparison,
    slot_position_effect,
)
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
