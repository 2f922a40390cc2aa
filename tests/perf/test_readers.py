"""Benchmark-file readers on files the real tools wrote (or, for criterion and llama-bench, their documented layout)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from bench_tools import gbench_binary, run_gbench, run_hyperfine, run_pyperf, run_pytest_benchmark
from logitlab.errors import InputError
from logitlab.perf.readers import FORMATS, detect_format, read_benchmark_file
from logitlab.perf.readers.criterion import baselines

DATA = Path(__file__).resolve().parents[1] / "data" / "bench"


@pytest.fixture(scope="module")
def gbench_exe(tmp_path_factory):
    return gbench_binary(tmp_path_factory.mktemp("gbench"))


def test_gbench_repetitions_are_samples(gbench_exe, tmp_path):
    bench = read_benchmark_file(run_gbench(gbench_exe, tmp_path / "gb.json", repetitions=6))
    assert bench.format == "gbench" == detect_format(tmp_path / "gb.json")
    assert list(bench.scenarios) == ["BM_sum/64", "BM_sum/512", "BM_copy"]
    s = bench.scenarios["BM_sum/512"]
    assert len(s.samples) == 6 and s.unit == "s" and not s.higher_is_better
    assert all(1e-10 < v < 1e-3 for v in s.samples)  # ns converted to seconds
    assert s.statistic == "geometric mean of 6 samples"
    assert bench.context["num_cpus"] >= 1


def test_gbench_aggregates_only_is_a_named_summary(gbench_exe, tmp_path):
    bench = read_benchmark_file(run_gbench(gbench_exe, tmp_path / "agg.json", repetitions=3, aggregates_only=True))
    s = bench.scenarios["BM_copy"]
    assert s.samples == ()
    assert s.statistic.startswith("Google Benchmark median aggregate") and "no CI" in s.statistic


def test_gbench_error_entries_dropped_with_note(tmp_path):
    data = {"context": {}, "benchmarks": [
        {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 10.0, "cpu_time": 10.0,
         "time_unit": "us"},
        {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "error_occurred": True,
         "error_message": "boom", "real_time": 0, "cpu_time": 0, "time_unit": "us"}]}
    (tmp_path / "e.json").write_text(json.dumps(data))
    s = read_benchmark_file(tmp_path / "e.json").scenarios["BM_a"]
    assert s.samples == pytest.approx((1e-5,)) and "error_occurred dropped" in s.note


def test_pytest_benchmark_with_and_without_data(tmp_path):
    (tmp_path / "a").mkdir()
    with_data = read_benchmark_file(run_pytest_benchmark(tmp_path / "a", tmp_path / "pb.json"))
    assert with_data.format == "pytest-benchmark"
    assert set(with_data.scenarios) == {"test_pb.py::test_small", "test_pb.py::test_big"}
    assert len(with_data.scenarios["test_pb.py::test_big"].samples) >= 8
    (tmp_path / "b").mkdir()
    saved = read_benchmark_file(run_pytest_benchmark(tmp_path / "b", tmp_path / "saved.json", save=True))
    s = saved.scenarios["test_pb.py::test_small"]
    assert s.samples == () and s.statistic.startswith("pytest-benchmark median") and "no CI" in s.statistic


def test_pyperf_values_and_run_times_and_gzip(tmp_path):
    out = run_pyperf(tmp_path / "pp.json")
    run_pyperf(out, append=True)
    bench = read_benchmark_file(out)
    assert bench.format == "pyperf"
    s = bench.scenarios["sum50"]
    assert len(s.samples) == 10 and len(set(s.groups)) == 2  # two worker runs, 5 values each
    gz = tmp_path / "pp.json.gz"
    gz.write_bytes(gzip.compress(out.read_bytes()))
    assert read_benchmark_file(gz).scenarios["sum50"].samples == s.samples


def test_hyperfine_runs_and_failures(tmp_path):
    bench = read_benchmark_file(run_hyperfine(tmp_path / "hf.json", ["true", "sleep 0.001"]))
    assert bench.format == "hyperfine" and list(bench.scenarios) == ["true", "sleep 0.001"]
    assert len(bench.scenarios["true"].samples) == 5
    run_hyperfine(tmp_path / "fail.json", ["false"], ignore_failure=True)
    with pytest.raises(InputError, match="every run of 'false' exited non-zero"):
        read_benchmark_file(tmp_path / "fail.json")


def test_criterion_layout_and_baselines():
    root = DATA / "criterion"
    assert baselines(root) == ["main", "new"]
    main = read_benchmark_file(root, baseline="main")
    new = read_benchmark_file(root)
    assert main.format == new.format == "criterion" == detect_format(root)
    assert set(main.scenarios) == {"matmul/f32_256", "gather/f16_4096"}
    assert set(new.scenarios) == {"matmul/f32_256", "gather/f16_4096", "add/f32_1024"}
    s = new.scenarios["matmul/f32_256"]
    assert len(s.samples) == 20 and 40e-6 < s.summary < 48e-6  # times/iters in ns -> s
    with pytest.raises(InputError, match="no criterion baseline 'release'.*main, new"):
        read_benchmark_file(root, baseline="release")


def test_criterion_estimates_only(tmp_path):
    folder = tmp_path / "crit" / "g" / "f" / "new"
    shutil.copytree(DATA / "criterion" / "gather" / "f16_4096" / "new", folder)
    (folder / "sample.json").unlink()
    s = read_benchmark_file(tmp_path / "crit").scenarios["gather/f16_4096"]
    assert s.samples == () and s.statistic.startswith("criterion median estimate")


def test_llama_bench_json_and_jsonl_agree():
    base = read_benchmark_file(DATA / "llama-bench-base.json")
    pr = read_benchmark_file(DATA / "llama-bench-pr.jsonl")
    assert base.format == pr.format == "llama-bench"
    assert list(base.scenarios) == list(pr.scenarios) == ["llama ?B Q4_1 pp64", "llama ?B Q4_1 tg16"]
    s = pr.scenarios["llama ?B Q4_1 tg16"]
    assert s.unit == "tokens/s" and s.higher_is_better and len(s.samples) == 5


def test_llama_bench_varying_parameter_names_the_scenario(tmp_path):
    rows = json.loads((DATA / "llama-bench-base.json").read_text())
    rows[1] = {**rows[1], "n_threads": 4}
    (tmp_path / "lb.json").write_text(json.dumps(rows))
    assert list(read_benchmark_file(tmp_path / "lb.json").scenarios) == [
        "llama ?B Q4_1 pp64 n_threads=2", "llama ?B Q4_1 tg16 n_threads=4"]


@pytest.mark.parametrize("content, message", [
    ("", "is empty"),
    ("   \n", "is empty"),
    ("{not json", "not valid JSON"),
    ('{"hello": 1}', "not a known benchmark format"),
    ("[1, 2, 3]", "not a known benchmark format"),
])
def test_bad_files(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_benchmark_file(path)


def test_missing_file_and_wrong_format(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_benchmark_file(tmp_path / "nope.json")
    with pytest.raises(InputError, match="looks like llama-bench output, not gbench"):
        read_benchmark_file(DATA / "llama-bench-base.json", format="gbench")
    with pytest.raises(InputError, match="format 'jmh' is not known"):
        read_benchmark_file(DATA / "llama-bench-base.json", format="jmh")
    with pytest.raises(InputError, match="criterion's output is a folder"):
        read_benchmark_file(DATA / "llama-bench-base.json", format="criterion")
    assert len(FORMATS) == 6


@pytest.mark.parametrize("value", [0, -1.5, "fast", None])
def test_zero_negative_or_non_numeric_times(tmp_path, value):
    data = {"results": [{"command": "x", "times": [0.1, value, 0.1], "exit_codes": [0, 0, 0]}]}
    (tmp_path / "hf.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="scenario 'x' sample 1"):
        read_benchmark_file(tmp_path / "hf.json")


def test_empty_result_list(tmp_path):
    (tmp_path / "gb.json").write_text(json.dumps({"context": {}, "benchmarks": []}))
    with pytest.raises(InputError, match="holds no benchmark results"):
        read_benchmark_file(tmp_path / "gb.json")
