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

#: Public names by defining module, each imported on first access (PEP 562), so that
#: ``from logitlab.numerics.verdict import VERDICTS`` (the CLI's option choices) does not load
#: numpy, numba and the comparison kernel.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "logitlab.numerics.compare": ("compare_logits", "LogitComparison", "HISTOGRAM_BINS", "KLD_STATS",
                                  "SCHEMA_VERSION"),
    "logitlab.numerics.assertions": ("assert_logits_equivalent", "assert_logits_equal", "assert_logits_close",
                                     "assert_verdict", "assert_probe_sensitive"),
    "logitlab.numerics.ulp": ("ulp_distance", "float_hex", "float_bits", "ULP_NAN_MISMATCH"),
    "logitlab.numerics.verdict": ("classify", "severity", "Thresholds", "Verdict", "VERDICTS"),
    "logitlab.numerics.floor": ("NoiseFloor", "measure_floor", "topk_spread"),
})
