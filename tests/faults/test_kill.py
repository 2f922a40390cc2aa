"""SIGKILL at random points: ``ab``, ``verify``, ``bench run`` and ``dump`` keep every run they finished.

Each command runs once to the end (its duration sets the kill window and its
output is the reference), then again once per seed, killed with SIGKILL at a
uniformly drawn time between the moment its output appears and the end of
the reference run (for ``dump``, every other kill from the moment its first
whole step file appears instead: the prefill step, a single step that may
take most of the run, would otherwise draw most kills). After each kill:

- run logs (ab, verify, bench run): every line is JSON except at most a torn
  last line, which the reader ignores; ``logitlab report LOG`` exits 0, says
  the run was interrupted, and shows exactly the runs the log holds, whose
  slots are the first ones of the schedule (nothing in the middle lost); for
  ``bench run`` every command run that finished before the kill (each appends
  to a marker file) is in the log, but for the one in flight at the kill;
- dumps: every step file left is whole (the safetensors library reads all its
  tensors), no unfinished file reads as a step, the manifest lists whole steps
  only, and dump-diff against the reference dump is bit-exact on every
  tensor the killed dump kept.

In ``make test`` each command is killed at ``KILL_SEEDS`` points;
``LOGITLAB_KILL_SEEDS=50`` raises it, ``LOGITLAB_KILL_TALLY=FILE`` writes
what each kill left as JSON (the table on docs/concepts/robustness.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import safe_open

from conftest import SHORT_PROMPT
from logitlab.dumps.diff import diff_dumps
from logitlab.dumps.manifest import read_manifest
from logitlab.dumps.readers import open_dump
from logitlab.runlog import read_run_log

KILL_SEEDS = int(os.environ.get("LOGITLAB_KILL_SEEDS", 3))
pytestmark = pytest.mark.engine

COMMANDS = {
    "ab": ["ab", "--prompt", SHORT_PROMPT, "--tokens", "4", "--repeats", "2", "--warmup", "1",
           "--candidate", "flash_attn=1", "--no-escalate"],
    "verify": ["verify", "--prompt", SHORT_PROMPT, "--prompt", "Once upon a time", "--prompt", "def add(a, b):",
               "--k", "1", "2", "--tokens", "4"],
    "bench-run": ["bench", "run", "--control", "sh -c 'sleep 0.05; echo c >> MARKER'",
                  "--candidate", "sh -c 'sleep 0.06; echo b >> MARKER'", "--blocks", "6", "--warmup", "1"],
    "dump": ["dump", "--prompt", SHORT_PROMPT, "--tokens", "12", "--names", "l_out,attn_norm,result_norm"],
}
TALLY: list[dict] = []


def start(name: str, folder: Path) -> tuple[subprocess.Popen, Path]:
    """Start the command in ``folder``; returns the process and what it writes (run log, or dump folder)."""
    args = [a.replace("MARKER", str(folder / "marker")) for a in COMMANDS[name]]
    output = folder / ("dump" if name == "dump" else "runs.jsonl")
    args += ["--out", str(output)] if name == "dump" else ["--log", str(output)]
    proc = subprocess.Popen([sys.executable, "-m", "logitlab", *args, "-q"], cwd=folder, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    return proc, output


def appeared(output: Path) -> bool:
    """The run log's first line, or the dump's first step file (being written), is there."""
    if output.is_dir():
        return any(output.glob("step-*"))
    return output.is_file() and output.stat().st_size > 0


def whole_step(output: Path) -> bool:
    """The dump's first whole step file is there."""
    return output.is_dir() and any(output.glob("step-*.safetensors"))


def reference(name: str, folder: Path) -> tuple[Path, float, float, float]:
    """Run to the end: (output, seconds until the output appeared, until a whole step file did, in all)."""
    folder.mkdir()
    begin = time.monotonic()
    proc, output = start(name, folder)
    while not appeared(output) and proc.poll() is None:
        time.sleep(0.01)
    first = time.monotonic() - begin
    while name == "dump" and not whole_step(output) and proc.poll() is None:
        time.sleep(0.01)
    first_whole = time.monotonic() - begin
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    return output, first, first_whole, time.monotonic() - begin


def check_log(name: str, log: Path, folder: Path, ref: Path) -> dict:
    if not log.exists() or log.stat().st_size == 0:
        return {"runs": 0, "torn": False, "note": "killed before the log's first line"}
    lines = log.read_bytes().split(b"\n")
    bad = [i for i, line in enumerate(lines) if line and not _json(line)]
    assert bad in ([], [len(lines) - 1]), f"a line other than the last is not JSON: {bad}"
    contents = read_run_log(log)
    proc = subprocess.run([sys.executable, "-m", "logitlab", "report", str(log), "--json", str(folder / "shown.json")],
                          capture_output=True, text=True, cwd=folder)
    if contents.kind is None:  # killed inside the header line: nothing to show, one clear error
        assert proc.returncode == 2 and proc.stderr.startswith("error: run log"), proc.stderr
        return {"runs": 0, "torn": True, "note": "killed inside the header line"}
    assert proc.returncode == 0, proc.stderr
    shown = json.loads((folder / "shown.json").read_text())
    if contents.interrupted:
        assert "interrupted" in shown["error"] and "interrupted" in proc.stdout
    runs = shown["prompts"] if name == "verify" else shown["runs"]
    assert len(runs) == len(contents.records), "the report shows fewer runs than the log holds"
    full = read_run_log(ref).records
    key = "prompt" if name == "verify" else ("slot" if name == "ab" else "index")
    got = [r[key]["name"] if name == "verify" else r[key] for r in contents.records]
    want = [r[key]["name"] if name == "verify" else r[key] for r in full[:len(got)]]
    assert got == want, f"the log is not the first {len(got)} runs of the schedule: {got} vs {want}"
    out = {"runs": len(runs), "of": len(full), "torn": bool(bad), "ended": contents.ending}
    if name == "bench-run":  # independent evidence: each finished command appended a line to the marker
        finished = (folder / "marker").read_text().count("\n") if (folder / "marker").exists() else 0
        in_flight = finished - len(runs)
        assert in_flight in (0, 1), f"{finished} command runs finished, {len(runs)} logged"
        out["in_flight"] = in_flight
    return out


def check_dump(dump: Path, ref: Path) -> dict:
    if not dump.exists():
        return {"steps": 0, "note": "killed before the dump folder was made"}
    names = {p.name for p in dump.iterdir()}
    steps = sorted(n for n in names if n.startswith("step-") and n.endswith(".safetensors"))
    for step in steps:  # whole, whatever the manifest says
        with safe_open(str(dump / step), framework="numpy") as f:
            assert all(f.get_tensor(k) is not None for k in f.keys())
    assert names - set(steps) - {"manifest.json"} <= {n for n in names if n.endswith((".part", ".tmp"))} | \
        {n for n in names if n.startswith(".manifest.json.")}, names
    if "manifest.json" not in names:
        opened = open_dump(dump)  # step files alone read as a safetensors folder, never as a whole dump
        assert opened.manifest is None
        return {"steps": len(steps), "listed": 0, "note": "killed before the first manifest save"}
    manifest = read_manifest(dump)
    listed = [s.file for s in manifest.steps]
    assert set(listed) <= set(steps) and listed == steps[:len(listed)], (listed, steps)
    opened = open_dump(dump)
    if not manifest.complete:
        assert any("incomplete dump" in p for p in opened.problems)
    result = diff_dumps(open_dump(ref), opened)
    assert result.n_compared == len(opened.refs) and result.n_differing == 0, result.summary()
    return {"steps": len(steps), "listed": len(listed), "complete": manifest.complete}


def _json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_sigkill_at_random_points_keeps_every_finished_run(name, tmp_path):
    ref, first, first_whole, total = reference(name, tmp_path / "reference")
    rng = random.Random(f"{name}-17")
    for seed in range(KILL_SEEDS):
        folder = tmp_path / f"kill{seed}"
        folder.mkdir()
        after_a_step = name == "dump" and seed % 2 == 1
        delay = rng.uniform(0, max(total - (first_whole if after_a_step else first), 0.1))
        proc, output = start(name, folder)
        while not (whole_step if after_a_step else appeared)(output) and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        outcome = check_dump(output, ref) if name == "dump" else check_log(name, output, folder, ref)
        TALLY.append({"command": name, "seed": seed, "kill_after_s": round(delay, 3),
                      "from": "first whole step" if after_a_step else "output appeared",
                      "returncode": proc.returncode, **outcome})
    target = os.environ.get("LOGITLAB_KILL_TALLY")
    if target:
        Path(target).write_text(json.dumps(TALLY, indent=1) + "\n")
