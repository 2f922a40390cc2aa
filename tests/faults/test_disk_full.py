"""A disk that fills up while logitlab writes: a real, small tmpfs mounted by the test (root only).

Promise: one ``error:`` line and exit 2; nothing written before is lost; no
half-written file is left that reads as complete. Checked for ``dump --out``
(step files and the manifest) and for the run log of ``bench run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from conftest import SHORT_PROMPT
from logitlab.dumps.diff import diff_dumps
from logitlab.dumps.manifest import read_manifest
from logitlab.dumps.readers import open_dump
from logitlab.runlog import read_run_log


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of the size the test asks for, unmounted afterwards (skips unless root and mount works)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounts = []

    def mount(size: str) -> Path:
        point = tmp_path / f"disk{len(mounts)}"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", str(point)], check=False)
        if os.path.ismount(point):
            subprocess.run(["umount", "-l", str(point)], check=False)
        assert not os.path.ismount(point)


def logitlab(*args, cwd):
    return subprocess.run([sys.executable, "-m", "logitlab", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


@pytest.mark.engine
def test_dump_onto_a_disk_that_fills_up_keeps_every_whole_step(small_disk, tmp_path):
    disk = small_disk("2m")
    out = disk / "dump"
    # every layer's l_out: ~830 kB for the 12-token prefill, ~69 kB per decode step: the disk fills mid-way
    proc = logitlab("dump", "--prompt", SHORT_PROMPT, "--tokens", "32", "--names", "l_out", "--out", out, "-q",
                    cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {out}/"), proc.stderr
    assert "No space left on device (the disk is full" in lines[0] and "whole step(s) written before" in lines[0]
    kept = int(lines[0].split("lists the ")[1].split()[0])
    assert kept >= 2  # the prefill and at least one decode step fitted

    manifest = read_manifest(out)
    assert not manifest.complete and len(manifest.steps) == kept
    listed = {s.file for s in manifest.steps}
    on_disk = {p.name for p in out.iterdir()} - {"manifest.json"}
    assert listed <= on_disk and all(name.endswith(".safetensors") for name in on_disk), on_disk  # no .part/.tmp
    for name in on_disk:  # every step file left is whole: the safetensors library reads every tensor
        with safe_open(str(out / name), framework="numpy") as f:
            assert all(f.get_tensor(k).size for k in f.keys())
    dump = open_dump(out)
    assert len(dump.refs) == sum(e.positions[1] - e.positions[0] for e in manifest.tensors)
    assert any("incomplete dump" in p for p in dump.problems)
    assert all("not list" in p for p in dump.problems if "incomplete dump" not in p)  # unlisted (whole) steps named
    assert diff_dumps(dump, open_dump(out)).verdict == "bit-exact"


def test_bench_run_log_on_a_disk_that_fills_up_keeps_every_logged_run(small_disk, tmp_path):
    disk = small_disk("16k")
    log = disk / "runs.jsonl"
    out = tmp_path / "partial.json"
    proc = logitlab("bench", "run", "--control", "true", "--candidate", "true", "--blocks", "200", "--warmup", "0",
                    "--log", log, "--json", out, "-q", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write the run log {log}: No space left on device")
    logged = read_run_log(log)
    assert logged.notes == []  # no torn line: the failed write was cut back off
    assert logged.records and all(json.loads(line) for line in log.read_text().splitlines())
    partial = json.loads(out.read_text())
    assert len(partial["runs"]) == len(logged.records) + 1  # the run whose line did not fit is in --json
    assert f"the {len(logged.records)} run(s) logged before are kept" in lines[0]
