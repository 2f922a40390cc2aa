"""The CLI loads lazily: listing and help import no subcommand's heavy dependencies, completion works."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest

from logitlab.cli import COMMANDS, LazyGroup, load_command, main

#: what a --help must not import (each costs 0.05-2 s; benchmarks/bench_startup.py times it)
HEAVY = ("numpy", "scipy", "numba", "ml_dtypes", "rich", "matplotlib", "torch", "llama_cpp", "transformers",
         "logitlab.engines.base", "logitlab.numerics.compare")


def _command_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]
    for name in COMMANDS:
        command = load_command(COMMANDS[name][0])
        paths.append([name])
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in command.list_commands(click.Context(command))]
    return paths


def _imported_by(code: str, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    probe = code + f"\nimport sys\nprint('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    line = [x for x in done.stderr.splitlines() if x.startswith("HEAVY=")]
    assert line, done.stderr[-2000:]
    return [m for m in line[-1][len("HEAVY="):].split(",") if m], done.stdout


def test_every_registered_command_loads_and_its_one_line_help_is_its_docstrings_first_sentence():
    for name, (target, short) in COMMANDS.items():
        command = load_command(target)
        assert command.get_short_help_str(limit=10_000) == short, name


def test_group_help_lists_every_command_without_loading_any():
    code = ("from logitlab.cli import main\n"
            "try:\n    main(['--help'], prog_name='logitlab')\nexcept SystemExit:\n    pass\n"
            "import sys\nprint(sorted(m for m in sys.modules if m.startswith('logitlab.cli.')), file=sys.stderr)\n")
    heavy, out = _imported_by(code)
    assert heavy == []
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "logitlab")
def test_help_imports_nothing_heavy(path):
    code = ("from logitlab.cli import main\n"
            f"try:\n    main({[*path, '--help']!r}, prog_name='logitlab')\nexcept SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n")
    heavy, out = _imported_by(code)
    assert heavy == [], f"logitlab {' '.join(path)} --help imports {heavy}"
    assert "Usage: logitlab" in out and "--help" in out


def test_shell_completion_of_command_names_loads_no_command():
    env = {**os.environ, "_LOGITLAB_COMPLETE": "bash_complete", "COMP_WORDS": "logitlab d", "COMP_CWORD": "1"}
    code = "from logitlab.cli import main\ntry:\n    main(prog_name='logitlab')\nexcept SystemExit:\n    pass\n"
    heavy, out = _imported_by(code, env)
    assert heavy == []
    assert out.split() == ["plain,doctor", "plain,dump", "plain,dump-diff"]


def test_shell_completion_of_a_commands_options():
    env = {**os.environ, "_LOGITLAB_COMPLETE": "bash_complete", "COMP_WORDS": "logitlab ab --iso", "COMP_CWORD": "2"}
    code = "from logitlab.cli import main\ntry:\n    main(prog_name='logitlab')\nexcept SystemExit:\n    pass\n"
    heavy, out = _imported_by(code, env)
    assert out.split() == ["plain,--isolation"] and heavy == []


def test_unknown_command_is_a_usage_error():
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["abb"])
    assert result.exit_code == 2 and "No such command 'abb'" in result.output


@pytest.mark.parametrize("words", [[], ["bench"], ["history"]])
def test_a_group_without_its_command_prints_its_help_not_an_error(words):
    """``logitlab`` or ``logitlab bench`` alone: the group's usage and commands on stderr, exit 2, without an
    ``error:`` prefix or a "(see ... --help)" glued to its last line (a new user's report)."""
    proc = subprocess.run([sys.executable, "-m", "logitlab", *words], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"Usage: {' '.join(['logitlab', *words])} [OPTIONS] COMMAND"), proc.stderr
    assert "error:" not in proc.stderr and "(see '" not in proc.stderr and "Commands:" in proc.stderr


def test_a_new_command_is_one_registry_line(tmp_path, monkeypatch):
    """A command registered only by its target: listed with its line, loaded when run."""
    (tmp_path / "extra_cmd.py").write_text(
        "import click\n@click.command()\ndef hello():\n    \"\"\"Say hello. More text.\"\"\"\n    click.echo('hello')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    group = LazyGroup("t", lazy_commands={"hello": ("extra_cmd:hello", "Say hello.")})
    from click.testing import CliRunner

    listing = CliRunner().invoke(group, ["--help"])
    assert "hello  Say hello." in listing.output and "extra_cmd" not in sys.modules
    assert CliRunner().invoke(group, ["hello"]).output == "hello\n"
    assert json.dumps(sorted(group.commands)) == '["hello"]'


@pytest.mark.parametrize("args", [["ab", "--noise", "missing.json"], ["verify", "--prompts", "missing.jsonl"],
                                  ["bench", "run", "--blocks", "0", "--", "true"]],
                         ids=lambda a: " ".join(a[:2]))
def test_a_bad_input_exit_imports_no_statistics(args, tmp_path):
    """scipy.stats (~0.5 s quiet, ~1.8 s on a busy 2-core machine) is imported where a statistic is computed: a
    command refused before any run does not pay it (nine perf modules imported it at module level)."""
    code = ("import os\nos.chdir(" + repr(str(tmp_path)) + ")\nfrom logitlab.cli import main\n"
            f"try:\n    main({args!r}, prog_name='logitlab')\nexcept SystemExit as e:\n"
            "    assert e.code == 2, e.code\n"
            "import sys\nprint('STATS=' + str('scipy.stats' in sys.modules), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "error:" in done.stderr and "STATS=False" in done.stderr, done.stderr[-2000:]
