"""The files and the terminal a subcommand writes to: checked before any work, written after it.

:func:`check_output_paths` refuses, before anything runs, an output that
would destroy an input or another output; :func:`write_reports` writes a
result as JSON, Markdown and HTML where asked; :func:`show_report` prints it.

``--json -`` writes the JSON to stdout, in every command that takes ``--json``:
while the command runs (:func:`json_on_stdout`, entered by
:func:`~logitlab.cli.common.handle_errors`), everything else it prints (the
report, its notes) goes to stderr, so that stdout is the JSON alone
(:func:`write_json_output`).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, TextIO

if TYPE_CHECKING:  # rich loads when a command prints, not when its options are parsed
    from rich.console import Console

from logitlab.errors import InputError
from logitlab.formats import FORMATS


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
    given = {"--" + option.replace("_", "-"): path for option, path in paths.items()
             if path and not (option == "json" and path == STDOUT)}  # --json -: stdout, nothing to check
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
            probe_folder(target.parent)
        except OSError as exc:
            raise InputError(f"{flag} {path} cannot be written: {exc.strerror or exc}") from None


def report_paths(opts: dict[str, Any]) -> dict[str, str | None]:
    """The report outputs a command was given (``--json`` and each format's ``--NAME`` of
    :func:`~logitlab.cli.options.output_options`), as keyword arguments of :func:`check_output_paths`: every
    command checks all of them, not a hand-made list."""
    return {name: opts.get(f"{name}_path") for name in ("json", *FORMATS) if f"{name}_path" in opts}


def probe_folder(folder: Path) -> None:
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


#: ``--json -``: the JSON goes to stdout.
STDOUT = "-"
#: The stdout a ``--json -`` command started with, while it runs (its own prints go to stderr meanwhile).
_json_stdout: TextIO | None = None


@contextlib.contextmanager
def json_on_stdout(opts: dict[str, Any]) -> Iterator[None]:
    """While the block runs with ``opts["json_path"] == "-"``, send what the command prints to stderr (click's
    echo and rich's consoles follow ``sys.stdout``), keeping the real stdout for :func:`write_json_output`; a
    no-op for any other ``--json``."""
    global _json_stdout
    if opts.get("json_path") != STDOUT or _json_stdout is not None:
        yield
        return
    _json_stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stdout, _json_stdout = _json_stdout, None


def write_json_output(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented strict JSON to ``path`` (:func:`logitlab.jsonio.write_json`), or to stdout
    for ``-`` (the command's stdout, under :func:`json_on_stdout`; the same text as the file)."""
    import json

    from logitlab.jsonio import to_jsonable, write_json

    if str(path) != STDOUT:
        write_json(path, data)
        return
    out = _json_stdout or sys.stdout
    out.write(json.dumps(to_jsonable(data), indent=1, allow_nan=False) + "\n")
    out.flush()


def write_reports(result: Any, opts: dict[str, Any], **options: Any) -> None:
    """Write ``result.to_dict()`` as JSON (``--json``) and its report in each format of
    :data:`logitlab.formats.FORMATS` (``--markdown``, ``--html``) where asked.

    ``options`` go to the result's document builder (e.g. ``max_rows`` of a dump-diff). ``--json -``: to
    stdout (:func:`write_json_output`).
    """
    from logitlab import report
    from logitlab.jsonio import write_text

    if opts.get("json_path"):
        write_json_output(opts["json_path"], result.to_dict())
    for name in FORMATS:
        if opts.get(f"{name}_path"):
            write_text(opts[f"{name}_path"], report.render(result, name, **options))


def show_report(result: Any, *, show_error: bool = True, **options: Any) -> None:
    """Print the result's report on the terminal (120 columns at least); ``show_error=False`` leaves out
    the "stopped early" line when the caller prints the error itself; ``options`` go to the builder."""
    from logitlab import report

    report.display(result, report_console(), show_error=show_error, **options)


def report_console() -> Console:
    """Console for reports: at least 120 columns so tables stay readable in pipes."""
    from rich.console import Console

    return Console(width=max(Console().width, 120))
