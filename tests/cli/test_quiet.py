"""``--quiet``/``-q`` has one meaning in every command: no progress bar and no report on the terminal; the files
asked for are still written, errors and warnings still print one line on stderr, and the exit status is the same.

(It used to mean "no progress bar" for ``ab``, ``verify``, ``sweep``..., whose report then still filled the
terminal, and "no report" for ``bench``, ``report``, ``doctor``, ``golden``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import SHORT_PROMPT
from logitlab.cli import main
from logitlab.cli.options import QUIET_HELP

DATA = Path(__file__).resolve().parents[1] / "data" / "bench"


def logitlab(*args, cwd):
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def _commands(group: click.Group, ctx: click.Context, prefix: str = ""):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx, info_name=name), f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_every_quiet_option_is_dash_q_with_the_one_help_text():
    ctx = click.Context(main, info_name="logitlab")
    found = {path: param for path, command in _commands(main, ctx) for param in command.params
             if isinstance(param, click.Option) and "--quiet" in param.opts}
    assert {"ab", "verify", "sweep", "bench run", "bench compare", "report", "golden check", "dump", "build",
            "history add"} <= set(found), sorted(found)
    bad = {path: (param.opts, param.help) for path, param in found.items()
           if sorted(param.opts) != ["--quiet", "-q"] or param.help != QUIET_HELP}
    assert bad == {}, bad


#: commands on saved files, each with the outputs it writes: (arguments, {option: file name})
FILE_COMMANDS = {
    "bench compare": ([f"{DATA}/hyperfine-real-base.json", f"{DATA}/hyperfine-real-pr.json", "--fail-on",
                       "inconclusive", "--bootstrap", "999"], {"--json": "c.json", "--markdown": "c.md"}),
    "report": (["{saved}"], {"--json": "r.json", "--html": "r.html"}),
    "bench calibrate": ([f"{DATA}/hyperfine-real-base.json", f"{DATA}/hyperfine-real-pr.json"],
                        {"--out": "noise.json", "--markdown": "noise.md"}),
    "bench run": (["--control", "true", "--candidate", "true", "--repeats", "2", "--warmup", "0"],
                  {"--json": "run.json", "--markdown": "run.md"}),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A saved ``bench compare`` result, for ``report``."""
    path = tmp_path_factory.mktemp("saved") / "compare.json"
    done = logitlab("bench", "compare", DATA / "hyperfine-real-base.json", DATA / "hyperfine-real-pr.json",
                    "--bootstrap", "999", "--json", path, "-q", cwd=path.parent)
    assert done.returncode in (0, 1) and path.is_file(), done.stderr
    return path


@pytest.mark.parametrize("name", sorted(FILE_COMMANDS))
def test_quiet_prints_nothing_writes_the_files_and_exits_the_same_on_saved_files(name, saved, tmp_path):
    args, outputs = FILE_COMMANDS[name]
    args = [a.format(saved=saved) for a in args]
    runs = {}
    for label, extra in (("loud", []), ("quiet", ["-q"]), ("quiet-long", ["--quiet"])):
        folder = tmp_path / label
        folder.mkdir()
        files = [w for option, file in outputs.items() for w in (option, folder / file)]
        runs[label] = logitlab(*name.split(), *args, *files, *extra, cwd=folder)
        assert all((folder / file).is_file() and (folder / file).stat().st_size for file in outputs.values()), \
            (label, runs[label].stderr)
    loud = runs["loud"]
    assert loud.returncode in (0, 1) and loud.stdout.strip(), loud.stderr  # the report, without --quiet
    for label in ("quiet", "quiet-long"):
        quiet = runs[label]
        assert quiet.returncode == loud.returncode, quiet.stderr
        assert quiet.stdout == "", quiet.stdout[:400]
        # nothing but the line of a failed check (bench compare --fail-on), as without --quiet
        assert quiet.stderr.splitlines() == [line for line in loud.stderr.splitlines()
                                             if line.startswith("fail-on ")], quiet.stderr
    if name == "bench run":  # the run log is a file asked for too (its default: next to --json)
        assert (tmp_path / "quiet" / "run.runs.jsonl").is_file()
        assert f"runs logged to {tmp_path / 'loud' / 'run.runs.jsonl'}" in loud.stderr


def test_quiet_with_json_dash_prints_the_json_alone(tmp_path):
    """``--json -`` is a file asked for: with --quiet the JSON still goes to stdout, and nothing else anywhere."""
    proc = logitlab("bench", "run", "--control", "true", "--candidate", "true", "--repeats", "2", "--warmup", "0",
                    "--json", "-", "-q", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["kind"] == "bench-run"


def test_quiet_still_prints_an_error_as_one_line(tmp_path):
    proc = logitlab("bench", "run", "--control", "true", "--candidate", "exit 3", "--repeats", "2", "--warmup", "0",
                    "--json", "run.json", "-q", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith("error: candidate command 'exit 3' failed") and proc.stderr.count("\n") == 1, \
        proc.stderr
    assert json.loads((tmp_path / "run.json").read_text())["error"]  # what was measured is kept


@pytest.mark.engine
def test_ab_quiet_prints_nothing_writes_the_files_and_exits_with_the_verdict(tmp_path):
    """An engine command (``ab``, the embedded model): --quiet prints no report, only the line of the failed
    ``--require`` (flash attention moves logits on every CPU: never bit-exact), with the same exit status 1 and
    the same files as without it. Before, ``ab --quiet`` printed its whole report on stdout."""
    args = ["ab", "--prompt", SHORT_PROMPT, "--tokens", "2", "--repeats", "1", "--warmup", "0",
            "--no-detection-limit", "--candidate", "flash_attn=1", "--require", "bit-exact"]
    runs = {}
    for label, extra in (("loud", []), ("quiet", ["--quiet"])):
        folder = tmp_path / label
        folder.mkdir()
        runs[label] = logitlab(*args, "--json", "ab.json", "--markdown", "ab.md", *extra, cwd=folder)
        assert (folder / "ab.json").is_file() and (folder / "ab.md").is_file() and \
            (folder / "ab.runs.jsonl").is_file(), runs[label].stderr
    loud, quiet = runs["loud"], runs["quiet"]
    assert loud.returncode == quiet.returncode == 1, (loud.stderr, quiet.stderr)
    assert "A/B verdict: " in loud.stdout
    assert quiet.stdout == "", quiet.stdout[:400]
    word = json.loads((tmp_path / "quiet" / "ab.json").read_text())["verdict"]["word"]
    assert quiet.stderr == f"require bit-exact: the verdict is {word}\n", quiet.stderr
    assert f"require bit-exact: the verdict is {word}" in loud.stderr and "runs logged to ab.runs.jsonl" in loud.stderr
