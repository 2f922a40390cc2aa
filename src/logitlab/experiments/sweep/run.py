"""``logitlab sweep``: a matrix of variants × prompts (× models) run as one job set, locally or on Ray.

The matrix (:mod:`logitlab.experiments.sweep.matrix`) gives the jobs; an executor
(:mod:`logitlab.experiments.sweep.executors`) runs them; this module keeps the
record under ``--out``::

    OUT/sweep.json            the sweep manifest and summary (kind "sweep"), rewritten after every job
    OUT/sweep-events.jsonl    one line per worker start, job start, retry and end: what ran where, when
    OUT/jobs/<key>.json       one result per job (kind "sweep-job"), written when the job ends

A job's result file is written once, when it ends, and never touched again
unless the job is run again. ``resume=True`` runs only the jobs without a
finished result for the same spec (spec hash): never-run, failed, and those
whose settings changed. :func:`load_sweep` reads a folder back and
recomputes the summary from the job files present.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Sequence

from logitlab.errors import InputError, Interrupted
from logitlab.events import Event, ignore_event
from logitlab.experiments.sweep.executors import Executor
from logitlab.experiments.sweep.matrix import JobSpec, Matrix
from logitlab.experiments.sweep.job import JOB_STATUSES, SweepJobResult
from logitlab.experiments.sweep.summary import SweepResult, summarize
from logitlab.jsonio import dumps_line, read_json, write_json
from logitlab.manifest import host_info, now_utc

__all__ = ["MANIFEST", "EVENTS", "JOBS", "plan", "run_sweep", "load_sweep", "finished_results"]

MANIFEST = "sweep.json"
EVENTS = "sweep-events.jsonl"
JOBS = "jobs"


def plan(matrix: Matrix, out: str | Path, *, resume: bool) -> tuple[list[JobSpec], dict[str, SweepJobResult]]:
    """The matrix's jobs, and those already finished under ``out`` (by key) when resuming.

    Raises:
        InputError: ``out`` holds a sweep and ``resume`` is False, or holds none and it is True;
            ``out`` is a file.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder; give a folder path")
    manifest = out / MANIFEST
    if manifest.exists() and not resume:
        raise InputError(f"--out {out} already holds a sweep ({MANIFEST}): add --resume to run only the jobs without "
                         "a result, or choose another folder")
    if resume and not manifest.exists():
        raise InputError(f"--resume: {out} holds no sweep ({MANIFEST} is missing); drop --resume to start one there")
    specs = matrix.jobs()
    return specs, (finished_results(out, specs) if resume else {})


def finished_results(out: str | Path, specs: Sequence[JobSpec]) -> dict[str, SweepJobResult]:
    """Job results under ``out`` that finished (status ok) for exactly these specs (same spec hash)."""
    done = {}
    for spec in specs:
        result = _read_job(Path(out) / JOBS / f"{spec.key}.json")
        if result is not None and result.ok and result.spec_hash == spec.spec_hash:
            done[spec.key] = result
    return done


def _read_job(path: Path) -> SweepJobResult | None:
    if not path.exists():
        return None
    try:
        result = SweepJobResult.from_dict(read_json(path, what="job result"))
        result.experiment_result()  # the result it holds must read too
    except InputError:  # a damaged or foreign file counts as no result: the job runs again
        return None
    if not isinstance(result.status, str) or result.status not in JOB_STATUSES or not isinstance(result.spec_hash, str):
        return None  # damaged likewise
    return result


class _Record:
    """The files under ``--out`` of one running sweep."""

    def __init__(self, matrix: Matrix, out: Path, specs: list[JobSpec], results: dict[str, SweepJobResult],
                 manifest: dict[str, Any], notes: list[str]):
        self.matrix, self.out, self.specs, self.results = matrix, out, specs, results
        self.manifest, self.notes = manifest, notes
        self.started = False

    def start(self, executor: str, to_run: int) -> None:
        """Create the folder and the manifest, once the workers are up (a sweep that cannot start leaves nothing)."""
        if self.started:
            return
        self.started = True
        (self.out / JOBS).mkdir(parents=True, exist_ok=True)
        self.event("sweep-start", jobs=len(self.specs), to_run=to_run, finished=len(self.results), executor=executor)
        self.summary()

    def event(self, kind: str, **data: Any) -> None:
        with (self.out / EVENTS).open("a", encoding="utf-8") as f:
            f.write(dumps_line({"time": now_utc(), "event": kind, **data}) + "\n")

    def job(self, result: SweepJobResult) -> None:
        self.start("?", 0)  # (already started by the workers' event)
        write_json(self.out / JOBS / f"{result.key}.json", result.to_dict())
        self.results[result.key] = result
        self.event("job-end", job=result.key, status=result.status, attempt=result.attempt, where=result.where,
                   seconds=result.seconds, error=result.error, logits_hash=result.logits_hash)

    def summary(self, error: str | None = None) -> SweepResult:
        result = summarize(self.matrix.name, self.matrix.to_dict(), self.manifest, self.specs, self.results,
                           notes=self.notes, error=error)
        write_json(self.out / MANIFEST, result.to_dict())
        return result


def run_sweep(matrix: Matrix, out: str | Path, executor: Executor, *, resume: bool = False,
              on_event: Event | None = None) -> SweepResult:
    """Run the matrix's jobs (only the unfinished ones with ``resume``) and return the summary.

    ``on_event`` receives the executor's events (``workers``, ``job-start``,
    ``job-retry``), ``("sweep-start", {"jobs", "finished"})`` and
    ``("job-end", {"result"})``.

    Raises:
        InputError: see :func:`plan`; the executor cannot start (its resources).
        Interrupted: Ctrl-C; ``partial`` holds the summary so far (written to ``sweep.json``).
    """
    on_event = on_event or ignore_event
    out = Path(out)
    specs, done = plan(matrix, out, resume=resume)
    todo = [spec for spec in specs if spec.key not in done]
    notes = []
    if resume:
        previous = read_json(out / MANIFEST, what="sweep manifest")
        rerun = sum(1 for spec in todo if (out / JOBS / f"{spec.key}.json").exists())
        notes.append(f"resumed: {len(done)} of {len(specs)} job(s) had finished before and were kept; "
                     f"{len(todo)} ran now ({rerun} of them had a failed or outdated result)"
                     + (f"; first started {previous['manifest'].get('started_at')}" if isinstance(previous, dict)
                        and isinstance(previous.get("manifest"), dict) else ""))
    manifest = {"logitlab_version": _version(), "driver": host_info(), "started_at": now_utc(), "finished_at": None,
                "out": str(out), "resume": resume, "executor": executor.describe()}
    record = _Record(matrix, out, specs, dict(done), manifest, notes)
    on_event("sweep-start", {"jobs": len(todo), "finished": len(done)})

    def forward(kind: str, data: dict[str, Any]) -> None:
        if kind == "workers":
            manifest["executor"] = executor.describe()
            record.start(executor.name, len(todo))
            record.event("workers", workers=data["workers"])
        elif kind in ("job-start", "job-retry"):
            record.event(kind, job=data["spec"].key, attempt=data["attempt"], where=data["where"],
                         **({"error": data["error"]} if "error" in data else {}))
        on_event(kind, data)

    try:
        with contextlib.closing(executor.run(todo, matrix.resources, on_event=forward)) as results:
            for result in results:
                record.job(result)
                record.summary()
                on_event("job-end", {"result": result})
    except KeyboardInterrupt:
        manifest["finished_at"] = now_utc()
        if not record.started:  # interrupted while the workers started: nothing written
            raise Interrupted("interrupted", partial=summarize(matrix.name, matrix.to_dict(), manifest, specs, done,
                                                               notes=notes, error="interrupted")) from None
        partial = record.summary(error="interrupted")
        record.event("sweep-end", status="interrupted")
        raise Interrupted("interrupted", partial=partial) from None
    record.start(executor.name, len(todo))  # nothing to run: no worker started
    manifest["finished_at"] = now_utc()
    manifest["executor"] = executor.describe()
    result = record.summary()
    record.event("sweep-end", status="done", counts=result.counts())
    return result


def load_sweep(folder: str | Path) -> SweepResult:
    """A sweep folder's summary, recomputed from its manifest and the job result files present.

    Raises:
        InputError: no ``sweep.json`` in ``folder``, or it is damaged.
    """
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.exists():
        raise InputError(f"{folder} holds no sweep ({MANIFEST} is missing): give a sweep's --out folder or a "
                         "result file")
    try:
        stored = SweepResult.from_dict(read_json(path, what="sweep manifest"))
    except InputError as exc:
        if str(path) in str(exc):
            raise
        raise InputError(f"sweep manifest {path}: {exc}") from None
    specs = [job.spec for job in stored.jobs]
    results = {}
    for spec in specs:
        result = _read_job(folder / JOBS / f"{spec.key}.json")
        if result is not None and result.spec_hash == spec.spec_hash:
            results[spec.key] = result
    return summarize(stored.name, stored.matrix, stored.manifest, specs, results,
                     notes=[n for n in stored.notes if n.startswith("resumed:")], error=stored.error)


def _version() -> str:
    from logitlab import __version__

    return __version__
