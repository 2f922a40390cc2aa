"""The result history: one small JSON file per recorded run, per machine and engine commit.

Layout (asv-style: plain files, zero setup, merged by copying or by git)::

    ROOT/
      .gitignore                  ignores the derived index
      .index.json                 derived: a summary of every record, rebuilt when stale
      MACHINE/
        COMMIT12-STAMP-DIGEST.json    one record; never rewritten

Why files and not SQLite: a record is written once and never changed, and its
name is unique (commit, time, content digest), so two machines or two
branches that record results only ever *add* different files: ``git merge``,
``rsync`` or a plain copy of folders unions two histories without a
conflict, and a reviewer reads a record in a diff. A SQLite file is one binary
blob that git cannot merge. Queries stay fast through the derived index,
which caches each record's summary (not its samples) keyed by file size and
mtime, and is rebuilt for whatever changed (an entry whose own digest no
longer matches, one damaged or edited, included).

A record holds the machine key, the engine commit and its commit date, the
run manifest, and per variant (``control``, ``candidate``, ...) per metric
its kind (``'higher-is-better'``, ``'lower-is-better'``, ``'fingerprint'``),
unit, summary value and the raw per-block samples.

A series is one metric of one variant on one machine: in commit order when a
git repository of the engine is given (``git rev-list --first-parent``;
records of commits outside that history are left out and counted), else in
the order the records were made. Every record is one point, so repeated runs
of a commit are adjacent points. :func:`series_change_points` runs
:func:`logitlab.perf.changepoint.detect_change_points` on it.

Nothing here prints or logs.

JSON format history (``schema_version`` of :class:`HistoryRecord`):

- 1: first version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from logitlab.errors import InputError
from logitlab.experiments.gitrepo import commit_info, commit_order
from logitlab.jsonio import from_fields, read_json, write_json
from logitlab.manifest import host_info
from logitlab.perf.changepoint import ChangePointSeries, detect_change_points
from logitlab.perf.metrics import Metric

__all__ = [
    "SCHEMA_VERSION",
    "INDEX_NAME",
    "Metric",
    "HistoryRecord",
    "Series",
    "HistoryStore",
    "RecordTarget",
    "check_key",
    "machine_key",
    "commit_order",
    "commit_info",
    "new_record",
    "series_change_points",
]

#: Version of the JSON form of :class:`HistoryRecord`.
SCHEMA_VERSION = 1
#: File name of the derived index in the store's root.
INDEX_NAME = ".index.json"
_INDEX_VERSION = 2  # 2: each entry carries the digest of its summary
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _key(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _KEY.match(value) or len(value) > 200:
        raise InputError(
            f"{what} {value!r} is not valid: use letters, digits, '.', '_' and '-' (not first), up to 200 characters"
        )
    return value


def check_key(value: Any, what: str) -> str:
    """``value`` if it can name a machine or commit in the store (a folder- and file-safe name).

    Raises
    ------
    InputError
        If it holds anything but letters, digits, ``.``, ``_``, ``-`` (not
        first), or is longer than 200 characters.
    """
    return _key(value, what)


@dataclass(frozen=True)
class RecordTarget:
    """Where a new record goes: the store's folder, the machine key, the commit and its date."""

    root: Path
    machine: str
    commit: str
    commit_date: str | None


def _iso(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} {value!r} is not an ISO 8601 date string")
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{what} {value!r} is not an ISO 8601 date, e.g. 2026-11-30T12:00:00+00:00") from None
    return value


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """One recorded run.

    Attributes
    ----------
    machine : str
        Machine key (see :func:`machine_key`); a folder name.
    commit : str
        Engine commit id (full or abbreviated hash, or a build tag).
    commit_date : str or None
        The commit's date, ISO 8601.
    recorded_at : str
        When the run was recorded, ISO 8601 UTC.
    manifest : dict
        The run manifest (:func:`logitlab.manifest.build_manifest`), as JSON types.
    metrics : dict of str to dict of str to Metric
        Variant -> metric name -> :class:`Metric`.
    schema_version : int
    """

    machine: str
    commit: str
    commit_date: str | None
    recorded_at: str
    manifest: dict[str, Any]
    metrics: dict[str, dict[str, Metric]]
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        _key(self.machine, "machine key")
        _key(self.commit, "commit")
        if self.commit_date is not None:
            _iso(self.commit_date, "commit_date")
        _iso(self.recorded_at, "recorded_at")
        if self.schema_version != SCHEMA_VERSION:
            raise InputError(
                f"schema_version {self.schema_version!r} is not supported: this logitlab reads version {SCHEMA_VERSION}"
            )
        if not isinstance(self.manifest, Mapping):
            raise InputError(f"manifest {self.manifest!r} is not a mapping")
        if not isinstance(self.metrics, Mapping) or not self.metrics:
            raise InputError("metrics must map each variant to its metrics, and name at least one variant")
        metrics: dict[str, dict[str, Metric]] = {}
        for variant, ms in self.metrics.items():
            if not isinstance(variant, str) or not variant or not isinstance(ms, Mapping):
                raise InputError(f"variant {variant!r} must be a non-empty name mapped to its metrics")
            metrics[variant] = {}
            for name, m in ms.items():
                if not isinstance(name, str) or not name:
                    raise InputError(f"metric name {name!r} of variant {variant!r} is not a non-empty string")
                if isinstance(m, Mapping):
                    m = _fields(Metric, m)
                if not isinstance(m, Metric):
                    raise InputError(f"metric {variant}/{name} is {m!r}, not a Metric")
                metrics[variant][name] = m
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "manifest", dict(self.manifest))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (samples as lists)."""
        d = dataclasses.asdict(self)
        for ms in d["metrics"].values():
            for m in ms.values():
                m["samples"] = list(m["samples"])
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HistoryRecord":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        InputError
            On unknown or missing keys or any invalid field.
        """
        return _fields(cls, data)


def _fields(cls: type, data: Any) -> Any:
    return from_fields(cls, data, hint="")


@dataclass(frozen=True, slots=True)
class Series:
    """One metric of one variant on one machine, a point per record, oldest first.

    Attributes
    ----------
    machine, variant, metric : str
    kind : str
        The metric's kind (from its newest record).
    unit : str
    commits : tuple of str
        Commit of each point (the labels of change points).
    commit_dates, recorded_at : tuple of (str or None)
    values : tuple of (float or str)
    ordered_by : {'git', 'record'}
        Commit order from the repository, or the order of ``recorded_at``.
    left_out : int
        Records of this metric whose commit is not in the repository's
        history (other branches); 0 when ordered by record.
    """

    machine: str
    variant: str
    metric: str
    kind: str
    unit: str
    commits: tuple[str, ...]
    commit_dates: tuple[str | None, ...]
    recorded_at: tuple[str, ...]
    values: tuple[float | str, ...]
    ordered_by: str
    left_out: int = 0


def machine_key(host: Mapping[str, Any] | None = None) -> str:
    """A folder-safe key for this machine: CPU model, logical cores, OS and architecture.

    Parameters
    ----------
    host : mapping, optional
        ``logitlab.manifest.host_info()`` (the default) or the same keys;
        ``arch`` if given, else this machine's architecture.

    Returns
    -------
    str
        E.g. ``'amd-epyc-7b13-2cores-linux-x86_64'``: the same on every run
        of one machine, different where the hardware differs. Pass your own
        key (a CI runner's name) where two machines share a CPU model.
    """
    import platform

    h = dict(host_info() if host is None else host)
    system = str(h.get("os", platform.platform())).split("-")[0]
    arch = str(h.get("arch") or platform.machine() or "arch")
    parts = [str(h.get("cpu") or "cpu"), f"{h.get('cores', '?')}cores", system, arch]
    slug = re.sub(r"[^a-z0-9._]+", "-", " ".join(parts).lower()).strip("-.")
    return _key(slug[:200] or "machine", "machine key")


def _summary(rec: HistoryRecord) -> dict[str, Any]:
    return {
        "machine": rec.machine,
        "commit": rec.commit,
        "commit_date": rec.commit_date,
        "recorded_at": rec.recorded_at,
        "metrics": {
            v: {n: {"kind": m.kind, "unit": m.unit, "value": m.value} for n, m in ms.items()}
            for v, ms in rec.metrics.items()
        },
    }


def same_run(a: HistoryRecord, b: HistoryRecord) -> bool:
    """Whether two records hold the same run: machine, commit, run manifest and metric values equal (only
    ``recorded_at`` may differ). Two real runs differ in their manifests (timestamps): a match is one result
    recorded twice."""
    summary_a, summary_b = _summary(a), _summary(b)
    return all(summary_a[k] == summary_b[k] for k in ("machine", "commit", "metrics")) and a.manifest == b.manifest


def _entry_digest(entry: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of an index entry without its ``digest``: an entry edited or damaged since it was
    written no longer matches and is rebuilt from its record."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass
class HistoryStore:
    """A history folder: add records, list them, and read series.

    Parameters
    ----------
    root : path
        The folder (created on the first :meth:`add`).
    """

    root: Path
    _index: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"history folder {self.root} is a file: pass a folder")

    # -- writing ---------------------------------------------------------------

    def add(self, record: HistoryRecord) -> Path:
        """Write ``record`` as a new file and return its path.

        The name is ``MACHINE/COMMIT12-STAMP-DIGEST.json`` (STAMP from
        ``recorded_at``, DIGEST the first 8 hex digits of the content's
        SHA-256), so records never overwrite each other.
        """
        data = record.to_dict()
        text = json.dumps(data, allow_nan=False, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        stamp = re.sub(r"[^0-9T]", "", record.recorded_at.split("+")[0])[:15]
        path = self.root / record.machine / f"{record.commit[:12]}-{stamp}-{digest}.json"
        write_json(path, data)
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            ignore.write_text(f"# derived, rebuilt by logitlab\n{INDEX_NAME}\n", encoding="utf-8")
        return path

    # -- the derived index -----------------------------------------------------

    def _files(self) -> dict[str, os.stat_result]:
        out: dict[str, os.stat_result] = {}
        if not self.root.is_dir():
            return out
        for machine in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for f in machine.glob("*.json"):
                if not f.name.startswith("."):
                    out[f"{machine.name}/{f.name}"] = f.stat()
        return out

    def index(self) -> dict[str, dict[str, Any]]:
        """Relative path -> record summary (machine, commit, dates, metric values), rebuilt where stale.

        Raises
        ------
        InputError
            If a record file is not valid JSON or not a valid record (the
            message names the file).
        """
        files = self._files()
        path = self.root / INDEX_NAME
        cached: dict[str, Any] = {}
        if path.is_file():
            try:
                data = read_json(path, what="history index")
                if data.get("version") == _INDEX_VERSION and isinstance(data.get("files"), dict):
                    cached = data["files"]
            except (InputError, AttributeError):
                cached = {}  # a damaged index is rebuilt
        entries: dict[str, Any] = {}
        changed = set(cached) != set(files)
        for rel, st in files.items():
            old = cached.get(rel)
            if (isinstance(old, dict) and old.get("size") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns
                    and old.get("digest") == _entry_digest(old)):
                entries[rel] = old
                continue
            rec = self.read(rel)
            folder = rel.split("/")[0]
            if rec.machine != folder:
                raise InputError(
                    f"record {self.root / rel} names machine {rec.machine!r} but lies in folder {folder!r}"
                )
            entries[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, **_summary(rec)}
            entries[rel]["digest"] = _entry_digest(entries[rel])
            changed = True
        if changed and self.root.is_dir():
            write_json(path, {"version": _INDEX_VERSION, "files": entries})
        return entries

    # -- reading ---------------------------------------------------------------

    def read(self, rel: str) -> HistoryRecord:
        """The full record (manifest and samples included) at ``MACHINE/FILE.json``."""
        path = self.root / rel
        data = read_json(path, what="history record")
        try:
            return HistoryRecord.from_dict(data)
        except InputError as exc:
            raise InputError(f"history record {path} is not valid: {exc}") from None

    def find_same_run(self, record: HistoryRecord) -> str | None:
        """``MACHINE/FILE.json`` of a record of the same run as ``record`` (:func:`same_run`), or None.
        The index narrows the search; only records whose commit and values match are read."""
        wanted = _summary(record)
        for rel, entry in sorted(self.index().items()):
            if all(entry.get(k) == wanted[k] for k in ("machine", "commit", "metrics")) and \
                    same_run(self.read(rel), record):
                return rel
        return None

    def machines(self) -> list[str]:
        """Machine keys with at least one record."""
        return sorted({e["machine"] for e in self.index().values()})

    def series(
        self,
        machine: str,
        variant: str,
        metric: str,
        *,
        order: Sequence[str] | None = None,
    ) -> Series:
        """One metric of one variant on one machine, oldest first.

        Parameters
        ----------
        machine, variant, metric : str
        order : sequence of str, optional
            Commit hashes oldest first (:func:`commit_order`). Records whose
            commit (full or abbreviated) is not in it are left out; without
            it, records are in ``recorded_at`` order.

        Raises
        ------
        InputError
            If no record of ``machine`` has ``variant``/``metric`` (the
            message lists what there is).
        """
        index = self.index()
        rows = [e for e in index.values() if e["machine"] == machine and metric in e["metrics"].get(variant, {})]
        if not rows:
            have = sorted(
                {f"{e['machine']}:{v}/{m}" for e in index.values() for v, ms in e["metrics"].items() for m in ms}
            )
            raise InputError(
                f"no record of machine {machine!r} has metric {variant}/{metric}: "
                f"the history has {', '.join(have) if have else 'no records'}"
            )
        left_out = 0
        if order is None:
            rows.sort(key=lambda e: e["recorded_at"])
            ordered_by = "record"
        else:
            pos = {c: i for i, c in enumerate(order)}
            keyed = []
            for e in rows:
                i = pos.get(e["commit"])
                if i is None and len(e["commit"]) >= 7:
                    i = next((pos[c] for c in order if c.startswith(e["commit"])), None)
                if i is None:
                    left_out += 1
                else:
                    keyed.append((i, e["recorded_at"], e))
            keyed.sort(key=lambda t: (t[0], t[1]))
            rows = [t[2] for t in keyed]
            ordered_by = "git"
        ms = [e["metrics"][variant][metric] for e in rows]
        # kind and unit from the newest record (of the whole metric, left-out ones included)
        newest = max(
            (e for e in index.values() if e["machine"] == machine and metric in e["metrics"].get(variant, {})),
            key=lambda e: e["recorded_at"],
        )["metrics"][variant][metric]
        return Series(
            machine=machine,
            variant=variant,
            metric=metric,
            kind=newest["kind"],
            unit=newest["unit"],
            commits=tuple(e["commit"] for e in rows),
            commit_dates=tuple(e["commit_date"] for e in rows),
            recorded_at=tuple(e["recorded_at"] for e in rows),
            values=tuple(m["value"] for m in ms),
            ordered_by=ordered_by,
            left_out=left_out,
        )


def new_record(
    *,
    machine: str,
    commit: str,
    commit_date: str | None,
    manifest: Mapping[str, Any],
    metrics: Mapping[str, Mapping[str, Metric]],
    recorded_at: str | None = None,
) -> HistoryRecord:
    """A :class:`HistoryRecord` stamped now (UTC, to the microsecond: records of one second keep their order)
    unless ``recorded_at`` is given."""
    when = recorded_at or datetime.now(timezone.utc).isoformat(timespec="microseconds")
    return HistoryRecord(machine, commit, commit_date, when, dict(manifest), {v: dict(m) for v, m in metrics.items()})


def series_change_points(series: Series, **settings: Any) -> ChangePointSeries:
    """Change points of a :class:`Series`, labelled by commit.

    ``settings`` go to :func:`logitlab.perf.changepoint.detect_change_points`
    (``max_pvalue``, ``min_size``, ...).

    Raises
    ------
    InputError
        If the series mixes kinds (a fingerprint metric that once was
        numeric) or a setting is out of range.
    """
    numeric = series.kind != "fingerprint"
    if any(isinstance(v, str) == numeric for v in series.values):
        raise InputError(
            f"metric {series.variant}/{series.metric} on {series.machine} mixes numbers and fingerprints: "
            "record them under different names"
        )
    return detect_change_points(list(series.values), kind=series.kind, labels=list(series.commits), **settings)
