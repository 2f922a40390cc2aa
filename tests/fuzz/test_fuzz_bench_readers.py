"""Fuzz the six benchmark-file readers on damaged copies of files the real tools wrote.

The property: reading a damaged file either returns scenarios whose every
value is finite and positive, or raises a :class:`~logitlab.errors.LogitlabError`
(one ``error:`` line at the command line). Any other exception is a bug. A
file that reads is then compared with its undamaged seed (``bench compare``),
which must keep the same promise.
"""

from __future__ import annotations

import gzip
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import fuzzing
from fuzzing import DATA, outcome
from mutate import byte_edits, file_edits, folder_edits, json_file_edits
from logitlab.perf.compare_files import compare_benchmarks
from logitlab.perf.readers import FORMATS, BenchmarkFile, detect_format, read_benchmark_file

SEEDS = sorted((DATA / "fuzz" / "bench").glob("*.json*")) + sorted((DATA / "bench").glob("llama-bench*.json*"))
CRITERION = DATA / "bench" / "criterion"


def check_read(path: Path, **options) -> BenchmarkFile:
    """Read ``path``; a result must hold only finite, positive values."""
    bench = read_benchmark_file(path, **options)
    assert bench.format in FORMATS and bench.scenarios
    for scenario in bench.scenarios.values():
        assert isinstance(scenario.name, str)
        assert math.isfinite(scenario.summary) and scenario.summary > 0, scenario
        assert all(math.isfinite(x) and x > 0 for x in scenario.samples), scenario
        if scenario.groups is not None:
            assert len(scenario.groups) == len(scenario.samples)
    return bench


def check(reader: str, path: Path, seed: Path, compare: bool, **options) -> None:
    """detect_format, read, and ``bench compare`` of the seed with a damaged file that still reads."""
    with outcome(reader + " (detect)"):
        detect_format(path)
    bench = None
    with outcome(reader):
        bench = check_read(path, **options)
    if bench is not None and compare:
        base = read_benchmark_file(seed, **options)
        with outcome(reader + " + compare"):
            compare_benchmarks(base, bench, n_bootstrap=200)


@st.composite
def damaged_gzip(draw, seed: Path) -> bytes:
    """A .json.gz: edit the JSON inside and compress again, or edit the compressed bytes."""
    raw = seed.read_bytes()
    if draw(st.booleans()):
        return draw(byte_edits(raw))
    return gzip.compress(draw(json_file_edits(gzip.decompress(raw).decode())), mtime=0)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
@given(data=st.data(), cpu=st.booleans())
def test_damaged_benchmark_files_read_or_raise_a_logitlab_error(seed, data, cpu):
    content = data.draw(damaged_gzip(seed) if seed.name.endswith(".gz") else file_edits(seed))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / seed.name
        path.write_bytes(content)
        check(f"bench: {detect_format(seed)}", path, seed, not cpu, time="cpu" if cpu else "real")


@given(data=st.data(), baseline=st.sampled_from(["new", "main"]))
def test_damaged_criterion_folders_read_or_raise_a_logitlab_error(data, baseline):
    with tempfile.TemporaryDirectory() as folder:
        root = data.draw(folder_edits(CRITERION, Path(folder) / "criterion"))
        check("bench: criterion", root, CRITERION, True, baseline=baseline)


def test_every_seed_reads():
    """The seeds themselves are good files: each reads (the fuzzers start from valid input)."""
    for seed in SEEDS:
        assert read_benchmark_file(seed).scenarios, seed
    assert read_benchmark_file(CRITERION).format == "criterion"
    assert {detect_format(s) for s in SEEDS} | {"criterion"} == set(FORMATS)
    assert fuzzing.EXAMPLES >= 1
