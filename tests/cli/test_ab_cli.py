"""``python -m logitlab ab`` as a user runs it: exit codes, one-line errors, reports on disk."""

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import SHORT_PROMPT
from logitlab.experiments.ab_results import analyse_speed
from logitlab.perf.between_runs import between_run_variance
from logitlab.perf.prereg import calibrated_margin
from logitlab.report import read_result
from logitlab.runlog import read_run_log

pytestmark = pytest.mark.engine

RUN = ["--tokens", "8", "--repeats", "1", "--warmup", "0", "--quiet"]
SHORT = ["--prompt", SHORT_PROMPT, *RUN]
#: SHORT without --quiet: for the tests that read the report on stdout (--quiet prints none)
SHOWN = [arg for arg in SHORT if arg != "--quiet"]


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd)


def test_flash_attn_requires_bit_exact_exits_1_and_writes_reports(tmp_path):
    out = tmp_path / "out.json"
    md = tmp_path / "out.md"
    proc = logitlab("ab", *SHOWN, "--candidate", "flash_attn=1", "--require", "bit-exact",
                    "--json", str(out), "--markdown", str(md))
    assert proc.returncode == 1, proc.stderr
    assert "require bit-exact: the verdict is" in proc.stderr
    data = json.loads(out.read_text())
    assert data["schema_version"] == 2 and data["verdict"]["word"] == "near-tie"
    assert "require bit-exact: the verdict is near-tie" in proc.stderr
    assert data["manifest"]["engine"]["model_sha256"] and data["manifest"]["host"]["cores"]
    first = next(r for r in data["runs"] if r["slot"] == data["verdict_slot"])["comparison"]["first_mismatch"]
    assert first["reference_bits"] != first["observed_bits"]
    assert "first mismatch" in proc.stdout and first["reference_hex"] in proc.stdout
    assert md.read_text().startswith("## logitlab ab: **")
    log = read_run_log(tmp_path / "out.runs.jsonl")
    assert len(log.records) == 4 and log.ending == "complete"


def test_aa_passes_require_bit_exact(tmp_path):
    proc = logitlab("ab", *SHOWN, "--require", "bit-exact", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "A/A: control reproducible" in proc.stdout and "bit-exact" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--model", "/nonexistent/model.gguf"], "error: model file /nonexistent/model.gguf does not exist"),
    (["--candidate", "flash=1"], "error: unknown llamacpp option 'flash'; valid options: "),
    (["--candidate", "flash_attn"], "error: model file flash_attn does not exist (a variant spec's bare word is read "
                                    "as a model file; an engine option is KEY=VALUE, e.g. flash_attn=1)"),
    (["--control", "n_ctx=16", "--candidate", "n_ctx=16"],
     "exceeds the control's context of 16 tokens; shorten the prompt or --tokens, or pass a larger n_ctx=..."),
    (["--tokens", "0"], "error: --tokens must be at least 1"),
    (["--top-k", "100000"], "error: --top-k 100000 reaches the vocabulary of 49152 tokens: the top-k set would be"),
    (["--explain", "--explain-positions", "0"], "error: --explain-positions must be at least 1, got 0"),
    (["--explain-positions", "3"], "error: --explain-positions is a setting of --explain: add --explain"),
    (["--prompt", "a", "--prompt-file", "p.txt"], "error: give one of --prompt, --prompt-file and --prompts, not --prompt and --prompt-file"),
    (["--candidate", "nosuch:"], "error: unknown engine 'nosuch' in --candidate spec 'nosuch:' (engines: cmd, "),
    (["--candidate", "flash_attn=1,flash_attn=0"], "error: option 'flash_attn' given twice in "),
    (["--candidate-env", "X=1", "--candidate-env", "X=2"], "error: environment knob 'X' given twice (X=1, X=2)"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    if "--prompt" not in args:
        args = ["--prompt", SHORT_PROMPT, *args]
    proc = logitlab("ab", *RUN, *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_error_line_without_quiet_is_not_preceded_by_an_empty_line(tmp_path):
    proc = logitlab("ab", "--prompt", SHORT_PROMPT, "--tokens", "8", "--model", "/nonexistent/model.gguf", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "error: model file /nonexistent/model.gguf does not exist\n"


def test_missing_prompt_file(tmp_path):
    proc = logitlab("ab", *RUN, "--prompt-file", "/nonexistent/prompt.txt", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "error: cannot read --prompt-file /nonexistent/prompt.txt: No such file or directory\n"


@pytest.mark.parametrize("args, message", [
    (["--candidate", "flash_attn=banana"], "error: bad value 'banana' for llamacpp option 'flash_attn'"),
    (["--repeats", "0"], "error: --repeats must be at least 1, got 0"),
    (["--warmup", "-1"], "error: --warmup must be 0 or more, got -1"),
    (["--repeats", "auto", "--max-repeats", "2"], "error: --max-repeats must be an integer from 3 (the first look) "
                                                  "to 100, got 2"),
    (["--max-time", "10m"], "error: --max-time is the budget of --repeats auto; with --repeats 1 drop it"),
    (["--candidate", "n_ctx=16"], "error: the prompt (12 tokens) + --tokens 8 = 20 exceeds the candidate's context "
                                  "of 16 tokens; shorten the prompt or --tokens, or pass a larger n_ctx=... in the "
                                  "variant"),
    (["--json", "."], "error: --json . is a folder; give a file path"),
    (["--markdown", "/proc/report.md"], "error: --markdown /proc/report.md cannot be written"),
    (["--max-ulp", "-1"], "error: --max-ulp must be a number >= 0, got -1.0"),  # the option, not "threshold max_ulp"
    (["--min-positions", "0"], "error: --min-positions must be an integer >= 2, got 0"),
])
def test_bad_input_is_rejected_before_any_run(args, message, tmp_path):
    proc = logitlab("ab", *SHORT, *args, "--log", str(tmp_path / "runs.jsonl"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == "" and not (tmp_path / "runs.jsonl").exists()


def test_prompt_file_that_is_not_utf8(tmp_path):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    proc = logitlab("ab", *RUN, "--prompt-file", "bin.txt", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --prompt-file bin.txt is not UTF-8 text")


def test_env_knob_outside_process_isolation_is_noted_and_json_is_readable(tmp_path):
    out = tmp_path / "out.json"
    proc = logitlab("ab", *SHOWN, "--candidate-env", "GGML_SCHED_MAX_COPIES=1", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    note = next(n for n in json.loads(out.read_text())["notes"] if n.startswith("environment knobs"))
    assert "--isolation process" in note and "--isolation process" in proc.stdout
    assert out.stat().st_mode & 0o044 == 0o044, oct(out.stat().st_mode)


def sigint_default() -> None:
    """In the child: SIGINT back to its default. A background job (``make test &``, some CI runners) starts its
    children with SIGINT ignored (POSIX), and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_writes_the_partial_result_and_exits_130(tmp_path):
    out = tmp_path / "out.json"
    log = tmp_path / "out.runs.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "logitlab", "ab", "--prompt", SHORT_PROMPT, "--tokens", "8",
                             "--repeats", "50", "--quiet", "--json", str(out), "--markdown", "out.md", "--html",
                             "out.html"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count('"slot":') < 12):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted")
    data = json.loads(out.read_text())
    assert data["error"] == "interrupted" and len(data["runs"]) >= 10
    # what was measured keeps its verdict and its speed calls (two complete blocks at least)
    assert data["verdict"]["word"] == "bit-exact" and data["speed"]["decode"]["n_blocks"] >= 2
    # ... and they are the calls of the runs it kept: the paired analysis of the complete blocks, re-run here
    kept = read_result(out)
    again = analyse_speed(kept.runs, margin=kept.config["margin"], seed=kept.config["seed"])
    assert set(again) == set(data["speed"]) and again["decode"].n_blocks == data["speed"]["decode"]["n_blocks"]
    for phase, comparison in again.items():
        assert comparison.call == data["speed"][phase]["call"], phase
    # the written reports say plainly, before the A/A and the verdict, that the user stopped the run, after how
    # many of the planned blocks, and that what they conclude rests on those only
    measured = [r for r in data["runs"] if r["block"] is not None]
    line = (f"stopped early by the user (Ctrl-C) after {data['speed']['decode']['n_blocks']} of 50 planned ABBA/BAAB "
            f"blocks ({len(measured)} runs measured): the A/A, the verdict and the speed calls rest on those only")
    markdown = (tmp_path / "out.md").read_text()
    assert f"**{line}**" in markdown and markdown.index(line) < markdown.index("A/B verdict")
    assert line in (tmp_path / "out.html").read_text()


def test_not_a_gguf_file(tmp_path):
    bogus = tmp_path / "weights.bin"
    bogus.write_bytes(b"\x00" * 64)
    proc = logitlab("ab", *SHORT, "--model", str(bogus), cwd=tmp_path)
    assert proc.returncode == 2 and f"error: model file {bogus} is not GGUF" in proc.stderr


def test_a_candidate_process_that_cannot_start_is_crashed_and_require_fails_it(tmp_path):
    out = tmp_path / "ab.json"
    proc = logitlab("ab", *SHOWN, "--isolation", "process", "--candidate-env", f"PYTHONHOME={tmp_path}/x",
                    "--require", "divergent", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "A/B verdict: crashed" in proc.stdout and "crashed in start (exit 1)" in proc.stdout
    data = json.loads(out.read_text())
    assert data["error"] is None and data["verdict"]["word"] == "crashed"
    assert {r["variant"] for r in data["runs"] if r["crash"]} == {"candidate"}


def test_positions_last_compares_one_row_a_run_and_says_so(tmp_path):
    """Issue #31: ``--positions last`` keeps one row of each run; the verdict, the JSON and the reports say which
    positions it rests on, and the saved result renders again byte for byte."""
    out, md = tmp_path / "out.json", tmp_path / "out.md"
    proc = logitlab("ab", *SHOWN, "--positions", "last", "--json", str(out), "--markdown", str(md))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["positions"] == {"spec": "last", "compared": 1, "of": 20} and data["config"]["positions"] == "last"
    compared = [r["comparison"] for r in data["runs"] if r["comparison"] is not None]
    assert compared and all(c["n_positions"] == 1 and c["positions"] == [19] for c in compared)
    assert "; compared 1 of 20 positions (last))" in proc.stdout
    assert "compared 1 of 20 positions (last)" in md.read_text()
    assert logitlab("report", str(out), "--markdown", str(tmp_path / "again.md"), "--quiet").returncode == 0
    assert (tmp_path / "again.md").read_text() == md.read_text()


@pytest.mark.parametrize("spec, message", [
    ("frist", "error: --positions 'frist': 'frist' is not a position spec; valid: all, prompt, decode, last, "),
    ("every:0", "error: --positions 'every:0': 'every:0' needs a step of at least 1"),
    ("9-3", "error: --positions '9-3': '9-3' ends before it starts"),
])
def test_a_bad_positions_spec_is_refused_before_any_engine_loads(spec, message, tmp_path):
    # the model does not exist: an engine load would have said so first
    proc = logitlab("ab", *SHORT, "--positions", spec, "--model", "/nonexistent/model.gguf", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_positions_past_the_run_are_refused_before_any_run(tmp_path):
    proc = logitlab("ab", *SHORT, "--positions", "0,25", "--log", str(tmp_path / "runs.jsonl"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("error: --positions '0,25': 25 is past the run's last row 19 (12 prompt + 8 decode "
                           "rows)\n"), proc.stderr
    assert proc.stdout == "" and not (tmp_path / "runs.jsonl").exists()


def test_repeats_auto_margin_is_preregistered_default_or_from_a_saved_aa(tmp_path):
    """--repeats auto fixes δ before the first look: 2 % by default, or from a saved ab A/A given as --noise (the
    real engine, the default control on both sides); a bad --noise file is one error line before any run."""
    auto = ["--prompt", SHORT_PROMPT, "--tokens", "4", "--repeats", "auto", "--max-repeats", "3", "--warmup", "0",
            "--quiet"]
    first = logitlab("ab", *auto[:-1], "--json", "aa.json", cwd=tmp_path)  # not --quiet: the report is read
    assert first.returncode == 0, first.stderr
    data = json.loads((tmp_path / "aa.json").read_text())
    decode = data["sequential"]["decode"]
    assert (decode["margin"], decode["margin_source"], decode["margin_file"]) == (0.02, "default", None)
    assert data["speed"]["decode"]["margin_source"] == "default"
    assert "delta 2.0%, the default of a sequential run, fixed before the first look" in first.stdout
    second = logitlab("ab", *auto, "--noise", "aa.json", "--json", "auto.json", "--markdown", "auto.md", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    decode = json.loads((tmp_path / "auto.json").read_text())["sequential"]["decode"]
    sd = data["speed"]["decode"]["sd_log_ratio"]
    assert (decode["margin_source"], decode["margin_file"]) == ("calibration", "aa.json")
    assert decode["margin"] == calibrated_margin(sd, 3, max_blocks=3, file="aa.json", basis="").margin
    assert decode["margin_basis"].startswith("ab A/A of llamacpp SmolLM2-135M-Instruct.Q4_1.gguf, 4 tokens, "
                                             "session isolation, ")
    assert "from the calibration aa.json (ab A/A of llamacpp" in (tmp_path / "auto.md").read_text()
    # --noise repeated: the A/As pooled (a second A/A's blocks, shifted by 5 block sds: another pair of objects)
    blocks = data["speed"]["decode"]["block_log_ratios"]
    shift = 5 * sd + 0.05
    shifted = {**data, "speed": {**data["speed"], "decode": {**data["speed"]["decode"],
                                                              "block_log_ratios": [x + shift for x in blocks]}}}
    (tmp_path / "aa2.json").write_text(json.dumps(shifted))
    third = logitlab("ab", *auto[:-1], "--noise", "aa.json", "--noise", "aa2.json", "--json", "pooled.json",
                     cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    sequential = json.loads((tmp_path / "pooled.json").read_text())["sequential"]
    decode = sequential["decode"]
    pooled = between_run_variance([blocks, shifted["speed"]["decode"]["block_log_ratios"]])
    # decode's repeated CI carries tau; prefill's not (tau was measured on decode)
    assert decode["between_run_sd"] == pooled.between_sd and sequential["prefill"]["between_run_sd"] == 0.0
    assert "its width carries a run's own offset" in third.stdout
    assert (decode["margin_source"], decode["margin_file"]) == ("calibration", "aa.json, aa2.json")
    assert pooled.between_sd > 0 and decode["margin"] == calibrated_margin(
        pooled.within_sd, 6, max_blocks=3, file="f", basis="", tau=pooled.between_sd).margin
    assert decode["margin_basis"].startswith("2 A/As: ab A/A of llamacpp SmolLM2-135M-Instruct.Q4_1.gguf, 4 tokens, "
                                             "session isolation, 6 blocks, pooled decode block sd ")
    longer = {**data, "config": {**data["config"], "n_decode": 8}}
    (tmp_path / "longer.json").write_text(json.dumps(longer))
    two = {**data, "config": {**data["config"], "candidate": {**data["config"]["candidate"],
                                                              "options": {"flash_attn": "1"}}}}
    (tmp_path / "two.json").write_text(json.dumps(two))
    (tmp_path / "bench.json").write_text(json.dumps({"kind": "bench-run", "schema_version": 2}))
    for args, message in [
        (["--noise", "missing.json"], "error: --noise file missing.json does not exist"),
        (["--noise", "bench.json"], "error: --noise file bench.json holds a result of kind 'bench-run': ab is "),
        (["--noise", "two.json"], "error: --noise file two.json is an ab of two different variants, not an A/A"),
        (["--noise", "aa.json", "--noise", "longer.json"],
         "error: --noise files aa.json and longer.json differ in --tokens (4 vs 8): pool A/As of one variant, "),
        (["--noise", "aa.json", "--noise", "aa.json"], "error: --noise file aa.json is given twice"),
        (["--noise", "aa.json", "--isolation", "engine"],
         "error: --noise files measured --isolation session; this run has --isolation engine: calibrate with "),
        (["--noise", "longer.json"], "error: --noise files measured --tokens 8; this run has --tokens 4: "),
        (["--noise", "aa.json", "--noise", "aa2.json", "--margin", "0.03"],
         "error: --margin replaces the δ of --noise, but the A/As given to --noise also measured"),
    ]:
        proc = logitlab("ab", *auto, *args, "--log", "runs.jsonl", cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(message), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs.jsonl").exists()
    fixed = logitlab("ab", *SHORT, "--noise", "aa.json", cwd=tmp_path)
    assert fixed.returncode == 2 and fixed.stderr == ("error: --noise is the pre-registered δ of --repeats auto; "
                                                      "with --repeats 1 drop it (or give --margin)\n")
