"""Fuzz the history store's readers: record files (``HistoryStore.read``, ``HistoryRecord.from_dict``) and the index.

Seeds: the records ``--record`` makes of a finished ``ab`` and ``bench run`` (their run logs in
``tests/data/fuzz/logs``, read back and recorded by logitlab's own writer, :meth:`HistoryStore.add`).
Properties:

- round trip: a record with Hypothesis-drawn keys, dates, manifest and metrics, written by
  :meth:`HistoryStore.add`, reads back equal, and the store's series give its metric values;
- agreement: a damaged record file either raises :class:`~logitlab.errors.InputError` naming the
  file (from ``read`` and from ``index``/``series``), or reads as a record that round-trips (written
  again, it reads back equal);
- truncation: a record cut at any byte reads equal (only trailing white space was cut) or is that
  ``InputError``;
- a damaged ``.index.json`` (derived, a cache) never fails a query: it is rebuilt.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import timezone
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from fuzzing import DATA, outcome, tally
from mutate import byte_edits, json_file_edits
from logitlab import report
from logitlab.errors import InputError
from logitlab.experiments.history.metrics import record_from_result
from logitlab.experiments.history.store import INDEX_NAME, HistoryRecord, HistoryStore
from logitlab.perf.metrics import FINGERPRINT, HIGHER, LOWER, Metric

LOGS = DATA / "fuzz" / "logs"
KINDS = {"ab": LOGS / "ab.runs.jsonl", "bench-run": LOGS / "bench-run.runs.jsonl"}


def seed_record(kind: str) -> HistoryRecord:
    """The record ``--record`` makes of the seed run (fixed machine, commit and time)."""
    return record_from_result(report.read_result(KINDS[kind]), machine="fuzz-machine", commit="0123456789abcdef",
                              commit_date="2026-01-02T03:04:05+00:00", recorded_at="2026-01-02T04:00:00+00:00")


def store_with(root: Path, *records: HistoryRecord) -> tuple[HistoryStore, list[str]]:
    store = HistoryStore(root)
    paths = [store.add(r) for r in records]
    return store, [str(p.relative_to(root)) for p in paths]


# -- round trip ----------------------------------------------------------------------------------------
keys = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)
dates = st.datetimes(timezones=st.sampled_from([timezone.utc, None])).map(lambda d: d.isoformat())
finite = st.floats(allow_nan=False, allow_infinity=False)
json_plain = st.recursive(st.none() | st.booleans() | st.integers(-(2**64), 2**64) | finite | st.text(max_size=8),
                          lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                          max_leaves=8)
metrics = st.one_of(
    st.builds(Metric, st.sampled_from([HIGHER, LOWER]), finite, st.text(max_size=8),
              st.lists(finite, max_size=5).map(tuple)),
    st.builds(Metric, st.just(FINGERPRINT), st.text(min_size=1, max_size=12)),
)
records = st.builds(HistoryRecord, machine=keys, commit=keys, commit_date=st.none() | dates, recorded_at=dates,
                    manifest=st.dictionaries(st.text(max_size=8), json_plain, max_size=4),
                    metrics=st.dictionaries(st.text(min_size=1, max_size=8),
                                            st.dictionaries(st.text(min_size=1, max_size=8), metrics, min_size=1,
                                                            max_size=3), min_size=1, max_size=3))


@given(record=records)
def test_a_record_reads_back_equal_and_gives_its_values(record):
    with tempfile.TemporaryDirectory() as folder:
        store, (rel,) = store_with(Path(folder), record)
        assert store.read(rel) == record
        for variant, ms in record.metrics.items():
            for name, metric in ms.items():
                series = store.series(record.machine, variant, name)
                assert series.values == (metric.value,) and series.kind == metric.kind and series.unit == metric.unit
        tally("history record: round trip", "read")


# -- damaged records -----------------------------------------------------------------------------------
def check_damaged(root: Path, rel: str, other: str) -> None:
    """Read the damaged record ``rel`` and query the store: only an InputError naming the file may escape."""
    path = root / rel
    store = HistoryStore(root)
    record = None
    with outcome("history record: damaged", names=[path], error=InputError):
        record = store.read(rel)
    if record is not None:  # what reads, round-trips
        again = HistoryRecord.from_dict(json.loads(json.dumps(record.to_dict())))
        assert again == record
        with tempfile.TemporaryDirectory() as second:
            copy, (rel2,) = store_with(Path(second), record)
            assert copy.read(rel2) == record
    with outcome("history record: damaged, index + series", names=[path], error=InputError):
        index = store.index()
        assert set(index) == {rel, other}
        entry = index[other]
        variant, ms = next(iter(entry["metrics"].items()))
        store.series(entry["machine"], variant, next(iter(ms)))


@pytest.mark.parametrize("kind", sorted(KINDS))
@given(data=st.data())
def test_a_damaged_record_reads_and_round_trips_or_raises_input_error_naming_it(kind, data):
    seed, other = seed_record(kind), seed_record("ab" if kind != "ab" else "bench-run")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        _, (rel, rel_other) = store_with(root, seed, other)
        path = root / rel
        path.write_bytes(data.draw(json_file_edits(path.read_text())))
        check_damaged(root, rel, rel_other)


@pytest.mark.parametrize("kind", sorted(KINDS))
@given(data=st.data())
def test_a_record_cut_at_any_byte_reads_equal_or_raises_input_error_naming_it(kind, data):
    seed = seed_record(kind)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        store, (rel,) = store_with(root, seed)
        path = root / rel
        raw = path.read_bytes()
        cut = data.draw(st.integers(0, len(raw)))
        path.write_bytes(raw[:cut])
        try:
            record = store.read(rel)
        except InputError as exc:
            assert str(path) in str(exc), exc
            assert raw[:cut].strip() != raw.strip()
            tally("history record: cut", "rejected")
        else:
            assert record == seed and raw[:cut].strip() == raw.strip()
            tally("history record: cut", "read")


@given(data=st.data())
def test_a_damaged_index_is_rebuilt(data):
    records = [seed_record("ab"), seed_record("bench-run")]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "history"
        store, _ = store_with(root, *records)
        store.index()
        clean = Path(folder) / "clean"
        shutil.copytree(root, clean)
        (clean / INDEX_NAME).unlink()
        index = root / INDEX_NAME
        text = index.read_text()
        index.write_bytes(data.draw(st.one_of(json_file_edits(text), byte_edits(text.encode()))))
        expected = HistoryStore(clean)
        with outcome("history index: damaged", names=[index], error=InputError):
            for record in records:
                for variant, ms in record.metrics.items():
                    for name in ms:
                        got = HistoryStore(root).series(record.machine, variant, name)
                        assert got == expected.series(record.machine, variant, name)


def test_the_seed_records_round_trip():
    for kind in KINDS:
        record = seed_record(kind)
        assert record.metrics and record.manifest["result_kind"] == kind
        with tempfile.TemporaryDirectory() as folder:
            store, (rel,) = store_with(Path(folder), record)
            assert store.read(rel) == record
