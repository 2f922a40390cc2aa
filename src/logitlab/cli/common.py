"""The run of every ``logitlab`` subcommand: exit codes, the one ``error:`` line, partial results, progress, the tail.

Exit codes: 0 ok, 1 a ``--require`` / ``--fail-on`` check failed, 2 bad usage
or bad input (one ``error:`` line on stderr; results measured before the error
are kept), 130 interrupted (Ctrl-C; results measured so far are written).

``ab``, ``verify``, ``explain`` and ``bench run`` build their config, then hand
the run to :func:`run_with_progress` (an experiment class to :func:`run_experiment`)
and the result to :func:`finish`, which
owns the tail they share: the reports in every format asked for, the terminal
report, ``--record``, the run log's line, and the exit code. (``golden``,
``invariance``, ``bisect``, ``sweep`` and ``dump`` still write their own.)
The option groups are :mod:`logitlab.cli.options`, the output files
:mod:`logitlab.cli.outputs`, ``--record`` :mod:`logitlab.cli.recording`.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import click

if TYPE_CHECKING:  # rich loads when a command prints, not when its options are parsed
    from rich.progress import Progress

from logitlab.errors import Interrupted, LogitlabError
from logitlab.numerics.verdict import VERDICTS

#: ``--require`` choices of every command that gives a verdict: every word but ``crashed``, in severity order
#: (``--require divergent`` accepts any verdict but a crash).
REQUIRE_CHOICES = VERDICTS[:-1]
EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C


def fail(message: str) -> None:
    """Print one ``error:`` line on stderr and exit 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a LogitlabError into one line on stderr and exit 2; with ``--json -``, run the command with its
    prints on stderr and stdout kept for the JSON (:func:`~logitlab.cli.outputs.json_on_stdout`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from logitlab.cli.outputs import json_on_stdout

        with json_on_stdout(kwargs):
            try:
                return func(*args, **kwargs)
            except LogitlabError as exc:
                fail(str(exc))

    return wrapper


def require_exit_code(word: str | None, require: str | None, what: str = "the verdict") -> int:
    """``--require``: :data:`EXIT_CHECK_FAILED` (with one line on stderr) when ``word`` is worse than ``require``
    in :data:`~logitlab.numerics.verdict.VERDICTS` (``crashed`` is worse than every bar), else :data:`EXIT_OK`;
    None for either: no bar, or nothing judged."""
    from logitlab.numerics.verdict import VERDICTS

    if require is None or word is None or VERDICTS.index(word) <= VERDICTS.index(require):
        return EXIT_OK
    click.echo(f"require {require}: {what} is {word}", err=True)
    return EXIT_CHECK_FAILED


def keep_partial(run: Callable[[], Any]) -> tuple[Any, LogitlabError | None]:
    """``(run(), None)``; or ``(partial, error)`` when ``run`` raises a LogitlabError with a ``partial`` result.

    Experiments attach what they measured before an error as ``exc.partial``,
    so the caller can write it before reporting the error.  Errors without a
    partial result are re-raised.
    """
    try:
        return run(), None
    except LogitlabError as exc:
        if exc.partial is None:
            raise
        return exc.partial, exc


def make_progress(quiet: bool) -> Progress:
    """A progress bar on stderr, removed when done; off with ``--quiet`` and when stderr is not a terminal.

    Off a terminal rich draws no bar but ends with an empty line (which then stood before an
    ``error:`` line); its console still prints, so lines sent through it appear either way.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=quiet or not console.is_interactive, transient=True,
    )


#: ``finish(..., target=NO_RECORD)``: the command has no ``--record`` option.
NO_RECORD = object()

OnEvent = Callable[[str, dict], None]


def run_with_progress(run: Callable[[OnEvent], Any], *, quiet: bool, first: str,
                      describe: Callable[[str, dict], "dict[str, Any] | None"]) -> tuple[Any, LogitlabError | None]:
    """``run(on_event)`` under a progress bar; ``(result, None)``, or ``(partial, error)`` as :func:`keep_partial`.

    ``first`` is the bar's text until the first event; ``describe(kind, data)``
    turns an experiment's progress event into the keyword arguments of
    ``rich.progress.Progress.update`` (``total``, ``advance``, ``description``),
    or None to leave the bar as it is.
    """
    with make_progress(quiet) as progress:
        task = progress.add_task(first, total=None)

        def on_event(kind: str, data: dict) -> None:
            update = describe(kind, data)
            if update:
                progress.update(task, **update)

        return keep_partial(lambda: run(on_event))


def run_experiment(experiment: Callable[..., Any], config: Any, *, quiet: bool,
                   describe: Callable[[str, dict], "dict[str, Any] | None"], first: str = "loading",
                   **options: Any) -> tuple[Any, LogitlabError | None]:
    """``experiment(config, on_event=..., **options).run()`` under a progress bar, as :func:`run_with_progress`.

    ``experiment`` is an :class:`~logitlab.experiments.base.Experiment` class (``options``: its other keyword
    arguments, e.g. ``log_path``); ``quiet``, ``describe`` and ``first`` as for :func:`run_with_progress`.
    """
    return run_with_progress(lambda on_event: experiment(config, on_event=on_event, **options).run(),
                             quiet=quiet, first=first, describe=describe)


def finish(result: Any, error: LogitlabError | None, opts: dict[str, Any], *, exit_code: Callable[[Any], int],
           target: Any = NO_RECORD, log_path: str | None = None, interrupted: str | None = None) -> NoReturn:
    """The tail of a command that ran an experiment: write, show, record, then exit.

    Writes the reports asked for (:func:`~logitlab.cli.outputs.write_reports`),
    prints the terminal report unless ``--quiet`` (without its "stopped early" line when ``error``
    is printed below), adds the result to the history (``target`` from
    :func:`~logitlab.cli.recording.record_target`; :data:`NO_RECORD` for a
    command without ``--record``), says where the run log is (``log_path``,
    unless ``--quiet``), then exits: :data:`EXIT_INTERRUPTED` with the line
    ``error: interrupted; <interrupted>`` when ``error`` is an
    :class:`~logitlab.errors.Interrupted` (an experiment that turns Ctrl-C into
    one with its partial result: ab, verify, explain, invariance, bench run) and ``interrupted`` is given; 2 with
    one ``error:`` line for any other error; else ``exit_code(result)``
    (0, or :data:`EXIT_CHECK_FAILED` for a failed ``--require``).
    """
    from logitlab.cli.outputs import show_report, write_reports
    from logitlab.cli.recording import record_result

    write_reports(result, opts)
    if not opts["quiet"]:
        show_report(result, show_error=error is None)  # else the error: line below says it
    if target is not NO_RECORD:
        record_result(result, opts, target)
    if log_path is not None and not opts["quiet"]:
        click.echo(f"runs logged to {log_path}", err=True)
    if interrupted is not None and isinstance(error, Interrupted):
        click.echo(f"error: interrupted; {interrupted}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if error is not None:
        fail(str(error))
    sys.exit(exit_code(result))
