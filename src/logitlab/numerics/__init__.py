"""Numerics: compare two logit arrays and classify how they differ.

Pure numpy; nothing here prints, logs or plots.

>>> import numpy as np
>>> from logitlab.numerics import compare_logits, classify
>>> ref = np.zeros((4, 16), np.float32); ref[:, 2] = 3.0
>>> c = compare_logits(ref, ref.copy())
>>> bool(c), classify(c).word
(True, 'bit-exact')
"""

from __future__ import annotations

from logitlab.lazy import lazy_exports

#: Public name -> the module that defines it; imported on first access (PEP 562), so that
#: ``from logitlab.numerics.verdict import VERDICTS`` (the CLI's option choices) does not load
#: numpy, numba and the comparison kernel.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("HISTOGRAM_BINS", "KLD_STATS", "SCHEMA_VERSION", "LogitComparison", "compare_logits"),
                    "logitlab.numerics.compare"),
    **dict.fromkeys(("assert_logits_close", "assert_logits_equal", "assert_logits_equivalent", "assert_probe_sensitive",
                     "assert_verdict"), "logitlab.numerics.assertions"),
    **dict.fromkeys(("ULP_NAN_MISMATCH", "float_bits", "float_hex", "ulp_distance"), "logitlab.numerics.ulp"),
    **dict.fromkeys(("VERDICTS", "Thresholds", "Verdict", "classify", "severity"), "logitlab.numerics.verdict"),
    **dict.fromkeys(("NoiseFloor", "measure_floor", "topk_spread"), "logitlab.numerics.floor"),
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


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
