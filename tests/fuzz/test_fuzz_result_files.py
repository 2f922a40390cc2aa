"""Fuzz ``logitlab report RESULT.json|PAGE.html``: result files as ``report.read_result`` reads them back.

Seeds: the ``--json`` files (``write_json(result.to_dict())``, what every command writes) of a real
``ab``, ``verify`` and ``bench run`` (their run logs in ``tests/data/fuzz/logs``, on the embedded model
and two shell commands), a ``bench compare`` of two real hyperfine files and a ``dump-diff`` of a real
llama.cpp capture. Properties:

- round trip: each seed, and the HTML page ``--html`` writes of it, reads back to the same result;
- agreement: a damaged file either raises :class:`~logitlab.errors.InputError` naming the file, or
  reads as a result that renders (Markdown, terminal, HTML) and round-trips (written again, it reads
  back the same);
- truncation: a file cut at any byte reads equal (only trailing white space was cut) or is that
  ``InputError``.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from rich.console import Console

from fuzzing import DATA, outcome, tally
from mutate import json_file_edits
from logitlab import report
from logitlab.dumps.diff import diff_dumps
from logitlab.dumps.readers import open_dump
from logitlab.errors import InputError
from logitlab.jsonio import to_jsonable, write_json
from logitlab.perf.compare_files import compare_benchmarks
from logitlab.perf.readers import read_benchmark_file


def _results() -> dict:
    logs = DATA / "fuzz" / "logs"
    out = {name: report.read_result(logs / f"{name}.runs.jsonl") for name in ("ab", "verify", "bench-run")}
    out["bench-compare"] = compare_benchmarks(read_benchmark_file(DATA / "bench" / "hyperfine-real-base.json"),
                                              read_benchmark_file(DATA / "bench" / "hyperfine-real-pr.json"),
                                              n_bootstrap=200, seed=0)
    out["dump-diff"] = diff_dumps(open_dump(DATA / "fuzz" / "dumps" / "llamacpp"),
                                  open_dump(DATA / "fuzz" / "dumps" / "raw"))
    return out


RESULTS = _results()


def plain(result) -> str:
    """The result as canonical strict JSON text (what ``--json`` writes, keys sorted)."""
    return json.dumps(to_jsonable(result.to_dict()), sort_keys=True)


def written(result, folder: Path, name: str) -> Path:
    path = folder / name
    write_json(path, result.to_dict())
    return path


@pytest.mark.parametrize("kind", sorted(RESULTS))
def test_a_result_file_and_its_page_read_back_the_same_result(kind, tmp_path):
    result = RESULTS[kind]
    assert plain(report.read_result(written(result, tmp_path, "result.json"))) == plain(result)
    page = tmp_path / "result.html"
    page.write_text(report.html(result), encoding="utf-8")
    assert plain(report.read_result(page)) == plain(result)


@pytest.mark.parametrize("kind", sorted(RESULTS))
@given(data=st.data())
def test_a_damaged_result_file_reads_and_round_trips_or_raises_input_error_naming_it(kind, data):
    with tempfile.TemporaryDirectory() as folder:
        seed = written(RESULTS[kind], Path(folder), "seed.json")
        path = Path(folder) / "result.json"
        path.write_bytes(data.draw(json_file_edits(seed.read_text())))
        result = None
        with outcome(f"result file: {kind}", names=[path], error=InputError):
            result = report.read_result(path)
            report.display(result, Console(file=io.StringIO(), width=120))
            report.html(result)
        if result is not None:
            again = report.read_result(written(result, Path(folder), "again.json"))
            assert plain(again) == plain(result)


@pytest.mark.parametrize("kind", sorted(RESULTS))
@given(data=st.data())
def test_a_result_file_cut_at_any_byte_reads_equal_or_raises_input_error_naming_it(kind, data):
    with tempfile.TemporaryDirectory() as folder:
        path = written(RESULTS[kind], Path(folder), "result.json")
        raw = path.read_bytes()
        cut = data.draw(st.integers(0, len(raw)))
        path.write_bytes(raw[:cut])
        try:
            result = report.read_result(path)
        except InputError as exc:
            assert str(path) in str(exc), exc
            tally(f"result file cut: {kind}", "rejected")
        else:
            assert raw[:cut].strip() == raw.strip() and plain(result) == plain(RESULTS[kind])
            tally(f"result file cut: {kind}", "read")


def test_the_seeds_are_the_kinds_they_claim():
    assert {kind: r.KIND for kind, r in RESULTS.items()} == {k: k for k in RESULTS}
    assert all(getattr(r, "error", None) is None for r in RESULTS.values())
