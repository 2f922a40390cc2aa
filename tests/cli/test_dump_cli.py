"""``python -m logitlab dump`` / ``dump-diff`` as a user runs them: exit codes, one-line problems, reports."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SHORT_PROMPT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dumps"))
from rawdumps import base_tensors, plant, raw_path, write_folder  # noqa: E402


def logitlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.engine
def test_dump_flash_attn_pair_then_dump_diff(tmp_path):
    out = tmp_path / "dumps"
    proc = logitlab("dump", "--candidate", "flash_attn=1", "--out", str(out), "--prompt", SHORT_PROMPT,
                    "--tokens", "2", "--layers", "0-3")
    assert proc.returncode == 0, proc.stderr
    assert "control: estimated dump size" in proc.stderr and "candidate: estimated dump size" in proc.stderr
    assert f"next: logitlab dump-diff {out / 'control'} {out / 'candidate'}" in proc.stdout
    report, md = tmp_path / "diff.json", tmp_path / "diff.md"
    proc = logitlab("dump-diff", str(out / "control"), str(out / "candidate"), "--json", str(report),
                    "--markdown", str(md), "-q")
    assert proc.returncode == 0, proc.stderr
    assert "verdict: divergent" in proc.stdout and "first divergence: kqv_out-0@pos" in proc.stdout
    assert "only in A: kq (layers 0-3" in proc.stdout and "growth by layer" in proc.stdout
    data = json.loads(report.read_text())
    assert data["first_divergence"]["name"] == "kqv_out" and data["first_divergence"]["layer"] == 0
    assert data["first_divergence"]["kind"] == "attention" and len(data["tensors"]) == data["n_aligned"]
    assert md.read_text().startswith("## logitlab dump-diff: **divergent**")
    proc = logitlab("dump-diff", str(out / "control"), str(out / "candidate"), "--require", "bit-exact", "-q")
    assert proc.returncode == 1 and "require bit-exact: the dump-diff verdict is divergent" in proc.stderr
    proc = logitlab("dump", "--out", str(out / "control"), "--tokens", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: dump folder {out / 'control'} is not empty; choose another --out or pass --force"


@pytest.mark.engine
def test_max_bytes_stops_early_with_a_message(tmp_path):
    proc = logitlab("dump", "--out", str(tmp_path / "d"), "--max-bytes", "1MB", "--tokens", "1")
    assert proc.returncode == 0, proc.stderr
    assert "more than --max-bytes 1.0 MB: the capture will stop early" in proc.stderr
    assert "control: stopped early: --max-bytes 1.0 MB reached at step 0" in proc.stdout
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["bytes_written"] <= 1_000_000


def test_raw_f32_folders_with_missing_and_truncated_files(tmp_path):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "ds4_dumps_a")
    b = write_folder(tmp_path / "b", plant(base, ("ffn_out", 2, 1)), "ds4_dumps_b")
    raw_path(b, "ds4_dumps_b", "kqv_out", 0, 2).unlink()
    cut = raw_path(b, "ds4_dumps_b", "l_out", 3, 0)
    cut.write_bytes(cut.read_bytes()[:-2])
    proc = logitlab("dump-diff", str(a), str(b), "--format", "raw-f32", "--shape", "8x8", "--shape",
                    "result_output=128", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "first divergence: ffn_out-2@pos1 (layer 2, ffn, float32 [8, 8]): 32/64 differ" in proc.stdout
    assert "only in A: kqv_out (layers 0, positions 2): 1" in proc.stdout
    assert "1 problem(s):" in proc.stdout
    assert f"B: {cut}: truncated (254 bytes is not a multiple of 4, the size of float32)" in proc.stdout
    assert proc.stderr == ""


def test_nothing_aligned_exits_2_with_one_line_per_problem(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = logitlab("dump-diff", str(empty), str(tmp_path / "missing"), "-q")
    assert proc.returncode == 2
    assert f"A: {empty}: empty folder (no dump files)" in proc.stdout
    assert f"B: {tmp_path / 'missing'}: no such file or folder" in proc.stdout
    assert proc.stderr.strip().startswith("error: nothing could be compared between")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_options_give_one_error_line(tmp_path):
    proc = logitlab("dump-diff", str(tmp_path), str(tmp_path), "--shape", "axb")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: bad --shape 'axb': expected DIMS like 576 or 9x64, optionally NAME=DIMS"
    proc = logitlab("dump-diff", str(tmp_path), str(tmp_path), "--layers", "3-1")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: bad layer range '3-1'")
    proc = logitlab("dump", "--out", str(tmp_path / "x"), "--engine", "fake", "--max-bytes", "lots")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: bad size 'lots'")


def test_dtype_mismatch_is_one_problem_line_and_the_rest_compared(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    np.arange(4, dtype="<f4").tofile(a / "r_l_out-0_pos0.bin")
    np.arange(4, dtype="<i4").tofile(b / "r_l_out-0_pos0.i32")
    np.ones(4, dtype="<f4").tofile(a / "r_l_out-1_pos0.bin")
    np.ones(4, dtype="<f4").tofile(b / "r_l_out-1_pos0.bin")
    proc = logitlab("dump-diff", str(a), str(b), "-q")
    assert proc.returncode == 0, proc.stderr
    assert "l_out-0@pos0: dtype mismatch: A float32 vs B int32" in proc.stdout
    assert "verdict: incomplete" in proc.stdout
