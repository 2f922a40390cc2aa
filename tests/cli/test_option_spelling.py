"""One spelling for one option across commands: every output folder or file option is ``-o``/``--out`` (build's
``--output`` kept as its former name), and every ``--json PATH`` takes ``-`` for stdout; walks every command and
subcommand of the real CLI."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from logitlab.cli import main


def _commands(group: click.Group, ctx: click.Context, prefix: str = ""):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx, info_name=name), f"{path} ")
        else:
            yield path, command


def test_every_out_option_is_o_and_out():
    ctx = click.Context(main, info_name="logitlab")
    found = {}
    for path, command in _commands(main, ctx):
        for param in command.params:
            if isinstance(param, click.Option) and {"--out", "--output"} & set(param.opts):
                found[path] = sorted(param.opts)
    assert set(found) >= {"build", "dump", "golden record", "golden export-kld", "sweep", "bench calibrate"}, \
        found
    bad = {path: opts for path, opts in found.items() if not {"-o", "--out"} <= set(opts)}
    assert bad == {}, bad
    assert found["build"] == ["--out", "--output", "-o"]


# -- --json -: the JSON on stdout, for every command that writes JSON ----------------------------------------------
#: the cheapest real invocation of each command with --json (``{tmp}``: the test's folder, ``{data}``: the checked-in
#: benchmark files); run with ``--json -`` (``bench calibrate``: ``--out -``) and no --quiet, stdout must be the JSON
FILE_COMMANDS = {
    "bench compare": "bench compare {data}/hyperfine-real-base.json {data}/hyperfine-real-pr.json",
    "bench calibrate": "bench calibrate {data}/hyperfine-real-base.json {data}/hyperfine-real-pr.json",
    "bench run": "bench run --control true --candidate true --blocks 2 --warmup 0",
    "report": "report {tmp}/compare.json",
    "history show": "history show --dir {tmp}/history",
    "dump-diff": "dump-diff {tmp}/raw {tmp}/raw",
    "doctor": "doctor --no-engines",
}
SHORT_RUN = "--prompt 'The capital of France is' --tokens 2"
ENGINE_COMMANDS = {
    "ab": f"ab {SHORT_RUN} --repeats 1 --warmup 0 --no-detection-limit",
    "verify": f"verify {SHORT_RUN} --k 2",
    "explain": f"explain {SHORT_RUN} --candidate n_threads=1",
    "dump": f"dump {SHORT_RUN} --names result_output --out {{tmp}}/dump",
    "golden record": f"golden record {SHORT_RUN} -o {{tmp}}/golden",
    "golden check": "golden check {tmp}/golden",
    "golden update": "golden update {tmp}/golden --reason again",
    "invariance batch": "invariance batch --batch 1 2 --prompt 'The capital of France is'",
    "invariance determinism": f"invariance determinism --runs 2 {SHORT_RUN}",
    "invariance prefill-decode": f"invariance prefill-decode {SHORT_RUN}",
    "invariance matrix": "invariance matrix --axes determinism --runs 2 --tokens 2",
    "sweep": "sweep {tmp}/matrix.toml --out {tmp}/sweep",
}
#: commands whose --json - is checked where their costly setup already is
ELSEWHERE = {
    "build": "tests/engines/test_llamacpp_builds.py (builds llama.cpp)",
    "bisect": "tests/cli/test_history_cli.py::test_bisect_numerics_names_the_commit_and_restores_the_checkout "
              "(a git repository of an engine)",
}
MATRIX = """name = "j"
prompts = ["The capital of France is"]
[control]
options = { n_threads = 1 }
[axes]
options.n_threads_batch = [1]
[experiment]
tokens = 2
"""


def test_every_command_with_json_is_checked_for_json_to_stdout():
    ctx = click.Context(main, info_name="logitlab")
    with_json = {path for path, command in _commands(main, ctx)
                 if any(isinstance(p, click.Option) and "--json" in p.opts for p in command.params)}
    checked = set(FILE_COMMANDS) | set(ENGINE_COMMANDS) | set(ELSEWHERE)
    assert with_json == checked, (with_json - checked, checked - with_json)


def _json_on_stdout(name: str, line: str, tmp_path) -> dict:
    import json
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "bench"
    args = shlex.split(line.format(tmp=tmp_path, data=data))
    args += ["--out", "-"] if name == "bench calibrate" else ["--json", "-"]
    proc = subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    try:
        found = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"{name} --json -: stdout is not JSON alone: {proc.stdout[:400]!r}") from None
    assert isinstance(found, dict) and found, proc.stdout
    assert not (tmp_path / "-").exists() and not list(tmp_path.glob("-.*"))  # no file named '-' (or '-.runs.jsonl')
    return found


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A folder of saved files for the commands that read them: a raw dump, a bench compare result, a history."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dumps"))
    from rawdumps import base_tensors, write_folder

    folder = tmp_path_factory.mktemp("saved")
    write_folder(folder / "raw", base_tensors(), "p")
    data = Path(__file__).resolve().parents[1] / "data" / "bench"
    subprocess.run([sys.executable, "-m", "logitlab", "bench", "compare", str(data / "hyperfine-real-base.json"),
                    str(data / "hyperfine-real-pr.json"), "--json", str(folder / "compare.json"), "-q"], check=True)
    subprocess.run([sys.executable, "-m", "logitlab", "history", "add", str(folder / "compare.json"), "--dir",
                    str(folder / "history"), "--commit", "c1", "--machine", "m", "-q"], check=True)
    return folder


@pytest.mark.parametrize("name", sorted(FILE_COMMANDS))
def test_json_dash_prints_the_json_on_stdout_of_commands_on_saved_files(name, saved, tmp_path):
    import shutil

    shutil.copytree(saved, tmp_path, dirs_exist_ok=True)
    found = _json_on_stdout(name, FILE_COMMANDS[name], tmp_path)
    kinds = {"bench compare": "bench-compare", "report": "bench-compare", "bench run": "bench-run",
             "history show": "history", "doctor": "doctor", "bench calibrate": "logitlab-bench-noise"}
    assert found.get("kind") == kinds.get(name, found.get("kind")), found.get("kind")


@pytest.mark.engine
def test_json_dash_prints_the_json_on_stdout_of_engine_commands(tmp_path):
    """One short real run of each engine command (golden check and update read the golden record made)."""
    (tmp_path / "matrix.toml").write_text(MATRIX)
    for name, line in ENGINE_COMMANDS.items():
        found = _json_on_stdout(name, line, tmp_path)
        assert found, name


# -- one idea, one spelling: bench run and bisect take ab's names; their former names stay as second names --------
#: (idea, the common spelling, the former spellings kept): every command with any of them has the common one
SAME_IDEA = [
    ("ABBA/BAAB blocks", "--repeats", {"--blocks"}),
    ("budget of blocks of auto", "--max-repeats", {"--max-blocks"}),
    ("time limit of one timed run (slot)", "--slot-timeout", {"--timeout"}),
]


@pytest.mark.parametrize("idea, common, former", SAME_IDEA, ids=[i for i, _, _ in SAME_IDEA])
def test_one_idea_has_one_spelling_and_former_names_stay(idea, common, former):
    ctx = click.Context(main, info_name="logitlab")
    found = {}
    for path, command in _commands(main, ctx):
        for param in command.params:
            if isinstance(param, click.Option) and (set(param.opts) & (former | {common})):
                found[path] = param.opts
    assert found, idea
    bad = {path: opts for path, opts in found.items() if opts[0] != common}  # the common name first (--help)
    assert bad == {}, f"{idea}: {bad}"
    assert {"bench run", "ab"} & set(found), found


def test_bench_run_takes_the_common_names_and_its_former_ones():
    import json
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "logitlab", "bench", "run", "--control", "true", "--candidate",
                               "true", "--warmup", "0", "-q", "--json", "-", *args], capture_output=True, text=True)

    new, old = run("--repeats", "2", "--slot-timeout", "5"), run("--blocks", "2", "--timeout", "5")
    assert new.returncode == 0 and old.returncode == 0, new.stderr + old.stderr
    for proc in (new, old):
        data = json.loads(proc.stdout)
        assert data["config"]["blocks"] == 2 and data["config"]["timeout"] == 5.0
        assert data["comparisons"]["wall"]["n_blocks"] == 2
    bad = run("--repeats", "4", "--max-repeats", "8")
    assert bad.returncode == 2 and bad.stderr == ("error: --max-repeats is the budget of --repeats auto; with "
                                                  "--repeats 4 drop it\n")


@pytest.mark.parametrize("args, message", [
    (["--blocks", "0"], "--blocks must be at least 1 (2 or more for a CI), got 0"),  # said --repeats
    (["--repeats", "0"], "--repeats must be at least 1 (2 or more for a CI), got 0"),
    (["--blocks", "4", "--max-blocks", "8"], "--max-blocks is the budget of --blocks auto; with --blocks 4 drop it"),
    (["--blocks", "auto", "--max-blocks", "2"], "--max-blocks must be an integer from 3 (the first look) to 100, "
                                                "got 2"),
    (["--repeats", "auto", "--max-blocks", "2"], "--max-blocks must be an integer from 3 (the first look) to 100, "
                                                 "got 2"),
    (["--blocks", "2", "--max-time", "10m"], "--max-time is the budget of --blocks auto; with a fixed number of "
                                             "blocks drop it"),
    (["--timeout", "-1"], "--timeout must be positive seconds, got -1.0"),
    (["--slot-timeout", "-1"], "--slot-timeout must be positive seconds, got -1.0"),
    (["--repeats", "3", "--blocks", "4"], "--repeats and --blocks name the same option: give it once (see "
                                          "'logitlab bench run --help')"),
])
def test_bench_run_bad_values_name_the_option_as_typed(args, message, tmp_path):
    """A former name given a bad value is named in the message as the user typed it (``--blocks 0`` said
    "--repeats must be at least 1"): one error line, exit 2, before any command runs."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "logitlab", "bench", "run", "--control", "touch ran", "--candidate",
                           "touch ran", "--warmup", "0", "-q", *args], capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {message}\n")
    assert not (tmp_path / "ran").exists()


@pytest.mark.engine  # the conftest guard counts every bisect as a model run; this one stops before any
def test_bisect_speed_budget_names_the_option_as_typed(tmp_path):
    import subprocess
    import sys

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for option in ("--max-blocks", "--max-repeats"):
        proc = subprocess.run([sys.executable, "-m", "logitlab", "bisect", "HEAD~1..HEAD", "--repo", str(tmp_path),
                               "--probe", "speed", option, "2", "-q", "--", "true"], capture_output=True, text=True)
        assert (proc.returncode, proc.stderr) == (
            2, f"error: {option} must be an integer from 3 (the first look) to 100, got 2\n"), proc.stderr
