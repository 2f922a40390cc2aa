"""The sweep's summary: one row per matrix cell, pooled over the cell's prompts, and one entry per job.

Per cell (from its finished jobs): the verdict — the worst over its prompts
(``ab``: each job's A/B verdict, itself the worst over its candidate runs;
``verify``: each job's classification, the worst over K) —, whether the
control reproduced itself (A/A), rows differing, max |Δ|, KLD mean and p99
over every compared position (pooled as
:func:`~logitlab.numerics.compare.merge_comparisons` pools rows), argmax
flips, the largest ``argmax-up`` detection limit of the jobs' comparisons,
and for ``ab`` with speed the paired speed comparison over every prompt's
ABBA/BAAB blocks together (blocks are the independent units of
:func:`~logitlab.perf.paired.paired_comparison`, whatever prompt they ran).
The ``ab`` numbers come from each job's verdict run (its worst candidate
run); ``verify`` numbers from its K totals (KLD is not kept by ``verify``).
Each kind's result class pools its own cell (its ``sweep_cell`` classmethod:
:meth:`~logitlab.experiments.ab_results.AbResult.sweep_cell`,
:meth:`~logitlab.experiments.verify.results.VerifyResult.sweep_cell`,
:meth:`~logitlab.experiments.invariance_matrix.InvarianceMatrixResult.sweep_cell`: per invariance axis, its
status, worst verdict and bit-identical rows over the prompts), and a
job's verdict is its result's ``verdict_word``.

:class:`SweepResult` is also the sweep manifest (``sweep.json`` under
``--out``): the matrix, every job's spec, what ran where, and this summary.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from logitlab.experiments.sweep.matrix import JobSpec
from logitlab.experiments.sweep.job import SweepJobResult
from logitlab.jsonio import ResultRecord
from logitlab.numerics import VERDICTS
from logitlab.perf.paired import PairedComparison

__all__ = ["CELL_STATUSES", "CellSummary", "JobSummary", "SweepResult", "summarize"]

#: ``ok``: every job finished; ``incomplete``: some failed or are pending; ``failed``: none finished
#: and one failed; ``pending``: nothing ran yet.
CELL_STATUSES = ("ok", "incomplete", "failed", "pending")


@dataclass
class JobSummary:
    """One job of the sweep, as the manifest lists it.

    Attributes:
        spec: the job; ``key`` its file name stem; ``file`` its result file, relative to ``--out``.
        status: ``ok``, ``failed`` or ``pending`` (no result yet).
        error, where, attempt, seconds, logits_hash: from the job's result (None / {} when pending).
        verdict: the job's verdict word (``ab``: A/B; ``verify``: the classification).
    """

    spec: JobSpec
    key: str
    file: str
    status: str = "pending"
    error: str | None = None
    where: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    seconds: float | None = None
    logits_hash: str | None = None
    verdict: str | None = None


@dataclass
class CellSummary:
    """One matrix cell, pooled over its prompts (see the module docstring).

    Attributes:
        cell: its label; ``values`` its axis values (axis name -> value label).
        control, candidate: the variants (``verify`` runs on the candidate).
        status: one of :data:`CELL_STATUSES`; ``jobs``, ``ok``, ``failed`` count its jobs.
        verdict: worst over the finished jobs (None: none finished).
        aa: ``ok`` (every control run bit-exact with its reference), ``NO`` (one was not) or None.
        cause: ``verify``: the cause of the worst K (:data:`~logitlab.experiments.verify.results.CAUSES`).
        positions, rows_differing: compared positions and those not bit-exact, over the prompts.
        max_abs_diff: largest |Δ| (logits); ``kld_mean``, ``kld_p99``: nats (``ab`` only).
        flips: argmax flips.
        detection_limit: the largest ``argmax-up`` detection limit (logits) over the jobs' verdict-deciding
            comparisons (``ab``: each job's verdict run; ``verify``: each job's K): one logit, the greedy
            token's, raised that much reads ``divergent`` wherever it lands
            (:func:`~logitlab.numerics.detection.largest_limit`); None when none was measured or, with
            ``detection_measured`` > 0, when one left a position uncaught up to 10⁴.
        detection_measured: how many comparisons measured it (a ``divergent`` one has nothing to measure).
        speed: ``ab`` with speed: per phase (``decode``, ``prefill``), the paired comparison over
            every prompt's blocks.
        logits_hash: SHA-256 over the jobs' logits hashes in prompt order (None unless every job finished with
            one: an ``invariance-matrix`` job has none).
        where: the distinct places its jobs ran (``host device``).
        invariance_axes: ``invariance-matrix``: per invariance axis, pooled over the prompts, the axis's summary
            (:meth:`~logitlab.experiments.invariance_matrix.AxisResult.summary`: ``axis``, ``status``, ``verdict``,
            ``rows_identical`` of ``rows``, ``skipped``, ...); empty for the other kinds.
    """

    cell: str
    values: dict[str, str]
    control: dict[str, Any]
    candidate: dict[str, Any]
    status: str
    jobs: int
    ok: int
    failed: int
    verdict: str | None = None
    aa: str | None = None
    cause: str | None = None
    positions: int = 0
    rows_differing: int = 0
    max_abs_diff: float | None = None
    kld_mean: float | None = None
    kld_p99: float | None = None
    flips: int | None = None
    detection_limit: float | None = None
    detection_measured: int = 0
    speed: dict[str, PairedComparison] = field(default_factory=dict)
    logits_hash: str | None = None
    where: list[str] = field(default_factory=list)
    invariance_axes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SweepResult(ResultRecord):
    """A whole sweep: the manifest (matrix, jobs, executor) and the matrix summary.

    Attributes:
        name: the sweep's name.
        matrix: the parsed matrix (:meth:`~logitlab.experiments.sweep.matrix.Matrix.to_dict`).
        manifest: logitlab version, the driver's host, start and end time, the
            executor and its workers (:meth:`~logitlab.experiments.sweep.executors.Executor.describe`),
            the ``--out`` folder.
        axes: axis names in matrix order (the summary table's first columns).
        cells: one :class:`CellSummary` per cell, in matrix order.
        jobs: one :class:`JobSummary` per job, in matrix order.
        notes: facts the report must state (reruns, shared CPUs under a speed sweep, ...).
        error: why the sweep stopped early (interrupted), else None.

    JSON format history (``schema_version``): 1 — first version; later in 1 (additive): a cell's
    ``detection_limit`` and ``detection_measured`` (absent: None and 0); ``invariance-matrix`` cells and their
    ``invariance_axes`` (absent: []).
    """

    KIND: ClassVar[str] = "sweep"
    SCHEMA_VERSION: ClassVar[int] = 1

    name: str
    matrix: dict[str, Any]
    manifest: dict[str, Any]
    axes: list[str]
    cells: list[CellSummary] = field(default_factory=list)
    jobs: list[JobSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def kind(self) -> str:
        """The experiment of every cell: ``ab``, ``verify`` or ``invariance-matrix``."""
        return self.matrix["experiment"]["kind"]

    @property
    def speed(self) -> bool:
        return self.kind == "ab" and bool(self.matrix["experiment"]["speed"])

    def counts(self) -> dict[str, int]:
        """Jobs per status (``ok``, ``failed``, ``pending``)."""
        out = {"ok": 0, "failed": 0, "pending": 0}
        for job in self.jobs:
            out[job.status] += 1
        return out

    def worst_verdict(self) -> str | None:
        words = [c.verdict for c in self.cells if c.verdict is not None]
        return max(words, key=VERDICTS.index) if words else None

    def derived(self) -> dict[str, Any]:
        return {"counts": self.counts(), "worst_verdict": self.worst_verdict()}


# -- building the summary -----------------------------------------------------------------
def summarize(name: str, matrix: Mapping[str, Any], manifest: Mapping[str, Any], specs: Sequence[JobSpec],
              results: Mapping[str, SweepJobResult], *, notes: Sequence[str] = (),
              error: str | None = None) -> SweepResult:
    """The :class:`SweepResult` of ``specs`` (matrix order) given the results finished so far (by job key)."""
    typed = {key: r.experiment_result() for key, r in results.items() if r.ok and r.result is not None}
    jobs = [_job_summary(spec, results.get(spec.key), typed.get(spec.key)) for spec in specs]
    cells: dict[str, list[JobSpec]] = {}
    for spec in specs:
        cells.setdefault(spec.cell, []).append(spec)
    axes = [a["key"] or a["kind"] for a in matrix["axes"]]
    summary = [_cell(cell_specs, results, typed) for cell_specs in cells.values()]
    all_notes = list(notes) + _notes(matrix, results, typed, manifest)
    return SweepResult(name=name, matrix=dict(matrix), manifest=dict(manifest), axes=axes, cells=summary, jobs=jobs,
                       notes=all_notes, error=error)


def _job_summary(spec: JobSpec, result: SweepJobResult | None, typed: ResultRecord | None) -> JobSummary:
    job = JobSummary(spec=spec, key=spec.key, file=f"jobs/{spec.key}.json")
    if result is None:
        return job
    job.status, job.error, job.where = result.status, result.error, dict(result.where)
    job.attempt, job.seconds, job.logits_hash = result.attempt, result.seconds, result.logits_hash
    if typed is not None:
        job.verdict = typed.verdict_word
    return job


def _cell(specs: Sequence[JobSpec], results: Mapping[str, SweepJobResult], typed: Mapping[str, Any]) -> CellSummary:
    first = specs[0]
    done = [results[s.key] for s in specs if s.key in results]
    ok = [r for r in done if r.ok]
    failed = len(done) - len(ok)
    status = ("ok" if len(ok) == len(specs) else "pending" if not done else
              "failed" if not ok else "incomplete")
    cell = CellSummary(cell=first.cell, values=dict(first.values), control=first.control.to_dict(),
                       candidate=first.candidate.to_dict(), status=status, jobs=len(specs), ok=len(ok),
                       failed=failed)
    cell.where = sorted({f"{r.where.get('host', '?')} {r.where.get('device', '?')}" for r in done})
    if len(ok) == len(specs) and all(results[s.key].logits_hash for s in specs):
        digest = hashlib.sha256()
        for spec in specs:
            digest.update(results[spec.key].logits_hash.encode("ascii"))
        cell.logits_hash = digest.hexdigest()
    finished = [typed[s.key] for s in specs if s.key in typed]
    if not finished:
        return cell
    for name, value in type(finished[0]).sweep_cell(finished, first.experiment).items():
        setattr(cell, name, value)
    return cell


def _notes(matrix: Mapping[str, Any], results: Mapping[str, SweepJobResult], typed: Mapping[str, Any],
           manifest: Mapping[str, Any]) -> list[str]:
    notes: list[str] = []
    seen: set[str] = set()
    busy = 0
    for key, result in typed.items():
        for note in getattr(result, "notes", []) or []:
            if note.startswith("machine busy"):
                busy += 1
            elif note not in seen:
                seen.add(note)
                notes.append(note)
    speed = matrix["experiment"]["kind"] == "ab" and matrix["experiment"]["speed"]
    if speed and busy:
        notes.append(f"machine busy (1-minute load above 1.5 × the cores) at the end of {busy} job(s): absolute "
                     "tokens/s are unreliable; the ABBA/BAAB pairing still protects each ratio")
    lanes = (manifest.get("executor") or {}).get("lanes") or []
    shared: dict[str, int] = {}
    for lane in lanes:
        if lane.get("device") == "cpu":
            shared[lane.get("host", "?")] = shared.get(lane.get("host", "?"), 0) + 1
    crowded = {host: n for host, n in shared.items() if n > 1}
    if speed and crowded:
        hosts = ", ".join(f"{n} on {host}" for host, n in crowded.items())
        notes.append(f"speed: several CPU workers ran at once on one host ({hosts}): their jobs shared the cores, "
                     "so absolute tokens/s are lower and noisier; each ratio is still paired within its own job")
    retried = sum(1 for r in results.values() if r.attempt > 1)
    if retried:
        notes.append(f"{retried} job(s) ran again after their worker died (attempt > 1)")
    return notes
