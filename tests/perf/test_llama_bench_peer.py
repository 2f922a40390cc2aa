"""The llama-bench reader and ``logitlab bench compare`` on files the real llama-bench wrote.

The live tests run llama-bench (built by ``make tools``) on the embedded model
with tiny settings (8-token prompt, 4 generated tokens); the recorded files in
``tests/data/bench/llama-bench-real.*`` (see the README there) check the reader
without the tool.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logitlab.perf.readers import read_benchmark_file
from logitlab.perf.readers.llama_bench import parse_jsonl

from peers import run_tool

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bench"
PY = sys.executable
TINY = ("-p", "8", "-n", "4")


def llama_bench(model_path: str, out: Path, fmt: str, *args: str) -> Path:
    """Run llama-bench with ``-o fmt``; its stdout is the file."""
    proc = run_tool("llama-bench", "-m", model_path, *TINY, *args, "-o", fmt)
    out.write_text(proc.stdout)
    return out


def rows_of(path: Path) -> list[dict]:
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else parse_jsonl(str(path), text)


def check_against_rows(path: Path, expected_names: list[str]) -> None:
    """The reader's scenarios carry exactly the file's samples and names."""
    bench = read_benchmark_file(path)
    rows = rows_of(path)
    assert bench.format == "llama-bench"
    assert list(bench.scenarios) == expected_names
    for row, scenario in zip(rows, bench.scenarios.values()):
        assert scenario.unit == "tokens/s" and scenario.higher_is_better
        assert scenario.samples == tuple(float(x) for x in row["samples_ts"])
        assert scenario.summary == pytest.approx(float(np.exp(np.mean(np.log(row["samples_ts"])))))
    assert bench.context["backends"] == rows[0]["backends"] and bench.context["cpu_info"] == rows[0]["cpu_info"]


# -- recorded real files (no tool needed) -------------------------------------------------------
def test_recorded_real_json_and_jsonl():
    names = ["llama 256M Q4_1 pp8 n_threads=1", "llama 256M Q4_1 tg4 n_threads=1",
             "llama 256M Q4_1 pp8 n_threads=2", "llama 256M Q4_1 tg4 n_threads=2"]
    for name in ("llama-bench-real.json", "llama-bench-real.jsonl"):
        check_against_rows(DATA / name, names)
        context = read_benchmark_file(DATA / name).context
        assert "n_threads" not in context  # it varies inside the file: not one value for the whole run
        assert context["model_filename"] == "SmolLM2-135M-Instruct.Q4_1.gguf"


# -- the live tool -------------------------------------------------------------------------------
@pytest.mark.peers
@pytest.mark.engine
def test_live_json_and_jsonl_read_back(model_path, tmp_path):
    for fmt in ("json", "jsonl"):
        path = llama_bench(model_path, tmp_path / f"bench.{fmt}", fmt, "-r", "2", "-t", "1", "-fa", "off,on")
        rows = rows_of(path)
        assert [(r["n_prompt"], r["n_gen"], r["flash_attn"]) for r in rows] == [(8, 0, 0), (0, 4, 0), (8, 0, 1),
                                                                                  (0, 4, 1)]
        assert all(len(r["samples_ts"]) == 2 for r in rows)
        prefix = next(iter(read_benchmark_file(path).scenarios)).split(" pp8")[0]
        assert prefix.endswith(" Q4_1")  # llama.cpp's model description: architecture, size class, type
        check_against_rows(path, [f"{prefix} {t} flash_attn={fa}" for fa in (0, 1) for t in ("pp8", "tg4")])


@pytest.mark.peers
@pytest.mark.engine
def test_live_parameters_of_the_current_llama_bench_name_scenarios(model_path, tmp_path):
    """``repack`` and ``load_mode`` are newer than the documented layout the reader was first written for."""
    path = tmp_path / "sweep.jsonl"
    path.write_text(run_tool("llama-bench", "-m", model_path, "-p", "8", "-n", "0", "-r", "1", "-t", "1",
                             "--repack", "0,1", "-lm", "none,mmap", "-o", "jsonl").stdout)
    rows = rows_of(path)
    assert [(r["load_mode"], r["repack"]) for r in rows] == [("none", False), ("none", True), ("mmap", False),
                                                              ("mmap", True)]
    names = list(read_benchmark_file(path).scenarios)
    prefix = names[0].split(" pp8")[0]
    assert names == [f"{prefix} pp8 load_mode={m} repack={r}" for m in ("none", "mmap") for r in (False, True)]


@pytest.mark.peers
@pytest.mark.engine
def test_bench_compare_flash_attention_off_vs_on(model_path, tmp_path):
    # one thread each: two threads on a busy 2-core machine spin for tens of seconds
    one = llama_bench(model_path, tmp_path / "fa0.json", "json", "-r", "5", "-t", "1", "-fa", "off")
    two = llama_bench(model_path, tmp_path / "fa1.jsonl", "jsonl", "-r", "5", "-t", "1", "-fa", "on")
    out = tmp_path / "cmp.json"
    proc = subprocess.run([PY, "-m", "logitlab", "bench", "compare", str(one), str(two), "--bootstrap", "999",
                           "--json", str(out), "--markdown", str(tmp_path / "cmp.md")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    names = [s["name"] for s in data["scenarios"]]
    assert len(names) == 2 and names[0].endswith(" pp8") and names[1].endswith(" tg4")  # flash_attn: per file
    assert not data["only_base"] and not data["only_candidate"]
    for s in data["scenarios"]:
        assert s["base_n"] == s["candidate_n"] == 5 and s["ci_method"].startswith("bootstrap")
        assert s["ci_low"] <= s["ratio"] <= s["ci_high"]
    text = (tmp_path / "cmp.md").read_text()
    assert "95% CI by bootstrap" in text and "Holm's correction across 2 scenarios" in text


@pytest.mark.peers
@pytest.mark.engine
def test_bench_compare_with_too_few_samples_says_so_plainly(model_path, tmp_path):
    one = llama_bench(model_path, tmp_path / "fa0.json", "json", "-r", "2", "-t", "1", "-fa", "off")
    two = llama_bench(model_path, tmp_path / "fa1.json", "json", "-r", "2", "-t", "1", "-fa", "on")
    proc = subprocess.run([PY, "-m", "logitlab", "bench", "compare", str(one), str(two), "--markdown",
                           str(tmp_path / "cmp.md"), "--json", str(tmp_path / "cmp.json")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for text in ((tmp_path / "cmp.md").read_text(), " ".join(proc.stdout.split())):
        assert "no CI for any scenario (fewer than 5 samples on a side, or a summary only)" in text
        assert "Status: inconclusive for every scenario, as no CI can be given" in text
        assert "by none" not in text and "across 0 scenarios" not in text
    data = json.loads((tmp_path / "cmp.json").read_text())
    assert [s["status"] for s in data["scenarios"]] == ["inconclusive"] * 2
    from logitlab import report
    from logitlab.report.speed_text import scenario_reason

    result = report.load_result(data)
    assert all("2 samples on a side (< 5)" in scenario_reason(s, result) for s in result.scenarios)
