"""End to end: a real git repository of a small engine, 16 commits; history and bisect find what changed.

The repository (``tests/engine_repo.py``) holds ``examples/numpy_cmd_engine.py``
and a build script. Commit 5 changes the arithmetic (the RMS norm accumulates
in float64: different logits bits), commit 7 breaks the build (commit 8 fixes
it), commit 11 makes decode about twice as slow (a debug check scans the output
weights at every step). At every commit that builds, an ``ab`` of the commit's
build (candidate) against a pinned build of v1.0 (control) is recorded with
``--record`` (in this process: a fresh ``python -m logitlab`` costs seconds of
imports on a loaded machine): the candidate/control ratio cancels the machine's
load, which moves absolute tokens/s here by tens of per cent from one build to
the next. ``history show``, ``bisect --probe numerics`` and ``bisect --probe
speed`` then run as a user runs them, in fresh processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_repo import (  # noqa: E402
    BENCH,
    BENCH_METRIC,
    BROKEN,
    BUILD,
    NUMERICS,
    SLOWER,
    SPEC,
    git,
    make_engine_repo,
    pinned_build,
    spec,
)

PY = sys.executable
MACHINE = "test-box"


def logitlab(*args, cwd=None, timeout=600):
    return subprocess.run([PY, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def in_process(*args, cwd):
    from logitlab.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(main, list(args))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def one_line_error(result, text):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.stderr


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The 16-commit repository and its commit hashes (oldest first)."""
    repo = tmp_path_factory.mktemp("e2e") / "engine"
    return repo, make_engine_repo(repo)


@pytest.fixture(scope="module")
def recorded(engine, tmp_path_factory):
    """At every commit that builds (commit 7 does not): ab of the commit's build against v1.0's, recorded."""
    repo, shas = engine
    history = tmp_path_factory.mktemp("history") / "h"
    logs = history.parent / "runs"
    pinned = pinned_build(repo, "v1.0", history.parent / "pinned")
    start = time.perf_counter()
    for i, sha in enumerate(shas):
        git(repo, "checkout", "-q", "--detach", sha)
        built = subprocess.run(BUILD, shell=True, cwd=repo, capture_output=True, text=True)
        if i == BROKEN:
            assert built.returncode != 0 and "SyntaxError" in built.stderr
            continue
        assert built.returncode == 0, built.stderr
        r = in_process("ab", "--control", spec(pinned), "--candidate", SPEC, "--tokens", "48", "--repeats", "2",
                       "--warmup", "0", "--no-escalate", "-q", "--log", str(logs / f"{i}.jsonl"), "--record",
                       str(history), "--repo", ".", "--machine", MACHINE, cwd=repo)
        assert r.returncode == 0, r.stderr
    git(repo, "checkout", "-q", "main")
    print(f"recorded 15 builds in {time.perf_counter() - start:.1f} s")
    return history


@pytest.mark.engine
def test_every_build_is_one_record_with_commit_date_manifest_and_samples(engine, recorded):
    repo, shas = engine
    files = sorted((recorded / MACHINE).glob("*.json"))
    assert len(files) == 15
    records = {r["commit"]: r for r in (json.loads(f.read_text()) for f in files)}
    assert sorted(records) == sorted(s for i, s in enumerate(shas) if i != BROKEN)
    first = records[shas[0]]
    assert first["commit_date"].startswith("2026-01-01T12:00:00") and first["machine"] == MACHINE
    assert first["manifest"]["result_kind"] == "ab" and first["manifest"]["manifest"]["engine"]["engine"] == "cmd"
    assert set(first["metrics"]) == {"control", "candidate", "ratio"}
    decode = first["metrics"]["candidate"]["decode"]
    assert decode["unit"] == "tokens/s" and len(decode["samples"]) == 2  # one per ABBA/BAAB block
    assert len(first["metrics"]["ratio"]["decode"]["samples"]) == 2
    built = [s for i, s in enumerate(shas) if i != BROKEN]
    control = {records[s]["metrics"]["control"]["logits"]["value"] for s in built}
    assert len(control) == 1  # the pinned v1.0 build: the same bits at every commit
    for sha in built:
        m = records[sha]["metrics"]["candidate"]
        changed = shas.index(sha) >= NUMERICS
        assert (m["logits"]["value"] in control) is not changed
        assert (m["bit_exact_share"]["value"] < 100.0) is changed and (m["kld_mean"]["value"] > 0) is changed


@pytest.mark.engine  # the module's `recorded` builds run the cmd engine
def test_history_show_flags_the_numerics_change_and_the_slowdown(engine, recorded, tmp_path):
    repo, shas = engine
    out, md = tmp_path / "history.json", tmp_path / "history.md"
    r = logitlab("history", "show", "--dir", str(recorded), "--repo", str(repo), "--json", str(out),
                 "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    data = json.loads(out.read_text())
    assert data["kind"] == "history" and data["n_records"] == 15
    series = {s["variant"] + "/" + s["metric"]: s for s in data["series"]}
    assert {"ratio/decode", "candidate/logits", "control/logits", "candidate/kld_mean"} <= set(series)
    assert all(s["ordered_by"] == "git" and s["commits"] == [c for i, c in enumerate(shas) if i != BROKEN]
               for s in series.values())

    def changes(name):
        return [(c["previous_label"], c["label"], c["direction"]) for c in series[name]["detection"]["change_points"]]

    numerics = (shas[NUMERICS - 1], shas[NUMERICS])
    assert changes("candidate/logits") == [(*numerics, "changed")]
    assert changes("control/logits") == []
    assert changes("candidate/kld_mean") == [(*numerics, "regression")]
    assert changes("candidate/bit_exact_share") == [(*numerics, "regression")]
    (slow,) = [c for c in series["ratio/decode"]["detection"]["change_points"] if c["label"] == shas[SLOWER]]
    assert slow["previous_label"] == shas[SLOWER - 1] and slow["direction"] == "regression"
    assert slow["change"] < -0.25 and slow["p_value"] <= 0.001
    # the terminal and Markdown reports name both, with the commit ranges (a terminal cell may wrap)
    text = md.read_text()
    assert text.startswith("## logitlab history: **") and "**bits changed**" in text and "**regression**" in text
    assert f"| `candidate/logits` | {shas[NUMERICS - 1][:10]} → {shas[NUMERICS][:10]} |" in text
    assert f"| `ratio/decode` | {shas[SLOWER - 1][:10]} → {shas[SLOWER][:10]} |" in text
    for sha in (shas[NUMERICS - 1], shas[NUMERICS], shas[SLOWER - 1], shas[SLOWER]):
        assert sha[:10] in r.stdout
    # in record order (no --repo) the same series: recorded oldest commit first
    again = in_process("history", "show", "--dir", str(recorded), "--metric", "candidate/logits", "--json",
                       str(tmp_path / "r.json"), "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    (only,) = json.loads((tmp_path / "r.json").read_text())["series"]
    assert only["ordered_by"] == "record" and only["detection"]["change_points"][0]["label"] == shas[NUMERICS]


@pytest.mark.engine  # the module's `recorded` builds run the cmd engine
def test_regressions_only_exits_1_for_ci_and_keeps_only_alarming_series(engine, recorded, tmp_path):
    repo, shas = engine
    r = in_process("history", "show", "--dir", str(recorded), "--repo", str(repo), "--regressions-only",
                   "--last", "20", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "regressions-only:" in r.stderr and "candidate/logits" in r.stderr and "ratio/decode" in r.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    names = {s["variant"] + "/" + s["metric"] for s in data["series"]}
    assert {"candidate/logits", "ratio/decode"} <= names
    assert "control/logits" not in names and data["hidden"] >= 1  # the pinned build's bits never change
    # the last 3 builds hold neither change: nothing to report, exit 0
    quiet = in_process("history", "show", "--dir", str(recorded), "--repo", str(repo), "--regressions-only",
                       "--last", "3", "--metric", "candidate/logits", "--metric", "ratio/decode", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr


@pytest.mark.engine
def test_bisect_numerics_names_the_commit_and_restores_the_checkout(engine, tmp_path):
    repo, shas = engine
    start = time.perf_counter()
    r = logitlab("bisect", "v1.0..HEAD", "--repo", str(repo), "--build", BUILD, "--probe", "numerics",
                 "--json", "-", "--", SPEC)  # --json -: the JSON alone on stdout, the report on stderr
    seconds = time.perf_counter() - start
    assert r.returncode == 0, r.stderr
    print(r.stderr, f"bisect --probe numerics: {seconds:.1f} s")
    data = json.loads(r.stdout)
    assert data["first_bad"] == shas[NUMERICS] and data["suspects"] == [] and data["restored"]
    steps = {s["commit"]: s for s in data["steps"]}
    assert steps[shas[NUMERICS]]["outcome"] == "bad" and steps[shas[NUMERICS - 1]]["outcome"] == "good"
    assert steps[shas[NUMERICS]]["probe"]["verdict"]["word"] == "ulp-noise"  # float64 norm: rounding only (numpy)
    assert steps[shas[BROKEN]]["outcome"] == "skip" and "build failed" in steps[shas[BROKEN]]["reason"]
    assert f"first bad commit {shas[NUMERICS][:10]}" in r.stderr
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main" and git(repo, "status", "--porcelain") == ""


@pytest.mark.engine
def test_bisect_exits_1_when_a_skip_leaves_two_suspects(engine, tmp_path):
    """Exit 1 (``docs/commands/bisect.md``: skips leave several commits, all named): the build also fails at the
    commit just before the numerics change, so the first bad commit is that one or the next, and bisect cannot
    tell which."""
    repo, shas = engine
    before = shas[NUMERICS - 1]
    build = f'test "$(git rev-parse HEAD)" != {before} && {BUILD}'  # commit 4 does not build either
    out = tmp_path / "bisect.json"
    r = logitlab("bisect", "v1.0..HEAD", "--repo", str(repo), "--build", build, "--probe", "numerics",
                 "--json", str(out), "--", SPEC)
    assert r.returncode == 1, r.stderr
    data = json.loads(out.read_text())
    assert data["first_bad"] is None and data["restored"]
    assert sorted(data["suspects"]) == sorted([before, shas[NUMERICS]]), data["suspects"]
    steps = {s["commit"]: s for s in data["steps"]}
    assert steps[before]["outcome"] == "skip" and "build failed" in steps[before]["reason"]
    assert steps[shas[NUMERICS]]["outcome"] == "bad" and steps[shas[NUMERICS - 2]]["outcome"] == "good"
    assert before[:10] in r.stdout and shas[NUMERICS][:10] in r.stdout
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main" and git(repo, "status", "--porcelain") == ""


@pytest.mark.engine
def test_bisect_speed_names_the_commit_and_removes_its_worktree(engine, tmp_path):
    repo, shas = engine
    out = tmp_path / "bisect.json"
    start = time.perf_counter()
    r = logitlab("bisect", "v1.0..HEAD", "--repo", str(repo), "--build", BUILD, "--probe", "speed",
                 "--metric", BENCH_METRIC, "--metric-name", "decode_seconds", "--unit", "s", "--lower-is-better",
                 "--max-blocks", "8", "--warmup", "0", "--json", str(out), "--markdown", str(tmp_path / "b.md"),
                 "--", *BENCH.split())
    seconds = time.perf_counter() - start
    assert r.returncode == 0, r.stderr
    print(r.stdout, f"bisect --probe speed: {seconds:.1f} s")
    data = json.loads(out.read_text())
    assert data["first_bad"] == shas[SLOWER] and data["restored"], [(s["commit"][:8], s["reason"])
                                                                    for s in data["steps"]]
    bad = next(s for s in data["steps"] if s["commit"] == shas[SLOWER])
    assert bad["probe"]["speed"]["call"] == "slower" and bad["probe"]["speed"]["ratio"] > 1.25
    assert data["reference"]["margin_source"] == "half of BAD's change"
    assert "first bad commit" in (tmp_path / "b.md").read_text()
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main work tree is left
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"


def sigint_default() -> None:
    """In the child: SIGINT back to its default. A background job (``make test &``, some CI runners) starts its
    children with SIGINT ignored (POSIX), and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.engine
def test_ctrl_c_restores_the_checkout_and_keeps_the_steps(engine, tmp_path):
    repo, shas = engine
    git(repo, "checkout", "-q", "--detach", shas[3])  # a detached start is restored as detached
    out = tmp_path / "partial.json"
    proc = subprocess.Popen([PY, "-m", "logitlab", "bisect", "v1.0..main", "--repo", str(repo), "--build", BUILD,
                             "--probe", "speed", "--metric", BENCH_METRIC, "--lower-is-better", "--json", str(out),
                             "--", *BENCH.split()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 300
        while "logitlab-bisect-" not in git(repo, "worktree", "list") and time.monotonic() < deadline:
            time.sleep(0.2)  # GOOD's work tree exists: the bisection is under way
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert git(repo, "rev-parse", "HEAD") == shas[3] and git(repo, "worktree", "list").count("\n") == 0
    data = json.loads(out.read_text())
    assert data["error"].startswith("interrupted") and data["restored"]
    git(repo, "checkout", "-q", "main")


# --- bad input: one error line, exit 2 -------------------------------------------------------------------


@pytest.mark.engine
def test_bisect_bad_input_is_one_error_line(engine, tmp_path):
    repo, shas = engine
    spec = ["--", SPEC]
    one_line_error(in_process("bisect", "v1.0..HEAD", "--repo", str(tmp_path), "--probe", "numerics", *spec,
                              cwd=tmp_path), "is not a git repository")
    one_line_error(in_process("bisect", "v0.9..HEAD", "--repo", str(repo), "--probe", "numerics", *spec,
                              cwd=tmp_path), "unknown revision 'v0.9'")
    one_line_error(in_process("bisect", "HEAD", "--repo", str(repo), "--probe", "numerics", *spec, cwd=tmp_path),
                   "is not GOOD..BAD")
    one_line_error(in_process("bisect", "HEAD..v1.0", "--repo", str(repo), "--probe", "numerics", *spec,
                              cwd=tmp_path), "is not on the first-parent history")
    one_line_error(in_process("bisect", "v1.0..HEAD", "--repo", str(repo), "--probe", "speed", cwd=tmp_path),
                   "give the speed probe after --")
    one_line_error(in_process("bisect", "v1.0..HEAD", "--repo", str(repo), "--probe", "speed", "--",
                              f"{PY} {repo}/build/engine.py --bench 8", cwd=tmp_path), "relative to the work tree")
    # a build command that never succeeds: fails at GOOD, before anything else is built
    never = in_process("bisect", "v1.0..HEAD", "--repo", str(repo), "--build", "exit 3", "--probe", "numerics",
                       *spec, cwd=tmp_path)
    one_line_error(never, "fails at GOOD")
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    # BAD that is not bad: v1.0..commit 3 has no numerics change
    same = in_process("bisect", f"v1.0..{shas[3]}", "--repo", str(repo), "--build", BUILD, "--probe", "numerics",
                      *spec, cwd=tmp_path)
    one_line_error(same, "is not bad: bit-exact with GOOD")
    # uncommitted changes: refused before any checkout
    readme = repo / "README.md"
    readme.write_text(readme.read_text() + "local edit\n")
    try:
        one_line_error(in_process("bisect", "v1.0..HEAD", "--repo", str(repo), "--probe", "numerics", *spec,
                                  cwd=tmp_path), "uncommitted changes (README.md)")
    finally:
        git(repo, "checkout", "--", "README.md")


def test_record_and_history_bad_input_is_one_error_line(engine, tmp_path):
    repo, _ = engine
    one_line_error(in_process("history", "show", "--dir", str(tmp_path / "none"), cwd=tmp_path),
                   f"the history folder {tmp_path / 'none'} does not exist")  # not "holds no records": a typo
    (tmp_path / "empty").mkdir()
    one_line_error(in_process("history", "show", "--dir", str(tmp_path / "empty"), cwd=tmp_path), "holds no records")
    one_line_error(in_process("bench", "run", "--control", "true", "--aa", "--blocks", "2", "--record",
                              str(tmp_path / "h"), "--repo", str(tmp_path), cwd=tmp_path), "is not a git repository")
    one_line_error(in_process("bench", "run", "--control", "true", "--aa", "--blocks", "2", "--record",
                              str(tmp_path / "h"), "--repo", str(repo), "--commit", "nosuch", cwd=tmp_path),
                   "nosuch")
    one_line_error(in_process("bench", "run", "--control", "true", "--aa", "--blocks", "2", "--commit", "abc",
                              cwd=tmp_path), "add --record")
    one_line_error(in_process("bench", "run", "--control", "true", "--aa", "--blocks", "2", "--record", "--commit",
                              "abc", "--machine", "bad key", cwd=tmp_path), "--machine 'bad key' is not valid")
    (tmp_path / "file").write_text("x")
    one_line_error(in_process("bench", "run", "--control", "true", "--aa", "--blocks", "2", "--record",
                              str(tmp_path / "file"), "--commit", "abc", cwd=tmp_path), "is a file")


def test_bench_compare_record_and_history_add_of_saved_results(engine, tmp_path):
    repo, shas = engine
    data = Path(__file__).resolve().parents[1] / "data" / "bench" / "criterion"
    history = tmp_path / "h"
    r = in_process("bench", "compare", str(data), "--baseline", "main", "--bootstrap", "199", "-q", "--record",
                   str(history), "--repo", str(repo), "--commit", "v1.0", "--machine", "ci-1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(p.read_text()) for p in (history / "ci-1").glob("*.json")]
    assert record["commit"] == shas[0] and record["commit_date"].startswith("2026-01-01")
    assert set(record["metrics"]) == {"candidate", "ratio"} and "matmul/f32_256" in record["metrics"]["ratio"]
    # a saved result recorded later: history add (HEAD of --repo, machine from $LOGITLAB_MACHINE)
    saved, failed = tmp_path / "run.json", tmp_path / "failed.json"
    assert in_process("bench", "run", "--control", "true", "--aa", "--blocks", "2", "--warmup", "0", "-q",
                      "--json", str(saved), cwd=tmp_path).returncode == 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOGITLAB_MACHINE", "ci-1")
        added = in_process("history", "add", str(saved), "--dir", str(history), "--repo", str(repo), cwd=tmp_path)
    assert added.returncode == 0 and f"commit {shas[-1][:12]}, machine ci-1" in added.stderr, added.stderr
    assert len(list((history / "ci-1").glob("*.json"))) == 2
    # the same file again (or twice in one call) is refused before anything is recorded: it would weigh twice
    (recorded,) = [p for p in (history / "ci-1").glob(f"{shas[-1][:12]}-*.json")]
    copy = tmp_path / "copy.json"
    copy.write_text(saved.read_text())
    for given, said in (((saved,), f"{saved} is recorded already in {history} (ci-1/{recorded.name}: same commit"),
                        ((copy, saved), f"{saved} is the same run as {copy}, given before it: a run is recorded once")):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LOGITLAB_MACHINE", "ci-1")
            again = in_process("history", "add", *map(str, given), "--dir", str(history),
                               "--commit", "v1.0" if len(given) == 2 else shas[-1], cwd=tmp_path)
        one_line_error(again, said)
    assert len(list((history / "ci-1").glob("*.json"))) == 2
    # a run that stopped early is not recorded
    assert in_process("bench", "run", "--control", "true", "--candidate", "exit 3", "--blocks", "2", "-q",
                      "--json", str(failed), cwd=tmp_path).returncode == 2
    one_line_error(in_process("history", "add", str(failed), "--dir", str(history), "--commit", "x", cwd=tmp_path),
                   "stopped early")
    one_line_error(in_process("history", "add", str(tmp_path / "none.json"), "--dir", str(history), "--commit",
                              "x", cwd=tmp_path), "does not exist")
    # a missing file is named first, even without a commit (not "--record needs the engine's commit"); then a
    # result without a commit names history add, not a --record it does not have
    one_line_error(in_process("history", "add", str(tmp_path / "none.json"), "--dir", str(history), cwd=tmp_path),
                   "result file " + str(tmp_path / "none.json") + " does not exist")
    one_line_error(in_process("history", "add", str(saved), "--dir", str(history), cwd=tmp_path),
                   "history add needs the engine's commit: pass --commit REV, or --repo PATH")


def test_history_show_gives_a_unitless_bench_metric_as_a_number_not_a_hash(engine, tmp_path):
    """A ``bench run --metric`` without ``--unit`` (say ``decode_seconds``) is a number series: its unit cell is
    ``—``, its latest value a number and its line bars, not the ``hash`` and letters of a fingerprint."""
    repo, shas = engine
    history = tmp_path / "h"
    for commit, value in zip(shas[:3], ("0.50", "0.51", "0.90")):
        r = in_process("bench", "run", "--control", f"echo decode_seconds={value}", "--aa", "--blocks", "2",
                       "--warmup", "0", "-q", "--metric", "decode_seconds=([0-9.]+)", "--lower-is-better",
                       "--record", str(history), "--repo", str(repo), "--commit", commit, "--machine", "m",
                       cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    out = tmp_path / "show.json"
    shown = in_process("history", "show", "--dir", str(history), "--metric", "control/decode_seconds",
                       "--json", str(out), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (series,) = json.loads(out.read_text())["series"]
    assert (series["kind"], series["unit"], series["values"][-1]) == ("lower-is-better", "", 0.9)
    (row,) = [line for line in shown.stdout.splitlines() if line.startswith("│ control/decode_seconds ")]
    cells = [c.strip() for c in row.split("│")]
    assert "hash" not in cells and "—" in cells and "0.9" in cells, row
    assert not any(ch in row for ch in "ABC"), row  # no fingerprint letters in the sparkline
