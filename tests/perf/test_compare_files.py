"""bench compare / calibrate logic: statuses from CI and margin, Holm, one-sided scenarios, noise margins."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench_tools import gbench_binary, run_gbench, run_pyperf
from logitlab.errors import InputError
from logitlab.report.speed_text import scenario_reason
from logitlab.perf.calibration import NoiseProfile, calibrate_noise
from logitlab.perf.compare_files import compare_benchmarks, holm_adjust
from logitlab.perf.readers import read_benchmark_file
from logitlab.perf.readers.base import BenchmarkFile, make_scenario

DATA = Path(__file__).resolve().parents[1] / "data" / "bench"


def make_file(scenarios: dict[str, tuple[float, float, int]], *, fmt: str = "gbench", seed: int = 0,
              summary_only: bool = False, path: str = "f.json") -> BenchmarkFile:
    """scenarios: name -> (true time s, log noise sd, n samples)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (value, sd, n) in scenarios.items():
        samples = value * np.exp(rng.normal(0.0, sd, n))
        out[name] = make_scenario(path=path, name=name, unit="s", higher_is_better=False,
                                  samples=() if summary_only else samples, summary=float(np.median(samples)),
                                  summary_statistic="median")
    return BenchmarkFile(path, fmt, out)


def test_holm_matches_the_definition():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, 1*0.04 -> cummax 0.02, 0.03, 0.06, 0.06
    assert holm_adjust(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjust([]).size == 0
    assert holm_adjust([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_statuses_from_ci_and_margin():
    base = make_file({"slow": (1e-3, 0.01, 30), "same": (1e-3, 0.01, 30), "fast": (1e-3, 0.01, 30),
                      "tiny": (1e-3, 0.002, 200), "noisy": (1e-3, 0.15, 10)}, seed=1)
    cand = make_file({"slow": (1.2e-3, 0.01, 30), "same": (1e-3, 0.01, 30), "fast": (0.8e-3, 0.01, 30),
                      "tiny": (1.005e-3, 0.002, 200), "noisy": (1.05e-3, 0.15, 10)}, seed=2)
    result = compare_benchmarks(base, cand, margin=0.03, n_bootstrap=2000)
    status = {s.name: s.status for s in result.scenarios}
    assert status == {"slow": "regressed", "same": "unchanged", "fast": "improved", "tiny": "unchanged",
                      "noisy": "inconclusive"}
    tiny = next(s for s in result.scenarios if s.name == "tiny")
    assert tiny.ci_low > 1.0  # significant, but inside the 3 % margin: not a regression
    assert [s.name for s in result.worst_first()][0] == "slow"
    assert result.counts == {"regressed": 1, "inconclusive": 1, "unchanged": 2, "improved": 1}
    slow = next(s for s in result.scenarios if s.name == "slow")
    assert slow.ci_low < slow.ratio < slow.ci_high and slow.change == pytest.approx(slow.ratio - 1)
    assert slow.ci_method == "bootstrap (independent)" and slow.margin_source == "option"


def test_higher_is_better_orientation():
    def file(ts, seed):
        rng = np.random.default_rng(seed)
        return BenchmarkFile("l.json", "llama-bench", {"tg": make_scenario(
            path="l.json", name="tg", unit="tokens/s", higher_is_better=True,
            samples=ts * np.exp(rng.normal(0, 0.005, 20)))})
    assert compare_benchmarks(file(100, 1), file(120, 2), n_bootstrap=1000).scenarios[0].status == "improved"
    assert compare_benchmarks(file(100, 1), file(80, 2), n_bootstrap=1000).scenarios[0].status == "regressed"


def test_holm_turns_borderline_flags_inconclusive():
    # 1 scenario clearly beyond the margin alone is flagged; among 40 A/A-like ones its p must survive x40.
    rng = np.random.default_rng(3)
    names = {f"s{i}": (1e-3, 0.05, 6) for i in range(40)}
    base = make_file(names, seed=4)
    cand = make_file(names, seed=5)
    result = compare_benchmarks(base, cand, margin=0.01, n_bootstrap=999, seed=int(rng.integers(100)))
    raw_flags = sum(s.p_change < 0.05 for s in result.scenarios)
    holm_flags = sum(s.status in ("regressed", "improved") for s in result.scenarios)
    assert holm_flags <= raw_flags
    assert holm_flags == 0  # no true change: family-wise control keeps them all out
    assert raw_flags == 1  # seeded files: one of the 40 A/A scenarios has a raw p < 0.05, Holm keeps it out
    assert any("not after Holm" in scenario_reason(s, result) for s in result.scenarios)


def test_one_sided_scenarios_listed_and_nothing_in_common():
    base = make_file({"a": (1e-3, 0.01, 10), "b": (1e-3, 0.01, 10)})
    cand = make_file({"a": (1e-3, 0.01, 10), "c": (1e-3, 0.01, 10)}, seed=1)
    result = compare_benchmarks(base, cand, n_bootstrap=500)
    assert result.only_base == ["b"] and result.only_candidate == ["c"]
    assert [s.name for s in result.scenarios] == ["a"]
    with pytest.raises(InputError, match="no scenario is in both files: .* has 'b'; .* has 'c'"):
        compare_benchmarks(make_file({"b": (1, 0.01, 5)}), make_file({"c": (1, 0.01, 5)}), n_bootstrap=500)


def test_mixed_formats_and_bad_options():
    a = make_file({"a": (1e-3, 0.01, 10)})
    with pytest.raises(InputError, match="mixed formats"):
        compare_benchmarks(a, make_file({"a": (1e-3, 0.01, 10)}, fmt="pyperf"))
    with pytest.raises(InputError, match="margin"):
        compare_benchmarks(a, a, margin=-0.1)
    with pytest.raises(InputError, match="confidence"):
        compare_benchmarks(a, a, confidence=95)


def test_summary_only_has_no_ci_and_is_inconclusive():
    base = make_file({"a": (1e-3, 0.01, 10)}, summary_only=True)
    cand = make_file({"a": (1.5e-3, 0.01, 10)}, summary_only=True, seed=1)
    result = compare_benchmarks(base, cand)
    s = result.scenarios[0]
    assert s.status == "inconclusive" and s.ci_low is None and s.ci_method == "none"
    assert "no CI can be given" in scenario_reason(s, result) and "median" in s.statistic


def test_calibrated_noise_sets_each_margin():
    spec = {"quiet": (1e-3, 0.002, 30), "noisy": (1e-3, 0.002, 30)}
    runs = [make_file(spec, seed=s) for s in range(3)]
    # the noisy scenario moves 20-25 % between runs of the same code (the seed's runner noise)
    for i, factor in enumerate((1.0, 1.25, 0.8)):
        sc = runs[i].scenarios["noisy"]
        runs[i].scenarios["noisy"] = make_scenario(path="f", name="noisy", unit="s", higher_is_better=False,
                                                   samples=[v * factor for v in sc.samples])
    profile = calibrate_noise(runs)
    assert profile.scenarios["noisy"].margin > 0.3 > 0.01 == profile.scenarios["quiet"].margin
    assert profile.scenarios["noisy"].n_runs == 3 and len(profile.scenarios["noisy"].aa_ratios) == 2
    again = NoiseProfile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again == profile

    base = make_file(spec, seed=10)
    cand = make_file({"quiet": (1.1e-3, 0.002, 30), "noisy": (1.1e-3, 0.002, 30)}, seed=11)
    fixed = {s.name: s.status for s in compare_benchmarks(base, cand, n_bootstrap=1000).scenarios}
    calibrated = compare_benchmarks(base, cand, noise=profile, n_bootstrap=1000)
    assert fixed == {"quiet": "regressed", "noisy": "regressed"}
    assert {s.name: s.status for s in calibrated.scenarios} == {"quiet": "regressed", "noisy": "unchanged"}
    assert {s.margin_source for s in calibrated.scenarios} == {"noise"}


def test_noise_gives_summary_only_scenarios_a_ci():
    runs = [make_file({"a": (1e-3 * f, 0.01, 10)}, summary_only=True, seed=i) for i, f in enumerate((1, 1.02, 0.99))]
    profile = calibrate_noise(runs)
    base = make_file({"a": (1e-3, 0.01, 10)}, summary_only=True, seed=5)
    cand = make_file({"a": (2e-3, 0.01, 10)}, summary_only=True, seed=6)
    s = compare_benchmarks(base, cand, noise=profile).scenarios[0]
    assert s.ci_method == "A/A noise" and s.ci_low is not None and s.status == "regressed"


def test_calibrate_needs_two_runs_of_one_format():
    a = make_file({"a": (1e-3, 0.01, 10)})
    with pytest.raises(InputError, match="at least 2 runs"):
        calibrate_noise([a])
    with pytest.raises(InputError, match="mixed formats"):
        calibrate_noise([a, make_file({"a": (1e-3, 0.01, 10)}, fmt="pyperf")])
    with pytest.raises(InputError, match="not a logitlab noise profile"):
        NoiseProfile.from_dict({"scenarios": {}})


def test_real_gbench_a_a_and_criterion_fixture(tmp_path):
    exe = gbench_binary(tmp_path)
    a = read_benchmark_file(run_gbench(exe, tmp_path / "a.json"))
    b = read_benchmark_file(run_gbench(exe, tmp_path / "b.json"))
    result = compare_benchmarks(a, b, n_bootstrap=999)
    assert [s.name for s in result.scenarios] == ["BM_sum/64", "BM_sum/512", "BM_copy"]
    assert all(s.base_n == 6 and s.ci_low is not None for s in result.scenarios)
    assert result.geomean_ratio is not None and result.geomean_ci_low is not None

    crit = compare_benchmarks(read_benchmark_file(DATA / "criterion", baseline="main"),
                              read_benchmark_file(DATA / "criterion"), n_bootstrap=999)
    assert {s.name: s.status for s in crit.scenarios} == {"matmul/f32_256": "regressed",
                                                          "gather/f16_4096": "unchanged"}
    assert crit.only_candidate == ["add/f32_1024"]


def test_pyperf_runs_appended_in_turn_are_paired(tmp_path):
    base, cand = tmp_path / "base.json", tmp_path / "pr.json"
    for i in range(3):
        run_pyperf(base, append=i > 0)
        run_pyperf(cand, append=i > 0, statement="sum(range(60))")
    result = compare_benchmarks(read_benchmark_file(base), read_benchmark_file(cand), n_bootstrap=999)
    assert result.scenarios[0].ci_method == "bootstrap (paired by run)"
    sequential = tmp_path / "seq.json"
    for i in range(3):
        run_pyperf(sequential, append=i > 0)
    result = compare_benchmarks(read_benchmark_file(sequential), read_benchmark_file(cand), n_bootstrap=999)
    assert result.scenarios[0].ci_method == "bootstrap (independent)"
    assert math.isfinite(result.scenarios[0].ratio)
