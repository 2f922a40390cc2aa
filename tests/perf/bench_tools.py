"""Run the real benchmark tools to produce the files the readers are tested on.

Each helper runs the tool for a few milliseconds per benchmark. Debian tools
that are absent make the calling test skip, naming the package
(``scripts/install-bench-tools.sh`` installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GBENCH_SOURCE = r"""
#include <benchmark/benchmark.h>
#include <vector>
static void BM_sum(benchmark::State& state) {
    std::vector<int> v(state.range(0), 1);
    for (auto _ : state) { long t = 0; for (int x : v) t += x; benchmark::DoNotOptimize(t); }
}
BENCHMARK(BM_sum)->Arg(64)->Arg(512);
static void BM_copy(benchmark::State& state) {
    std::vector<char> a(4096, 1), b(4096);
    for (auto _ : state) { b = a; benchmark::DoNotOptimize(b.data()); }
}
BENCHMARK(BM_copy);
BENCHMARK_MAIN();
"""

PYTEST_BENCH_SOURCE = """
def work(n):
    return sum(range(n))

def test_small(benchmark):
    benchmark(work, 50)

def test_big(benchmark):
    benchmark(work, 500)
"""


def gbench_binary(folder: Path) -> Path:
    """Compile a two-family Google Benchmark program with g++; skip if the tool chain is absent."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed (Debian package g++)")
    if not Path("/usr/include/benchmark/benchmark.h").is_file():
        pytest.skip("Google Benchmark is not installed: needs Debian package libbenchmark-dev "
                    "(scripts/install-bench-tools.sh)")
    src = folder / "gb.cc"
    src.write_text(GBENCH_SOURCE)
    exe = folder / "gb"
    subprocess.run(["g++", "-O2", str(src), "-o", str(exe), "-lbenchmark", "-lpthread"], check=True,
                   capture_output=True)
    return exe


def run_gbench(exe: Path, out: Path, *, repetitions: int = 6, aggregates_only: bool = False) -> Path:
    args = [str(exe), f"--benchmark_out={out}", "--benchmark_out_format=json",
            f"--benchmark_repetitions={repetitions}", "--benchmark_min_time=0.002"]
    if aggregates_only:
        args.append("--benchmark_report_aggregates_only=true")
    subprocess.run(args, check=True, capture_output=True)
    return out


def run_pytest_benchmark(folder: Path, out: Path, *, save: bool = False) -> Path:
    """Run pytest-benchmark on two tiny benchmarks; ``save=True`` writes a --benchmark-save file (no data)."""
    pytest.importorskip("pytest_benchmark", reason="pytest-benchmark is not installed (pip install pytest-benchmark)")
    (folder / "test_pb.py").write_text(PYTEST_BENCH_SOURCE)
    (folder / "pytest.ini").write_text("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_pb.py",
            "--benchmark-min-rounds=8", "--benchmark-max-time=0.002", "--benchmark-warmup=off"]
    if save:
        args += ["--benchmark-save=run", f"--benchmark-storage=file://{folder / 'storage'}"]
    else:
        args.append(f"--benchmark-json={out}")
    # not as an xdist worker: pytest-benchmark disables itself when PYTEST_XDIST_WORKER is set (inherited from the
    # worker this suite runs in, pyproject's addopts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    subprocess.run(args, check=True, capture_output=True, cwd=folder, env=env)
    if save:
        saved = sorted((folder / "storage").rglob("*.json"))[-1]
        shutil.copy(saved, out)
    return out


def run_pyperf(out: Path, *, statement: str = "sum(range(50))", append: bool = False) -> Path:
    """One pyperf worker process (5 values) on a timeit statement."""
    pytest.importorskip("pyperf", reason="pyperf is not installed (pip install pyperf)")
    flag = "--append" if append else "-o"
    subprocess.run([sys.executable, "-m", "pyperf", "timeit", "-q", "-p", "1", "-n", "5", "-w", "1", "-l", "10",
                    "--name", "sum50", flag, str(out), statement], check=True, capture_output=True)
    return out


def run_hyperfine(out: Path, commands: list[str], *, runs: int = 5, ignore_failure: bool = False) -> Path:
    if shutil.which("hyperfine") is None:
        pytest.skip("hyperfine is not installed: needs Debian package hyperfine (scripts/install-bench-tools.sh)")
    args = ["hyperfine", "-N", "--runs", str(runs), "--warmup", "1", "--style", "none", "--export-json", str(out)]
    if ignore_failure:
        args.append("-i")
    subprocess.run(args + commands, check=True, capture_output=True)
    return out
