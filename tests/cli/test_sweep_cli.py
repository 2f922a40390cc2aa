"""``python -m logitlab sweep`` as a user mistypes it: one ``error:`` line, exit 2, nothing started; the dry run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine  # the tests run `logitlab sweep` in subprocesses (conftest counts it as a model run)

MATRIX = """
name = "fa"
prompts = ["The capital of France is"]
[control]
options = { n_threads = 1, n_threads_batch = 1 }
[axes]
options.flash_attn = [0, 1]
options.n_ubatch = [512, 4]
[experiment]
tokens = 8
"""


def logitlab(*args, env=None):
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          env=env)


@pytest.fixture
def matrix(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX)
    return path


def test_dry_run_lists_cells_and_runs_nothing(matrix, tmp_path):
    proc = logitlab("sweep", matrix, "--dry-run")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = proc.stdout
    assert "logitlab sweep fa: dry run, nothing runs" in out
    assert "4 cells × 1 prompt = 4 jobs: 0 ok, 0 failed, 4 pending" in out
    assert "llamacpp: n_threads=1, n_threads_batch=1, flash_attn=1, n_ubatch=4" in out
    assert "4 jobs, 4 to run" in out
    assert not any(tmp_path.glob("**/sweep.json"))


def _sweep_folder(tmp_path, matrix):
    """A folder with a sweep manifest, as ``logitlab sweep`` leaves it (no job run)."""
    from logitlab.experiments.sweep.matrix_file import load_matrix
    from logitlab.experiments.sweep.summary import summarize
    from logitlab.jsonio import write_json

    m = load_matrix(matrix)
    out = tmp_path / "runs"
    write_json(out / "sweep.json", summarize(m.name, m.to_dict(), {"out": str(out)}, m.jobs(), {}).to_dict())
    return out


@pytest.mark.parametrize("args, message", [
    (["--out", "{tmp}/runs", "--workers", "0"], "error: --workers must be at least 1, got 0"),
    (["--out", "{tmp}/runs", "--retries", "-1"], "error: --retries must be at least 0, got -1"),
    (["--out", "{tmp}/runs", "--address", "127.0.0.1:1"],
     "error: --address is the Ray cluster of --executor ray; the local executor takes none"),
    ([], "error: --out FOLDER is needed (where the job results go); --dry-run runs without"),
    (["--out", "{tmp}/runs", "--resume"],
     "error: --resume: {tmp}/runs holds no sweep (sweep.json is missing); drop --resume to start one there"),
    (["--out", "{tmp}/runs", "--json", "{tmp}/runs/s.json"],
     "error: --json {tmp}/runs/s.json lies inside the --out folder {tmp}/runs; choose a path outside it"),
    (["--out", "{tmp}/matrix.toml"], "error: --out {tmp}/matrix.toml exists and is not a folder; give a folder path"),
])
def test_bad_options(args, message, matrix, tmp_path):
    proc = logitlab("sweep", matrix, *[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == message.format(tmp=tmp_path) + "\n"
    assert not (tmp_path / "runs").exists()


def test_a_used_out_folder_needs_resume(matrix, tmp_path):
    out = _sweep_folder(tmp_path, matrix)
    before = (out / "sweep.json").read_bytes()
    proc = logitlab("sweep", matrix, "--out", out)
    assert proc.returncode == 2 and proc.stderr == (
        f"error: --out {out} already holds a sweep (sweep.json): add --resume to run only the jobs without a result, "
        "or choose another folder\n")
    assert (out / "sweep.json").read_bytes() == before
    # the dry run of a resume says what would run; the summary of the folder says what is there
    dry = logitlab("sweep", matrix, "--out", out, "--resume", "--dry-run")
    assert dry.returncode == 0 and "4 jobs, 4 to run" in dry.stdout
    shown = logitlab("report", out)
    assert shown.returncode == 0 and "0 ok, 0 failed, 4 pending" in shown.stdout
    assert "4 job(s) have no finished result: --resume runs only those" in shown.stdout


@pytest.mark.parametrize("text, message", [
    ("[axes\n", "is not valid TOML"),
    ("[axes]\noptions.flash_atn = [1]\n", "error: cell 'flash_atn=1': unknown llamacpp option 'flash_atn'"),
    ("[axes]\noptions.flash_attn = [1]\n[resources]\nnum_gpus = 1\n",
     "error: the matrix asks for 1 GPU(s) per job ([resources] num_gpus) and no GPU is visible here"),
])
def test_bad_matrix(text, message, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(text)
    proc = logitlab("sweep", path, "--out", tmp_path / "runs", env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert not any((tmp_path / "runs" / "jobs").glob("*.json"))


def test_missing_matrix(tmp_path):
    proc = logitlab("sweep", tmp_path / "none.toml", "--out", tmp_path / "runs")
    assert proc.returncode == 2 and proc.stderr == f"error: matrix file {tmp_path}/none.toml does not exist\n"


def test_report_of_a_folder_without_a_sweep(tmp_path):
    proc = logitlab("report", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {tmp_path} holds no sweep (sweep.json is missing): give a sweep's --out folder "
                           "or a result file\n")


def test_report_of_a_golden_folder_names_its_manifest(tmp_path):
    """A user gave ``report`` the folder ``golden record -o`` wrote; the error spoke of sweeps only. The manifests
    here say only their kind: the hint reads nothing else (a dump's manifest, of another kind, is no golden)."""
    for machine in ("cpu-a", "cpu-b"):
        (tmp_path / "gold" / machine).mkdir(parents=True)
        (tmp_path / "gold" / machine / "manifest.json").write_text('{"kind": "golden", "schema_version": 1}')
    proc = logitlab("report", tmp_path / "gold")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {tmp_path}/gold is a folder of golden logits, not a sweep: give one of its 2 "
                           f"manifests, e.g. {tmp_path}/gold/cpu-a/manifest.json\n")
    proc = logitlab("report", tmp_path / "gold" / "cpu-b")
    assert proc.stderr.endswith(f"give its manifest, {tmp_path}/gold/cpu-b/manifest.json\n"), proc.stderr
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "manifest.json").write_text('{"kind": "logit-dump"}')
    assert "holds no sweep" in logitlab("report", tmp_path / "dump").stderr


@pytest.mark.ray
def test_no_cluster_at_the_address(matrix, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = logitlab("sweep", matrix, "--out", tmp_path / "runs", "--executor", "ray", "--address", f"127.0.0.1:{port}")
    assert proc.returncode == 2 and proc.stderr == (
        f"error: no Ray cluster answers at --address 127.0.0.1:{port} (Connection refused): start one "
        "(ray start --head) or check the address\n")
    assert not (tmp_path / "runs").exists()  # a sweep that cannot start leaves nothing behind
