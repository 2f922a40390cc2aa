"""The ``logitlab`` command line: one group, one module per subcommand.

Each subcommand parses its flags, builds a config, calls one public function
and renders the result; ``--json`` writes the same object the API returns.

Subcommands load lazily (click's lazy-loading group pattern): ``logitlab
--help`` and shell completion read the names and one-line helps from
:data:`COMMANDS` and import nothing else; a subcommand's module is imported
when that subcommand runs or shows its own help, and its module keeps its
top level light (numpy, numba, rich and the engines load when the command
runs).  ``benchmarks/bench_startup.py`` measures it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from logitlab import __version__

#: Subcommand name -> (``"module:attribute"``, one-line help shown by ``logitlab --help``).
#: Adding a command is one line here; the help must be the first sentence of the
#: command's docstring (``tests/cli/test_lazy_cli.py`` checks both).
COMMANDS: dict[str, tuple[str, str]] = {
    "ab": ("logitlab.cli.ab:ab", "Counterbalanced A/B of two engine variants: bit-exactness, verdict, speed."),
    "verify": ("logitlab.cli.verify:verify",
               "Speculative-decoding verify probe: M=1 greedy vs M=K verify, K sweep, cause."),
    "invariance": ("logitlab.cli.invariance:invariance",
                   "Does one engine variant give the same logits when only the way it runs changes?"),
    "dump": ("logitlab.cli.dump:dump", "Dump named intermediate tensors (per layer and position) of one or two "
                                       "variants."),
    "dump-diff": ("logitlab.cli.dump:dump_diff", "Compare two dumps tensor by tensor and name the first divergence."),
    "bench": ("logitlab.cli.bench:bench",
              "Paired, noise-calibrated performance comparison of commands and benchmark files."),
    "golden": ("logitlab.cli.golden:golden",
               "Golden logits: record a build's logits once, check later builds against them."),
    "history": ("logitlab.cli.history:history",
                "Results recorded across engine builds (--record), series per metric, change points."),
    "bisect": ("logitlab.cli.bisect:bisect",
               "Find the first commit of GOOD..BAD whose build changed the numerics or the speed."),
    "explain": ("logitlab.cli.explain:explain", "Why did these positions flip? Controls and one cause per position."),
    "sweep": ("logitlab.cli.sweep:sweep",
              "Run a matrix of variants × prompts as one job set: verdicts, KLD, flips and speed per cell."),
    "report": ("logitlab.cli.report:report", "Render a saved result again: terminal, --markdown, --html, --json."),
    "build": ("logitlab.cli.build:build",
              "Build an engine's library from its sources, cached by sources and flags, for a lib=DIR variant."),
    "doctor": ("logitlab.cli.doctor:doctor",
               "What this installation has: versions, engines, the embedded model, tools, devices."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (``COMMANDS``-style registry).

    ``logitlab --help`` and shell completion of subcommand names use the
    registry's one-line helps, so listing the commands imports none of them.
    """

    def __init__(self, *args: Any, lazy_commands: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in self.lazy_commands:
            return None
        command = load_command(self.lazy_commands[cmd_name][0])
        self.add_command(command, cmd_name)
        return command

    def command_help(self, ctx: click.Context, cmd_name: str, limit: int = 45) -> str:
        """The one-line help of ``cmd_name``, from the registry when the command is not loaded yet."""
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            return click.Command(cmd_name, help=self.lazy_commands[cmd_name][1]).get_short_help_str(limit)
        command = self.get_command(ctx, cmd_name)
        return command.get_short_help_str(limit) if command is not None else ""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = [n for n in self.list_commands(ctx) if not (n in self.commands and self.commands[n].hidden)]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            formatter.write_dl([(name, self.command_help(ctx, name, limit)) for name in names])

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """Run the CLI; a usage error (unknown option, bad choice, missing argument) is one ``error:`` line
        on stderr and exit 2, like every other bad input (click's own form is three lines)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # a group without its subcommand: its help, not an error
            click.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else (prog_name or "logitlab")
            click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        names = [n for n in self.list_commands(ctx) if n.startswith(incomplete)]
        items = [CompletionItem(n, help=self.command_help(ctx, n)) for n in names]
        # options of the group itself (click's own completion, which would load every command, is not called)
        return items + click.Command.shell_complete(self, ctx, incomplete)


def load_command(target: str) -> click.Command:
    """Import ``"module:attribute"`` and return the click command it names."""
    module_name, attribute = target.split(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logitlab")
def main() -> None:
    """logitlab: is an engine change bit-exact, why not, and is it faster?

    \b
    Shell completion (click's): add to ~/.bashrc
        eval "$(_LOGITLAB_COMPLETE=bash_source logitlab)"
    (zsh: zsh_source in ~/.zshrc; fish: fish_source).
    """
