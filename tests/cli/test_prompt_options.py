"""Every command that takes a prompt takes it the same way: ``--prompt TEXT``, ``--prompt-file FILE`` (the whole
file is one prompt) and ``--prompts FILE`` (one prompt per line, or JSONL), from one definition
(``cli/options.py``'s ``prompt_options``), with the same help, the same one-of-three rule and the same error lines.

These run in this process (click's runner) and stop before any engine loads: the error cases fail while
parsing, and the cases that parse stop at a spy on ``select_prompts`` that reports what was read. One real run
(``verify --prompt-file`` on the embedded model) is at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from logitlab.cli import main
from logitlab.errors import InputError
from logitlab.experiments import prompts as prompts_module
from logitlab.experiments.prompts import DEFAULT_PROMPT, Prompt, one_prompt, select_prompts

#: Every command that takes a prompt, with what it needs besides (output folders, a probe), and whether it runs
#: several prompts.
SINGLE = {
    "ab": ["ab"],
    "explain": ["explain"],
    "invariance batch": ["invariance", "batch"],
    "invariance prefill-decode": ["invariance", "prefill-decode"],
    "invariance determinism": ["invariance", "determinism"],
    "dump": ["dump", "--out", "dumps"],
    "bisect": ["bisect", "v1..v2", "--probe", "numerics", "--repo", ".", "--", "llamacpp:"],
}
MANY = {
    "verify": ["verify"],
    "golden record": ["golden", "record", "-o", "golden"],
    "invariance matrix": ["invariance", "matrix"],
}
COMMANDS = {**SINGLE, **MANY}


def argv(command: str, extra: list[str]) -> list[str]:
    """The command's words with ``extra`` options (before bisect's ``-- SPEC``)."""
    words = COMMANDS[command]
    return [*words[:-2], *extra, *words[-2:]] if command == "bisect" else [*words, *extra]


def run(args, cwd) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def files(tmp_path):
    (tmp_path / "one.txt").write_text("The capital of France is\nParis, and the capital of Italy is\n")
    (tmp_path / "two.txt").write_text("The sky is\nOne, two, three,\n")
    (tmp_path / "one-line.txt").write_text("Once upon a time\n")
    (tmp_path / "empty.txt").write_text(" \n\n")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe bad")
    (tmp_path / "folder").mkdir()
    return tmp_path


@pytest.fixture
def spy(monkeypatch):
    """Stop every command right after its prompts are read, with one line saying what they are."""
    real = prompts_module.select_prompts

    def stop(*args, **kwargs):
        prompts = real(*args, **kwargs)
        raise InputError("parsed " + json.dumps(None if prompts is None else [[p.name, p.text] for p in prompts]))

    monkeypatch.setattr(prompts_module, "select_prompts", stop)


# -- errors: one line, exit 2, the same words on every command --------------------------------------------------
ERRORS = [
    (["--prompt", "a", "--prompt-file", "one.txt"],
     "error: give one of --prompt, --prompt-file and --prompts, not --prompt and --prompt-file"),
    (["--prompt-file", "one.txt", "--prompts", "two.txt"],
     "error: give one of --prompt, --prompt-file and --prompts, not --prompt-file and --prompts"),
    (["--prompt-file", "missing.txt"], "error: cannot read --prompt-file missing.txt: No such file or directory"),
    (["--prompts", "missing.txt"], "error: cannot read --prompts missing.txt: No such file or directory"),
    (["--prompt-file", "folder"], "error: cannot read --prompt-file folder: Is a directory"),
    (["--prompts", "folder"], "error: cannot read --prompts folder: Is a directory"),
    (["--prompt-file", "empty.txt"], "error: --prompt-file empty.txt holds no prompts (it is empty)"),
    (["--prompts", "empty.txt"], "error: --prompts empty.txt holds no prompts (it is empty)"),
    (["--prompt-file", "bin.txt"], "error: --prompt-file bin.txt is not UTF-8 text (byte 0: invalid start byte)"),
    (["--prompts", "bin.txt"], "error: --prompts bin.txt is not UTF-8 text (byte 0: invalid start byte)"),
    (["--prompt", " "], "error: --prompt is empty"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("args, line", ERRORS, ids=[" ".join(a) for a, _ in ERRORS])
def test_bad_prompt_input_is_one_line_and_exit_2_on_every_command(command, args, line, files):
    code, stdout, stderr = run(argv(command, args), files)
    assert code == 2, (stdout, stderr)
    assert stderr.splitlines() == [line]


@pytest.mark.parametrize("command", SINGLE)
def test_a_one_prompt_command_refuses_several(command, files):
    code, _, stderr = run(argv(command, ["--prompts", "two.txt"]), files)
    assert code == 2 and stderr.splitlines() == [
        f"error: {command} runs one prompt, but --prompts two.txt holds 2: give one --prompt, a --prompts file of one "
        "prompt, or --prompt-file FILE (the whole file is one prompt)"]
    code, _, stderr = run(argv(command, ["--prompt", "a", "--prompt", "b"]), files)
    assert code == 2 and stderr.splitlines()[0].startswith(f"error: {command} runs one prompt, but --prompt is given "
                                                           "2 times: ")


# -- what parses: the same prompts on every command ---------------------------------------------------------------
PARSED = [
    (["--prompt", "Hello there"], [["prompt-1", "Hello there"]]),
    (["--prompt-file", "one.txt"], [["one", "The capital of France is\nParis, and the capital of Italy is\n"]]),
    (["--prompts", "one-line.txt"], [["one-line-1", "Once upon a time"]]),
    ([], None),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("args, prompts", PARSED, ids=[" ".join(a) or "default" for a, _ in PARSED])
def test_each_option_reads_the_same_prompts_on_every_command(command, args, prompts, files, spy):
    code, stdout, stderr = run(argv(command, args), files)
    assert code == 2 and stderr.splitlines() == ["error: parsed " + json.dumps(prompts)], (stdout, stderr)


@pytest.mark.parametrize("command", MANY)
def test_several_prompt_commands_take_each_way(command, files, spy):
    _, _, stderr = run(argv(command, ["--prompts", "two.txt"]), files)
    assert stderr.splitlines() == ['error: parsed [["two-1", "The sky is"], ["two-2", "One, two, three,"]]']
    _, _, stderr = run(argv(command, ["--prompt", "a", "--prompt", "b"]), files)
    assert stderr.splitlines() == ['error: parsed [["prompt-1", "a"], ["prompt-2", "b"]]']


def _command(path: list[str]) -> click.Command:
    from logitlab.cli import main as group

    ctx = click.Context(group)
    command = group
    for word in [w for w in path if not w.startswith("-")][:2]:
        if not isinstance(command, click.Group):
            break
        command = command.get_command(ctx, word)
    return command


def test_one_spelling_and_one_help_on_every_command():
    """The three options, spelled and explained alike; only the default (what runs without them) and the
    one-or-several sentence differ between commands."""
    seen: dict[tuple[str, bool], set[str]] = {}
    for name, words in COMMANDS.items():
        command = _command(words)
        options = {opt: param for param in command.params for opt in getattr(param, "opts", [])}
        for flag in ("--prompt", "--prompt-file", "--prompts"):
            assert flag in options, (name, flag)
            param = options[flag]
            assert param.name == {"--prompt": "prompt_texts", "--prompt-file": "prompt_file",
                                  "--prompts": "prompts_file"}[flag]
            assert param.multiple == (flag == "--prompt")
            help_text = param.help.split(" (default: ")[0]
            seen.setdefault((flag, name in MANY), set()).add(help_text)
    assert all(len(texts) == 1 for texts in seen.values()), seen


# -- the functions behind them ------------------------------------------------------------------------------------
def test_select_prompts_and_one_prompt(tmp_path):
    (tmp_path / "p.txt").write_text("a\nb\n")
    assert select_prompts() is None
    assert select_prompts(("x", "y")) == [Prompt("prompt-1", "x"), Prompt("prompt-2", "y")]
    assert select_prompts(prompt_file=str(tmp_path / "p.txt")) == [Prompt("p", "a\nb\n")]
    assert select_prompts(prompts_file=str(tmp_path / "p.txt")) == [Prompt("p-1", "a"), Prompt("p-2", "b")]
    assert one_prompt(command="ab") == DEFAULT_PROMPT
    assert one_prompt(command="dump", default="short") == "short"
    assert one_prompt(prompt_file=str(tmp_path / "p.txt"), command="ab") == "a\nb\n"
    with pytest.raises(InputError, match=r"^ab runs one prompt, but --prompts .*p.txt holds 2: "):
        one_prompt(prompts_file=str(tmp_path / "p.txt"), command="ab")


# -- one real run --------------------------------------------------------------------------------------------------
@pytest.mark.engine
def test_verify_prompt_file_runs_the_whole_file_as_one_prompt(tmp_path):
    """``verify --prompt-file``: a file of two lines is one prompt (named after the file), not two."""
    prompt = tmp_path / "story.txt"
    prompt.write_text("The capital of France is Paris.\nThe capital of Italy is")
    out = tmp_path / "v.json"
    proc = subprocess.run([sys.executable, "-m", "logitlab", "verify", "--prompt-file", str(prompt), "--k", "1", "2",
                           "--tokens", "4", "--no-detection-limit", "-q", "--json", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert [p["name"] for p in data["prompts"]] == ["story"]
    assert data["config"]["prompts"] == [{"name": "story", "kind": "", "text": prompt.read_text()}]
    assert [(e["prompt"], e["k"]) for e in data["sweep"]] == [("story", 1), ("story", 2)]
