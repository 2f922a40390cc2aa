"""``bench compare --time real|cpu`` on files the real tools wrote (Google Benchmark, hyperfine)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from logitlab.errors import InputError
from logitlab.perf.compare_files import compare_benchmarks
from logitlab.perf.readers import read_benchmark_file

from bench_tools import gbench_binary, run_gbench, run_pyperf


@pytest.fixture(scope="module")
def two_gbench_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clock")
    exe = gbench_binary(folder)
    return run_gbench(exe, folder / "base.json"), run_gbench(exe, folder / "pr.json")


def _geomean_ratio(base, pr, field, name):
    """Independent: the ratio of geometric means of one field of the iteration entries of ``name``."""
    def values(path):
        data = json.loads(path.read_text())
        return [e[field] for e in data["benchmarks"]
                if e.get("run_type", "iteration") == "iteration" and e.get("run_name", e["name"]) == name]
    b, p = values(base), values(pr)
    assert len(b) >= 5 and len(p) >= 5
    return math.exp(np.mean(np.log(p)) - np.mean(np.log(b)))


@pytest.mark.parametrize("clock, field", [("real", "real_time"), ("cpu", "cpu_time")])
def test_gbench_ratio_follows_the_chosen_clock(two_gbench_runs, clock, field):
    base, pr = two_gbench_runs
    cmp = compare_benchmarks(read_benchmark_file(base, time=clock), read_benchmark_file(pr, time=clock),
                             n_bootstrap=200)
    assert cmp.time == clock
    for s in cmp.scenarios:
        assert s.ratio == pytest.approx(_geomean_ratio(base, pr, field, s.name), rel=1e-12)
    other = "cpu_time" if field == "real_time" else "real_time"
    # the two clocks really are different numbers in these files (else the test could not fail)
    assert any(abs(s.ratio - _geomean_ratio(base, pr, other, s.name)) > 1e-12 for s in cmp.scenarios)


def test_cli_time_cpu_and_a_wall_only_format(two_gbench_runs, tmp_path):
    base, pr = two_gbench_runs
    out = tmp_path / "cmp.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "bench", "compare", str(base), str(pr), "--time", "cpu",
                           "--json", str(out), "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["time"] == "cpu"
    pyperf = run_pyperf(tmp_path / "p.json")
    proc = subprocess.run([sys.executable, "-m", "logitlab", "bench", "compare", str(pyperf), str(pyperf),
                           "--time", "cpu"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --time cpu: ") and "wall-clock time only" in \
        proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_hyperfine_cpu_time_is_user_plus_system(tmp_path):
    if shutil.which("hyperfine") is None:
        pytest.fail("hyperfine is not installed (Debian package hyperfine; make test installs it when root)")
    out = tmp_path / "h.json"
    work = f"{sys.executable} -c 'sum(range(300000))'"  # real CPU work: user + system time is not zero
    subprocess.run(["hyperfine", "--runs", "3", "--warmup", "1", "--export-json", str(out), "-N", work],
                   check=True, capture_output=True)
    entry = json.loads(out.read_text())["results"][0]
    cpu = read_benchmark_file(out, time="cpu").scenarios[entry["command"]]
    assert cpu.summary == pytest.approx(entry["user"] + entry["system"]) and not cpu.samples
    with pytest.raises(InputError, match="holds real time but .* cpu time"):
        compare_benchmarks(read_benchmark_file(out), read_benchmark_file(out, time="cpu"))
