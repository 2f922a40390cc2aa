"""Numerics: compare two logit arrays and classify how they differ.

Pure numpy; nothing here prints, logs or plots.

>>> import numpy as np
>>> from logitlab.numerics import compare_logits, classify
>>> ref = np.zeros((4, 16), np.float32); ref[:, 2] = 3.0
>>> c = compare_logits(ref, ref.copy())
>>> bool(c), classify(c).word
(True, 'bit-exact')
"""

from logitlab.numerics.compare import (
    HISTOGRAM_BINS,
    KLD_STATS,
    SCHEMA_VERSION,
    LogitComparison,
    compare_logits,
)
from logitlab.numerics.assertions import (
    assert_logits_close,
    assert_logits_equal,
    assert_logits_equivalent,
    assert_probe_sensitive,
    assert_verdict,
)
from logitlab.numerics.ulp import ULP_NAN_MISMATCH, float_bits, float_hex, ulp_distance
from logitlab.numerics.floor import NoiseFloor, measure_floor, topk_spread
from logitlab.numerics.verdict import VERDICTS, Thresholds, Verdict, classify, severity

__all__ = [
    "compare_logits",
    "LogitComparison",
    "assert_logits_equivalent",
    "assert_logits_equal",
    "assert_logits_close",
    "assert_verdict",
    "assert_probe_sensitive",
    "ulp_distance",
    "float_hex",
    "float_bits",
    "ULP_NAN_MISMATCH",
    "classify",
    "severity",
    "Thresholds",
    "Verdict",
    "VERDICTS",
    "NoiseFloor",
    "measure_floor",
    "topk_spread",
    "HISTOGRAM_BINS",
    "KLD_STATS",
    "SCHEMA_VERSION",
]
