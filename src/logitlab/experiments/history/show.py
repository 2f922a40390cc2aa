"""``history show``: every series of a history folder, with its change points, as one typed result.

:func:`show_history` reads a :class:`~logitlab.experiments.history.HistoryStore`,
builds each series (one metric of one variant on one machine, in git commit
order when the engine's repository is given, else in record order), runs the
change-point detection (:func:`logitlab.perf.changepoint.detect_change_points`)
on the whole series, and keeps the change points that fall in the builds shown
(``last``). An *alarm* is a change point a CI gate fails on: a regression in
the metric's sense, or a changed numerics fingerprint (the logits' bits
changed: someone must look, whatever the reason).

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`HistoryResult`):

- 1: first version.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

from logitlab.errors import InputError
from logitlab.experiments.gitrepo import commit_order, require_repository
from logitlab.experiments.history.store import HistoryStore, series_change_points
from logitlab.jsonio import ResultRecord
from logitlab.perf.changepoint import (
    DEFAULT_MAX_PVALUE,
    DEFAULT_MIN_SIZE,
    ChangePoint,
    ChangePointSeries,
)

__all__ = ["SCHEMA_VERSION", "SeriesChanges", "HistoryResult", "show_history", "is_alarm"]

SCHEMA_VERSION = 1


def is_alarm(change: ChangePoint) -> bool:
    """A regression in the metric's sense, or a changed fingerprint."""
    return change.direction in ("regression", "changed")


@dataclass
class SeriesChanges:
    """One series and what the detection found in it.

    Attributes:
        machine, variant, metric: which series.
        kind: ``higher-is-better``, ``lower-is-better`` or ``fingerprint``.
        unit: the metric's unit (``''`` for fingerprints).
        commits: the commit of each point, oldest first (repeated runs of a commit are adjacent points).
        commit_dates: each point's commit date (ISO 8601) where recorded.
        values: each point's value (a number, or a hash for fingerprints).
        ordered_by: ``git`` (commit order of the repository) or ``record`` (order of recording).
        left_out: records of this metric whose commit is not in the repository's first-parent history.
        detection: the change points over the whole series, with outliers and settings.
        shown_from: index of the first point shown (``last``); change points before it are not reported.
    """

    machine: str
    variant: str
    metric: str
    kind: str
    unit: str
    commits: list[str]
    commit_dates: list[str | None]
    values: list[Any]
    ordered_by: str
    left_out: int
    detection: ChangePointSeries
    shown_from: int = 0

    @property
    def name(self) -> str:
        return f"{self.variant}/{self.metric}"

    @property
    def change_points(self) -> list[ChangePoint]:
        """The change points among the builds shown."""
        return [c for c in self.detection.change_points if c.index >= self.shown_from]

    @property
    def alarms(self) -> list[ChangePoint]:
        """Shown change points that are regressions or changed fingerprints."""
        return [c for c in self.change_points if is_alarm(c)]


@dataclass
class HistoryResult(ResultRecord):
    """All series of a history folder and their change points.

    Attributes:
        root: the history folder.
        repo: the engine repository whose commit order was used, or None (record order).
        n_records: records read (every machine).
        machines: the machine keys shown.
        settings: ``max_pvalue``, ``min_size``, ``last``, ``metrics`` (filters), ``regressions_only``.
        series: the series shown, by machine, variant, metric.
        hidden: series left out by ``regressions_only`` (they have no alarm among the builds shown).
    """

    KIND: ClassVar[str] = "history"
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    root: str
    repo: str | None
    n_records: int
    machines: list[str]
    settings: dict[str, Any]
    series: list[SeriesChanges] = field(default_factory=list)
    hidden: int = 0

    @property
    def alarms(self) -> list[tuple[SeriesChanges, ChangePoint]]:
        return [(s, c) for s in self.series for c in s.alarms]

    def derived(self) -> dict[str, Any]:
        return {"n_alarms": len(self.alarms)}


def show_history(
    root: str | Path,
    *,
    repo: str | Path | None = None,
    machines: Sequence[str] = (),
    metrics: Sequence[str] = (),
    last: int | None = None,
    regressions_only: bool = False,
    max_pvalue: float = DEFAULT_MAX_PVALUE,
    min_size: int = DEFAULT_MIN_SIZE,
) -> HistoryResult:
    """Read every series of a history folder and find its change points.

    Args:
        root: the history folder (``--record``'s).
        repo: the engine's git repository: series in its first-parent commit
            order (records of other commits are left out and counted); None:
            in the order the records were made.
        machines: machine keys to show (default: every machine with records).
        metrics: glob patterns matched against ``variant/metric`` and
            ``metric`` (e.g. ``'control/decode'``, ``'kld_*'``); default: all.
        last: report change points among the last ``last`` builds of each
            series only (the detection still sees the whole series).
        regressions_only: keep only series with an alarm (a regression or a
            changed fingerprint) among the builds shown.
        max_pvalue, min_size: settings of the detection
            (:func:`logitlab.perf.changepoint.detect_change_points`).

    Raises:
        InputError: the folder holds no records, a machine or metric filter
            matches nothing (the message lists what there is), ``last`` < 1,
            ``repo`` is not a git repository, or a setting is out of range.
    """
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise InputError(f"--last must be a number of builds >= 1, got {last!r}")
    if not Path(root).exists():
        raise InputError(f"the history folder {root} does not exist: give --dir the folder that --record or "
                         "history add wrote")
    store = HistoryStore(Path(root))
    index = store.index()
    if not index:
        raise InputError(f"the history folder {root} holds no records: add results with --record (ab, verify, "
                         "bench run, bench compare) or logitlab history add")
    have = sorted({e["machine"] for e in index.values()})
    chosen = list(machines) or have
    unknown = [m for m in chosen if m not in have]
    if unknown:
        raise InputError(f"no records of machine {unknown[0]!r} in {root}: it holds {', '.join(have)}")
    order = None
    if repo is not None:
        top = require_repository(repo)
        order = commit_order(top)
    names = sorted({(e["machine"], v, m) for e in index.values() if e["machine"] in chosen
                    for v, ms in e["metrics"].items() for m in ms})
    if metrics:
        names = [n for n in names if any(fnmatch.fnmatchcase(f"{n[1]}/{n[2]}", p) or fnmatch.fnmatchcase(n[2], p)
                                         for p in metrics)]
        if not names:
            known = sorted({f"{v}/{m}" for e in index.values() for v, ms in e["metrics"].items() for m in ms})
            raise InputError(f"no series matches --metric {' '.join(metrics)}: the history has {', '.join(known)}")
    result = HistoryResult(root=str(root), repo=None if repo is None else str(repo), n_records=len(index),
                           machines=chosen,
                           settings={"max_pvalue": max_pvalue, "min_size": min_size, "last": last,
                                     "metrics": list(metrics), "regressions_only": regressions_only})
    for machine, variant, metric in names:
        s = store.series(machine, variant, metric, order=order)
        if not s.values:
            continue  # every record of it lies off the repository's history
        detection = series_change_points(s, max_pvalue=max_pvalue, min_size=min_size)
        shown = SeriesChanges(machine=machine, variant=variant, metric=metric, kind=s.kind, unit=s.unit,
                              commits=list(s.commits), commit_dates=list(s.commit_dates), values=list(s.values),
                              ordered_by=s.ordered_by, left_out=s.left_out, detection=detection,
                              shown_from=max(0, len(s.values) - last) if last else 0)
        if regressions_only and not shown.alarms:
            result.hidden += 1
            continue
        result.series.append(shown)
    if order is not None and not result.series and not result.hidden:
        raise InputError(f"no record of {root} is of a commit on the first-parent history of {repo}: "
                         "check --repo, or leave it out to read the records in the order they were made")
    return result
