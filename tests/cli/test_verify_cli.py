"""``python -m logitlab verify`` as a user runs it: K parsing, reports, exit codes, one-line errors."""

import json
import subprocess
import sys

import pytest

from conftest import CPU_AVX512, SHORT_PROMPT

pytestmark = pytest.mark.engine

# One thread for batched (M=K) evaluation: on a busy 2-core runner two threads contend and
# make every verify block several times slower; thread count does not change llama.cpp's bits.
SHORT = ["--prompt", SHORT_PROMPT, "--tokens", "8", "--quiet", "--options", "n_threads_batch=1"]
#: SHORT without --quiet: for the tests that read the report on stdout (--quiet prints none)
SHOWN = [arg for arg in SHORT if arg != "--quiet"]


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd)


def test_k_sweep_writes_json_and_markdown(tmp_path):
    out, md = tmp_path / "v.json", tmp_path / "v.md"
    proc = logitlab("verify", *SHOWN, "--k", "1", "2", "--json", str(out), "--markdown", str(md),
                    "--require", "near-tie")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["schema_version"] == 3 and data["config"]["ks"] == [1, 2]
    k1, k2 = data["totals"]
    assert k1["k"] == 1 and k1["bit_exact_rows"] == k1["rows"] == 8 and k1["flips"] == 0
    assert k2["k"] == 2 and k2["rows"] == 8
    if CPU_AVX512:  # 8 tokens of this prompt: M=2 rows equal M=1's (AVX2 only: they differ by rounding)
        assert data["classification"]["cause"] == "bit-exact"
    assert data["classification"]["cause"] in ("bit-exact", "noise", "near-tie-noise")
    assert data["prompts"][0]["generated_ids"] and data["manifest"]["engine"]["model_sha256"]
    assert "K sweep" in proc.stdout and "classification:" in proc.stdout
    assert md.read_text().startswith("## logitlab verify: **")
    assert proc.stderr == f"runs logged to {out.with_suffix('.runs.jsonl')}\n"
    # issue #32: per K, the detection limit of the comparison its verdict is judged on (on by default)
    assert [d["k"] for d in data["detection"]] == [1, 2]
    for d in data["detection"]:
        up = next(s for s in d["limits"]["shapes"] if s["shape"] == "argmax-up")
        assert 0 < up["limit"] < 10 and up["caught"] == up["probed"] == 8 and up["above"] == "divergent"
        assert d["hardest"]["argmax-up"]["prompt"] == "prompt-1"
    assert ("K=2: detection limit: faults planted into a copy of the M=K rows, the smallest size (logits) that "
            "reads divergent wherever it lands") in proc.stdout
    assert "• one logit (the argmax token) raised: ≥ " in proc.stdout


def test_prompts_file_jsonl(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"name": "sky", "text": "The sky is"}\n"One, two, three,"\n')
    out = tmp_path / "p.json"
    proc = logitlab("verify", "--prompts", str(jsonl), "--k", "1,2", "--tokens", "4", "--json", str(out),
                    "--options", "n_threads_batch=1", "--no-detection-limit")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["detection"] == [] and data["config"]["detection"] is False and "detection limit" not in proc.stdout
    assert [p["name"] for p in data["prompts"]] == ["sky", "p-2"]
    assert [(e["prompt"], e["k"]) for e in data["sweep"]] == [("sky", 1), ("sky", 2), ("p-2", 1), ("p-2", 2)]


@pytest.mark.parametrize("args, message", [
    (["--k", "0", "2"], "error: --k values must be integers >= 1, got 0"),
    (["--k", "two"], "error: --k takes integers >= 1 (e.g. --k 1 2 4 8), got 'two'"),
    (["--tokens", "0"], "error: --tokens must be at least 1, got 0"),
    (["--options", "n_ctx=16,n_threads_batch=1"], "exceeds the context of 16 tokens; shorten the prompt or --tokens, "
                                                  "or pass a larger n_ctx=... in the variant"),
    (["--guard", "sometimes"], "error: --guard takes a margin in logits (e.g. 0.5), 'auto' or 'off'"),
    (["--prompts", "/nonexistent/p.jsonl"], "error: cannot read --prompts /nonexistent/p.jsonl"),
    (["--model", "/nonexistent/m.gguf"], "error: model file /nonexistent/m.gguf does not exist"),
    (["--k", "1", "100000"], "error: --k 100000 exceeds --tokens 8: a verify block of K rows replays K decoded"),
    (["--k", "1", "--guard", "0.5", "--guard-k", "100"], "error: --guard-k 100 exceeds --tokens 8: a guarded verify"),
    (["--guard-k", "0"], "error: --guard-k is the block size of the guarded loop: add --guard TAU or --guard auto"),
    (["--top-k", "49152"], "error: --top-k 49152 reaches the vocabulary of 49152 tokens"),
    (["--require-identical"], "error: --require-identical checks a guarded run: add --guard TAU or --guard auto"),
    (["--guard", "off", "--require-identical"], "error: --require-identical checks a guarded run"),
    (["--calibration-prompts", "c.txt"], "error: --calibration-prompts sets τ for --guard auto: add --guard auto"),
    (["--guard", "auto", "--calibration-prompts", "/nonexistent/c.txt"],
     "error: cannot read --calibration-prompts /nonexistent/c.txt"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    base = SHORT[2:] if "--prompts" in args else SHORT
    proc = logitlab("verify", *base, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # refused before any run: no empty report, no run log (a prompt past the context once got both)
    assert proc.stdout == "" and not (tmp_path / "logitlab-runs").exists(), proc.stdout


def test_positions_last_compares_one_row_a_prompt_and_says_so(tmp_path):
    """Issue #31: ``--positions last`` compares each prompt's last decode row (run position 12 prompt + 4 decode
    - 1 = 15); the classification, the JSON and the reports say which positions it rests on, and the saved
    result renders again byte for byte."""
    out, md = tmp_path / "v.json", tmp_path / "v.md"
    proc = logitlab("verify", *SHOWN[:2], "--tokens", "4", *SHOWN[4:], "--k", "1", "2", "--positions", "last",
                    "--no-detection-limit", "--json", str(out), "--markdown", str(md),
                    "--log", str(tmp_path / "v.jsonl"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["positions"] == {"spec": "last", "compared": 1, "of": 4} and data["config"]["positions"] == "last"
    assert [(t["k"], t["rows"]) for t in data["totals"]] == [(1, 1), (2, 1)]
    assert [[r["row"] for r in t["in_block"]] for t in data["totals"]] == [[0], [1]]  # output index 3
    assert "; compared 1 of 4 positions (last))" in proc.stdout
    assert "compared 1 of 4 positions (last)" in md.read_text()
    again = tmp_path / "again.md"
    assert logitlab("report", str(out), "--markdown", str(again), "--quiet").returncode == 0
    assert again.read_text() == md.read_text()
    from_log = tmp_path / "log.md"  # the run log holds the selection too
    assert logitlab("report", str(tmp_path / "v.jsonl"), "--markdown", str(from_log), "--quiet").returncode == 0
    assert "compared 1 of 4 positions (last)" in from_log.read_text()


@pytest.mark.parametrize("spec, message", [
    ("frist", "error: --positions 'frist': 'frist' is not a position spec; valid: all, prompt, decode, last, "),
    ("9-3", "error: --positions '9-3': '9-3' ends before it starts"),
])
def test_a_bad_positions_spec_is_refused_before_any_engine_loads(spec, message, tmp_path):
    # the model does not exist: an engine load would have said so first
    proc = logitlab("verify", *SHORT, "--positions", spec, "--model", "/nonexistent/model.gguf", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("spec, message", [
    ("prompt", "error: --positions 'prompt' selects no decode row of prompt 'prompt-1': the rows compared are the "
               "decode steps', positions 12-19 (12 prompt tokens)\n"),
    ("0,25", "error: --positions '0,25': 25 is past the run's last row 19 (12 prompt + 8 decode rows)\n"),
])
def test_positions_with_no_decode_row_or_past_the_run_are_refused_before_any_run(spec, message, tmp_path):
    proc = logitlab("verify", *SHORT, "--positions", spec, "--log", str(tmp_path / "runs.jsonl"), "--json",
                    str(tmp_path / "v.json"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == message and proc.stdout == ""
    assert not (tmp_path / "runs.jsonl").exists() and not (tmp_path / "v.json").exists()


def test_bad_jsonl_line_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": oops}\n')
    proc = logitlab("verify", "--prompts", str(bad), "-q")
    assert proc.returncode == 2
    assert f"--prompts {bad} line 2 is not valid JSON" in proc.stderr


def test_ctrl_c_writes_the_prompts_measured_and_exits_130(tmp_path):
    """Ctrl-C is an outcome of the run, not a crash: the prompts finished before it are in the JSON and the run
    log (whose end line says ``interrupted``), and the exit code is 130 (``docs/commands/verify.md``)."""
    import signal
    import time

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"name": f"p{i}", "text": f"Count to {i}: one, two,"}) + "\n"
                               for i in range(40)))
    out, log = tmp_path / "v.json", tmp_path / "v.runs.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "logitlab", "verify", "--prompts", str(prompts), "--k", "1", "2",
                             "--tokens", "8", "--quiet", "--options", "n_threads_batch=1", "--json", str(out),
                             "--markdown", str(tmp_path / "v.md")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    def prompts_logged() -> int:  # complete lines only: the last one may be half written
        text = log.read_text() if log.exists() else ""
        return sum("prompt" in json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n"))

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and prompts_logged() < 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == ("error: interrupted; the runs measured so far are in the reports "
                                               "and the log")
    data = json.loads(out.read_text())
    assert data["error"] == "interrupted" and 2 <= len(data["prompts"]) < 40
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[-1]["log_end"] == "interrupted"
    logged = sum("prompt" in line for line in lines)  # one line per finished prompt
    assert logged >= 2 and len(data["prompts"]) in (logged, logged + 1)  # + the one Ctrl-C cut short
    # the written report says plainly, before the K sweep, that the user stopped it after how many prompts
    markdown = (tmp_path / "v.md").read_text()
    line = f"stopped early by the user (Ctrl-C) after {logged} of 40 planned prompts"
    assert f"**{line}" in markdown and markdown.index(line) < markdown.index("K sweep"), markdown[:1500]
    assert "the K sweep, the flips and the classification rest on those only**" in markdown
