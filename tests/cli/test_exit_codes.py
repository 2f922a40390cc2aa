"""The exit-code matrix: every option that gates the exit status, passing (0), failing (1) and on bad input (2).

Exit codes (``cli/common.py``): 0 ok, 1 a ``--require`` / ``--fail-on`` / golden check failed, 2 bad input
with exactly one ``error:`` line on stderr. Each gate below is run once where it passes and once where it
fails, on real inputs as cheap as they come:

- the ``cmd`` engine running ``examples/numpy_cmd_engine.py`` (pure numpy, deterministic) and copies of it
  changed in one place each: ``f64`` accumulates the RMS norm in float64 (different rounding: the logits'
  bits change, ``ulp-noise``), ``noisy`` adds fresh random noise to every run's logits (not deterministic),
  ``swap`` swaps the top two logits of position 7 (a bug confined to one row: ``divergent``);
- the embedded model on llama.cpp where only it has the ability (verify's near-tie guard, ``dump``);
- the recorded benchmark files of ``tests/data/bench`` for ``bench compare``;
- ``true`` and ``sleep 0.05`` for ``bench run``.

Runs that several cases share are module-scoped fixtures. Bad input runs in this process (click's runner),
so the cases that load nothing stay in the fast suite (``-m "not engine"``).

=================================  =============================  ================================  ================
gate                               exit 0                         exit 1                            exit 2
=================================  =============================  ================================  ================
ab --require                       A/A of f64, bit-exact          numpy vs f64 (ulp-noise);         --prompt-file
                                                                  A/A of noisy (control does not    missing
                                                                  reproduce itself)
verify --require                   numpy, bit-exact               llama.cpp K=4 (noise)             --prompts missing
verify --require-identical         llama.cpp guard, identical     (no real engine: see its test)    (as above)
invariance determinism --require   numpy, bit-exact               noisy                             --runs 1
bench run --fail-on slower         true vs sleep (faster)         sleep vs true (slower)            --blocks 0
bench run --fail-on not-faster     true vs sleep (faster)         sleep vs true (slower)            (as above)
bench compare --fail-on regressed  llama-bench (no regression)    criterion (1 regressed)           missing file
bench compare --fail-on            llama-bench (none)             gbench (3 inconclusive)           (as above)
  inconclusive
dump (existing folder)             --force                        (none: exit 2)                    no --force
dump-diff --require bit-exact      control vs control again       control vs flash_attn=1           --layers x      
golden check                       numpy vs its golden            f64 vs numpy's golden             missing folder
sweep --require                    --resume, ulp-noise            bit-exact (f64 cell)              --out is a file
history show --regressions-only    same fingerprint twice         control fingerprint changed       empty folder
explain (no gate: 0 whatever the   numpy vs swap (divergent,      (none: explain judges nothing)    --prompt-file
  causes)                            cause bug)                                                     missing
=================================  =============================  ================================  ================

``bisect`` (0: one commit found; 1: skips leave several; 2: bad input) is tested on its throw-away engine
repository in ``test_history_cli.py``; exit 130 (Ctrl-C) of every command in ``test_ctrl_c.py`` and next to
each command's other tests; ``golden export-kld``'s 2 below the matrix. ``python scripts/audit_tests.py`` reads
every test for the whole command × exit-code table.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bench"
ENGINE = ROOT / "examples" / "numpy_cmd_engine.py"
PY = sys.executable
ARGS = " --tokens {tokens} --logits {logits} --n-prompt {n_prompt} --n-decode {n_decode}"
PROMPT = "The capital of France is"
AB = ("--tokens", "8", "--repeats", "1", "--warmup", "0", "--prompt", PROMPT, "--quiet")


def cli(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m logitlab ARGS`` as a user runs it (a fresh process: the real exit status)."""
    return subprocess.run([PY, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, check=False)


def in_process(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    """The same in this process (click's runner): for runs that load no model."""
    from click.testing import CliRunner

    from logitlab.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def spec(script: Path) -> str:
    """The ``cmd`` engine spec of a copy of the numpy engine (the embedded tokenizer's ids modulo its vocab)."""
    return f"cmd:{PY} {script}{ARGS}?vocab=4096"


def stderr_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("exit-codes")


@pytest.fixture(scope="module")
def engines(work) -> dict[str, str]:
    """numpy (as shipped), f64 (float64 norm: other rounding), noisy (fresh noise on every run's logits)."""
    source = ENGINE.read_text()
    flag = "NORM_FLOAT64 = False\n"
    write = "    path = Path(args.logits)\n"
    assert source.count(flag) == 1 and source.count(write) == 1, "examples/numpy_cmd_engine.py changed: adapt"
    (work / "f64.py").write_text(source.replace(flag, "NORM_FLOAT64 = True\n"))
    (work / "noisy.py").write_text(source.replace(write, "    logits = logits + np.random.default_rng().normal("
                                                         "0, 1e-3, logits.shape).astype(np.float32)\n" + write))
    swap = ("    if len(logits) > 7:  # one row broken: position 7's top two logits swapped\n"
            "        top = np.argsort(logits[7])[-2:]\n"
            "        logits[7, top] = logits[7, top[::-1]]\n")
    (work / "swap.py").write_text(source.replace(write, swap + write))
    return {"numpy": spec(ENGINE), "f64": spec(work / "f64.py"), "noisy": spec(work / "noisy.py"),
            "swap": spec(work / "swap.py")}


# -- the runs the cases share ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ab_runs(work, engines) -> dict[str, subprocess.CompletedProcess]:
    return {
        "pass": cli("ab", "--engine", engines["f64"], *AB, "--require", "bit-exact", "--json", "aa.json", cwd=work),
        "fail": cli("ab", "--engine", engines["numpy"], "--candidate", engines["f64"], *AB, "--require", "bit-exact",
                    "--json", "ab.json", cwd=work),
        "fail-aa": cli("ab", "--engine", engines["noisy"], *AB, "--no-escalate", "--require", "bit-exact", cwd=work),
        "bad": in_process("ab", "--prompt-file", "missing.txt", "--require", "bit-exact", "--quiet", cwd=work),
    }


@pytest.fixture(scope="module")
def verify_runs(work, engines) -> dict[str, subprocess.CompletedProcess]:
    return {
        "pass": cli("verify", "--engine", engines["numpy"], "--k", "1", "2", "--tokens", "4", "--prompt", PROMPT,
                    "--require", "bit-exact", "--quiet", cwd=work),
        # llama.cpp: its M=K rows differ from M=1 (noise); the near-tie guard keeps the tokens identical
        "fail": cli("verify", "--k", "4", "--tokens", "8", "--prompt", PROMPT, "--guard", "0.001",
                    "--require", "bit-exact", "--require-identical", "--json", "verify.json", "--quiet", cwd=work),
        "bad": in_process("verify", "--prompts", "missing.jsonl", "--require", "bit-exact", "--require-identical",
                          "--quiet", cwd=work),
    }


@pytest.fixture(scope="module")
def invariance_runs(work, engines) -> dict[str, subprocess.CompletedProcess]:
    common = ("--runs", "2", "--tokens", "4", "--prompt", PROMPT, "--require", "bit-exact", "--quiet")
    return {
        "pass": cli("invariance", "determinism", "--engine", engines["numpy"], *common, cwd=work),
        "fail": cli("invariance", "determinism", "--engine", engines["noisy"], *common, cwd=work),
        "bad": in_process("invariance", "determinism", "--runs", "1", "--require", "bit-exact", "--quiet", cwd=work),
    }


@pytest.fixture(scope="module")
def bench_run_runs(work) -> dict[str, subprocess.CompletedProcess]:
    """A candidate 50 ms faster or slower than its control: the call cannot be missed in 4 blocks."""
    common = ("--blocks", "4", "--warmup", "0", "--quiet")
    faster, slower = ("--control", "sleep 0.05", "--candidate", "true"), ("--control", "true", "--candidate",
                                                                          "sleep 0.05")
    runs = {}
    for fail_on in ("slower", "not-faster"):
        runs[f"{fail_on}-pass"] = in_process("bench", "run", *faster, *common, "--fail-on", fail_on, cwd=work)
        runs[f"{fail_on}-fail"] = in_process("bench", "run", *slower, *common, "--fail-on", fail_on, cwd=work)
    runs["bad"] = in_process("bench", "run", "--control", "true", "--candidate", "true", "--blocks", "0",
                             "--fail-on", "slower", "--quiet", cwd=work)
    return runs


@pytest.fixture(scope="module")
def bench_compare_runs(work) -> dict[str, subprocess.CompletedProcess]:
    llama = (DATA / "llama-bench-base.json", DATA / "llama-bench-pr.jsonl")  # unchanged + improved
    common = ("--bootstrap", "999", "--quiet")
    return {
        "regressed-pass": in_process("bench", "compare", *llama, *common, "--fail-on", "regressed", cwd=work),
        "regressed-fail": in_process("bench", "compare", DATA / "criterion", "--baseline", "main", *common,
                                     "--fail-on", "regressed", cwd=work),
        "inconclusive-pass": in_process("bench", "compare", *llama, *common, "--fail-on", "inconclusive", cwd=work),
        "inconclusive-fail": in_process("bench", "compare", DATA / "gbench-real-base.json",
                                        DATA / "gbench-real-pr.json", *common, "--fail-on", "inconclusive",
                                        cwd=work),
        "bad": in_process("bench", "compare", "missing.json", DATA / "gbench-real-pr.json", "--fail-on", "regressed",
                          cwd=work),
    }


@pytest.fixture(scope="module")
def dump_runs(work) -> dict[str, subprocess.CompletedProcess]:
    """A control + flash-attention pair into ``dumps/``; the control again into a folder holding an earlier dump."""
    common = ("--prompt", PROMPT, "--tokens", "1", "--layers", "0-1", "--quiet")
    pair = cli("dump", "--candidate", "flash_attn=1", "--out", "dumps", *common, cwd=work)
    assert pair.returncode == 0, pair.stderr
    shutil.copytree(work / "dumps" / "control", work / "again")  # a folder holding an earlier logitlab dump
    runs = {"pair": pair,
            "dump-bad": cli("dump", "--out", "again", *common, cwd=work),
            "dump-pass": cli("dump", "--out", "again", "--force", *common, cwd=work)}
    diff = ("dump-diff", "--require", "bit-exact", "--quiet")
    runs["diff-pass"] = in_process(*diff, "dumps/control", "again", cwd=work)
    runs["diff-fail"] = in_process(*diff, "dumps/control", "dumps/candidate", cwd=work)
    runs["diff-bad"] = in_process(*diff, "dumps/control", "again", "--layers", "x", cwd=work)
    return runs


@pytest.fixture(scope="module")
def golden_runs(work, engines) -> dict[str, subprocess.CompletedProcess]:
    record = cli("golden", "record", "-o", "golden", "--variant", engines["numpy"], "--prompt", PROMPT,
                 "--tokens", "4", "--quiet", cwd=work)
    assert record.returncode == 0, record.stderr
    return {
        "pass": cli("golden", "check", "golden", "--variant", engines["numpy"], "--quiet", cwd=work),
        "fail": cli("golden", "check", "golden", "--variant", engines["f64"], "--quiet", cwd=work),
        "bad": in_process("golden", "check", "missing-golden", "--quiet", cwd=work),
    }


@pytest.fixture(scope="module")
def sweep_runs(work, engines) -> dict[str, subprocess.CompletedProcess]:
    """Two cells against the numpy control: numpy itself (bit-exact) and f64 (ulp-noise)."""
    command = {name: engines[name][len("cmd:"):-len("?vocab=4096")] for name in ("numpy", "f64")}
    (work / "matrix.toml").write_text(
        'name = "f64-norm"\n[control]\nengine = "cmd"\n'
        f"options = {{ command = {json.dumps(command['numpy'])}, vocab = 4096 }}\n"
        f"[axes]\noptions.command = [{json.dumps(command['numpy'])}, {json.dumps(command['f64'])}]\n"
        f'[[prompts]]\nname = "capital"\ntext = "{PROMPT}"\n[experiment]\nkind = "ab"\ntokens = 8\n')
    fail = cli("sweep", "matrix.toml", "--out", "sweep", "--require", "bit-exact", "--quiet", cwd=work)
    return {
        "fail": fail,
        # the same cells judged again at a looser bar: --resume runs no job
        "pass": cli("sweep", "matrix.toml", "--out", "sweep", "--resume", "--require", "ulp-noise", "--quiet",
                    cwd=work),
        "bad": in_process("sweep", "matrix.toml", "--out", "matrix.toml", "--require", "bit-exact", cwd=work),
    }


@pytest.fixture(scope="module")
def history_runs(work, ab_runs) -> dict[str, subprocess.CompletedProcess]:
    """Builds c1, c2 of one machine: ab.json twice (same fingerprints), or ab.json then aa.json (the control's
    logits change from numpy's to f64's)."""
    for folder, results in (("same", ("ab.json", "ab.json")), ("changed", ("ab.json", "aa.json"))):
        for commit, result in zip(("c1", "c2"), results):
            added = in_process("history", "add", result, "--dir", folder, "--commit", commit, "--machine", "m", "-q",
                               cwd=work)
            assert added.returncode == 0, added.stderr
    (work / "empty").mkdir()
    show = ("history", "show", "--regressions-only", "--quiet")
    return {"pass": in_process(*show, "--dir", "same", cwd=work),
            "fail": in_process(*show, "--dir", "changed", cwd=work),
            "bad": in_process(*show, "--dir", "empty", cwd=work)}


@pytest.fixture(scope="module")
def explain_runs(work, engines) -> dict[str, subprocess.CompletedProcess]:
    """explain has no gate (``docs/commands/explain.md``: 0 done, whatever the causes): a pair whose one flip is a
    bug still exits 0."""
    return {
        "pass": cli("explain", "--engine", engines["numpy"], "--candidate", engines["swap"], "--tokens", "8",
                    "--prompt", PROMPT, "--json", "why.json", cwd=work),  # not --quiet: its report is read
        "bad": in_process("explain", "--prompt-file", "missing.txt", "--quiet", cwd=work),
    }


# -- the matrix ---------------------------------------------------------------------------------------------------
E = pytest.mark.engine
#: gate, case, exit status, fixture, key, stderr: "" (nothing), a list of exact lines, or "error: …" (the start of
#: the one line).
MATRIX = [
    pytest.param("ab --require", "pass", 0, "ab_runs", "pass", "", marks=E),
    pytest.param("ab --require", "fail", 1, "ab_runs", "fail", ["require bit-exact: the verdict is ulp-noise"],
                 marks=E),
    pytest.param("ab --require", "fail: A/A", 1, "ab_runs", "fail-aa",
                 ["require bit-exact: the control does not reproduce itself"], marks=E),
    pytest.param("ab --require", "bad", 2, "ab_runs", "bad", "error: cannot read --prompt-file missing.txt", marks=E),
    pytest.param("verify --require", "pass", 0, "verify_runs", "pass", "", marks=E),
    # the one line: --require failed (noise), --require-identical passed (no second line)
    pytest.param("verify --require", "fail", 1, "verify_runs", "fail",
                 ["require bit-exact: the verify verdict is noise"], marks=E),
    pytest.param("verify --require", "bad", 2, "verify_runs", "bad", "error: cannot read --prompts missing.jsonl",
                 marks=E),
    pytest.param("invariance --require", "pass", 0, "invariance_runs", "pass", "", marks=E),
    pytest.param("invariance --require", "fail", 1, "invariance_runs", "fail", "require bit-exact: the verdict is ",
                 marks=E),
    pytest.param("invariance --require", "bad", 2, "invariance_runs", "bad", "error: --runs must be at least 2",
                 marks=E),
    pytest.param("bench run --fail-on slower", "pass", 0, "bench_run_runs", "slower-pass", ""),
    pytest.param("bench run --fail-on slower", "fail", 1, "bench_run_runs", "slower-fail",
                 ["fail-on slower: the call is slower"]),
    pytest.param("bench run --fail-on not-faster", "pass", 0, "bench_run_runs", "not-faster-pass", ""),
    pytest.param("bench run --fail-on not-faster", "fail", 1, "bench_run_runs", "not-faster-fail",
                 ["fail-on not-faster: the call is slower"]),
    pytest.param("bench run --fail-on", "bad", 2, "bench_run_runs", "bad", "error: --blocks must be at least 1"),
    pytest.param("bench compare --fail-on regressed", "pass", 0, "bench_compare_runs", "regressed-pass", ""),
    pytest.param("bench compare --fail-on regressed", "fail", 1, "bench_compare_runs", "regressed-fail",
                 ["fail-on regressed: 1 scenario(s): matmul/f32_256"]),
    pytest.param("bench compare --fail-on inconclusive", "pass", 0, "bench_compare_runs", "inconclusive-pass", ""),
    pytest.param("bench compare --fail-on inconclusive", "fail", 1, "bench_compare_runs", "inconclusive-fail",
                 ["fail-on inconclusive: 3 scenario(s): BM_sum/64, BM_sum/512, BM_copy"]),
    pytest.param("bench compare --fail-on", "bad", 2, "bench_compare_runs", "bad",
                 "error: missing.json does not exist"),
    pytest.param("dump into a used folder", "--force", 0, "dump_runs", "dump-pass", "", marks=E),
    pytest.param("dump into a used folder", "no --force", 2, "dump_runs", "dump-bad",
                 "error: dump folder again is not empty; choose another --out or pass --force", marks=E),
    pytest.param("dump-diff --require", "pass", 0, "dump_runs", "diff-pass", "", marks=E),
    pytest.param("dump-diff --require", "fail", 1, "dump_runs", "diff-fail",
                 ["require bit-exact: the dump-diff verdict is differs"], marks=E),
    pytest.param("dump-diff --require", "bad", 2, "dump_runs", "diff-bad", "error: bad --layers item 'x'", marks=E),
    pytest.param("golden check", "pass", 0, "golden_runs", "pass", "", marks=E),
    pytest.param("golden check", "fail", 1, "golden_runs", "fail",
                 ["golden check failed: verdict ulp-noise > allowed bit-exact"], marks=E),
    pytest.param("golden check", "bad", 2, "golden_runs", "bad", "error: golden folder missing-golden does not exist",
                 marks=E),
    pytest.param("sweep --require", "pass", 0, "sweep_runs", "pass", "", marks=E),
    pytest.param("sweep --require", "fail", 1, "sweep_runs", "fail", "require bit-exact: cells worse or with a "
                 "control that does not reproduce itself: command=", marks=E),
    pytest.param("sweep --require", "bad", 2, "sweep_runs", "bad", "error: --out matrix.toml exists and is not a folder; give a folder path",
                 marks=E),
    pytest.param("history show --regressions-only", "pass", 0, "history_runs", "pass", "", marks=E),
    pytest.param("history show --regressions-only", "fail", 1, "history_runs", "fail",
                 ["regressions-only: 1 regression(s) or numerics change(s): control/logits at c2"], marks=E),
    pytest.param("history show --regressions-only", "bad", 2, "history_runs", "bad",
                 "error: the history folder empty holds no records", marks=E),
    pytest.param("explain", "divergent, cause bug", 0, "explain_runs", "pass", "", marks=E),
    pytest.param("explain", "bad", 2, "explain_runs", "bad", "error: cannot read --prompt-file missing.txt",
                 marks=E),
]


@pytest.mark.parametrize("gate, case, code, fixture, key, stderr", MATRIX)
def test_exit_code(gate, case, code, fixture, key, stderr, request):
    proc = request.getfixturevalue(fixture)[key]
    lines = stderr_lines(proc)
    assert proc.returncode == code, (gate, case, proc.returncode, proc.stderr[-2000:])
    if isinstance(stderr, list):
        assert lines == stderr, proc.stderr
    elif stderr == "":
        assert lines == [], proc.stderr
    else:
        assert len(lines) == 1 and lines[0].startswith(stderr), proc.stderr
        assert (code == 2) == lines[0].startswith("error: "), proc.stderr


# -- the whole --require range of a real result ------------------------------------------------------------------
@pytest.mark.engine
def test_ab_require_at_every_bar_on_the_f64_result(work, ab_runs, capsys):
    """One real A/B (numpy vs f64: ulp-noise) judged at every --require value by the CLI's own gate."""
    from logitlab import report
    from logitlab.cli.ab import _require_exit_code
    from logitlab.cli.common import REQUIRE_CHOICES

    result = report.load_result(json.loads((work / "ab.json").read_text()))
    assert result.verdict.word == "ulp-noise" and result.control_reproducible is True
    codes = {bar: _require_exit_code(result, bar) for bar in REQUIRE_CHOICES}
    assert codes == {"bit-exact": 1, "ulp-noise": 0, "noise": 0, "near-tie": 0, "lossy": 0, "systematic-offset": 0,
                     "divergent": 0}  # --require divergent: anything but a crash
    assert capsys.readouterr().err == "require bit-exact: the verdict is ulp-noise\n"


@pytest.mark.engine
def test_verify_require_at_every_bar_and_require_identical(work, verify_runs, capsys):
    """The llama.cpp verify result (K=4: noise; guarded runs identical) judged at every bar; --require-identical
    fails only where a guarded run differs from M=1 greedy. No real engine gives that here (the guard is exact by
    construction and the run has no flip), so the failing case flips one guarded run of the real result."""
    import dataclasses

    from logitlab import report
    from logitlab.cli.common import REQUIRE_CHOICES
    from logitlab.cli.verify import _exit_code

    result = report.load_result(json.loads((work / "verify.json").read_text()))
    assert result.classification.word == "noise"
    assert result.guard_identical is True and len(result.guard.results) == 2  # redecode and resync, 1 prompt
    codes = {bar: _exit_code(result, bar, True) for bar in REQUIRE_CHOICES}
    assert codes == {"bit-exact": 1, "ulp-noise": 1, "noise": 0, "near-tie": 0, "lossy": 0, "systematic-offset": 0,
                     "divergent": 0}  # --require divergent: anything but a crash
    capsys.readouterr()
    first, *rest = result.guard.results
    broken = dataclasses.replace(result, guard=dataclasses.replace(
        result.guard, results=[dataclasses.replace(first, identical=False), *rest]))
    assert broken.guard_identical is False
    assert _exit_code(broken, None, False) == 0 and _exit_code(broken, None, True) == 1
    assert capsys.readouterr().err == (f"require identical: guarded output differs from M=1 greedy on "
                                       f"{first.prompt} ({first.fallback})\n")


@pytest.mark.engine
def test_explain_exits_0_on_a_pair_whose_flip_is_a_bug(work, explain_runs):
    """The exit-0 run of the matrix really explained something: the pair is divergent, its one flip (position 7)
    is a bug, and the report says so."""
    data = json.loads((work / "why.json").read_text())
    assert data["kind"] == "explain" and data["error"] is None and data["verdict"]["word"] == "divergent"
    assert [(p["position"], p["cause"]) for p in data["positions"]] == [(7, "bug")]
    assert "cause: bug" in explain_runs["pass"].stdout


@pytest.mark.engine
def test_golden_check_takes_engine_with_a_target(work, engines, golden_runs):
    for name, code, lines in (("numpy", 0, []), ("f64", 1, ["golden check failed: verdict ulp-noise > allowed "
                                                               "bit-exact"])):
        engine, _, options = engines[name].partition("?")  # cmd:COMMAND and vocab=4096
        proc = cli("golden", "check", "golden", "--engine", engine, "--candidate", options, "--quiet", cwd=work)
        assert (proc.returncode, stderr_lines(proc)) == (code, lines), proc.stderr  # the engine's command ran


@pytest.mark.parametrize("args, message", [
    (["missing-golden"], "error: golden folder missing-golden does not exist; record one with: logitlab golden "
                         "record -o missing-golden"),
    (["empty"], "error: golden folder empty holds no golden (no manifest.json in it or in a subfolder)"),
])
def test_golden_export_kld_bad_input_is_exit_2_and_writes_nothing(args, message, tmp_path):
    """``golden export-kld`` has no gate (0 written, 2 bad input): a folder that is no golden is one ``error:``
    line, exit 2, and no KLD file."""
    (tmp_path / "empty").mkdir()
    proc = in_process("golden", "export-kld", *args, "-o", "base.kld", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    (line,) = stderr_lines(proc)
    assert line.startswith(message), line
    assert not (tmp_path / "base.kld").exists()


@pytest.mark.parametrize("args, message", [
    (["bench", "compare", "a.json", "--fail-on", "bogus"], "error: Invalid value for '--fail-on': 'bogus' is not "
                                                           "one of "),
    (["bench", "compare", "a.json", "--nope"], "error: No such option '--nope'"),
    (["nope"], "error: No such command 'nope'."),
    (["report"], "error: Missing argument 'RESULT.json|RUNS.jsonl|SWEEP_DIR'."),
])
def test_a_usage_error_is_one_error_line_and_exit_2(args, message, tmp_path):
    """Click's own usage errors (bad choice, unknown option or command, missing argument) read like every
    other bad input: one ``error:`` line naming the --help to read, exit 2."""
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = stderr_lines(proc)
    assert line.startswith(message) and line.endswith("--help')")
