"""Ctrl-C on every command that works long enough to be interrupted: exit 130, and what it promises kept.

Each case starts the real command (``python -m logitlab``, a fresh process with SIGINT at its default), waits
until it is working — a file it writes as it goes, a file it reads, a library it loads — sends SIGINT, and
checks the exit status 130, its last ``error:`` line, what the command promises to keep (``docs/commands``:
the reports written with what was measured; a dump readable up to its last whole step; a golden, a build
cache and an output file never half written) and that nothing it started is left running.

``ab``, ``verify``, ``explain``, ``invariance determinism`` and ``bisect`` have theirs next to their other
tests (``test_ab_cli.py``, ``test_verify_cli.py``, ``test_explain_cli.py``, ``test_invariance_cli.py``,
``test_history_cli.py``). Commands that read files and finish within a second (``report``, ``history add``,
``history show``, ``bench calibrate``, ``dump-diff``, ``golden export-kld``) are interrupted while they read their
input from a FIFO that nothing writes yet (a result, a record, a dump's or a golden's manifest): their input
reading is under way, deterministically.

The SIGINT goes to logitlab's process alone, as ``kill -INT`` sends it; a terminal's Ctrl-C also reaches the
children in logitlab's process group (the engine workers and the commands ``bench run`` times are in sessions
of their own, and logitlab ends them itself). Where the signal that a command is working
comes just as it starts a new part (``golden check`` opens the golden's logits to compare the first prompt),
the SIGINT waits until it waits on its engine worker again, as a user's Ctrl-C during a long run does.

Exit 130 is the status a shell shows: logitlab's own ``sys.exit(130)``, or an end by SIGINT itself (-2 to
Python's ``subprocess``). CPython (3.11) ends a ``python -m`` program by SIGINT after its exit when the
KeyboardInterrupt passed through code run by ``exec()`` of a string (a dataclass being created in a lazy
import, say), even though the program caught it and exited 130 (``Py_RunMain``'s
``_Py_UnhandledKeyboardInterrupt``); the ``logitlab`` console script exits 130 there. The ``error:`` line shows
that logitlab handled it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "bench"
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
PROMPTS = ("The capital of France is", "Once upon a time, in a small village by the sea,", "def fibonacci(n):",
           "The three laws of thermodynamics are", "My favourite recipe for bread starts with")


# -- processes, as /proc shows them --------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int, int, float]:
    """State, parent, process group and CPU seconds (user + system) of ``pid``; OSError when it is gone."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), int(fields[2]), (int(fields[11]) + int(fields[12])) / TICK


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def tree(pid: int) -> list[int]:
    """``pid`` and its living descendants."""
    children: dict[int, list[int]] = {}
    for p in _pids():
        try:
            children.setdefault(_stat(p)[1], []).append(p)
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def maps(pid: int, needle: str) -> bool:
    """Whether ``pid`` or a descendant has a file whose path contains ``needle`` mapped (a library loaded, a
    safetensors file opened)."""
    for p in tree(pid):
        try:
            if needle in Path(f"/proc/{p}/maps").read_text():
                return True
        except OSError:
            continue
    return False


def left_running(pgid: int, marker: str | None = None) -> list[str]:
    """Processes still running (zombies aside) in process group ``pgid``, or anywhere with ``marker`` in their
    command line."""
    found = []
    for p in _pids():
        try:
            state, _, group, _ = _stat(p)
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if state != "Z" and p != os.getpid() and (group == pgid or (marker and marker in cmdline)):
            found.append(f"{p} {cmdline[:200]}")
    return found


class FifoInput:
    """A FIFO as a command's input: the command blocks reading it until a writer opens it. The write end stays
    open (nothing written) until :meth:`close`, so the read stays blocked.

    ``reading(pid)`` turns true once the command waits in the read itself, not merely when the FIFO is open: a
    SIGINT that lands between the open and the read, in C code that checks for signals only when its read is
    interrupted, would leave a Python program blocked in a read nothing ends (the race failed a CI run under
    load: the command never saw the Ctrl-C). The kernel's wait channel (``/proc/PID/wchan``) names the pipe
    read (``pipe_read``, ``anon_pipe_read``, older kernels ``pipe_wait``); where it does not show (a kernel that
    hides it), the command counts as reading 2 s after the FIFO opened.
    """

    def __init__(self, path: Path):
        self.path = path
        os.mkfifo(path)
        self.fd: int | None = None
        self.opened_at: float | None = None

    def opened(self) -> bool:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until a reader has it open
            except OSError:
                return False
            self.opened_at = time.monotonic()
        return True

    def reading(self, pid: int) -> bool:
        if not self.opened():
            return False
        try:
            channel = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            channel = ""
        return "pipe" in channel or time.monotonic() - self.opened_at > 2.0

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# -- one interrupted run ---------------------------------------------------------------------------------------------
@dataclass
class Interrupted:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # from the start to the SIGINT

    @property
    def last_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def interrupt(args: list[str], cwd: Path, ready: Callable[[int], bool], *, env: dict[str, str] | None = None,
              timeout: float = 120.0, marker: str | None = None) -> Interrupted:
    """Run ``logitlab ARGS`` in ``cwd``; when ``ready(pid)`` turns true, send SIGINT and wait for the end.

    Fails the test when the command ends before it is ready (its workload was too short to interrupt), when it
    does not get ready within ``timeout`` s, or when something it started is still running 0.5 s after it ended
    (its process group; ``marker``: a string in the command line of what it starts in sessions of its own).
    """
    out, err = cwd / "ctrl-c.stdout", cwd / "ctrl-c.stderr"
    with open(out, "w") as stdout, open(err, "w") as stderr:  # files: a full pipe would block the command
        proc = subprocess.Popen([PY, "-m", "logitlab", *args], cwd=cwd, env=env, stdout=stdout, stderr=stderr,
                                start_new_session=True,  # its own process group, to find what it leaves
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    start = time.monotonic()
    try:
        while not _ready(ready, proc.pid):
            if proc.poll() is not None:
                pytest.fail(f"logitlab {' '.join(args)} ended (exit {proc.returncode}) before it was interrupted: "
                            f"{err.read_text()[-2000:]}")
            if time.monotonic() - start > timeout:
                pytest.fail(f"logitlab {' '.join(args)} was not working after {timeout:.0f} s")
            time.sleep(0.05)
        seconds = time.monotonic() - start
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 0.5
    while left_running(proc.pid, marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left_running(proc.pid, marker), left_running(proc.pid, marker)
    return Interrupted(proc.returncode, out.read_text(), err.read_text(), seconds)


def _ready(ready: Callable[[int], bool], pid: int) -> bool:
    try:
        return ready(pid)
    except OSError:  # a process it looked at ended meanwhile
        return False


def exited_130(run: Interrupted, line: str) -> None:
    """Exit status 130 as a shell shows it (see the module docstring), ``line`` last on stderr, no traceback."""
    assert run.returncode in (130, -signal.SIGINT), (run.returncode, run.stderr[-2000:])
    assert run.last_line == line and "Traceback" not in run.stderr, run.stderr[-2000:]


def aborted(run: Interrupted) -> None:
    """Exit 130 with click's one line (a command that keeps nothing partial)."""
    exited_130(run, "error: aborted")


class WaitingOnWorker:
    """Ready when ``first(pid)`` holds and logitlab then waits on a worker: its own CPU time still over a sample,
    a descendant's growing (an engine computing)."""

    def __init__(self, first: Callable[[int], bool]):
        self.first = first
        self.last: tuple[float, float] | None = None

    def __call__(self, pid: int) -> bool:
        if self.last is None and not self.first(pid):
            return False
        now = (_stat(pid)[3], max((_stat(p)[3] for p in tree(pid)[1:] if _alive(p)), default=0.0))
        last, self.last = self.last, now
        if last is None:
            return False
        time.sleep(0.1)  # samples 0.15 s apart (CPU time counts in 10 ms ticks)
        return now[0] == last[0] and now[1] > last[1]


def files_of(folder: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``folder`` (hidden ones included)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# -- commands that run other commands or engines ---------------------------------------------------------------------
def test_bench_run_keeps_the_complete_blocks_in_the_json_and_the_log(tmp_path):
    """``bench run``: the runs measured so far in ``--json`` (the calls over the complete blocks), the run log
    ended ``interrupted``; the command being timed is ended too."""
    log = tmp_path / "b.runs.jsonl"

    def blocks_logged(pid: int) -> bool:  # more than two blocks (8 runs) logged after the header
        text = log.read_text() if log.exists() else ""
        return len(text.splitlines(keepends=True)[1:]) >= 9

    run = interrupt(["bench", "run", "--control", "sleep 0.1", "--candidate", "sleep 0.12", "--blocks", "60",
                     "--warmup", "0", "--quiet", "--json", "b.json", "--markdown", "b.md"], tmp_path, blocks_logged,
                    marker="sleep 0.1")
    exited_130(run, "error: interrupted; the runs measured so far are in the reports and the log")
    data = json.loads((tmp_path / "b.json").read_text())
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert data["error"] == "interrupted" and lines[-1]["log_end"] == "interrupted"
    assert 9 <= len(data["runs"]) < 240 and len(data["runs"]) == len(lines) - 2  # header, runs, end line
    complete = len(data["runs"]) // 4
    assert data["comparisons"]["wall"]["n_blocks"] == complete >= 2
    # the written report says plainly, before any call, that the user stopped it, where, and what the calls rest on
    line = (f"stopped early by the user (Ctrl-C) after {complete} of 60 planned ABBA/BAAB blocks "
            f"({len(data['runs'])} timed runs): the calls rest on those only")
    markdown = (tmp_path / "b.md").read_text()
    assert f"**{line}**" in markdown and markdown.index(line) < markdown.index("| metric")
    shown = subprocess.run([PY, "-m", "logitlab", "report", "b.json"], cwd=tmp_path, capture_output=True, text=True)
    assert shown.returncode == 0 and line in " ".join(shown.stdout.split()), shown.stderr


@pytest.mark.engine
def test_dump_leaves_a_readable_dump_of_its_whole_steps(tmp_path):
    """``dump``: the folder stays a dump of the steps finished before Ctrl-C (``docs/concepts/robustness.md``):
    its manifest says it is incomplete and lists only whole step files, which read back."""
    from logitlab.dumps.readers import open_dump

    out = tmp_path / "d"
    run = interrupt(["dump", "--tokens", "64", "--out", "d", "--quiet", "--json", "d.json"], tmp_path,
                    lambda pid: len(list(out.glob("step-*.safetensors"))) >= 2)
    aborted(run)
    dump = open_dump(out)
    manifest = dump.manifest
    assert manifest is not None and not manifest.complete and manifest.stopped.startswith("interrupted")
    assert 1 <= len(manifest.steps) < 65 and all((out / step.file).is_file() for step in manifest.steps)
    allowed = ("incomplete dump", "a step file the manifest does not list", "an unfinished step file")
    assert all(any(a in problem for a in allowed) for problem in dump.problems), dump.problems
    last = max(dump.refs, key=lambda r: r.order)
    assert last.load().size > 0  # the last listed tensor reads back
    assert not (tmp_path / "d.json").exists()  # the summary is written after a capture, not instead of it


@pytest.mark.engine
def test_golden_record_leaves_no_golden(tmp_path):
    """``golden record``: the golden is written into a hidden ``.part`` folder and renamed when whole; Ctrl-C
    removes the ``.part`` folder, so no half golden can pass a check."""
    root = tmp_path / "g"

    def first_prompt_written(pid: int) -> bool:
        return any(f.is_file() and f.stat().st_size > 0 for f in root.glob(".*.part/*"))

    run = interrupt(["golden", "record", "-o", "g", *sum((["--prompt", p] for p in PROMPTS), []), "--tokens", "48",
                     "--quiet", "--json", "g.json"], tmp_path, first_prompt_written)
    aborted(run)
    assert list(root.iterdir()) == [] and not (tmp_path / "g.json").exists()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    """A golden of five prompts, 24 tokens each."""
    folder = tmp_path_factory.mktemp("ctrl-c-golden")
    proc = subprocess.run([PY, "-m", "logitlab", "golden", "record", "-o", "g", *sum((["--prompt", p] for p in PROMPTS),
                                                                                   []), "--tokens", "24", "--quiet"],
                          cwd=folder, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return folder / "g"


@pytest.mark.engine
@pytest.mark.parametrize("command", ["check", "update"])
def test_golden_check_and_update_leave_the_golden_as_it_was(golden, command, tmp_path):
    """``golden check`` and ``golden update``, interrupted after the first prompt was compared (the golden's
    logits file is open): the golden is unchanged, byte for byte, with no ``.part`` or ``.old`` folder beside
    it, and no report is written."""
    before = files_of(golden.parent)
    extra = ["--reason", "interrupted on purpose"] if command == "update" else []
    run = interrupt(["golden", command, str(golden), *extra, "--quiet", "--json", "r.json"], tmp_path,
                    WaitingOnWorker(lambda pid: maps(pid, "logits.safetensors")))
    aborted(run)
    assert files_of(golden.parent) == before
    assert not (tmp_path / "r.json").exists()


@pytest.mark.engine
@pytest.mark.parametrize("probe, args", [("batch", ["--batch", "1", "4", "16", "64"]),
                                         ("prefill-decode", ["--tokens", "200"])])
def test_invariance_batch_and_prefill_decode_write_what_was_measured(probe, args, tmp_path):
    """``invariance batch`` / ``prefill-decode``: one engine step each, interrupted while the worker computes
    it (2 s of its CPU: the model loads in well under one): the JSON is written with the prompt and
    ``error: interrupted``, and no check (nothing was compared), as the terminal report says."""
    def worker_computing(pid: int) -> bool:
        return any(_stat(p)[3] >= 2.0 for p in tree(pid)[1:] if _alive(p))

    run = interrupt(["invariance", probe, *args, "--json", "i.json"], tmp_path, worker_computing)  # the report read
    exited_130(run, "error: interrupted; what was measured so far is in the reports")
    data = json.loads((tmp_path / "i.json").read_text())
    assert data["probe"] == probe and data["error"] == "interrupted" and data["prompt_ids"]
    assert data["checks"] == [] and "no check was compared" in run.stdout


class NthWorkerComputing:
    """Ready when the ``n``-th engine worker ``pid`` started (a process below it, in the order first seen) has
    spent ``seconds`` of CPU: the ``n``-th part of a command that loads one engine per part is under way."""

    def __init__(self, n: int, seconds: float):
        self.n, self.seconds = n, seconds
        self.seen: list[int] = []

    def __call__(self, pid: int) -> bool:
        self.seen += [p for p in tree(pid)[1:] if p not in self.seen and _alive(p)]
        return len(self.seen) >= self.n and _alive(self.seen[self.n - 1]) and \
            _stat(self.seen[self.n - 1])[3] >= self.seconds


@pytest.mark.engine
def test_invariance_matrix_writes_the_axes_measured_so_far(tmp_path):
    """``invariance matrix``: interrupted while its second axis (batch, B = 1..24, one engine of its own) computes,
    after the first (determinism) finished: the reports are written with the determinism axis whole, the batch
    axis as far as it got (its probe's partial result, no check yet, or the checks it compared) and ``error:
    interrupted``; ``report`` renders the JSON again."""
    run = interrupt(["invariance", "matrix", "--axes", "determinism,batch", "--runs", "2", "--tokens", "2",
                     "--max-batch", "24", "--prompt", PROMPTS[1], "--variant", "n_threads=1,n_threads_batch=1",
                     "--quiet", "--json", "m.json", "--markdown", "m.md"], tmp_path, NthWorkerComputing(2, 2.0))
    exited_130(run, "error: interrupted; what was measured so far is in the reports")
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["kind"] == "invariance-matrix" and data["error"] == "interrupted"
    axes = {a["axis"]: a for a in data["axes_summary"]}
    assert list(axes) == ["determinism", "batch"]
    assert axes["determinism"]["status"] == "invariant" and axes["determinism"]["rows"] > 0  # finished before
    (batch,) = [a for a in data["axes"] if a["axis"] == "batch"]
    assert len(batch["probes"]) <= 1 and all(p["error"] == "interrupted" for p in batch["probes"])
    assert axes["batch"]["rows"] < sum(range(1, 25)) * axes["determinism"]["rows"]  # not every batch compared
    markdown = (tmp_path / "m.md").read_text()
    line = ("stopped early by the user (Ctrl-C) after 2 of 2 planned axes (the last as far as it got): the verdicts "
            "rest on those only")  # said before the axes table
    assert "## logitlab invariance matrix" in markdown and markdown.index(line) < markdown.index("| axis")
    shown = subprocess.run([PY, "-m", "logitlab", "report", "m.json"], cwd=tmp_path, capture_output=True, text=True)
    assert shown.returncode == 0 and line in " ".join(shown.stdout.split()), shown.stderr


def _alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


SWEEP = """
name = "ctrl-c"
prompts = ["The capital of France is"]
[control]
options = { n_threads = 1, n_threads_batch = 1 }
[axes]
options.flash_attn = [0, 1]
options.n_ubatch = [512, 8, 4]
[experiment]
tokens = 8
"""


@pytest.mark.engine
def test_sweep_keeps_the_finished_jobs_and_resume_runs_only_the_rest(tmp_path):
    """``sweep``: the jobs finished before Ctrl-C are kept (their files whole, ``sweep.json`` says
    ``interrupted``); ``--resume`` plans only the others."""
    (tmp_path / "m.toml").write_text(SWEEP)
    jobs = tmp_path / "s" / "jobs"
    run = interrupt(["sweep", "m.toml", "--out", "s", "--quiet"], tmp_path,
                    WaitingOnWorker(lambda pid: len(list(jobs.glob("*.json"))) >= 1))
    exited_130(run, "error: interrupted; finished jobs are in s/jobs/; --resume continues")
    summary = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert summary["error"] == "interrupted"
    finished = sorted(jobs.glob("*.json"))
    assert 1 <= len(finished) < 6
    for path in finished:
        job = json.loads(path.read_text())  # whole files only
        assert job["status"] == "ok" and job["result"]["kind"] == "ab", path
    plan = subprocess.run([PY, "-m", "logitlab", "sweep", "m.toml", "--out", "s", "--resume", "--dry-run"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert plan.returncode == 0 and f"6 jobs, {6 - len(finished)} to run" in plan.stdout, plan.stdout + plan.stderr


@pytest.mark.engine
def test_build_kills_its_compile_jobs_and_caches_nothing(tmp_path):
    """``build``: interrupted while llama.cpp compiles (CMake has configured; the first objects are built): the
    compiler jobs end with it, and the build cache holds neither a library folder nor the temporary one, so the
    next ``build`` starts over instead of finding half a library. The sources are the installed release's
    (downloaded once, as ``test_llamacpp_builds.py`` does); the cache is a fresh folder, so nothing is a hit."""
    from logitlab.engines.llamacpp_build import release_source
    from logitlab.tools import llama_cpp_python_version

    source = str(release_source(llama_cpp_python_version()).llama_cpp)  # vendor/llama.cpp
    cache = tmp_path / "cache"
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "LOGITLAB_CACHE": str(cache), "TMPDIR": str(tmp_path / "tmp")}

    def compiling(pid: int) -> bool:
        building = list((cache / "llama-builds").glob(".build-*/cmake-build"))
        return any((b / "build.ninja").exists() or (b / "Makefile").exists() for b in building) and any(
            p.suffix == ".o" for b in building for p in (b / "ggml" / "src").rglob("*.o"))

    run = interrupt(["build", "llamacpp", source, "-D", "GGML_NATIVE=OFF", "-q"], tmp_path, compiling, env=env,
                    marker=str(cache))
    aborted(run)
    left = [p.name for p in (cache / "llama-builds").iterdir()]
    assert [name for name in left if not name.endswith(".lock")] == [], left  # the build lock's file stays (empty)


def test_doctor_while_it_imports_the_engines(tmp_path):
    """``doctor``: interrupted while it imports the engines' libraries (torch is mapped): no report written."""
    run = interrupt(["doctor", "--quiet", "--json", "d.json"], tmp_path, lambda pid: maps(pid, "libtorch"))
    aborted(run)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctrl-c.stderr", "ctrl-c.stdout"]


# -- commands that read files ------------------------------------------------------------------------------------------
class CpuAfterMapped:
    """Ready once the process has spent ``seconds`` of CPU after it mapped a file whose path contains ``needle``
    (a library the command's work imports): it is then in that work, not in its start-up."""

    def __init__(self, needle: str, seconds: float):
        self.needle, self.seconds = needle, seconds
        self.start: float | None = None

    def __call__(self, pid: int) -> bool:
        if self.start is None:
            if not maps(pid, self.needle):
                return False
            self.start = _stat(pid)[3]
        return _stat(pid)[3] - self.start >= self.seconds


def test_bench_compare_during_its_bootstrap(tmp_path):
    """``bench compare`` with 4 million bootstrap resamples per scenario (about 2.5 s of CPU here), interrupted
    0.5 s of CPU after it loaded scipy.stats (the comparison's module loads it): no report written."""
    run = interrupt(["bench", "compare", DATA / "gbench-real-base.json", DATA / "gbench-real-pr.json", "--bootstrap",
                     "4000000", "--quiet", "--json", "c.json"], tmp_path, CpuAfterMapped("scipy/stats", 0.5))
    aborted(run)
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("name", ["report", "history add", "history show", "bench calibrate", "dump-diff",
                                  "golden export-kld"])
def test_file_commands_while_they_read_their_input(name, tmp_path):
    """Commands that finish within a second, interrupted while they read an input that does not come (a FIFO
    nothing writes to yet): exit 130, nothing written."""
    path = {"history show": "h/m/c1-0-0.json",  # a record
            "dump-diff": "d/manifest.json",  # a dump folder's manifest
            "golden export-kld": "g/manifest.json"}.get(name, "in.json")  # a golden's manifest
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    fifo = FifoInput(tmp_path / path)
    args = {"report": ["report", "in.json", "--json", "out.json", "--quiet"],
            "history add": ["history", "add", "in.json", "--dir", "h", "--commit", "c1", "--machine", "m"],
            "history show": ["history", "show", "--dir", "h", "--json", "out.json", "--quiet"],
            "bench calibrate": ["bench", "calibrate", "in.json", "in.json", "--out", "out.json", "--quiet"],
            "dump-diff": ["dump-diff", "d", "d", "--json", "out.json", "--quiet"],
            "golden export-kld": ["golden", "export-kld", "g", "-o", "out.kld"]}[name]
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    try:
        run = interrupt(args, tmp_path, fifo.reading)
    finally:
        fifo.close()
    aborted(run)
    after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if not p.name.startswith("ctrl-c."))
    assert after == before  # no output, no history record, no folder made
