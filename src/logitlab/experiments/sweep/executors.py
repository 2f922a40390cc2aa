"""Executors: where a sweep's jobs run. One small interface; ``local`` (a process pool) and ``ray``.

An executor starts **workers** (worker processes here, Ray actors on a
cluster), hands each one job at a time, and yields every job's
:class:`~logitlab.experiments.sweep.job.SweepJobResult` as it finishes. A
worker keeps engines loaded between its jobs
(:class:`~logitlab.experiments.engine_cache.EngineCache`). A job is a whole
experiment — both arms of an A/B and all its ABBA/BAAB blocks — so a
comparison never splits across workers or devices: executors distribute
cells and prompts only.

When a worker dies in the middle of a job (killed, out of memory, a crash in
an engine's native code), its job is retried on a fresh worker up to
``retries`` times, else recorded as ``failed`` with the error; the sweep goes
on with a fresh worker. Jobs that finished are never touched again.

``local``: one single-process pool per worker (``concurrent.futures``, spawn
start method), so a dead worker costs exactly its own job. With GPUs visible
(``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``) each worker gets its own
``ceil(num_gpus)`` of them (one worker per GPU by default) through
``CUDA_VISIBLE_DEVICES``; without, one worker (parallel CPU jobs would share
the cores; ``workers`` runs more at once). ``ray``: see
:mod:`logitlab.experiments.sweep.executor_ray`, imported only when asked for.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import shutil
import subprocess
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Iterator, Sequence

from logitlab.errors import InputError, check_at_least
from logitlab.events import Event, ignore_event
from logitlab.experiments.engine_cache import EngineCache
from logitlab.experiments.sweep.matrix import JobSpec, Resources
from logitlab.experiments.sweep.job import SweepJobResult, execute, failed_job, worker_info
from logitlab.manifest import now_utc

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "WorkerDied", "make_executor", "visible_gpus"]

#: Executor names of ``logitlab sweep --executor``.
EXECUTORS = ("local", "ray")


class WorkerDied(Exception):
    """A worker ended (or could not be reached) while it ran a job; the message says how."""


class Executor:
    """Runs jobs on workers; subclasses implement the ``_lane`` hooks (a lane is one worker).

    Attributes:
        name: ``local`` or ``ray``.
        workers: how many workers run at once (None: the executor's default).
        retries: how often a job whose worker died is run again on a fresh worker.
    """

    name = "executor"

    def __init__(self, *, workers: int | None = None, retries: int = 0):
        if workers is not None:
            check_at_least("--workers", workers, 1)
        check_at_least("--retries", retries, 0)
        self.workers = workers
        self.retries = retries
        self.lanes: list[Any] = []

    # -- the interface ------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What ran the sweep: executor name, workers and their places (for the sweep manifest)."""
        return {"executor": self.name, "workers": len(self.lanes) or self.workers, "retries": self.retries,
                "lanes": [lane.where for lane in self.lanes]}

    def run(self, jobs: Sequence[JobSpec], resources: Resources, *,
            on_event: Event | None = None) -> Iterator[SweepJobResult]:
        """Run ``jobs`` and yield each result as it finishes (not in job order).

        ``on_event`` gets ``("workers", {"workers": [where, ...]})`` once,
        ``("job-start", {"spec", "where", "attempt"})`` when a worker takes a
        job, ``("job-retry", {"spec", "where", "attempt", "error"})`` when a
        job's worker died and the job is run again.

        Raises:
            InputError: the resources cannot be met (no GPU, a cluster too small).
        """
        on_event = on_event or ignore_event
        if not jobs:
            return
        try:
            self._start(resources, len(jobs))
            on_event("workers", {"workers": [lane.where for lane in self.lanes]})
            yield from self._loop(jobs, on_event)
        finally:
            self.close()

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        for lane in self.lanes:
            self._close_lane(lane)

    # -- the loop every executor shares ---------------------------------------------------
    def _loop(self, jobs: Sequence[JobSpec], on_event: Event) -> Iterator[SweepJobResult]:
        queue = deque((spec, 1) for spec in jobs)
        idle = list(self.lanes)
        running: dict[Any, tuple[Any, JobSpec, int, str, float]] = {}

        def fill() -> None:  # every idle worker takes the next job
            while idle and queue:
                lane = idle.pop(0)
                spec, attempt = queue.popleft()
                handle = self._submit(lane, spec, attempt)
                running[handle] = (lane, spec, attempt, now_utc(), time.perf_counter())
                on_event("job-start", {"spec": spec, "where": lane.where, "attempt": attempt})

        fill()
        while running:
            finished = []
            for handle in self._wait(list(running)):
                lane, spec, attempt, started_at, start = running.pop(handle)
                try:
                    finished.append(SweepJobResult.from_dict(self._result(handle)))
                    idle.append(lane)
                except WorkerDied as exc:
                    idle.append(self._replace_lane(lane))
                    error = f"worker {_place(lane.where)} died while running this job: {exc}"
                    if attempt <= self.retries:
                        queue.appendleft((spec, attempt + 1))
                        on_event("job-retry", {"spec": spec, "where": lane.where, "attempt": attempt, "error": error})
                    else:
                        finished.append(failed_job(spec, error, lane.where, attempt=attempt, started_at=started_at,
                                                   seconds=time.perf_counter() - start))
            fill()  # the next jobs start before the finished ones are written
            yield from finished

    # -- hooks --------------------------------------------------------------------------
    def _start(self, resources: Resources, n_jobs: int) -> None:
        raise NotImplementedError

    def _submit(self, lane: Any, spec: JobSpec, attempt: int) -> Any:
        raise NotImplementedError

    def _wait(self, handles: list[Any]) -> list[Any]:
        raise NotImplementedError

    def _result(self, handle: Any) -> dict[str, Any]:
        """The job's result dict; raises :class:`WorkerDied` when the worker died."""
        raise NotImplementedError

    def _replace_lane(self, lane: Any) -> Any:
        raise NotImplementedError

    def _close_lane(self, lane: Any) -> None:
        raise NotImplementedError


def _place(where: dict[str, Any]) -> str:
    return f"{where.get('executor')}#{where.get('lane')} (pid {where.get('pid')} on {where.get('host')})"


# -- local ----------------------------------------------------------------------------------
def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``'s, else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        out = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


#: A local worker's state: its engine cache and where it runs (set by :func:`_init_local_worker`).
_WORKER: dict[str, Any] = {}


def _init_local_worker(lane: int, gpus: list[str], keep_engines: int) -> None:
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    _WORKER["cache"] = EngineCache(keep_engines)
    _WORKER["where"] = worker_info("local", lane=lane, gpus=gpus)


def _local_hello() -> dict[str, Any]:
    return _WORKER["where"]


def _local_job(spec: dict[str, Any], attempt: int) -> dict[str, Any]:
    return execute(spec, _WORKER["where"], _WORKER["cache"], attempt)


class _LocalLane:
    def __init__(self, index: int, gpus: list[str], keep_engines: int):
        self.index, self.gpus, self.keep_engines = index, gpus, keep_engines
        self.pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_init_local_worker, initargs=(index, gpus, keep_engines))
        self._hello: Future = self.pool.submit(_local_hello)
        self.where: dict[str, Any] = {"executor": "local", "lane": index, "gpus": gpus}

    def ready(self) -> "_LocalLane":
        try:
            self.where = self._hello.result()
        except BrokenProcessPool:
            raise InputError("a local sweep worker could not start: its process ended while starting (from a Python "
                             "script, call run_sweep under `if __name__ == \"__main__\":`: the workers start with "
                             "multiprocessing's spawn method, which imports the script again)") from None
        return self


class LocalExecutor(Executor):
    """Jobs on worker processes of this machine (one single-process pool per worker)."""

    name = "local"

    def _start(self, resources: Resources, n_jobs: int) -> None:
        gpus = visible_gpus()
        self.keep_engines = resources.keep_engines
        if resources.num_gpus > 0 and not gpus:
            raise InputError(f"the matrix asks for {resources.num_gpus:g} GPU(s) per job ([resources] num_gpus) and "
                             "no GPU is visible here (CUDA_VISIBLE_DEVICES, nvidia-smi): set num_gpus = 0, or run on a "
                             "machine or cluster with GPUs")
        per_worker = max(1, math.ceil(resources.num_gpus))
        chunks = [gpus[i:i + per_worker] for i in range(0, len(gpus) - per_worker + 1, per_worker)]
        if gpus and not chunks:
            raise InputError(f"the matrix asks for {resources.num_gpus:g} GPUs per job; {len(gpus)} visible")
        workers = self.workers or (len(chunks) if chunks else 1)
        workers = max(1, min(workers, n_jobs))
        self.lanes = [_LocalLane(i, chunks[i % len(chunks)] if chunks else [], self.keep_engines)
                      for i in range(workers)]
        self.lanes = [lane.ready() for lane in self.lanes]

    def _submit(self, lane: _LocalLane, spec: JobSpec, attempt: int) -> Future:
        try:
            return lane.pool.submit(_local_job, spec.to_dict(), attempt)
        except BrokenProcessPool:  # died while idle: the job goes to a fresh worker (the loop replaces it)
            future: Future = Future()
            future.set_exception(BrokenProcessPool("the worker process had died before the job reached it"))
            return future

    def _wait(self, handles: list[Future]) -> list[Future]:
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return list(done)

    def _result(self, handle: Future) -> dict[str, Any]:
        try:
            return handle.result()
        except BrokenProcessPool:
            raise WorkerDied("the worker process ended abruptly (killed by a signal, out of memory, or a crash in "
                             "native code)") from None

    def _replace_lane(self, lane: _LocalLane) -> _LocalLane:
        self._close_lane(lane)
        fresh = _LocalLane(lane.index, lane.gpus, lane.keep_engines).ready()
        self.lanes[self.lanes.index(lane)] = fresh
        return fresh

    def _close_lane(self, lane: _LocalLane) -> None:
        lane.pool.shutdown(wait=True, cancel_futures=True)


def make_executor(name: str, *, workers: int | None = None, retries: int = 0, address: str | None = None,
                  runtime_env: dict[str, Any] | None = None) -> Executor:
    """The executor called ``name`` (one of :data:`EXECUTORS`).

    Raises:
        InputError: an unknown name, ``address`` for the local executor, or Ray not installed.
    """
    if name == "local":
        if address:
            raise InputError("--address is the Ray cluster of --executor ray; the local executor takes none")
        return LocalExecutor(workers=workers, retries=retries)
    if name == "ray":
        try:
            from logitlab.experiments.sweep.executor_ray import RayExecutor
        except ImportError as exc:
            raise InputError(f"--executor ray needs Ray ({exc.name} is not installed): pip install 'logitlab[ray]'") \
                from None
        return RayExecutor(workers=workers, retries=retries, address=address, runtime_env=runtime_env)
    raise InputError(f"unknown executor {name!r}; valid: {', '.join(EXECUTORS)}")
