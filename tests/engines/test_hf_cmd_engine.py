"""``examples/hf_cmd_engine.py``: transformers behind the ``cmd`` protocol, and the faults it plants.

The second reference engine of the protocol: the same logits as the ``hf`` engine, and the engine whose
float32 vs bfloat16 pair brackets the detection limit through a real engine (issue #32).
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines.variant import parse_variant
from logitlab.engines.workload import run_workload
from logitlab.experiments.ab import AbConfig, run_ab
from logitlab.experiments.isolation import load_engine

from conftest import SHORT_PROMPT

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_cmd_engine.py"
TEMPLATE = (f"{sys.executable} {EXAMPLE} --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}} "
            "--n-decode {n_decode}")
N_DECODE = 4

pytest.importorskip("transformers", reason="the hf extra (make test installs it)")


def cmd_variant(label="control", **env):
    return dataclasses.replace(parse_variant("", label, default_engine=f"cmd:{TEMPLATE}"), env=env)


@pytest.mark.engine
def test_protocol_loses_nothing_against_the_hf_engine():
    """The cmd engine in float32 gives the hf engine's logits bit for bit, greedy tokens included."""
    hf = load_engine(parse_variant("hf:dtype=float32", "control", default_engine="llamacpp"))
    try:
        ids = hf.tokenize(SHORT_PROMPT)
        direct = run_workload(hf, ids, N_DECODE, None)
    finally:
        hf.close()
    cmd = load_engine(cmd_variant())
    try:
        wrapped = run_workload(cmd, ids, N_DECODE, None)
    finally:
        cmd.close()
    assert list(wrapped.generated) == list(direct.generated)
    a, b = np.asarray(direct.logits), np.asarray(wrapped.logits)
    assert a.shape == b.shape == (len(ids) + N_DECODE, 49152)
    assert np.array_equal(a, b)


@pytest.mark.engine
def test_the_detection_limit_brackets_a_logit_planted_by_the_engine_under_bfloat16():
    """Issue #32, the hf float32 vs bfloat16 pair: the argmax-up limit ab reports is planted by the engine
    (HF_CMD_PLANT, its own argmax token at the hardest position): 1.1× reads divergent there, 0.8× does not."""
    control = cmd_variant(HF_CMD_DTYPE="float32")

    def ab(plant=None, detection=False):
        env = {"HF_CMD_DTYPE": "bfloat16", **({"HF_CMD_PLANT": plant} if plant else {})}
        return run_ab(AbConfig(control=control, candidate=cmd_variant("candidate", **env), prompt=SHORT_PROMPT,
                               n_decode=N_DECODE, repeats=1, warmup=0, detection=detection))

    clean = ab(detection=True)
    assert clean.verdict.word in ("noise", "near-tie"), clean.verdict.evidence
    limit = clean.detection.shape("argmax-up")
    assert limit.limit is not None and limit.caught == limit.probed and limit.above == "divergent"
    p, token = limit.position, limit.token
    above = ab(f"argmax-up:{p}:{1.1 * limit.limit:.6g}:{token}")
    below = ab(f"argmax-up:{p}:{0.8 * limit.limit:.6g}:{token}")
    print(f"\nargmax-up limit {limit.limit:.4g} at position {p}: 1.1× -> {above.verdict.word}, "
          f"0.8× -> {below.verdict.word}")
    assert above.verdict.word == "divergent" and p in above.verdict.outside
    assert below.verdict.word != "divergent" and p not in below.verdict.outside


@pytest.mark.parametrize("env, message", [
    ({"HF_CMD_DTYPE": "float64"}, "error: HF_CMD_DTYPE='float64' is not one of float32, bfloat16, float16"),
    ({"HF_CMD_PLANT": "sideways:0:1"}, "error: HF_CMD_PLANT='sideways:0:1': SHAPE is argmax-up"),
    ({"HF_CMD_PLANT": "argmax-up:0"}, "error: HF_CMD_PLANT='argmax-up:0' is not SHAPE:POSITION:SIZE[:TOKEN]"),
    ({"HF_CMD_THREADS": "0"}, "error: HF_CMD_THREADS=0 is not a positive integer"),
    ({"HF_CMD_THREADS": "two"}, "error: HF_CMD_THREADS='two' is not an integer"),
])
@pytest.mark.engine
def test_bad_knobs_are_one_error_line_and_exit_2(tmp_path, env, message):
    """Each knob is checked before the model loads (~6 s of imports here): a ``torch`` that cannot be imported
    comes first on the path, and the knob's error is still the one line."""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("1 2 3")
    (tmp_path / "torch.py").write_text("raise ImportError('the engine loaded before it checked its knobs')\n")
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--tokens", str(tokens), "--logits",
                           str(tmp_path / "l.npy")], capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": path})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr
