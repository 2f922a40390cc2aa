"""Reports: every result kind becomes one format-neutral document; one renderer per format writes it.

>>> from logitlab import report
>>> report.markdown(result)            # any result object          # doctest: +SKIP
>>> report.display(result)             # the terminal report         # doctest: +SKIP
>>> report.html(result)                # one self-contained HTML page # doctest: +SKIP
>>> report.load_result(json.load(f))   # a saved result, typed again # doctest: +SKIP

A result kind registers its class and its document builder in
:data:`KINDS` (``"module:name"`` strings, imported when first used; the
registry is :data:`logitlab.kinds.KINDS`, read here and by the layers below).
A run log is read back by its kind's ``from_run_log``. A new format is one
renderer module taking a :class:`~logitlab.report.document.Document` and one line
in :data:`logitlab.formats.FORMATS` (:func:`render` and every command's ``--NAME``
option read it).
"""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any, Mapping

from logitlab.errors import InputError
from logitlab.formats import FORMATS
from logitlab.jsonio import ResultRecord, read_json
from logitlab.kinds import KINDS, kinds_with, load, result_class
from logitlab.report.document import Document

__all__ = ["KINDS", "FORMATS", "document", "render", "markdown", "html", "display", "load_result", "read_result"]


def document(result: ResultRecord, **options: Any) -> Document:
    """The document of any result (``options`` go to its builder, e.g. ``show_error=False``).

    Raises:
        InputError: the object is not a result logitlab knows.
    """
    kind = getattr(result, "KIND", None)
    if kind not in KINDS:
        raise InputError(f"no report for {type(result).__name__}: not a logitlab result")
    return load(KINDS[kind][1])(result, **options)


def render(result: ResultRecord, fmt: str, **options: Any) -> str:
    """The result's report in the file format ``fmt`` (a key of :data:`~logitlab.formats.FORMATS`), as text.

    Raises:
        InputError: an unknown format, or the object is not a result logitlab knows.
    """
    if fmt not in FORMATS:
        raise InputError(f"no report format {fmt!r}: use one of {', '.join(FORMATS)}")
    return load(FORMATS[fmt].render)(document(result, **options), result)


def markdown(result: ResultRecord, **options: Any) -> str:
    """The result's report as Markdown text."""
    return render(result, "markdown", **options)


def html(result: ResultRecord, **options: Any) -> str:
    """The result's report as one self-contained HTML page, with figures and the result JSON inside."""
    return render(result, "html", **options)


def display(result: ResultRecord, console: Any = None, **options: Any) -> None:
    """Print the result's report to the terminal (a rich ``Console``; default: stdout)."""
    from logitlab.report.render_terminal import render_terminal

    render_terminal(document(result, **options), console)


def load_result(data: Mapping[str, Any]) -> ResultRecord:
    """A saved result (the dict its ``--json`` file holds), typed again by its ``kind``.

    Raises:
        InputError: no or an unknown ``kind``, another schema version, or damaged data.
    """
    if not isinstance(data, Mapping):
        raise InputError(f"a logitlab result is a JSON object, not a {type(data).__name__}")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        known = ", ".join(sorted(KINDS))
        what = f"kind {kind!r}" if kind else "no \"kind\""
        raise InputError(f"not a logitlab result ({what}); results of these kinds can be shown: {known}")
    return result_class(kind).from_dict(data)


def _refuse_golden_folder(folder: Path) -> None:
    """A golden's folder given for a sweep's: say which file is the result (its ``manifest.json``).

    Raises:
        InputError: ``folder`` or a subfolder holds a manifest of kind ``golden``.
    """
    manifests = []
    for candidate in sorted([*folder.glob("manifest.json"), *folder.glob("*/manifest.json")]):
        try:
            if json.loads(candidate.read_text()).get("kind") == "golden":
                manifests.append(candidate)
        except (OSError, ValueError, AttributeError):
            continue
    if manifests:
        which = f"one of its {len(manifests)} manifests, e.g." if len(manifests) > 1 else "its manifest,"
        raise InputError(f"{folder} is a folder of golden logits, not a sweep: give {which} {manifests[0]}")


def read_result(path: str | Path) -> ResultRecord:
    """Read a result: a ``--json`` file, the result embedded in a page written with ``--html``,
    the run log (``--log``, JSONL) of ab, verify or bench run, or a sweep's ``--out`` folder
    (its summary, recomputed from the job results there: :func:`~logitlab.experiments.sweep.run.load_sweep`).

    A run log of an experiment that was killed gives the partial result it
    holds, its ``error`` saying so (see :mod:`logitlab.runlog`).

    Raises:
        InputError: missing, unreadable or not JSON, not a logitlab result or
            run log, or a damaged one (a result whose report cannot be built).
    """
    from logitlab.runlog import looks_like_run_log, read_run_log

    if Path(path).is_dir():
        from logitlab.experiments.sweep.run import MANIFEST, load_sweep

        if not (Path(path) / MANIFEST).exists():
            _refuse_golden_folder(Path(path))
        result = load_sweep(path)
    elif looks_like_run_log(path):
        log = read_run_log(path)
        kind = log.kind or "ab"  # a log without a header: ab's reload says what it lacks
        if kind not in KINDS or not callable(getattr(result_class(kind), "from_run_log", None)):
            raise InputError(f"{path}: a run log of kind {log.kind!r}; logs of these kinds can be shown: "
                             f"{', '.join(kinds_with('from_run_log'))}")
        result = result_class(kind).from_run_log(log)
    else:
        try:
            if str(path).lower().endswith((".html", ".htm")):
                result = load_result(_read_page(path))
            else:
                result = load_result(read_json(path, what="result file"))
        except InputError as exc:
            if str(exc).startswith("result file"):
                raise
            raise InputError(f"{path}: {exc}") from None
    check_renders(result, path)
    return result


def check_renders(result: ResultRecord, path: str | Path) -> None:
    """Build the result's report and its JSON once, so that a damaged file is one clear error, not a crash
    mid-report or while ``--json`` writes it again.

    A result file is logitlab's own output: its typed fields are checked on
    loading, but free-form parts (config, manifest) are only read by the
    report; a file edited by hand can break them in many ways.

    Raises:
        InputError: the report cannot be built from this result.
    """
    try:
        markdown(result)
        result.to_dict()  # what --json writes and --html embeds
    except InputError:
        raise
    except StopIteration:
        raise InputError(f"{path}: damaged {getattr(result, 'KIND', '')} result: it names a run or entry it does "
                         "not hold (was the file edited?)") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(f"{path}: damaged {getattr(result, 'KIND', '')} result: its report cannot be built "
                         f"({type(exc).__name__}: {exc}); was the file edited?") from None


def _read_page(path: str | Path) -> Any:
    """The result JSON embedded in an HTML report."""
    from logitlab.report.render_html import extract_json

    try:
        page = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"result file {path} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = extract_json(page)
    except ValueError as exc:
        raise InputError(f"result file {path}: the result embedded in the page is damaged ({exc})") from None
    if data is None:
        raise InputError(f"result file {path}: no logitlab result embedded in this page (written with --html?)")
    return data
