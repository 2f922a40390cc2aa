"""One sweep job: a matrix cell on one prompt, run by the experiment it names, recorded with where it ran.

:func:`run_job` is a function of the :class:`~logitlab.experiments.sweep.matrix.JobSpec`
alone (an engine kept loaded from an earlier job is the same engine a fresh
load gives). It never raises for a failed experiment: the
:class:`SweepJobResult` records the error, and whatever the experiment had
measured, so the sweep goes on. :func:`execute` is the same with JSON-type
dicts in and out, for the executors' worker processes.

The logits hash of an ``ab`` job is the SHA-256 of the reference run's and
the first candidate run's logits bits; of a ``verify`` job, of every M=1 and
M=K row in run order. Equal hashes mean bit-identical logits, whichever
worker, node or executor ran the job. An ``invariance-matrix`` job has none
(the matrix keeps its comparisons, not the logits).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from logitlab.engines.variant import Variant
from logitlab.engines.workload import RunOutput
from logitlab.errors import InputError, Interrupted, LogitlabError
from logitlab.experiments.engine_cache import EngineCache
from logitlab.experiments.prompts import Prompt
from logitlab.experiments.sweep.matrix import ExperimentSettings, JobSpec
from logitlab.jsonio import ResultRecord, dumps_line
from logitlab.manifest import now_utc

__all__ = ["JOB_STATUSES", "SweepJobResult", "run_job", "execute", "worker_info", "logits_digest"]

#: ``ok``: the experiment finished; ``failed``: it raised, or its worker died.
JOB_STATUSES = ("ok", "failed")


@dataclass
class SweepJobResult(ResultRecord):
    """The result file of one job (``jobs/<key>.json`` under the sweep's ``--out``).

    Attributes:
        spec: what ran; ``spec_hash`` its :attr:`~logitlab.experiments.sweep.matrix.JobSpec.spec_hash`.
        status: ``ok`` or ``failed``; ``error`` says why it failed.
        where: the executor, host, node, process and device it ran on
            (:func:`worker_info`; for a worker that died, the worker's).
        started_at: UTC start time; ``seconds``: wall time of the job (s).
        attempt: 1 for the first try, more when the executor retried it after its worker died.
        logits_hash: SHA-256 (hex) of the logits bits (see the module docstring); None when
            the experiment did not finish, and for an ``invariance-matrix`` job (it keeps no logits).
        engines_loaded, engines_kept: engines this job loaded, and engines it found
            loaded by an earlier job on the same worker.
        result: the experiment's result as saved (``kind`` ``ab``, ``verify`` or ``invariance-matrix``),
            partial when it failed; None when nothing was measured.

    JSON format history (``schema_version``): 1 — first version.
    """

    KIND: ClassVar[str] = "sweep-job"
    SCHEMA_VERSION: ClassVar[int] = 1

    spec: JobSpec
    spec_hash: str
    status: str
    error: str | None
    where: dict[str, Any]
    started_at: str
    seconds: float
    attempt: int = 1
    logits_hash: str | None = None
    engines_loaded: int = 0
    engines_kept: int = 0
    result: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def key(self) -> str:
        return self.spec.key

    def experiment_result(self) -> Any:
        """The saved ``result`` typed again (an ``AbResult`` or a ``VerifyResult``), or None.

        Raises:
            InputError: a saved result that is not a JSON object, of no known kind, or damaged.
        """
        if self.result is None:
            return None
        from logitlab.kinds import KINDS, result_class

        kind = self.result.get("kind") if isinstance(self.result, Mapping) else None
        if not isinstance(kind, str) or kind not in KINDS:
            raise InputError(f"job {self.key}: its saved result is not a logitlab result (kind {kind!r})")
        return result_class(kind).from_dict(self.result)


def worker_info(executor: str, **extra: Any) -> dict[str, Any]:
    """Where this process runs: executor, host, pid, the GPUs visible to it, and ``extra`` (node ids).

    ``device`` is ``cpu`` when no GPU is visible (``CUDA_VISIBLE_DEVICES`` unset or
    empty and none given), else ``cuda:<ids>`` in the node's numbering.
    """
    gpus = extra.pop("gpus", None)
    if gpus is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        gpus = [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    return {"executor": executor, "host": socket.gethostname(), "pid": os.getpid(),
            "device": "cuda:" + ",".join(map(str, gpus)) if gpus else "cpu", "gpus": [str(g) for g in gpus],
            **extra}


def logits_digest(outputs: Sequence[RunOutput | None]) -> str | None:
    """SHA-256 (hex) over the shape and bits of each run's logits (and its top-k data); None if one is missing."""
    if not outputs or any(o is None for o in outputs):
        return None
    digest = hashlib.sha256()
    for output in outputs:
        logits = np.ascontiguousarray(output.logits, dtype=np.float32)
        digest.update(repr(logits.shape).encode("ascii"))
        digest.update(logits.reshape(-1).view(np.uint8))  # the array's own bytes, read in place (no copy)
        if output.topk is not None:
            digest.update(dumps_line(output.topk.to_dict()).encode("utf-8"))
    return digest.hexdigest()


def run_job(spec: JobSpec, *, where: dict[str, Any] | None = None, cache: EngineCache | None = None,
            attempt: int = 1) -> SweepJobResult:
    """Run one job and record it; never raises for a failed experiment (``KeyboardInterrupt`` passes).

    Args:
        spec: the job.
        where: :func:`worker_info` of the worker (default: this process, executor ``inline``).
        cache: engines kept between jobs (None: the experiment loads its own).
        attempt: the executor's try number.
    """
    where = where or worker_info("inline")
    started, start = now_utc(), time.perf_counter()
    cache = cache if cache is not None else EngineCache(0)
    loads, hits = cache.loads, cache.hits
    result, digest, error = None, None, None
    with cache.job() as scope:
        try:
            run = {"ab": _run_ab, "verify": _run_verify, "invariance-matrix": _run_matrix}[spec.experiment.kind]
            result, digest = run(spec, cache)
        except Interrupted:  # the experiment kept its partial result; Ctrl-C stops the sweep, not this job alone
            raise KeyboardInterrupt from None
        except LogitlabError as exc:
            error, result = str(exc), exc.partial
        except Exception as exc:  # a bug in logitlab or an engine: the job fails, the sweep goes on
            last = traceback.extract_tb(exc.__traceback__)[-1]
            error = (f"internal error {type(exc).__name__}: {exc} (at {os.path.basename(last.filename)}:"
                     f"{last.lineno})")
        scope.failed = error is not None
    return SweepJobResult(
        spec=spec, spec_hash=spec.spec_hash, status="ok" if error is None else "failed", error=error,
        where=where, started_at=started, seconds=time.perf_counter() - start, attempt=attempt,
        logits_hash=digest if error is None else None, engines_loaded=cache.loads - loads,
        engines_kept=cache.hits - hits, result=None if result is None else result.to_dict())


def _run_ab(spec: JobSpec, cache: EngineCache) -> tuple[Any, str | None]:
    from logitlab.experiments.ab import AbConfig, AbExperiment

    exp = spec.experiment
    config = AbConfig(control=spec.control, candidate=spec.candidate, prompt=spec.prompt.text, n_decode=exp.tokens,
                      repeats=exp.repeats, warmup=exp.warmup, isolation=exp.isolation, randomize=exp.randomize,
                      seed=exp.seed, escalate=exp.escalate, top_k=exp.top_k, thresholds=exp.thresholds,
                      margin=exp.margin, max_repeats=exp.max_repeats, max_time=exp.max_time)
    experiment = AbExperiment(config, loader=cache.load if exp.isolation == "session" else None,
                              keep_first_candidate=True)  # digested below
    result = experiment.run()
    return result, logits_digest([experiment.reference, experiment.first_candidate])


def _run_verify(spec: JobSpec, cache: EngineCache) -> tuple[Any, str | None]:
    from logitlab.experiments.verify.run import VerifyConfig, VerifyExperiment

    exp = spec.experiment
    config = VerifyConfig(variant=spec.candidate, prompts=(spec.prompt,), ks=exp.ks, n_decode=exp.tokens,
                          top_k=exp.top_k, thresholds=exp.thresholds)
    experiment = VerifyExperiment(config, engine=cache.load(spec.candidate))
    result = experiment.run()
    return result, experiment.logits_digest.hexdigest()


def matrix_config(exp: ExperimentSettings, variant: Variant, prompts: Sequence[Prompt]) -> Any:
    """The :class:`~logitlab.experiments.invariance_matrix.MatrixConfig` of an ``invariance-matrix`` cell: its
    variant on ``prompts`` with the ``[experiment]`` settings."""
    from logitlab.experiments.invariance_matrix import MatrixConfig

    return MatrixConfig(variant=variant, prompts=tuple(prompts), axes=tuple(exp.axes) or None,
                        max_batch=exp.max_batch, runs=exp.runs, n_decode=exp.tokens, top_k=exp.top_k,
                        thresholds=exp.thresholds)


def _run_matrix(spec: JobSpec, cache: EngineCache) -> tuple[Any, str | None]:
    """The invariance matrix of the candidate on the job's prompt (its engines its own: supervised, one per
    probe); no logits hash (the matrix keeps comparisons, not logits)."""
    from logitlab.experiments.invariance_matrix import InvarianceMatrix

    return InvarianceMatrix(matrix_config(spec.experiment, spec.candidate, (spec.prompt,))).run(), None


def execute(spec: Mapping[str, Any], where: Mapping[str, Any], cache: EngineCache | None = None,
            attempt: int = 1) -> dict[str, Any]:
    """:func:`run_job` with JSON-type dicts in and out (what crosses a process or network boundary)."""
    return run_job(JobSpec.from_dict(spec), where=dict(where), cache=cache, attempt=attempt).to_dict()


def failed_job(spec: JobSpec, error: str, where: Mapping[str, Any], *, attempt: int = 1,
               seconds: float = 0.0, started_at: str | None = None) -> SweepJobResult:
    """The record of a job whose worker died (or that never reached one): status ``failed``, nothing measured."""
    return SweepJobResult(spec=spec, spec_hash=spec.spec_hash, status="failed", error=error, where=dict(where),
                          started_at=started_at or now_utc(), seconds=seconds, attempt=attempt)
