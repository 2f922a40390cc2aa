"""One spelling for one option across commands: every output folder or file option is ``-o``/``--out`` (build's
``--output`` kept as its former name); walks every command and subcommand of the real CLI."""

from __future__ import annotations

import click

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
