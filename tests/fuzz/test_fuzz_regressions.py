"""Every crash the fuzzers found in the readers, kept as a case.

Each case is the smallest form of an input that made the code before the fix
raise something other than a logitlab error (the exception and the line it
came from are in the comment), or read as something other than the file
holds, or gave an error that did not name the file. Now each gives one clear
error naming it, or, for dump files, one problem line while the rest of the
dump stays readable.
"""

from __future__ import annotations

import gzip
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from fuzzing import DATA
from logitlab.dumps.manifest import read_manifest
from logitlab.dumps.readers import open_dump
from logitlab.engines.command import read_logits
from logitlab.errors import EngineError, InputError
from logitlab.perf.readers import read_benchmark_file

BENCH = DATA / "fuzz" / "bench"
DUMPS = DATA / "fuzz" / "dumps"


def edited(path: Path, edit) -> dict:
    data = json.loads(path.read_text())
    edit(data)
    return data


# -- benchmark files -------------------------------------------------------------------------------
def gbench_entry(**fields):
    return lambda d: d["benchmarks"][0].update(fields)


@pytest.mark.parametrize("name, data, message", [
    # TypeError at gbench.py:62: float(None)
    ("gbench.json", edited(BENCH / "gbench.json", gbench_entry(real_time=None)), "real_time of benchmark .* is null"),
    # TypeError at gbench.py:58: an unhashable time_unit looked up in a dict
    ("gbench.json", edited(BENCH / "gbench.json", gbench_entry(time_unit=[])), "has time_unit \\[\\]"),
    # KeyError at hyperfine.py:56: exit_codes an object, indexed [0] in the message
    ("hyperfine.json", edited(BENCH / "hyperfine.json", lambda d: d["results"][0].update(exit_codes={"x": 1})),
     "exit_codes of 'true' is an object, not a JSON array"),
    # AttributeError at pyperf.py:57: a run that is not an object
    ("pyperf.json", edited(BENCH / "pyperf.json", lambda d: d["benchmarks"][0]["runs"].append(1)),
     r"runs\[\d+\] is 1, not a JSON object"),
    # TypeError at pyperf.py:48: the suite's metadata an array
    ("pyperf.json", edited(BENCH / "pyperf.json", lambda d: d.update(metadata=[1])),
     "the suite's metadata is an array, not a JSON object"),
])
def test_damaged_benchmark_json_is_one_input_error(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        read_benchmark_file(path)


@pytest.mark.parametrize("value, message", [
    ({"a": 1}, "n_gen is an object, not a number"),   # TypeError at llama_bench.py:36: int() of an object
    ([1], "n_gen is an array, not a number"),          # TypeError at llama_bench.py:36: int() of an array
])
def test_llama_bench_token_count_that_is_not_a_number_is_one_input_error(tmp_path, value, message):
    """Found by the census of the code before the fixes (``LOGITLAB_FUZZ_CENSUS=1``, 300 inputs per seed)."""
    rows = json.loads((DATA / "bench" / "llama-bench-real.json").read_text())
    rows[0]["n_gen"] = value
    path = tmp_path / "llama-bench.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(InputError, match=message):
        read_benchmark_file(path)


@pytest.mark.parametrize("damage", [
    lambda raw: raw[:-12],                                  # EOFError at readers/__init__.py:46: cut short
    lambda raw: raw[:10] + b"\x00" * 8 + raw[18:],          # zlib.error at readers/__init__.py:46: a bad block
])
def test_damaged_gzip_is_one_input_error(tmp_path, damage):
    path = tmp_path / "pyperf.json.gz"
    path.write_bytes(damage((BENCH / "pyperf.json.gz").read_bytes()))
    with pytest.raises(InputError, match="looks gzipped but cannot be read"):
        read_benchmark_file(path)


def test_criterion_file_that_is_not_utf8_is_one_input_error(tmp_path):
    """UnicodeDecodeError at readers/base.py:120 (read_text of estimates.json)."""
    import shutil

    root = tmp_path / "criterion"
    shutil.copytree(DATA / "bench" / "criterion", root)
    target = next(root.rglob("new/estimates.json"))
    target.write_bytes(b"\xff" + target.read_bytes())
    with pytest.raises(InputError, match="is not UTF-8 text"):
        read_benchmark_file(root)


def test_json_nested_too_deeply_is_one_input_error(tmp_path):
    """RecursionError in json.loads (found by reading the code while fixing the above)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nests JSON arrays or objects too deeply"):
        read_benchmark_file(path)


def test_a_number_beyond_a_float_is_one_input_error(tmp_path):
    """OverflowError in float() of a 400-digit integer (found by reading the code while fixing the above)."""
    data = json.loads((BENCH / "hyperfine.json").read_text())
    data["results"][0]["times"][0] = int("9" * 400)
    path = tmp_path / "hyperfine.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="times and rates must be positive and finite"):
        read_benchmark_file(path)


# -- dumps ------------------------------------------------------------------------------------------
def _copy_dump(tmp_path: Path) -> Path:
    import shutil

    folder = tmp_path / "dump"
    shutil.copytree(DUMPS / "llamacpp", folder)
    return folder


def test_manifest_token_axis_that_is_not_an_axis_is_a_problem_line(tmp_path):
    """TypeError at dumps/readers.py:394: shape[:axis] with a string token_axis."""
    folder = _copy_dump(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tensors"][0]["token_axis"] = "0"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    dump = open_dump(folder)
    assert not dump.refs and "token_axis '0'" in dump.problems[0] and "malformed manifest" in dump.problems[0]


@pytest.mark.parametrize("positions", [[0], [0, 1, 2]])
def test_manifest_positions_that_are_not_a_span_are_a_problem_line(tmp_path, positions):
    """ValueError at dumps/readers.py:388 (``start, stop = entry.positions``), found by the census of the code
    before the fixes."""
    folder = _copy_dump(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tensors"][0]["positions"] = positions
    (folder / "manifest.json").write_text(json.dumps(manifest))
    dump = open_dump(folder)
    assert not dump.refs and "malformed manifest" in dump.problems[0] and f"positions {positions}" in dump.problems[0]


@pytest.mark.parametrize("key", ["steps", "tensors", "bytes_written"])
def test_manifest_with_null_lists_and_counts_reads(tmp_path, key):
    """TypeError at dumps/format.py:358 (iterating a null ``steps``), found by the long fuzz run of the fixed code."""
    folder = _copy_dump(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest[key] = None
    (folder / "manifest.json").write_text(json.dumps(manifest))
    read_manifest(folder)
    dump = open_dump(folder)
    assert dump.refs if key != "tensors" else not dump.refs


def test_manifest_step_file_outside_the_folder_is_refused(tmp_path):
    """A manifest may not send the reader outside its folder (found by reading the code while fixing the above)."""
    folder = _copy_dump(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tensors"][0]["file"] = "../../etc/passwd"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert "is not a file name inside the dump folder" in open_dump(folder).problems[0]


def _rewrite_header(path: Path, edit) -> None:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length:])


def _first(header: dict) -> str:
    return next(k for k in header if k != "__metadata__")


@pytest.mark.parametrize("edit, message", [
    (lambda h: h[_first(h)].pop("data_offsets"), "has data_offsets None"),       # KeyError at readers.py:415
    (lambda h: h.update({_first(h): 5}), "is not described by an object"),      # TypeError at readers.py:415
    (lambda h: h[_first(h)].update(data_offsets=[0]), r"has data_offsets \[0\]"),  # IndexError at readers.py:415
    (lambda h: h[_first(h)].update(dtype=[]), r"has dtype \[\]"),  # TypeError at readers.py:378: unhashable dtype
    (lambda h: h[_first(h)].update(shape=5), "has shape 5"),        # TypeError at readers.py:378: tuple(5)
])
def test_step_file_with_a_damaged_header_entry_is_a_problem_line(tmp_path, edit, message):
    folder = _copy_dump(tmp_path)
    step = folder / "step-0001-decode.safetensors"
    _rewrite_header(step, edit)
    dump = open_dump(folder)
    assert any(re.search(message, p) and "its tensors are skipped" in p for p in dump.problems), dump.problems
    assert dump.refs and all(str(step) not in r.source for r in dump.refs)  # the other step still reads


@pytest.mark.parametrize("edit, message", [
    (lambda h: h[_first(h)].update(data_offsets=[0]), r"data_offsets \[0\]"),          # IndexError at readers.py:587
    (lambda h: h[_first(h)].update(data_offsets={"0": 1}), r"data_offsets \{'0': 1\}"),  # KeyError at :587 (census)
    (lambda h: h[_first(h)].update(data_offsets=[0, "x"]), r"data_offsets \[0, 'x'\]"),  # TypeError at :587
    (lambda h: h[_first(h)].update(shape=5), "has shape 5"),                             # TypeError at :582
    (lambda h: h.update({_first(h): [1]}), "is not described by an object"),             # AttributeError at :582
])
def test_safetensors_file_with_a_damaged_header_entry_is_a_problem_line(tmp_path, edit, message):
    path = tmp_path / "tensors.safetensors"
    path.write_bytes((DUMPS / "tensors.safetensors").read_bytes())
    _rewrite_header(path, edit)
    dump = open_dump(path)
    assert not dump.refs and re.search(message, dump.problems[0]), dump.problems


@pytest.mark.parametrize("header, what", [
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), ", "TokenError"),  # an unclosed dict
    (None, "EOFError"),                                                             # an empty file
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000000000000000000000, 4), }",
     "OverflowError"),                                                              # a shape beyond int64
])
def test_npy_with_a_damaged_header_is_a_problem_line_and_an_engine_error(tmp_path, header, what):
    """TokenError / EOFError / OverflowError from np.load at dumps/readers.py:555 (numpy parses the header with
    Python's literal parser)."""
    seed = next((DUMPS / "npy").glob("*.npy")).read_bytes()
    if header is None:
        raw = b""
    else:
        text = header.ljust(118) + "\n"
        raw = seed[:8] + len(text).to_bytes(2, "little") + text.encode("latin-1") + seed[128:]
    path = tmp_path / "attn_norm-0_pos0.npy"
    path.write_bytes(raw)
    dump = open_dump(path)
    assert not dump.refs and "not a readable .npy file" in dump.problems[0], dump.problems
    with pytest.raises(EngineError, match="logits file attn_norm-0_pos0.npy"):
        read_logits(path, None)


def test_every_damaged_case_leaves_the_seed_readable():
    """The seeds these cases start from read cleanly (the cases test the damage, not a bad seed)."""
    assert read_benchmark_file(BENCH / "pyperf.json.gz").scenarios
    assert not open_dump(DUMPS / "llamacpp").problems
    assert np.load(next((DUMPS / "npy").glob("*.npy"))).shape == (4, 4)
    assert gzip.decompress((BENCH / "pyperf.json.gz").read_bytes())


# -- logitlab's own files: history, goldens, result files, sweep folders (#35 item 5) ---------------
import test_fuzz_golden as golden_seed  # noqa: E402 - the seeds those fuzzers build, not their tests
import test_fuzz_result_files as result_seed  # noqa: E402
import test_fuzz_sweep as sweep_seed  # noqa: E402


def test_history_index_entry_without_its_machine_is_rebuilt(tmp_path):
    """KeyError at history/store.py:406 (``e["machine"]`` in series): an index entry damaged while its
    record's size and mtime still matched was trusted."""
    from logitlab.experiments.history.store import INDEX_NAME, HistoryStore
    import test_fuzz_history as history_seed

    store, _ = history_seed.store_with(tmp_path, history_seed.seed_record("ab"))
    store.index()
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    (entry,) = index["files"].values()
    del entry["machine"]
    (tmp_path / INDEX_NAME).write_text(json.dumps(index))
    assert HistoryStore(tmp_path).series("fuzz-machine", "candidate", "decode").values


def test_json_nested_too_deeply_in_a_history_record_is_one_input_error(tmp_path):
    """RecursionError in read_json's json.loads (found while fixing the above)."""
    from logitlab.experiments.history.store import HistoryStore

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "r.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"m/r.json nests JSON arrays or objects too deeply"):
        HistoryStore(tmp_path).read("m/r.json")


def test_golden_manifest_whose_ids_are_not_the_stored_ones_is_one_input_error(tmp_path):
    """A manifest edited to ``"prompt_ids": [[1, 2]]`` read as a golden whose prompt was one token, a list."""
    import shutil

    folder = tmp_path / "golden"
    prompts = [golden_seed.GoldenPrompt("two", "Hi there", [1, 2], [], "")]
    golden_seed.write_golden(folder, "topk:8", prompts, [np.concatenate([golden_seed.REAL, golden_seed.REAL])])
    good = tmp_path / "good"
    shutil.copytree(folder, good)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["prompts"][0]["prompt_ids"] = [[1, 2]]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"golden/manifest.json: prompt 0 does not list its token ids as integers"):
        golden_seed.read_golden(folder)
    manifest["prompts"][0]["prompt_ids"] = [1, 3]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"golden .*golden is corrupt: the token ids logits.safetensors holds for "
                                         r"prompt 0 are not those its manifest lists"):
        golden_seed.read_golden(folder)
    assert golden_seed.read_golden(good).prompts[0].prompt_ids == [1, 2]


def _result_file(tmp_path: Path, kind: str, edit) -> Path:
    data = json.loads(json.dumps(result_seed.to_jsonable(result_seed.RESULTS[kind].to_dict())))
    edit(data)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data, allow_nan=True))
    return path


@pytest.mark.parametrize("kind, edit, message", [
    # reads with NaN, is written back with null, then no longer renders (TypeError: NoneType * float)
    ("bench-compare", lambda d: d["scenarios"][1].update(margin=float("nan")), "is not strict JSON: it holds NaN"),
    # AttributeError at ab_results.py:89 (to_dict of the dict dacite kept: no member of the union fitted)
    ("ab", lambda d: d["runs"][2]["comparison"].pop("flips"), r"runs\[2\]\.comparison does not fit its type"),
    # TypeError at report/__init__.py:72: an unhashable kind looked up in KINDS
    ("ab", lambda d: d.update(kind=["ab"]), "not a logitlab result"),
    # TypeError at dumps/format.py:99 (to_dict, via --json or --html, of a tensor whose name is a list)
    ("dump-diff", lambda d: d["tensors"][0].update(name=["attn_norm"]), "damaged dump-diff result"),
    # AttributeError at dumps/diff_results.py:377 (_expand of a list)
    ("dump-diff", lambda d: d["only_right"].append({"name": "x", "instance": 0, "layers": [0], "positions": "0",
                                                    "count": 1}), "damaged dump-diff result"),
    # a range list that would expand to 10**12 numbers (found while fixing the above)
    ("dump-diff", lambda d: d["only_right"].append({"name": "x", "instance": 0, "layers": "0-999999999999",
                                                    "positions": "0", "count": 1}), "expands to more than"),
])
def test_damaged_result_file_is_one_input_error_naming_it(tmp_path, kind, edit, message):
    path = _result_file(tmp_path, kind, edit)
    with pytest.raises(InputError, match=message) as info:
        result_seed.report.read_result(path)
    assert str(path) in str(info.value)


def test_text_that_is_not_a_string_renders_on_the_terminal():
    """TypeError in rich (``Only str or Text can be appended to Text``, report/render_terminal.py:40): a damaged
    result's field reached a Span as a number (found by the fuzzer; the input itself was not kept)."""
    import io

    from rich.console import Console

    from logitlab.report.document import Document, Paragraph, Rich, Span
    from logitlab.report.render_terminal import render_terminal

    out = io.StringIO()
    render_terminal(Document("ab", "t", [Paragraph(Rich((Span(5), Span(" tokens"))))]), Console(file=out, width=80))
    assert "5 tokens" in out.getvalue()


def test_damaged_sweep_manifest_is_one_input_error_naming_it(tmp_path):
    """``damaged sweep result: missing value for field "cells.candidate"`` did not say which file."""
    out = tmp_path / "runs"
    sweep_seed.write_sweep(out)
    manifest = json.loads((out / "sweep.json").read_text())
    del manifest["cells"][0]["candidate"]
    (out / "sweep.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"sweep manifest .*runs/sweep.json: damaged sweep result"):
        result_seed.report.read_result(out)


@pytest.mark.parametrize("edit", [
    lambda d: d.update(status=None),                            # KeyError at sweep/summary.py:151 (counts)
    lambda d: d["result"].update(kind="nonsense"),              # KeyError at kinds.py:54 (result_class)
    lambda d: d["result"].pop("schema_version"),                # InputError naming no file (summarize)
])
def test_damaged_sweep_job_file_counts_as_no_result(tmp_path, edit):
    out = tmp_path / "runs"
    summary = sweep_seed.write_sweep(out)
    job = out / "jobs" / f"{summary.jobs[0].key}.json"
    data = json.loads(job.read_text())
    edit(data)
    job.write_text(json.dumps(data))
    shown = result_seed.report.read_result(out)
    assert [j.status for j in shown.jobs] == ["pending", "ok", "failed", "pending"]
