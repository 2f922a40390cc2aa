"""``python -m logitlab dump`` / ``dump-diff`` as a user runs them: exit codes, one-line problems, reports."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SHORT_PROMPT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dumps"))
from rawdumps import base_tensors, plant, raw_path, write_folder, write_logitlab_dump  # noqa: E402


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
                    "--markdown", str(md))
    assert proc.returncode == 0, proc.stderr
    assert "verdict: differs" in proc.stdout and "first divergence: kqv_out-0@pos" in proc.stdout
    assert "only in A: kq (layers 0-3" in proc.stdout and "growth by layer" in proc.stdout
    data = json.loads(report.read_text())
    assert data["first_divergence"]["name"] == "kqv_out" and data["first_divergence"]["layer"] == 0
    assert data["first_divergence"]["kind"] == "attention" and len(data["tensors"]) == data["n_aligned"]
    assert md.read_text().startswith("## logitlab dump-diff: **differs**")
    proc = logitlab("dump-diff", str(out / "control"), str(out / "candidate"), "--require", "bit-exact", "-q")
    assert proc.returncode == 1 and "require bit-exact: the dump-diff verdict is differs" in proc.stderr
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
                    "result_output=128")
    assert proc.returncode == 0, proc.stderr
    assert "first divergence: ffn_out-2@pos1 (layer 2, ffn, float32 [8, 8]): 32/64 differ" in proc.stdout
    assert "only in A: kqv_out (layers 0, positions 2): 1" in proc.stdout
    assert "1 problem(s):" in proc.stdout
    assert f"B: {cut}: truncated (254 bytes is not a multiple of 4, the size of float32)" in proc.stdout
    assert proc.stderr == ""


def test_nothing_aligned_exits_2_with_one_line_per_problem(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = logitlab("dump-diff", str(empty), str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert f"A: {empty}: empty folder (no dump files)" in proc.stdout
    assert f"B: {tmp_path / 'missing'}: no such file or folder" in proc.stdout
    assert proc.stderr.strip().startswith("error: nothing could be compared between")
    assert proc.stderr.strip().endswith("(2 problems, listed in the report)")
    assert len(proc.stderr.strip().splitlines()) == 1
    quiet = logitlab("dump-diff", str(empty), str(tmp_path / "missing"), "-q")  # no report: the line names the first
    assert quiet.returncode == 2 and quiet.stdout == ""
    assert quiet.stderr == (f"error: nothing could be compared between {empty} and {tmp_path / 'missing'} "
                            f"(2 problems, the first: A: {empty}: empty folder (no dump files))\n"), quiet.stderr


@pytest.mark.engine
def test_bad_options_give_one_error_line(tmp_path):
    proc = logitlab("dump-diff", str(tmp_path), str(tmp_path), "--shape", "axb")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: bad --shape 'axb': expected DIMS like 576 or 9x64, optionally NAME=DIMS"
    proc = logitlab("dump-diff", str(tmp_path), str(tmp_path), "--layers", "3-1")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: bad --layers range '3-1'")
    proc = logitlab("dump", "--out", str(tmp_path / "x"), "--engine", "fake", "--max-bytes", "lots")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: bad size 'lots'")


def test_dtype_mismatch_is_one_problem_line_and_the_rest_compared(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    np.arange(4, dtype="<f4").tofile(a / "r_l_out-0_pos0.bin")
    np.arange(4, dtype="<i4").tofile(b / "r_l_out-0_pos0.i32")
    np.ones(4, dtype="<f4").tofile(a / "r_l_out-1_pos0.bin")
    np.ones(4, dtype="<f4").tofile(b / "r_l_out-1_pos0.bin")
    proc = logitlab("dump-diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "l_out-0@pos0: dtype mismatch: A float32 vs B int32" in proc.stdout
    assert "verdict: incomplete" in proc.stdout


def one_error_line(proc, message):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr


@pytest.mark.engine
def test_unwritable_outputs_and_bad_prompt_files_fail_before_any_work(tmp_path):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    (tmp_path / "file").write_text("")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    one_error_line(logitlab("dump", "--out", "/proc/dumpx"), "--out /proc/dumpx cannot be written: ")
    one_error_line(logitlab("dump", "--out", str(tmp_path / "file" / "d")), "cannot be written: ")
    one_error_line(logitlab("dump", "--out", str(tmp_path / "file")), "exists and is not a folder")
    one_error_line(logitlab("dump", "--out", str(tmp_path / "d"), "--json", "/proc/x.json"),
                   "--json /proc/x.json cannot be written: ")
    one_error_line(logitlab("dump", "--out", str(tmp_path / "p"), "--prompt-file", str(tmp_path / "bin.txt")),
                   "is not UTF-8 text")
    one_error_line(logitlab("dump-diff", str(a), str(a), "--markdown", "/proc/x.md", "-q"),
                   "--markdown /proc/x.md cannot be written: ")
    one_error_line(logitlab("dump-diff", str(a), str(a), "--json", str(tmp_path), "-q"),
                   f"--json {tmp_path} is a folder; give a file path")
    # a pair: both side folders are checked before the control is captured
    (tmp_path / "pair" / "candidate").mkdir(parents=True)
    (tmp_path / "pair" / "candidate" / "keep.txt").write_text("mine")
    one_error_line(logitlab("dump", "--candidate", "flash_attn=1", "--out", str(tmp_path / "pair")),
                   f"dump folder {tmp_path / 'pair' / 'candidate'} is not empty")
    assert not (tmp_path / "pair" / "control").exists()  # made by the command, so removed again
    assert (tmp_path / "pair" / "candidate" / "keep.txt").read_text() == "mine"


def test_dump_diff_of_an_empty_file_says_so(tmp_path):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    (tmp_path / "empty.json").write_text("")
    proc = logitlab("dump-diff", str(a), str(tmp_path / "empty.json"))
    assert proc.returncode == 2
    assert f"B: {tmp_path / 'empty.json'}: empty file, not a dump" in proc.stdout and "not a file" not in proc.stdout


@pytest.mark.engine
def test_dump_filters_that_capture_nothing_are_one_error_line(tmp_path):
    for i, (args, message) in enumerate([
        (["--names", "nomatch_*"], "error: --names nomatch_* matches no tensor; the graph has embd, "),
        (["--positions", "100"], "error: --positions '100': 100 is past the run's last row 15 (12 prompt + 4 "
                                 "decode rows)"),
        (["--layers", "99"], "error: --layers 99 matches no layer: the model has layers 0-29"),
        (["--max-bytes", "0", "-q"], "error: --max-bytes 0 B is smaller than the first tensor (embd, "),
    ]):
        one_error_line(logitlab("dump", "--out", str(tmp_path / str(i)), *args), message)
        assert not (tmp_path / str(i)).exists()  # the folder the command made is gone again


@pytest.mark.engine
def test_a_dump_that_fails_before_writing_removes_only_the_folders_it_made(tmp_path):
    new = tmp_path / "new" / "dumps"
    proc = logitlab("dump", "--control", "bogus=1", "--out", str(new))  # no --quiet: no empty line before error:
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown llamacpp option 'bogus'")
    assert len(proc.stderr.splitlines()) == 1 and not (tmp_path / "new").exists()
    one_error_line(logitlab("dump", "--control", "bogus=1", "--candidate", "flash_attn=1", "--out",
                            str(tmp_path / "pair"), "-q"), "unknown llamacpp option 'bogus'")
    assert not (tmp_path / "pair").exists()
    (tmp_path / "mine").mkdir()
    one_error_line(logitlab("dump", "--control", "flash_attn=banana", "--out", str(tmp_path / "mine"), "-q"),
                   "bad value 'banana' for llamacpp option 'flash_attn'")
    assert (tmp_path / "mine").is_dir()


@pytest.mark.parametrize("option, value, message", [
    ("--positions", "0,,2", "error: --positions '0,,2': an empty item is not a position spec; valid: all, prompt, "),
    ("--positions", "", "error: --positions is empty; valid: all, prompt, decode, last, every:K, A, A-B, A- "),
    ("--positions", "frist", "error: --positions 'frist': 'frist' is not a position spec; valid: all, prompt, "),
    ("--layers", "", "error: --layers '' is empty"),
    ("--names", "", "error: --names '' is empty"),
    ("--names", "[", "error: bad --names glob '[': '[' without a closing ']'"),
])
@pytest.mark.engine
def test_malformed_filters_are_one_error_line_in_dump_and_dump_diff(tmp_path, option, value, message):
    a = write_folder(tmp_path / "a", base_tensors(), "p")
    one_error_line(logitlab("dump-diff", str(a), str(a), option, value, "-q"), message)
    one_error_line(logitlab("dump", "--out", str(tmp_path / "d"), option, value, "-q"), message)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("args, message", [
    (["--layers", "99"], "error: --layers 99 matches no layer: the dumps have layers 0-3"),
    (["--positions", "7-9"], "error: --positions '7-9': 7-9 is past the run's last row 2 (the dumps have "
                             "positions 0-2)"),
    (["--positions", "prompt"], "error: --positions 'prompt': 'prompt' needs to know where the prompt ends, which "
                                "only a logitlab dump records (neither dump has a manifest); give position numbers: "
                                "the dumps have positions 0-2"),
    (["--names", "nomatch*"], "error: --names nomatch* matches no tensor; the dumps have attn_norm, kqv_out, "),
    (["--names", "kqv_out", "--layers", "9,0-1"], None),
])
def test_dump_diff_filters_that_match_nothing_in_the_dumps_exit_2(tmp_path, args, message):
    base = base_tensors()
    a = write_folder(tmp_path / "a", base, "p")
    b = write_folder(tmp_path / "b", plant(base, ("kqv_out", 1, 0)), "q")
    proc = logitlab("dump-diff", str(a), str(b), *args)
    if message is None:  # layer 9 is not in the dumps, but 0-1 are: a filter that keeps something is fine
        assert proc.returncode == 0 and "(1 name, 2 layers, 3 positions)" in proc.stdout, proc.stderr
    else:
        one_error_line(proc, message)


def test_dump_diff_of_a_dump_with_a_cut_short_manifest(tmp_path):
    a = write_logitlab_dump(tmp_path / "a", base_tensors())
    b = write_logitlab_dump(tmp_path / "b", base_tensors())
    (b / "manifest.json").write_text((b / "manifest.json").read_text()[:300])
    proc = logitlab("dump-diff", str(a), str(b))
    one_error_line(proc, "error: nothing could be compared between")
    assert f"B: manifest.json of {b} is not valid JSON (" in proc.stdout
    # one problem: the error line says it (it said "1 problem(s) listed above", printed below it when piped)
    assert proc.stderr.startswith(f"error: nothing could be compared between {a} and {b}: B: manifest.json of {b} "
                                  "is not valid JSON ("), proc.stderr
    assert "not a readable logitlab dump" in proc.stdout and "shapes" not in proc.stdout


@pytest.mark.engine
def test_dump_and_dump_diff_positions_are_the_spec_of_ab_with_its_rows_and_its_errors(tmp_path):
    """``--positions`` of dump and dump-diff is ab's SPEC: a real dump of 12 prompt + 3 decode tokens keeps exactly
    the rows ab keeps of such a run, dump-diff on a whole dump compares them, and a bad SPEC or a position past the
    run is ab's error line, word for word."""
    from logitlab.experiments.positions import parse_positions

    n_prompt, n_decode = 12, 3  # SHORT_PROMPT is 12 tokens
    whole = tmp_path / "whole"
    proc = logitlab("dump", "--prompt", SHORT_PROMPT, "--tokens", str(n_decode), "--names", "result_output",
                    "--out", str(whole), "-q")
    assert proc.returncode == 0, proc.stderr
    for i, spec in enumerate(["prompt,last", "decode", "every:5,1-2"]):
        rows = parse_positions(spec).rows(n_prompt, n_decode).tolist()
        out = tmp_path / str(i)
        proc = logitlab("dump", "--prompt", SHORT_PROMPT, "--tokens", str(n_decode), "--names", "result_output",
                        "--positions", spec, "--out", str(out), "-q")
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        assert sorted({p for t in manifest["tensors"] for p in range(*t["positions"])}) == rows, spec
        assert manifest["filter"]["positions_spec"] == spec and manifest["filter"]["positions"] == rows
        report = tmp_path / f"{i}.json"
        proc = logitlab("dump-diff", str(whole), str(whole), "--positions", spec, "--json", str(report), "-q")
        assert proc.returncode == 0, proc.stderr
        assert sorted({t["position"] for t in json.loads(report.read_text())["tensors"]}) == rows, spec
    for spec in ["frist", "every:0", "0,25"]:
        ab = logitlab("ab", "--prompt", SHORT_PROMPT, "--tokens", "8", "--positions", spec, "-q", cwd=tmp_path)
        dump = logitlab("dump", "--prompt", SHORT_PROMPT, "--tokens", "8", "--positions", spec,
                        "--out", str(tmp_path / "bad"), "-q")
        one_error_line(ab, "--positions")
        assert dump.returncode == 2 and dump.stderr == ab.stderr, (dump.stderr, ab.stderr)
        assert not (tmp_path / "bad").exists()
    assert ab.stderr == ("error: --positions '0,25': 25 is past the run's last row 19 (12 prompt + 8 decode "
                         "rows)\n")
    proc = logitlab("dump-diff", str(whole), str(whole), "--positions", "frist", "-q")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --positions 'frist': 'frist' is not a position "
                                                           "spec; valid: all, prompt, decode, last, every:K")
