"""Run logs: an experiment's runs as JSON Lines, written as they finish, readable after a kill.

``ab``, ``verify`` and ``bench run`` append one line per finished run (slot,
prompt, command run) to a run log, so that a run killed at any point — SIGKILL,
a crashed machine session, a full disk — keeps every run it finished, and
``logitlab report RUNS.jsonl`` can show what was measured.

Layout of a log (format ``logitlab-run-log``, version 1)::

    {"log": "logitlab-run-log", "version": 1, "kind": "ab", "started_at": ..., "header": {...}}
    {...one run...}
    {"log_update": {...}}             a field learned during the run (merged into the header)
    {...one run...}
    {"log_end": "complete", "final": {...}}   how it ended: complete, error or interrupted

The header holds what the experiment knew at the start (its config, the
manifest, the prompt ids), each run line is the run record's own ``to_dict``,
and the end line holds the fields computed at the end (verdicts, totals), so
a log of a finished experiment rebuilds the whole result. A log without an end
line is one whose process was killed. A log may hold several experiments (a
log path given twice appends); the reader shows the last one.

Writing: each line is one ``write`` on a file opened for appending, so a line
is in the file whole or, when the process dies inside that call or the disk
fills up, cut short at the end. A write that fails is cut back off the file
(nothing half-written stays, as far as the file system lets us) and raises an
:class:`~logitlab.errors.InputError`. The log survives the process being
killed; lines are not ``fsync``-ed, so a machine crash may lose the last ones.

Reading tolerates a cut-short line (a torn line, ignored with a note) and any
line that is not JSON, and never raises for the content of a line.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logitlab.errors import InputError
from logitlab.jsonio import dumps_line, reading

__all__ = ["LOG_FORMAT", "LOG_VERSION", "ENDINGS", "RunLog", "RunLogContents", "read_run_log", "looks_like_run_log"]

LOG_FORMAT = "logitlab-run-log"
LOG_VERSION = 1
#: How an experiment can end, as its end line says.
ENDINGS = ("complete", "error", "interrupted")


class RunLog:
    """Append an experiment's header, runs and end to a JSONL file.

    Parameters
    ----------
    path : str or Path
        The log file; created with its folders; appended to if it exists.
    kind : str
        The result kind the log rebuilds (``ab``, ``verify``, ``bench-run``).
    header : dict
        What the experiment knows at the start (JSON-able).

    Raises
    ------
    InputError
        The file cannot be created or written (the message names it and the
        operating system's reason).
    """

    def __init__(self, path: str | Path, kind: str, header: dict[str, Any]):
        from logitlab import __version__
        from logitlab.manifest import now_utc

        self.path = Path(path)
        self.kind = kind
        self.runs = 0
        self._fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise InputError(f"cannot write the run log {self.path}: {exc.strerror or exc}") from None
        self.write({"log": LOG_FORMAT, "version": LOG_VERSION, "kind": kind, "logitlab_version": __version__,
                    "started_at": now_utc(), "header": header})

    def write(self, data: dict[str, Any]) -> None:
        """Append one line (``data`` as strict JSON).

        Raises
        ------
        InputError
            The write failed (a full disk, an I/O error); the part of the line
            that reached the file is cut off again, the lines before are kept.
        """
        line = (dumps_line(data) + "\n").encode("utf-8")
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:
                written = os.write(self._fd, view)
                if written == 0:  # pragma: no cover - a regular file never returns 0 for a non-empty write
                    raise OSError(errno.EIO, "the file system wrote nothing")
                view = view[written:]
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise InputError(f"cannot write the run log {self.path}: {exc.strerror or exc}; the "
                             f"{self.runs} run(s) logged before are kept") from None

    def run(self, record: dict[str, Any]) -> None:
        """Append one finished run (its record's ``to_dict()``)."""
        self.write(record)
        self.runs += 1

    def update(self, **fields: Any) -> None:
        """Append fields learned during the run (e.g. the reference's generated tokens); readers merge them into
        the header."""
        self.write({"log_update": fields})

    def end(self, how: str, final: dict[str, Any] | None = None, error: str | None = None) -> None:
        """Append the end line: ``how`` is one of :data:`ENDINGS`; ``final`` the fields computed at the end."""
        if how not in ENDINGS:
            raise ValueError(f"unknown ending {how!r}")
        self.write({"log_end": how, "error": error, "final": final or {}})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class RunLogContents:
    """What a run log holds (its last experiment).

    Attributes
    ----------
    path : str
    kind : str or None
        The result kind; None for a log written before logitlab wrote headers.
    header : dict
        The header's fields, with every ``log_update`` merged in.
    records : list of dict
        The run lines, in order.
    ending : str or None
        ``complete``, ``error`` or ``interrupted``; None when the log has no
        end line (the process was killed).
    error : str or None
        The error the end line names.
    final : dict
        The fields the end line carries.
    notes : list of str
        Lines ignored (torn, not JSON) and earlier experiments in the file.
    """

    path: str
    kind: str | None
    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    ending: str | None = None
    error: str | None = None
    final: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        """No end line: the process stopped without saying how (killed)."""
        return self.ending is None

    def require(self, kind: str, fields: tuple[str, ...]) -> None:
        """Check that this is a ``kind`` log whose header holds ``fields`` (a result class's ``from_run_log``
        calls it first).

        Raises
        ------
        InputError
            A log without a header (written before logitlab put one in its
            logs), a log of another kind, or a header that lacks a field.
        """
        if self.kind is None:  # read_run_log has said so when the header line is there but damaged
            raise InputError(f"{self.path} is a run log written before logitlab put a header line in its logs: it "
                             f"holds {len(self.records)} run line(s) but not the experiment's config and manifest, so "
                             "no report can be built from it (each line is a run's JSON record; rerun to get a full "
                             "log)")
        if self.kind != kind:
            raise InputError(f"{self.path} is a {self.kind!r} run log, not a {kind!r} one")
        missing = [f for f in fields if f not in self.header]
        if missing:
            raise InputError(f"{self.path}: the run log's header lacks {', '.join(missing)}: damaged log")

    def interrupted_message(self, what: str) -> str:
        """The ``error`` of a result rebuilt from a log that has no end line (``what``: its lines, e.g.
        ``"run(s)"``)."""
        return (f"interrupted: the run log {self.path} ends after {len(self.records)} {what} without an end line "
                "(the process was killed or lost); this report shows the runs it logged")


def _lines(path: Path) -> list[str]:
    with reading(f"run log {path}"):
        data = path.read_bytes()
    return data.decode("utf-8", errors="replace").split("\n")  # ends with "" when the last line is whole


def _is_header(value: Any) -> bool:
    return isinstance(value, dict) and value.get("log") == LOG_FORMAT


def _starts_a_run_log(value: Any) -> bool:
    """Is ``value`` (a file's first line, parsed) a run log's header, or an ``ab`` run line of a log written
    before the header line existed?"""
    return _is_header(value) or isinstance(value, dict) and {"slot", "variant", "is_reference"} <= set(value)


def check_appendable(path: str | Path, option: str = "--log") -> None:
    """Refuse to append a run log to a file that holds something else.

    A run log is appended to (a second run's header and runs follow the first's); a file that exists, is not
    empty and does not start as a run log (a header line, or an ``ab`` run line of a log older than the header)
    would be damaged, so it is refused before any work.

    Raises:
        InputError: naming ``option`` and the file.
    """
    path = Path(path)
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return
        with open(path, "rb") as f:
            value = json.loads(f.readline(1 << 24))
    except OSError:
        return  # the writer says why it cannot write
    except (ValueError, RecursionError):
        value = None
    if not _starts_a_run_log(value):
        raise InputError(f"{option} {path} exists and is not a logitlab run log: runs are appended to it, which "
                         "would damage it; give a new path")


def looks_like_run_log(path: str | Path) -> bool:
    """True when the file is named ``*.jsonl``, or its first line is a run log header or an ``ab`` run line (a log
    written before the header line existed)."""
    if Path(path).suffix.lower() == ".jsonl":
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 24)
    except OSError:
        return False
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return _starts_a_run_log(value)


def read_run_log(path: str | Path) -> RunLogContents:
    """Read a run log; the last experiment in it.

    Returns
    -------
    RunLogContents
        A torn or non-JSON line is skipped and named in ``notes``; lines
        before the first header (a log written before logitlab wrote headers)
        are records of an experiment whose ``kind`` is None.

    Raises
    ------
    InputError
        The file is missing, unreadable, empty, or holds no JSON object at all.
    """
    path = Path(path)
    lines = _lines(path)
    sections: list[RunLogContents] = [RunLogContents(str(path), None, {})]
    skipped: list[str] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            torn = number == len(lines)  # the file does not end with a newline: its last line was cut short
            skipped.append(f"line {number} is {'cut short (a torn last line: the writer was stopped mid-line)' if torn else 'not JSON'}; ignored")
            continue
        if not isinstance(value, dict):
            skipped.append(f"line {number} is not a JSON object; ignored")
            continue
        if _is_header(value):
            header = value.get("header")
            kind = value.get("kind")
            sections.append(RunLogContents(str(path), kind if isinstance(kind, str) else None,
                                           dict(header) if isinstance(header, dict) else {}))
            if value.get("version") != LOG_VERSION:
                sections[-1].notes.append(f"run log version {value.get('version')!r}; this logitlab writes "
                                          f"{LOG_VERSION}")
            continue
        section = sections[-1]
        if section.ending is not None:
            skipped.append(f"line {number} follows the end line of its experiment; ignored")
        elif "log_update" in value:
            if isinstance(value["log_update"], dict):
                section.header.update(value["log_update"])
        elif "log_end" in value:
            ending = value["log_end"]
            section.ending = ending if ending in ENDINGS else "error"
            section.error = value.get("error") if isinstance(value.get("error"), str) else None
            section.final = value.get("final") if isinstance(value.get("final"), dict) else {}
        else:
            section.records.append(value)
    chosen = sections[-1]
    if chosen.kind is None and not chosen.records:
        raise InputError(f"run log {path} holds no logitlab runs" + (f" ({skipped[0]})" if skipped else ""))
    if chosen.kind is None and skipped and skipped[0].startswith("line 1 "):
        raise InputError(f"run log {path}: its first line, the header with the experiment's config, is damaged "
                         f"({skipped[0].split('; ')[0]}): the {len(chosen.records)} run line(s) after it cannot be "
                         "shown without it")
    earlier = len(sections) - 2 + (1 if sections[0].records else 0) if len(sections) > 1 else 0
    if earlier > 0:
        chosen.notes.append(f"the log holds {earlier} earlier experiment(s) before this one (the same log path "
                            "given again appends); only the last is shown")
    chosen.notes += skipped
    return chosen
