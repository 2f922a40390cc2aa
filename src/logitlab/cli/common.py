"""Pieces shared by every ``logitlab`` subcommand: exit codes, errors, option groups, progress.

Exit codes: 0 ok, 1 a ``--require`` / ``--fail-on`` check failed, 2 bad usage
or bad input (one ``error:`` line on stderr; results measured before the error
are kept), 130 interrupted (Ctrl-C; results measured so far are written).
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import click

if TYPE_CHECKING:  # rich loads when a command prints, not when its options are parsed
    from rich.console import Console
    from rich.progress import Progress

from logitlab.errors import InputError, LogitlabError
from logitlab.numerics.verdict import VERDICTS, Thresholds

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
    """Turn a LogitlabError into one line on stderr and exit 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LogitlabError as exc:
            fail(str(exc))

    return wrapper


def check_output_paths(*, inputs: Iterable[str | None] = (), folders: dict[str, str] | None = None,
                       **paths: str | None) -> None:
    """Check, before any work, that each output file can be written without destroying anything.

    ``paths`` maps option names to output files (``json="out.json"``);
    ``inputs`` are the files and folders the command reads (model, prompt
    file, dumps, benchmark files); ``folders`` maps option names to output
    folders the command fills (``out="dumps/"``).  Probes each output's
    folder with a temporary file; missing folders are created for the probe
    and removed again (the writers create them when they write).

    Raises:
        InputError: two outputs are the same file; an output is an input or
            lies inside an input folder or an output folder; a path is a
            folder; or its folder cannot be created or written.
    """
    given = {"--" + option.replace("_", "-"): path for option, path in paths.items() if path}
    named_folders = {"--" + k.replace("_", "-"): v for k, v in (folders or {}).items() if v}
    for flag, path in given.items():
        if path == "-":
            raise InputError(f"{flag} -: this command writes {flag} to a file, not to stdout; give a file path")
    for flag, folder in named_folders.items():
        blocker = next((p for p in (Path(folder), *Path(folder).parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            if blocker == Path(folder):
                raise InputError(f"{flag} {folder} exists and is not a folder; give a folder path")
            raise InputError(f"{flag} {folder} cannot be written: {blocker} is a file, not a folder")
    _check_distinct(given, [p for p in inputs if p], named_folders)
    for flag, path in given.items():
        target = Path(path)
        if target.is_dir():
            raise InputError(f"{flag} {path} is a folder; give a file path")
        blocker = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise InputError(f"{flag} {path} cannot be written: {blocker} is a file, not a folder")
        try:
            _probe_folder(target.parent)
        except OSError as exc:
            raise InputError(f"{flag} {path} cannot be written: {exc.strerror or exc}") from None


def report_paths(opts: dict[str, Any]) -> dict[str, str | None]:
    """The report outputs a command was given (``--json``, ``--markdown``, ``--html`` of :func:`output_options`),
    as keyword arguments of :func:`check_output_paths`: every command checks all of them, not a hand-made list."""
    return {name: opts.get(f"{name}_path") for name in ("json", "markdown", "html") if f"{name}_path" in opts}


def _probe_folder(folder: Path) -> None:
    """Create ``folder`` if missing, write and delete a temporary file there, and remove what was created."""
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".logitlab-probe-"):
            pass
    finally:
        for path in created:  # deepest first
            try:
                path.rmdir()
            except OSError:
                pass


def _check_distinct(outputs: dict[str, str], inputs: list[str], folders: dict[str, str]) -> None:
    """Raise InputError when an output would overwrite an input, another output, or land in an output folder."""
    resolved = {flag: Path(path).resolve() for flag, path in outputs.items()}
    seen: dict[Path, str] = {}
    for flag, target in resolved.items():
        if target in seen:
            raise InputError(f"{seen[target]} and {flag} are the same file ({outputs[flag]}); give each its own path")
        seen[target] = flag
    for source in inputs:
        where = Path(source).resolve()
        for flag, target in resolved.items():
            if target == where or where.is_dir() and where in target.parents:
                what = "is" if target == where else "lies inside"
                raise InputError(f"{flag} {outputs[flag]} {what} the input {source}: it would be overwritten; "
                                 f"choose another path")
    for option, folder in folders.items():
        root = Path(folder).resolve()
        for flag, target in resolved.items():
            if target == root or root in target.parents:
                raise InputError(f"{flag} {outputs[flag]} lies inside the {option} folder {folder}; "
                                 f"choose a path outside it")


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


def run_log_option(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--log PATH``: the run log (:mod:`logitlab.runlog`) each finished run is appended to."""
    return click.option("--log", "log_path", type=str, default=None,
                        help="JSONL file each run is appended to as it finishes, so a killed run keeps them "
                             "(`logitlab report` shows it; default: next to --json, else "
                             f"./logitlab-runs/{command}-TIMESTAMP.jsonl).")


def run_log_path(opts: dict[str, Any], command: str) -> str:
    """``--log``, else ``X.runs.jsonl`` next to ``--json X.json``, else ``logitlab-runs/COMMAND-TIMESTAMP.jsonl``."""
    from datetime import datetime

    if opts.get("log_path"):
        return opts["log_path"]
    if opts.get("json_path"):
        return str(Path(opts["json_path"]).with_suffix(".runs.jsonl"))
    return f"logitlab-runs/{command}-{datetime.now():%Y%m%d-%H%M%S}.jsonl"


def output_options(*, json_help: str = "Write the full result as JSON.", markdown: bool = True,
                   quiet_help: str = "No progress bar.",
                   json: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json PATH``, ``--markdown PATH`` and ``--html PATH`` (unless ``markdown=False``: a command without a
    report) and ``--quiet``: one group for every command.

    ``json=False``: the command declares its own JSON output option (``bench calibrate --out/--json``,
    required there); it must keep the ``json_path`` name that :func:`write_reports` reads.
    """
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = [click.option("--json", "json_path", type=str, default=None, help=json_help)] if json else []
        if markdown:
            options.append(click.option("--markdown", "markdown_path", type=str, default=None,
                                        help="Write the report as Markdown (a PR comment)."))
            options.append(click.option("--html", "html_path", type=str, default=None,
                                        help="Write the report as one self-contained HTML page with figures "
                                             "(opens from a file, no network; the result JSON is inside)."))
        options.append(click.option("--quiet", "-q", is_flag=True, help=quiet_help))
        return _apply(func, options)
    return decorate


def write_reports(result: Any, opts: dict[str, Any], **options: Any) -> None:
    """Write ``result.to_dict()`` as JSON (``--json``), its Markdown report (``--markdown``) and its HTML
    page (``--html``) where asked.

    ``options`` go to the result's document builder (e.g. ``max_rows`` of a dump-diff).
    """
    from logitlab import report
    from logitlab.jsonio import write_json, write_text

    if opts.get("json_path"):
        write_json(opts["json_path"], result.to_dict())
    if opts.get("markdown_path"):
        write_text(opts["markdown_path"], report.markdown(result, **options))
    if opts.get("html_path"):
        write_text(opts["html_path"], report.html(result, **options))


def show_report(result: Any, *, show_error: bool = True, **options: Any) -> None:
    """Print the result's report on the terminal (120 columns at least); ``show_error=False`` leaves out
    the "stopped early" line when the caller prints the error itself; ``options`` go to the builder."""
    from logitlab import report

    report.display(result, report_console(), show_error=show_error, **options)


MODEL_HELP = "Model file (default: the embedded SmolLM2-135M Q4_1 GGUF)."
SPEC_HELP = "KEY=VALUE[,KEY=VALUE] engine options, or [ENGINE:][MODEL][?KEY=VALUE&...]"


def _apply(func: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    for option in reversed(options):
        func = option(func)
    return func


def variant_pair_options(*, engine_help: str, candidate_help: str,
                         slots: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--model --engine --control --candidate --control-env --candidate-env`` (read by :func:`variant_pair`).

    ``slots`` names where an environment knob applies ("control slots", "the control").
    """
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        from logitlab.engines import DEFAULT_ENGINE

        return _apply(func, [
            click.option("--model", type=str, default=None, help=MODEL_HELP),
            click.option("--engine", "engine", default=DEFAULT_ENGINE, show_default=True, help=engine_help),
            click.option("--control", default="", help=f"Control spec: {SPEC_HELP}."),
            click.option("--candidate", default=None, help=candidate_help),
            click.option("--control-env", multiple=True, metavar="NAME[=VALUE]",
                         help=f"Environment knob for {slots.format(side='control')}."),
            click.option("--candidate-env", multiple=True, metavar="NAME[=VALUE]",
                         help=f"Environment knob for {slots.format(side='candidate')}."),
        ])
    return decorate


def variant_pair(opts: dict[str, Any]) -> tuple[Any, Any]:
    """The control and candidate :class:`~logitlab.engines.variant.Variant` of :func:`variant_pair_options`.

    Without ``--candidate`` the candidate is the control's spec (an A/A).
    ``--control-model`` / ``--candidate-model``, where a command has them,
    override ``--model`` for one side.

    Raises:
        InputError: a malformed spec or environment knob.
    """
    from logitlab.engines.variant import parse_env, parse_variant

    def side(name: str, spec: str) -> Any:
        model = opts.get(f"{name}_model") or opts["model"]
        return parse_variant(spec, name, default_engine=opts["engine"], default_model=model,
                             env=parse_env(opts[f"{name}_env"]))

    return side("control", opts["control"]), side("candidate", opts["control"] if opts["candidate"] is None
                                                   else opts["candidate"])


def prompt_options(default_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--prompt`` and ``--prompt-file``; ``default_help`` says what runs without them."""
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        return _apply(func, [
            click.option("--prompt", default=None, help=f"Prompt text (default: {default_help})."),
            click.option("--prompt-file", type=str, default=None, help="Read the prompt from a file."),
        ])
    return decorate


def threshold_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Verdict thresholds (``--max-ulp``, ``--near-tie-margin``, ``--offset-ratio``, ``--floor-factor``,
    ``--min-positions``, ``--fixed-thresholds``, ``--top-k``)."""
    defaults = Thresholds()
    options = [
        click.option("--max-ulp", type=float, default=defaults.max_ulp, show_default=True,
                     help="ulp-noise: largest |Δ| in ULPs at the row's scale."),
        click.option("--near-tie-margin", type=float, default=defaults.near_tie_margin, show_default=True,
                     help="near-tie: flips at a reference top1–top2 margin (logits) below this; at or above it, "
                          "a flip inside the noise floor is lossy (without a floor: divergent)."),
        click.option("--offset-ratio", type=float, default=defaults.offset_ratio, show_default=True,
                     help="systematic-offset: the positions' mean Δ averages at least this many of its standard "
                          "deviations across positions."),
        click.option("--floor-factor", type=float, default=defaults.floor_factor, show_default=True,
                     help="a position whose top-k Δ spread exceeds this many times the pair's noise floor (p99 "
                          "over the positions that kept their argmax) is divergent."),
        click.option("--min-positions", type=int, default=defaults.min_positions, show_default=True,
                     help="fewest positions for a noise floor and for a systematic offset."),
        click.option("--fixed-thresholds", is_flag=True, default=False,
                     help="judge with the fixed thresholds only, not against the pair's noise floor."),
        click.option("--top-k", type=int, default=5, show_default=True, help="k of the top-k set agreement."),
    ]
    return _apply(func, options)


def thresholds_from(opts: dict[str, Any]) -> Thresholds:
    """Build Thresholds from the options of :func:`threshold_options`.

    Raises:
        InputError: a threshold out of range (the message names it).
    """
    return Thresholds(max_ulp=opts["max_ulp"], near_tie_margin=opts["near_tie_margin"],
                      offset_ratio=opts["offset_ratio"], floor_factor=opts["floor_factor"],
                      min_positions=opts["min_positions"], calibrate=not opts["fixed_thresholds"])


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


def report_console() -> Console:
    """Console for reports: at least 120 columns so tables stay readable in pipes."""
    from rich.console import Console

    return Console(width=max(Console().width, 120))


# ---------------------------------------------------------------------------
# --record: add a result to the history

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
        return _apply(func, options)
    return decorate


def record_target(opts: dict[str, Any]) -> Any:
    """Where ``--record`` will write: folder, machine key, commit and commit date; None without ``--record``.

    The commit is ``--commit`` (or a command's ``--build-commit``), resolved
    to a full hash with its date in ``--repo`` when that is given, else kept
    as given (no date); without ``--commit``, ``HEAD`` of ``--repo`` (default:
    the current folder).

    Raises:
        InputError: ``--commit``/``--repo``/``--machine`` without ``--record``; a folder that cannot be
            written; no repository to take the commit from; an unknown commit; a bad machine key.
    """
    import os

    from logitlab.experiments.gitrepo import commit_info, require_repository
    from logitlab.experiments.history import HistoryStore, RecordTarget, check_key, machine_key

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
        _probe_folder(root)
    except OSError as exc:
        raise InputError(f"--record {root} cannot be written: {exc.strerror or exc}") from None
    commit = opts.get("record_commit") or opts.get("build_commit")
    repo = opts.get("record_repo")
    if repo is None and commit is None:
        try:
            repo_path = require_repository(".", option="the current folder")
        except InputError:
            raise InputError("--record needs the engine's commit: pass --commit REV, or --repo PATH (the current "
                             "folder is not a git repository)") from None
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
    from logitlab.experiments.history import HistoryStore
    from logitlab.experiments.history_metrics import record_from_result

    target = target if target is not None else record_target(opts)
    if target is None:
        return None
    quiet = opts.get("quiet", False) if quiet is None else quiet
    if getattr(result, "error", None):
        click.echo(f"not recorded in {target.root}: the run stopped early", err=True)
        return None
    record = record_from_result(result, machine=target.machine, commit=target.commit, commit_date=target.commit_date)
    path = HistoryStore(target.root).add(record)
    if not quiet:
        click.echo(f"recorded in {path} (commit {target.commit[:12]}, machine {target.machine})", err=True)
    return path
