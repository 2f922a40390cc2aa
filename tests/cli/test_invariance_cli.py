"""``python -m logitlab invariance`` as a user runs it: reports, exit codes, one-line errors."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CPU_AVX512, SHORT_PROMPT

pytestmark = pytest.mark.engine

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
LLAMA = "n_threads=1,n_threads_batch=1"  # 2 batch threads on a busy 2-core machine spin for seconds


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd,
                          env=ENV)


def test_llamacpp_batch_writes_json_and_markdown(tmp_path):
    out, md = tmp_path / "b.json", tmp_path / "b.md"
    word = "bit-exact" if CPU_AVX512 else "noise"  # AVX2 only: batched rows differ from B=1 by rounding
    proc = logitlab("invariance", "batch", "--batch", "1", "2", "--prompt", SHORT_PROMPT, "--variant", LLAMA,
                    "--require", word, "--json", str(out), "--markdown", str(md))
    assert proc.returncode == 0, proc.stderr
    assert "parallel sequences (seq ids)" in proc.stdout
    if CPU_AVX512:
        assert "verdict: bit-exact" in proc.stdout
    assert "--padding does not apply" not in proc.stdout  # not given: nothing to note
    data = json.loads(out.read_text())
    assert data["probe"] == "batch" and data["config"]["batch_sizes"] == [1, 2]
    assert [c["name"] for c in data["checks"]] == ["B=1 again", "B=2"]
    assert md.read_text().startswith("## logitlab invariance batch: **" + ("bit-exact**" if CPU_AVX512 else ""))


def test_hf_left_padding_is_not_bit_exact_and_require_exits_1(tmp_path):
    pytest.importorskip("transformers")
    proc = logitlab("invariance", "batch", "--engine", "hf", "--variant", "threads=1", "--batch", "1,3",
                    "--padding", "left", "--prompt", SHORT_PROMPT, "--require", "bit-exact")
    assert proc.returncode == 1, proc.stderr
    assert "B=3, left padding" in proc.stdout and "right padding" not in proc.stdout
    assert "require bit-exact: the verdict is" in proc.stderr


def test_determinism_counts_runs(tmp_path):
    out = tmp_path / "d.json"
    proc = logitlab("invariance", "determinism", "--runs", "3", "--tokens", "4", "--prompt", SHORT_PROMPT,
                    "--variant", LLAMA, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "distinct logit arrays  1" in proc.stdout
    assert json.loads(out.read_text())["details"]["distinct_texts"] == 1


@pytest.mark.parametrize("args, message", [
    (["invariance", "batch", "--batch", "0"], "error: --batch sizes must be at least 1, got 0"),
    (["invariance", "batch", "--batch", "x"], "error: --batch takes whole numbers (batch sizes), got 'x'"),
    (["invariance", "determinism", "--runs", "1"], "error: --runs must be at least 2, got 1"),
    (["invariance", "batch", "--batch", "3", "--slots", "--fill", "same"],
     "error: --slots moves the prompt among other sequences: it needs --fill mixed, not same"),
    (["invariance", "batch", "--engine", "hf", "--model", "{tmp}"], "is not a Hugging Face model folder"),
    (["invariance", "batch", "--engine", "hf", "--variant", "dtype=float8"],
     "error: bad value 'float8' for hf option 'dtype': valid: float32, bfloat16, float16"),
    (["invariance", "prefill-decode", "--engine", "hf", "--candidate", "dtype=float8"],  # the same option
     "error: bad value 'float8' for hf option 'dtype': valid: float32, bfloat16, float16"),
    (["ab", "--engine", "hf", "--model", "{tmp}", "--tokens", "2"], "is not a Hugging Face model folder"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    if "hf" in args:
        pytest.importorskip("transformers")
    proc = logitlab(*[a.replace("{tmp}", str(tmp_path)) for a in args], "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ")


def test_unwritable_outputs_bad_prompt_files_and_long_prompts_are_one_line(tmp_path):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    (tmp_path / "long.txt").write_text("hello world " * 1000)  # 2001 tokens, the context is 512
    cases = [
        (["batch", "--json", str(tmp_path)], f"error: --json {tmp_path} is a folder; give a file path"),
        (["prefill-decode", "--markdown", "/proc/x.md"], "error: --markdown /proc/x.md cannot be written: "),
        (["determinism", "--json", "/proc/x.json"], "error: --json /proc/x.json cannot be written: "),
        (["determinism", "--prompt-file", str(tmp_path / "bin.txt")], "is not UTF-8 text"),
        # --no-memory-check: the memory refusal comes first and depends on the memory free at that moment (an
        # 8.7 GB peak for batch: refused on a machine with less free, tested in test_memory_check.py); these two
        # test the context check
        (["batch", "--prompt-file", str(tmp_path / "long.txt"), "--no-memory-check"],
         "error: the prompt (2001 tokens) exceeds the context of 512 tokens; shorten the prompt, or pass a larger "
         "n_ctx=... in the variant"),
        (["prefill-decode", "--prompt-file", str(tmp_path / "long.txt"), "--tokens", "4", "--no-memory-check"],
         "error: the prompt (2001 tokens) + --tokens 4 = 2005 exceeds the context of 512 tokens"),
    ]
    for args, message in cases:
        proc = logitlab("invariance", *args, "--quiet")
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, (args, proc.stderr)


def test_hf_device_that_is_not_there_is_exit_2():
    torch = pytest.importorskip("torch")
    proc = logitlab("invariance", "determinism", "--engine", "hf", "--variant", "device=cuda:99", "--quiet")
    message = ("error: device 'cuda:99' does not exist: " if torch.cuda.is_available() else
               "error: device 'cuda:99' is not available with torch")  # cuda:99 exists nowhere
    assert proc.returncode == 2 and proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_ctrl_c_compares_the_runs_finished_and_exits_130(tmp_path):
    """Ctrl-C during `invariance determinism` is an outcome, not a crash of logitlab: the runs finished before it
    are compared and written (the JSON says `interrupted` and how many runs), the exit code is 130."""
    import json
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "d.json"
    proc = subprocess.Popen([sys.executable, "-m", "logitlab", "invariance", "determinism", "--runs", "400",
                             "--tokens", "8", "--quiet", "--json", str(out), "--markdown", str(tmp_path / "d.md")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(15)  # loading takes about a second here, a run of 8 decode tokens a fraction of one
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "error: interrupted; what was measured so far is in the reports"
    data = json.loads(out.read_text())
    assert data["error"] == "interrupted" and 2 <= data["details"]["runs"] < 400
    assert data["details"]["distinct_texts"] == len(data["details"]["text_groups"]) >= 1
    assert data["checks"] and "stopped early: interrupted" not in stdout  # the error: line says it instead
    n = len(data["checks"])
    line = (f"stopped early by the user (Ctrl-C) after {n} compared check{'s' * (n != 1)}: the checks and the "
            "verdict rest on those only")  # the written report says so, before the checks
    markdown = (tmp_path / "d.md").read_text()
    assert f"**{line}**" in markdown and markdown.index(line) < markdown.index("| check")


# -- invariance matrix ---------------------------------------------------------------------------------------
def test_matrix_writes_json_markdown_and_report_renders_it_again(tmp_path):
    out, md = tmp_path / "m.json", tmp_path / "m.md"
    proc = logitlab("invariance", "matrix", "--axes", "threads,determinism", "--runs", "2", "--tokens", "2",
                    "--prompt", SHORT_PROMPT, "--variant", LLAMA, "--require", "bit-exact",
                    "--json", str(out), "--markdown", str(md), "--record", str(tmp_path / "history"),
                    "--commit", "0123456789abcdef", "--machine", "test-machine")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("logitlab invariance matrix: bit-exact")
    assert "1 unique logit array of 2 runs, 1 unique greedy text" in proc.stdout
    data = json.loads(out.read_text())
    assert data["kind"] == "invariance-matrix" and data["config"]["axes"] == ["threads", "determinism"]
    assert [s["axis"] for s in data["axes_summary"]] == ["determinism", "threads"]  # in the matrix's order
    assert all(s["verdict"] == "bit-exact" and s["rows_identical"] == s["rows"] == 14 for s in data["axes_summary"])
    text = md.read_text()
    assert text.startswith("## logitlab invariance matrix: **bit-exact**")
    assert "| threads | **bit-exact** | 100.0 % (14/14) | 0 | 0 / 0 | none |" in text
    again = tmp_path / "again.md"
    proc = logitlab("report", str(out), "--markdown", str(again))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert again.read_text() == text
    # --record: one series per axis, for `history show`
    assert len(list((tmp_path / "history" / "test-machine").glob("0123456789ab-*.json"))) == 1
    proc = logitlab("history", "show", "--dir", str(tmp_path / "history"))
    assert proc.returncode == 0, proc.stderr
    assert "threads/bit_exact_share" in proc.stdout and "determinism/argmax flips" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--axes", "batch,speed"], "error: unknown invariance axis 'speed'; valid: determinism, batch, batch-position, "
                                "prefill-decode, chunked-prefill, threads, verify, process"),
    (["--axes", ","], "error: --axes needs at least one axis"),
    (["--tokens", "1"], "error: --tokens must be at least 2 (the verify axis scores greedy tokens in blocks of K; "
                        "leave it out of --axes for fewer), got 1"),
    (["--max-batch", "1"], "error: --max-batch must be at least 2 (B=1 is the prompt alone), got 1"),
    (["--prompts", "{tmp}/p.txt", "--prompt", "x"],
     "error: give one of --prompt, --prompt-file and --prompts, not --prompt and --prompts"),
    (["--prompts", "{tmp}/missing.txt"], "error: cannot read --prompts "),
    (["--engine", "nope"], "error: unknown engine 'nope'; valid engines: "),
])
def test_matrix_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    (tmp_path / "p.txt").write_text("hello\n")
    proc = logitlab("invariance", "matrix", *[a.replace("{tmp}", str(tmp_path)) for a in args], "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(message), proc.stderr


def test_matrix_self_check_and_a_vacuous_axis_fails_require():
    """n_ubatch=1: the prefill runs one row per forward, as the decode steps do: the prefill-decode axis reads
    bit-exact and could not have failed (docs/commands/invariance.md); --require does not accept it."""
    proc = logitlab("invariance", "matrix", "--axes", "prefill-decode", "--tokens", "2", "--self-check",
                    "--prompt", SHORT_PROMPT, "--variant", LLAMA + ",n_ubatch=1", "--require", "bit-exact")
    assert proc.returncode == 1, proc.stderr
    assert "caught: prefill-decode, decode vs prefill, token " in proc.stdout
    assert "status: vacuous (prefill-decode: vacuous)" in proc.stdout
    assert proc.stderr.startswith("error: an axis is vacuous: prefill-decode: the prefill also ran one row per "
                                  "forward"), proc.stderr
