"""``--record``: adding a command's result to the history (:mod:`logitlab.experiments.history.store`).

:func:`record_options` adds ``--record [DIR]``, ``--machine``, ``--commit``
and ``--repo`` (:func:`logged_run_options`: with the output options and
``--log``); :func:`record_target` resolves them before any work (so a bad
``--repo`` fails first); :func:`record_result` adds the finished result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from logitlab.cli.options import apply_options, output_options, run_log_option
from logitlab.cli.outputs import probe_folder
from logitlab.errors import InputError

#: Environment variable naming the default history folder of ``--record``.
HISTORY_ENV = "LOGITLAB_HISTORY"
#: History folder of ``--record`` without a value or $LOGITLAB_HISTORY.
DEFAULT_HISTORY = ".logitlab/history"
#: Environment variable naming this machine's key in the history.
MACHINE_ENV = "LOGITLAB_MACHINE"


def history_folder(value: str | None) -> str:
    """The history folder: ``value``, else $LOGITLAB_HISTORY, else ``.logitlab/history``."""
    import os

    return value or os.environ.get(HISTORY_ENV) or DEFAULT_HISTORY


def record_options(*, record_flag: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--record [DIR]``, ``--commit``, ``--repo``, ``--machine``: add the result to a history folder.

    A command with these options calls :func:`record_target` before its work
    (bad input fails fast) and :func:`record_result` after it. ``record_flag=False``
    leaves out ``--record`` (``history add`` names its folder otherwise).
    """
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--commit", "record_commit", default=None, metavar="REV",
                         help="The engine's commit the result belongs to: resolved (full hash, date) in --repo when "
                              "that is given, else kept as given. Default: HEAD of --repo."),
            click.option("--repo", "record_repo", default=None, metavar="PATH",
                         help="The engine's git repository, for the commit and its date (default: the current "
                              "folder)."),
            click.option("--machine", "record_machine", default=None, metavar="KEY",
                         help=f"Machine key in the history (default: ${MACHINE_ENV}, else CPU model, cores, OS and "
                              "architecture)."),
        ]
        if record_flag:
            options.insert(0, click.option(
                "--record", "record_dir", is_flag=False, flag_value="", default=None, metavar="[DIR]",
                help=f"Add the result to a history folder (default ${HISTORY_ENV}, else {DEFAULT_HISTORY}), "
                     "for logitlab history show."))
        return apply_options(func, options)
    return decorate


def logged_run_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of a command whose runs are logged as they finish and can be recorded (``ab``, ``verify``,
    ``bench run``): :func:`~logitlab.cli.options.output_options`, :func:`record_options` and
    :func:`~logitlab.cli.options.run_log_option` (``--log``; its default file is named after ``command``), in
    that order."""
    return lambda func: apply_options(func, [output_options(), record_options(), run_log_option(command)])


def record_target(opts: dict[str, Any], *, option: str = "--record") -> Any:
    """Where ``--record`` will write: folder, machine key, commit and commit date; None without ``--record``.

    The commit is ``--commit`` (or a command's ``--build-commit``), resolved
    to a full hash with its date in ``--repo`` when that is given, else kept
    as given (no date); without ``--commit``, ``HEAD`` of ``--repo`` (default:
    the current folder). ``option``: what asked to record, as the message
    about a missing commit names it (``history add`` records without ``--record``).

    Raises:
        InputError: ``--commit``/``--repo``/``--machine`` without ``--record``; a folder that cannot be
            written; no repository to take the commit from; an unknown commit; a bad machine key.
    """
    import os

    from logitlab.experiments.gitrepo import commit_info, require_repository
    from logitlab.experiments.history.store import HistoryStore, RecordTarget, check_key, machine_key

    if opts.get("record_dir") is None:
        given = [flag for flag, key in (("--commit", "record_commit"), ("--repo", "record_repo"),
                                        ("--machine", "record_machine")) if opts.get(key)]
        if given:
            raise InputError(f"{', '.join(given)} name{'s' if len(given) == 1 else ''} where a result is recorded: "
                             "add --record [DIR]")
        return None
    root = Path(history_folder(opts["record_dir"]))
    HistoryStore(root)  # a file where the folder should be
    try:
        probe_folder(root)
    except OSError as exc:
        raise InputError(f"--record {root} cannot be written: {exc.strerror or exc}") from None
    commit = opts.get("record_commit") or opts.get("build_commit")
    repo = opts.get("record_repo")
    if repo is None and commit is None:
        try:
            repo_path = require_repository(".", option="the current folder")
        except InputError:
            raise InputError(f"{option} needs the engine's commit: pass --commit REV, "
                             "or --repo PATH (the current folder is not a git repository)") from None
    elif repo is not None:
        repo_path = require_repository(repo)
    else:
        repo_path = None
    if repo_path is not None:
        commit, date = commit_info(repo_path, commit or "HEAD")
    else:
        date = None
    machine = opts.get("record_machine") or os.environ.get(MACHINE_ENV) or machine_key()
    return RecordTarget(root=root, machine=check_key(machine, "--machine"), commit=check_key(commit, "--commit"),
                        commit_date=date)


def record_result(result: Any, opts: dict[str, Any], target: Any = None, *, quiet: bool | None = None) -> Any:
    """Add ``result`` to the history where ``--record`` asked (nothing without it); returns the file or None.

    A result that stopped early (``result.error``) is not recorded: a partial
    run would read as a change of level. ``target``: from :func:`record_target`
    (resolved now when None).
    """
    from logitlab.experiments.history.store import HistoryStore
    from logitlab.experiments.history.metrics import record_from_result

    target = target if target is not None else record_target(opts)
    if target is None:
        return None
    quiet = opts.get("quiet", False) if quiet is None else quiet
    if getattr(result, "error", None):
        click.echo(f"warning: not recorded in {target.root}: the run stopped early", err=True)
        return None
    record = record_from_result(result, machine=target.machine, commit=target.commit, commit_date=target.commit_date)
    path = HistoryStore(target.root).add(record)
    if not quiet:
        click.echo(f"recorded in {path} (commit {target.commit[:12]}, machine {target.machine})", err=True)
    return path
