"""bfloat16 is loaded only when one is met: ml_dtypes costs ~0.6 s of every command's start-up otherwise."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import numpy as np
import logitlab.experiments.ab, logitlab.dumps.stats
from logitlab.numerics.compare import compare_logits
rng = np.random.default_rng(0)
a = rng.standard_normal((3, 50)).astype(np.float32)
b = a.copy(); b[1, 7] = np.nextafter(b[1, 7], np.float32(np.inf))
assert compare_logits(a, b).max_ulp == 1
assert "ml_dtypes" not in sys.modules, "a float32 comparison loaded ml_dtypes"
import ml_dtypes
from logitlab.numerics.ulp import SUPPORTED_DTYPES, ulp_distance
from logitlab.numerics._kernel import spacing
x = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
y = np.array([1.0, 2.015625], dtype=ml_dtypes.bfloat16)  # the next bfloat16 after 2
assert ulp_distance(x, y).tolist() == [0, 1]
assert compare_logits(x[None], y[None]).max_ulp == 1
assert spacing(np.array([1.0]), "bfloat16")[0] == 2.0 ** -7
assert np.dtype(ml_dtypes.bfloat16) in SUPPORTED_DTYPES
print("ok")
"""


def test_float32_never_loads_ml_dtypes_and_bfloat16_still_works():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
