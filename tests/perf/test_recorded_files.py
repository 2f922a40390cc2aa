"""Files the real tools wrote, checked in (tests/data/bench): the readers and ``bench compare`` numbers
against an independent computation from the raw JSON, with no tool needed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from logitlab.perf.compare_files import compare_benchmarks, holm_adjust
from logitlab.perf.readers import read_benchmark_file

DATA = Path(__file__).resolve().parents[1] / "data" / "bench"
PAIRS = {"gbench": ("gbench-real-base.json", "gbench-real-pr.json"),
         "hyperfine": ("hyperfine-real-base.json", "hyperfine-real-pr.json")}


def _raw_samples(path: Path, fmt: str) -> dict[str, list[float]]:
    """Seconds per sample straight from the JSON (independent of logitlab's readers)."""
    data = json.loads(path.read_text())
    if fmt == "hyperfine":
        return {r["command"]: [t for t, c in zip(r["times"], r["exit_codes"]) if c == 0] for r in data["results"]}
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    out: dict[str, list[float]] = {}
    for e in data["benchmarks"]:
        if e.get("run_type") == "iteration":
            out.setdefault(e["run_name"], []).append(e["real_time"] * scale[e["time_unit"]])
    return out


@pytest.mark.parametrize("fmt", sorted(PAIRS))
def test_recorded_files_are_read_sample_for_sample(fmt):
    for name in PAIRS[fmt]:
        path = DATA / name
        read = read_benchmark_file(path)
        assert read.format == fmt
        raw = _raw_samples(path, fmt)
        assert list(read.scenarios) == list(raw)
        for scenario, samples in raw.items():
            assert read.scenarios[scenario].samples == pytest.approx(samples, rel=1e-15)


@pytest.mark.parametrize("fmt", sorted(PAIRS))
def test_compare_numbers_against_an_independent_computation(fmt):
    base_path, pr_path = (DATA / n for n in PAIRS[fmt])
    result = compare_benchmarks(read_benchmark_file(base_path), read_benchmark_file(pr_path), n_bootstrap=2000,
                                seed=1)
    base, pr = _raw_samples(base_path, fmt), _raw_samples(pr_path, fmt)
    logs = []
    for s in result.scenarios:
        b, c = np.log(base[s.name]), np.log(pr[s.name])
        log_ratio = c.mean() - b.mean()  # ratio of geometric means
        logs.append(log_ratio)
        assert s.ratio == pytest.approx(math.exp(log_ratio), rel=1e-12)
        assert s.base == pytest.approx(math.exp(b.mean()), rel=1e-12)
        # the bootstrap CI against a Welch normal approximation of the same log ratio: same centre and width
        se = math.sqrt(b.var(ddof=1) / b.size + c.var(ddof=1) / c.size)
        z = stats.norm.ppf(0.975)
        lo, hi = math.log(s.ci_low), math.log(s.ci_high)
        assert lo < log_ratio < hi
        assert (hi - lo) == pytest.approx(2 * z * se, rel=0.35)
        # the status from the rule, recomputed: inside ±δ unchanged; beyond with Holm's p < 0.05 a change
        bound = math.log1p(s.margin)
        if -bound < lo and hi < bound:
            assert s.status == "unchanged"
        elif s.p_holm is not None and s.p_holm < 0.05:
            assert s.status == ("regressed" if log_ratio > 0 else "improved")
        else:
            assert s.status == "inconclusive"
    assert result.geomean_ratio == pytest.approx(math.exp(np.mean(logs)), rel=1e-12)
    tested = [s.p_change for s in result.scenarios if s.p_change is not None]
    assert [s.p_holm for s in result.scenarios if s.p_change is not None] == pytest.approx(_holm(tested))


def _holm(p: list[float]) -> list[float]:
    """Holm (1979), written out: sort, scale by (m - i), running maximum, cap at 1, original order."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_matches_the_written_out_procedure():
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = rng.uniform(0, 0.2, rng.integers(1, 12)).tolist()
        assert holm_adjust(p).tolist() == pytest.approx(_holm(p))
