"""The ``logitlab`` command line: one group, one module per subcommand.

Each subcommand parses its flags, builds a config, calls one public function
and renders the result; ``--json`` writes the same object the API returns.
"""

from __future__ import annotations

import click

from logitlab import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="logitlab")
def main() -> None:
    """logitlab: is an engine change bit-exact, why not, and is it faster?"""


# One line per subcommand module.
from logitlab.cli.ab import ab  # noqa: E402

main.add_command(ab)
from logitlab.cli.dump import dump, dump_diff  # noqa: E402
main.add_command(dump), main.add_command(dump_diff)
from logitlab.cli.bench import bench  # noqa: E402
main.add_command(bench)
from logitlab.cli.invariance import invariance  # noqa: E402
main.add_command(invariance)
from logitlab.cli.verify import verify  # noqa: E402
main.add_command(verify)
from logitlab.cli.explain import explain  # noqa: E402
main.add_command(explain)
from logitlab.cli.report import report  # noqa: E402
main.add_command(report)
from logitlab.cli.golden import golden  # noqa: E402
main.add_command(golden)
from logitlab.cli.history import history  # noqa: E402
main.add_command(history)
from logitlab.cli.bisect import bisect  # noqa: E402
main.add_command(bisect)
from logitlab.cli.sweep import sweep  # noqa: E402
main.add_command(sweep)
