"""The validity benchmark's simulation and its claims (fewer simulations than ``benchmarks/bench_validity.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.perf.validity_sim import METHODS, VALIDITY_SCENARIOS, SimScenario, score_methods, simulate_machine


def test_machine_model():
    logs = simulate_machine(5, np.random.default_rng(0), drift=0.1, noise_sd=0.0, block_sd=0.0)
    assert logs.shape == (20,) and logs[-1] == pytest.approx(math.log1p(0.1)) and logs[0] == 0.0
    pen = simulate_machine(2, np.random.default_rng(0), first_slot_penalty=0.1, noise_sd=0.0, block_sd=0.0)
    assert pen[[0, 4]] == pytest.approx([math.log(0.9)] * 2) and pen[1] == 0.0


def test_validity_claims_with_fewer_simulations():
    n = 200
    limit = 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)
    by_label = {s.label: s for s in VALIDITY_SCENARIOS}
    for label in ("A/A, linear drift +10%", "A/A, first-slot penalty 5%"):
        r = score_methods(by_label[label], n_experiments=n, seed=1)
        assert r[METHODS[0]]["flag_rate"] <= limit, label
        assert r[METHODS[1]]["flag_rate"] > limit  # the unpaired sequential U test does not hold its level
    drift = score_methods(by_label["A/A, linear drift +10%"], n_experiments=n, seed=2)
    assert drift[METHODS[1]]["flag_rate"] > 0.5 and drift[METHODS[2]]["flag_rate"] > 0.5
    power = score_methods(by_label["real effect 3%"], n_experiments=n, seed=3)
    best_anchor = max(power[m]["correct_rate"] for m in METHODS[1:])
    assert power[METHODS[0]]["correct_rate"] >= best_anchor
    assert power[METHODS[0]]["wrong_way_rate"] == 0.0


def test_score_methods_input_checks():
    with pytest.raises(InputError):
        score_methods(SimScenario("x"), n_experiments=0)
    with pytest.raises(InputError):
        score_methods(SimScenario("x"), n_blocks=1)
