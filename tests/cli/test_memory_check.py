"""The refuse-before-work path: a workload whose expected peak memory cannot fit this machine is one ``error:``
line (expected peak, available memory, the positions that would fit) and exit 2, before any engine loads.

In this process (click's runner): ``tests/conftest.py`` fails any test here that loads an engine, so passing
also shows that nothing was loaded. The vocabulary comes from the embedded model's GGUF metadata.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from logitlab.cli import main
from logitlab.errors import InputError

HUGE = "100000000"
#: every command with a memory check, and a workload it cannot hold: 10^8 decode tokens (invariance batch has none:
#: a long prompt file, below).
COMMANDS = {
    "ab": ["ab", "--tokens", HUGE],
    "verify": ["verify", "--prompt", "Hello", "--tokens", HUGE],
    "explain": ["explain", "--tokens", HUGE],
    "invariance prefill-decode": ["invariance", "prefill-decode", "--tokens", HUGE],
    "invariance determinism": ["invariance", "determinism", "--tokens", HUGE],
    "golden record": ["golden", "record", "-o", "golden", "--prompt", "Hello", "--tokens", HUGE],
    "golden record --store topk": ["golden", "record", "-o", "golden", "--prompt", "Hello", "--tokens", HUGE,
                                   "--store", "topk:64"],
}
LINE = re.compile(r"^error: (?P<command>[a-z -]+) would need about (?P<peak>[\d.]+ [kMGTP]?B) of memory at its peak "
                  r"\((at least )?(?P<positions>[\d,]+) positions × 49,152 vocabulary × 4 bytes = [\d.]+ [kMGTP]?B a "
                  r"run, about [\d.]+ such arrays? held at once today( \(a large reference kept on disk\))?, plus "
                  r"[\d.]+ [kMGTP]?B for the processes and "
                  r"the model( and [\d.]+ [kMGTP]?B for the engines' batch buffers)?\), but this machine has (?P<available>[\d.]+ [kMGTP]?B) available: at most "
                  r"(?P<fit>[\d,]+) positions would fit \(.*\); --no-memory-check runs it anyway$")


def run(args, cwd):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_that_cannot_fit_is_refused_before_any_engine_loads(command, tmp_path):
    code, stdout, stderr = run([*COMMANDS[command], "--quiet"], tmp_path)
    assert code == 2, (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    match = LINE.match(lines[0])
    assert match, lines[0]
    assert match["command"] == command
    assert int(match["positions"].replace(",", "")) >= int(HUGE)
    assert not list(tmp_path.iterdir())  # nothing written: no golden folder, no run log


def test_a_long_prompt_file_is_tokenized_and_refused(tmp_path, monkeypatch):
    """A prompt whose byte count cannot fit is counted with the model's tokenizer (a vocabulary-only load, no
    weights): the line gives its exact positions. (4 GB available, so that the test does not depend on this
    machine's memory: about 2,000 positions fit.)"""
    import logitlab.device

    monkeypatch.setattr(logitlab.device, "available_memory", lambda: 4 * 10 ** 9)
    (tmp_path / "long.txt").write_text("The lighthouse keeper wrote in his journal. " * 5_000)  # 220 kB
    code, _, stderr = run(["invariance", "batch", "--prompt-file", "long.txt", "--quiet"], tmp_path)
    assert code == 2
    match = LINE.match(stderr.strip())
    assert match and match["command"] == "invariance batch", stderr
    assert "at least" not in stderr and match["available"] == "4.0 GB"
    assert 20_000 < int(match["positions"].replace(",", "")) < 220_000


def test_no_memory_check_lets_it_run(tmp_path, monkeypatch):
    """``--no-memory-check``: the same workload goes on to the engine (stopped here before it loads)."""
    import logitlab.cli.ab as ab_cli

    def stop(config, *args, **kwargs):
        raise InputError(f"would run {config.n_decode} tokens")

    monkeypatch.setattr(ab_cli, "_run", stop)
    code, _, stderr = run(["ab", "--tokens", HUGE, "--quiet", "--no-memory-check", "--log", "x.jsonl"], tmp_path)
    assert code == 2 and stderr.splitlines() == [f"error: would run {HUGE} tokens"]
    code, _, stderr = run(["ab", "--tokens", "8", "--quiet", "--log", "x.jsonl"], tmp_path)  # fits: checked, passes
    assert code == 2 and stderr.splitlines() == ["error: would run 8 tokens"]


def test_every_engine_command_shows_the_option():
    from test_prompt_options import _command

    for words in COMMANDS.values():
        command = _command(words)
        assert any("--no-memory-check" in getattr(p, "secondary_opts", []) for p in command.params), words


def test_golden_check_counts_the_goldens_positions(tmp_path, monkeypatch):
    """``golden check`` knows its positions from the golden's token ids: the largest golden's, on its variant."""
    from types import SimpleNamespace

    import logitlab.device
    import logitlab.experiments.golden.provenance as provenance

    def golden(rows: int) -> SimpleNamespace:
        prompt = SimpleNamespace(input_ids=list(range(rows)))
        return SimpleNamespace(prompts=[prompt], provenance=SimpleNamespace(engine="llamacpp", model=None, options={},
                                                                            env={}), n_decode=0, positions=None)

    import logitlab.dumps.golden_format as golden_format

    monkeypatch.setattr(golden_format, "golden_folders", lambda root: ["a", "b"])
    monkeypatch.setattr(provenance, "read_goldens", lambda folders: [golden(10), golden(90_000)])
    monkeypatch.setattr(logitlab.device, "available_memory", lambda: 4 * 10 ** 9)
    (tmp_path / "golden").mkdir()
    code, _, stderr = run(["golden", "check", "golden", "--quiet"], tmp_path)
    assert code == 2
    match = LINE.match(stderr.strip())
    assert match and match["command"] == "golden check" and match["positions"] == "90,000", stderr


def test_ab_positions_count_the_rows_kept(tmp_path, monkeypatch):
    """Issue #31: ``ab --positions last`` holds the run itself and one row a run beyond it: a long prompt that
    ``ab`` refuses whole fits with it, and the refusal's arrays held at once are fewer."""
    import logitlab.cli.ab as ab_cli
    import logitlab.device

    def stop(config, *args, **kwargs):
        raise InputError(f"would run --positions {config.positions}")

    monkeypatch.setattr(ab_cli, "_run", stop)
    monkeypatch.setenv("LOGITLAB_SPILL", "off")  # every row held in memory (a reference on disk counts one run)
    monkeypatch.setattr(logitlab.device, "available_memory", lambda: 22 * 10 ** 8)  # whole: 2.6 GB needed, last: 1.6
    (tmp_path / "long.txt").write_text("The lighthouse keeper wrote in his journal. " * 400)  # 3,201 tokens
    code, _, stderr = run(["ab", "--prompt-file", "long.txt", "--tokens", "8", "--quiet", "--log", "x.jsonl"],
                          tmp_path)
    whole = LINE.match(stderr.strip())
    assert code == 2 and whole and whole["command"] == "ab", stderr
    code, _, stderr = run(["ab", "--prompt-file", "long.txt", "--tokens", "8", "--quiet", "--log", "x.jsonl",
                           "--positions", "last"], tmp_path)
    assert code == 2 and stderr.splitlines() == ["error: would run --positions last"], stderr
    code, _, stderr = run(["ab", "--tokens", HUGE, "--positions", "last", "--quiet"], tmp_path)  # the run itself
    last = LINE.match(stderr.strip())
    assert code == 2 and last, stderr
    held = re.search(r"about ([\d.]+) such arrays", stderr).group(1)
    assert float(held) < float(re.search(r"about ([\d.]+) such arrays", whole.string).group(1))
