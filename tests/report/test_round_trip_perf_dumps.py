"""A saved result renders again byte for byte: ``logitlab report X --markdown Z`` equals the run's own Markdown.

Each case runs the real command (``--json X --markdown Y``), then ``logitlab
report X --markdown Z`` in a fresh process, and checks Z == Y, the same
terminal report, and that ``report.load_result`` gives the typed result back.
"""

from __future__ import annotations

import sys

import pytest

from conftest import SHORT_PROMPT
from roundtrip_tools import ROOT, assert_round_trip, logitlab

sys.path.insert(0, str(ROOT / "tests" / "perf"))
sys.path.insert(0, str(ROOT / "tests" / "dumps"))
from bench_tools import gbench_binary, run_gbench  # noqa: E402
from rawdumps import base_tensors, plant, raw_path, write_folder  # noqa: E402

DATA = ROOT / "tests" / "data" / "bench"


# --- bench run, bench compare, bench calibrate -------------------------------------------------------------


@pytest.mark.parametrize("sides", [("--candidate", "sleep 0.012"), ("--aa",)], ids=["ab", "aa"])
def test_bench_run_round_trip(tmp_path, sides):
    from logitlab.perf.commands import BenchRunResult

    js, md = tmp_path / "run.json", tmp_path / "run.md"
    proc = logitlab("bench", "run", "--control", "sleep 0.01", *sides, "--blocks", "3", "--warmup", "0",
                    "--json", js, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, BenchRunResult)
    assert len(result.runs) == 12 and result.primary.n_blocks == 3
    assert (result.aa is not None) == (sides == ("--aa",))
    assert md.read_text().startswith(f"## logitlab bench run: **{result.primary.call}** (wall)")


def test_bench_run_blocks_auto_with_a_calibration_round_trip_and_a_version_2_decision_still_loads(tmp_path):
    import json

    from logitlab.perf.commands import BenchRunResult
    from logitlab.report import read_result

    aa = logitlab("bench", "run", "--control", "sleep 0.01", "--aa", "--blocks", "3", "--warmup", "0", "-q",
                  "--json", tmp_path / "aa.json")
    assert aa.returncode == 0, aa.stderr
    js, md = tmp_path / "run.json", tmp_path / "run.md"
    proc = logitlab("bench", "run", "--control", "sleep 0.01", "--aa", "--blocks", "auto", "--max-blocks", "3",
                    "--warmup", "0", "--noise", tmp_path / "aa.json", "--json", js, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, BenchRunResult)
    wall = result.sequential["wall"]
    assert (wall.margin_source, wall.margin_file, wall.schema_version) == ("calibration", str(tmp_path / "aa.json"), 4)
    # a result saved before δ was pre-registered: decisions of version 2, δ from the blocks' A/A
    data = json.loads(js.read_text())
    for decision in data["sequential"].values():
        del decision["margin_file"], decision["margin_basis"], decision["between_run_sd"]
        decision.update(schema_version=2, margin_source="a/a")
    (tmp_path / "v2.json").write_text(json.dumps(data))
    old = read_result(tmp_path / "v2.json").sequential["wall"]
    assert (old.schema_version, old.margin_source, old.margin_file, old.between_run_sd) == (4, "a/a", None, 0.0)
    shown = logitlab("report", tmp_path / "v2.json")
    assert shown.returncode == 0 and "from the A/A slots of the blocks so far, a decision saved before" in shown.stdout


def test_bench_run_that_stopped_early_round_trip(tmp_path):
    """A partial result (a failing candidate, exit 2) renders again with its error and first failure."""
    from logitlab.perf.commands import BenchRunResult

    js, md = tmp_path / "run.json", tmp_path / "run.md"
    proc = logitlab("bench", "run", "--control", "true", "--candidate", "exit 3", "--blocks", "2", "-q",
                    "--json", js, "--markdown", md)
    assert proc.returncode == 2 and proc.stderr.startswith("error: candidate command 'exit 3' failed")
    result = assert_round_trip(js, md, None, tmp_path, BenchRunResult)  # the run's terminal leaves the error out
    assert result.error and not result.comparisons
    assert "(first: candidate warmup, exit status 3)" in md.read_text() and "**Stopped early:**" in md.read_text()


@pytest.fixture(scope="module")
def gbench_runs(tmp_path_factory):
    """Three A/A runs and one PR run of a real Google Benchmark program."""
    folder = tmp_path_factory.mktemp("gbench")
    exe = gbench_binary(folder)
    return [run_gbench(exe, folder / f"base{i}.json") for i in range(3)], run_gbench(exe, folder / "pr.json")


def test_bench_calibrate_and_compare_round_trip(tmp_path, gbench_runs):
    from logitlab.perf.calibration import NoiseProfile
    from logitlab.perf.compare_files import FileComparison

    runs, pr = gbench_runs
    noise, noise_md = tmp_path / "noise.json", tmp_path / "noise.md"
    proc = logitlab("bench", "calibrate", *runs, "--out", noise, "--markdown", noise_md)
    assert proc.returncode == 0, proc.stderr
    profile = assert_round_trip(noise, noise_md, proc.stdout, tmp_path, NoiseProfile)
    assert set(profile.scenarios) == {"BM_sum/64", "BM_sum/512", "BM_copy"}

    js, md = tmp_path / "compare.json", tmp_path / "compare.md"
    proc = logitlab("bench", "compare", runs[0], pr, "--noise", noise, "--bootstrap", "999", "--json", js,
                    "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, FileComparison)
    assert {s.margin_source for s in result.scenarios} == {"noise"} and result.host["cores"]


def test_bench_compare_criterion_with_one_sided_scenarios_round_trip(tmp_path):
    """Checked-in criterion output (a regression, a scenario only in the PR): statuses, lists, contexts."""
    from logitlab.perf.compare_files import FileComparison

    js, md = tmp_path / "compare.json", tmp_path / "compare.md"
    proc = logitlab("bench", "compare", DATA / "criterion", "--baseline", "main", "--bootstrap", "999", "--json", js,
                    "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, FileComparison)
    assert result.counts["regressed"] == 1 and result.only_candidate == ["add/f32_1024"]


# --- dump-diff ----------------------------------------------------------------------------------------------


@pytest.mark.engine
def test_dump_diff_of_real_llamacpp_dumps_round_trip(tmp_path):
    """The embedded model on llama.cpp, flash attention off vs on, 1 decode token, layers 0-1."""
    from logitlab.dumps import TensorFilter, dump_pair
    from logitlab.dumps.diff_results import DumpDiffResult
    from logitlab.engines.variant import parse_variant

    dump_pair(parse_variant("", "control", default_engine="llamacpp"),
              parse_variant("flash_attn=1", "candidate", default_engine="llamacpp"), SHORT_PROMPT, 1, tmp_path / "d",
              select=TensorFilter.parse(layers="0-1"))
    js, md = tmp_path / "diff.json", tmp_path / "diff.md"
    proc = logitlab("dump-diff", tmp_path / "d" / "control", tmp_path / "d" / "candidate", "--json", js,
                    "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, DumpDiffResult)
    assert result.verdict == "differs" and result.first_divergence.name == "kqv_out"
    assert {t.layer for t in result.tensors} == {None, 0, 1} and result.only_left


def test_dump_diff_with_problems_and_one_sided_tensors_round_trip(tmp_path):
    """Raw float32 folders with a missing and a truncated file: problems and one-side groups render again."""
    from logitlab.dumps.diff_results import DumpDiffResult

    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", plant(base, ("ffn_out", 2, 1)), "p")
    raw_path(b, "p", "kqv_out", 0, 2).unlink()
    cut = raw_path(b, "p", "l_out", 3, 0)
    cut.write_bytes(cut.read_bytes()[:-2])
    js, md = tmp_path / "diff.json", tmp_path / "diff.md"
    proc = logitlab("dump-diff", a, b, "--format", "raw-f32", "--shape", "64", "--shape", "result_output=128",
                    "--json", js, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    result = assert_round_trip(js, md, proc.stdout, tmp_path, DumpDiffResult)
    assert result.only_left and len(result.problems) == 1 and result.n_unresolved == 1  # the truncated one
