"""The records of ``logitlab ab``: one run, the whole result, and what is computed from the runs alone.

Plain dataclasses, typed until the JSON boundary (:meth:`AbResult.to_dict`, ``from_dict``); the A/B verdict
over the candidate runs (:func:`worst_verdict`) and the paired speed calls over the complete ABBA/BAAB blocks
(:func:`analyse_speed`) — what ``ab`` computes at its end and a run log rebuilds
(:meth:`AbResult.from_run_log`). :mod:`logitlab.experiments.ab` runs the experiment that fills them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from logitlab.experiments.explain_results import ExplainResult
from logitlab.jsonio import ResultRecord
from logitlab.numerics import VERDICTS, LogitComparison, Verdict
from logitlab.numerics.detection import DetectionLimits, largest_limit
from logitlab.experiments.inverse_controls import Control
from logitlab.experiments.positions import Selected
from logitlab.experiments.speed_designs import CHUNK, WARM_STEPS
from logitlab.numerics.topk import TopKComparison
from logitlab.numerics.topk_offsets import RowOffsets
from logitlab.perf.design import CANDIDATE, CONTROL, Block
from logitlab.perf.metrics import FINGERPRINT, HIGHER, Metric, Metrics, put_comparison, put_crash, put_metric, \
    ratio_metric, speed_metric
from logitlab.perf.paired import PairedComparison, paired_comparison
from logitlab.perf.prereg import DEFAULT_SEQUENTIAL_MARGIN, PreregisteredMargin
from logitlab.perf.sequential import SequentialDecision
from logitlab.runlog import RunLogContents

__all__ = ["LOG_HEADER_FIELDS", "PHASES", "RunRecord", "InterleavedRecord", "InterleavedSpeed", "Escalation",
           "AbResult", "worst_verdict", "speed_blocks", "driving_blocks", "analyse_speed"]

#: AbResult fields a run log's header holds; ``runs`` are its lines; the end line holds the rest.
LOG_HEADER_FIELDS = ("config", "manifest", "prompt_ids", "notes", "positions", "interleaved")


@dataclass
class RunRecord:
    """One measured (or warmup) run: its slot, its speed, and its comparison with the reference.

    Attributes:
        slot, variant, block, position, pattern: where it ran (see :class:`~logitlab.perf.design.Slot`).
        isolation: the isolation level it ran under.
        prefill_tokens, decode_tokens: tokens of each phase.
        prefill_seconds, decode_seconds: wall time around the engine calls of each phase (s).
        is_reference: the first measured control run, every other run's reference.
        comparison: the run against the reference (None for warmups and the reference itself).
        verdict: the comparison's verdict word.
        candidate_self_exact: for candidate runs after the first, whether its logits are
            bit-identical with the first candidate run's.
        scoring: for an engine returning top-k log-probabilities only, how it obtained them (its
            ``RunOutput.scoring``: mode, requests, seconds, alignment check).
        row_offsets: for top-k comparisons, the per-row constant (softmax normaliser) and the
            within-row residual between this run and the reference (:mod:`logitlab.numerics.topk_offsets`).
        crash: for a run whose engine crashed, its evidence
            (:meth:`logitlab.engines.supervised.CrashEvidence.to_dict`); its verdict is then ``crashed``.
    """

    slot: int
    variant: str
    block: int | None
    position: int | None
    pattern: str
    isolation: str
    prefill_tokens: int
    prefill_seconds: float
    decode_tokens: int
    decode_seconds: float
    is_reference: bool = False
    comparison: TopKComparison | LogitComparison | None = None
    verdict: str | None = None
    candidate_self_exact: bool | None = None
    scoring: dict[str, Any] | None = None
    row_offsets: RowOffsets | None = None
    crash: dict[str, Any] | None = None

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def bit_exact(self) -> bool | None:
        return None if self.comparison is None else self.comparison.bit_exact

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["comparison"] = None if self.comparison is None else self.comparison.to_dict()
        data["row_offsets"] = None if self.row_offsets is None else self.row_offsets.to_dict()
        data["prefill_tokens_per_second"] = self.prefill_tokens_per_second
        data["decode_tokens_per_second"] = self.decode_tokens_per_second
        return data


@dataclass
class Escalation:
    """A/A repeated at a stronger isolation level."""

    isolation: str
    runs: int
    bit_exact_runs: int

    @property
    def reproducible(self) -> bool:
        return self.bit_exact_runs == self.runs


@dataclass
class InterleavedRecord:
    """One interleaved block of ``ab``.

    Attributes:
        block: its index (0-based, in run order).
        pattern: ``ABBA`` or ``BAAB``.
        steps: decode steps each arm ran (timed).
        rates: the four decode tokens/s of the block (per second of the phase's clock) in its pattern's slot order:
            each arm's first and second half of the steps
            (:meth:`~logitlab.experiments.interleave.InterleavedBlock.decode_block`).
        control_seconds, candidate_seconds: each arm's decode steps summed (s, in the phase's clock).
        load_seconds: the new pair's loads and warm-ups before the block (s, wall).
        wall_seconds: the whole block's wall time, the loads, the prefills and the closes included (s).
        prefill_seconds: ``[control, candidate]``, each arm's one prefill in the block (s, in the phase's clock: in
            ``cpu`` the calling thread's only, so a prefill on several threads is undercounted; kept, not analysed).
        first_loaded: the side whose engine was loaded and warmed first: the pattern's first (``control`` in ABBA,
            ``candidate`` in BAAB), so that an advantage of the first- or second-loaded worker cancels over each
            pair of blocks (logs written before this field: always ``control``).
    """

    block: int
    pattern: str
    steps: int
    rates: list[float]
    control_seconds: float
    candidate_seconds: float
    load_seconds: float
    prefill_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    first_loaded: str = "control"

    def speed_block(self) -> Block:
        """The block as the paired analysis takes it (decode tokens/s)."""
        return Block(self.pattern, tuple(self.rates))


@dataclass
class InterleavedSpeed:
    """The interleaved speed phase of an ``ab`` run (:mod:`logitlab.experiments.ab_interleaved`).

    Attributes:
        clock: ``cpu`` (the worker thread's CPU time) or ``wall``; the blocks' rates are decode tokens per second of
            that clock.
        cpus: the CPUs both arms decoded on (None: unpinned).
        reason: why this clock and placement (``ab_interleaved.plan``).
        chunk: decode steps a turn.
        warm_steps: untimed steps that warmed each new engine.
        plant: the candidate's planted slowdown (a fraction of each step's own time, busy-waited): 0 but in validity
            benchmarks, which say so.
        blocks: the measured blocks, in run order.
        stopped: why the phase stopped before its design's end (an engine crash or failure), else None.
        stopped_side: ``control`` or ``candidate``: whose engine stopped it, where known.
    """

    clock: str
    cpus: list[int] | None
    reason: str
    chunk: int = CHUNK
    warm_steps: int = WARM_STEPS
    plant: float = 0.0
    blocks: list[InterleavedRecord] = field(default_factory=list)
    stopped: str | None = None
    stopped_side: str | None = None

    def speed_blocks(self) -> list[Block]:
        """The blocks as :class:`~logitlab.perf.design.Block` s (decode tokens/s in :attr:`clock`)."""
        return [r.speed_block() for r in self.blocks]


@dataclass
class AbResult(ResultRecord):
    """The whole experiment: manifest, runs, A/A, A/B verdict, speed.

    JSON format history (``schema_version``): 1 — first version; 2 — ``kind``,
    typed comparisons (one field list), ``candidate_self_exact`` on the run,
    an unmeasured A/A is ``null``; later in 2 (additive): ``fingerprints``
    (absent: empty), ``explanation`` (``ab --explain``), verdicts with their
    noise ``floor`` and ``outside``; a run's ``crash`` (its engine died: the verdict ``crashed``);
    ``detection`` (the detection limits of the verdict's run, :mod:`logitlab.numerics.detection`; absent: None);
    ``controls`` (``--self-check``'s inverse control, :mod:`logitlab.experiments.inverse_controls`; absent: empty)
    and the derived ``vacuous``; ``manifest["load_seconds"]`` (each loaded engine's load wall time, s, by side);
    ``positions`` (``--positions``: the spec, the rows compared and a run's rows,
    :class:`~logitlab.experiments.positions.Selected`; absent or None: every row was compared);
    ``interleaved`` (``--speed-design interleaved``: the decode speed's interleaved blocks,
    :class:`InterleavedSpeed`; absent or None: the runs' design); then each block's ``first_loaded`` (absent:
    ``control``, the order before it followed the pattern).

    ``fingerprints``: per variant, the SHA-256 of the logits' bits of its first
    measured run (:meth:`~logitlab.engines.workload.RunOutput.fingerprint`):
    the control's is the reference run's. A history of results compares them
    across builds.
    """

    KIND: ClassVar[str] = "ab"
    SCHEMA_VERSION: ClassVar[int] = 2

    config: dict[str, Any]
    manifest: dict[str, Any]
    prompt_ids: list[int]
    generated_ids: list[int]
    generated_text: str
    runs: list[RunRecord] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)
    verdict: Verdict | None = None
    verdict_slot: int | None = None
    speed: dict[str, PairedComparison] = field(default_factory=dict)
    sequential: dict[str, SequentialDecision] = field(default_factory=dict)  # --repeats auto, per phase
    localization: dict[str, Any] | None = None
    explanation: ExplainResult | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # cross-engine facts the report must state
    fingerprints: dict[str, str] = field(default_factory=dict)
    detection: DetectionLimits | None = None  # of the verdict's run (full-vocabulary comparisons only)
    controls: list[Control] = field(default_factory=list)  # --self-check's inverse control
    positions: Selected | None = None  # --positions: the rows compared (None: all)
    interleaved: InterleavedSpeed | None = None  # --speed-design interleaved: decode speed's blocks

    def phase_blocks(self, phase: str) -> list[Block]:
        """The blocks a phase's speed call is computed from: with ``--speed-design interleaved`` decode's are the
        interleaved blocks (none where the phase did not run), else the complete ABBA/BAAB blocks of the runs.

        Raises:
            InputError: ``phase`` is not one of :data:`PHASES`' names.
        """
        if phase not in dict(PHASES):
            from logitlab.errors import InputError

            raise InputError(f"no speed phase {phase!r}; phases: {', '.join(dict(PHASES))}")
        interleaved = self.interleaved_decode_blocks()
        if phase == "decode" and interleaved is not None:
            return interleaved
        return speed_blocks(self.runs, dict(PHASES)[phase])

    def interleaved_decode_blocks(self) -> list[Block] | None:
        """``--speed-design interleaved``: decode's blocks, of decode tokens/s in :attr:`InterleavedSpeed.clock`
        (empty where no interleaved block was run or logged); None with the runs design, whose decode blocks are
        the runs'."""
        if self.config.get("speed_design") != "interleaved":
            return None
        return self.interleaved.speed_blocks() if self.interleaved is not None else []

    # -- derived views ------------------------------------------------------
    def measured(self, variant: str) -> list[RunRecord]:
        return [r for r in self.runs if r.variant == variant and r.block is not None]

    @property
    def aa_runs(self) -> list[RunRecord]:
        """The control runs compared with the reference (every measured control run but the reference)."""
        return [r for r in self.measured(CONTROL) if not r.is_reference and r.comparison is not None]

    @property
    def control_reproducible(self) -> bool | None:
        """Is every A/A comparison bit-exact? None when no control run besides the reference was compared."""
        runs = self.aa_runs
        return all(r.bit_exact for r in runs) if runs else None

    @property
    def aa_diagnosis(self) -> str:
        """``reproducible``, ``not measured``, ``state leak (… isolation)`` or ``run-to-run nondeterminism``."""
        reproducible = self.control_reproducible
        if reproducible is None:
            return "not measured"
        if reproducible:
            return "reproducible"
        for escalation in self.escalations:
            if escalation.reproducible:
                return f"state leak: reproducible under {escalation.isolation} isolation"
        if self.escalations or self.config["isolation"] == "process":
            return "run-to-run nondeterminism: not reproducible even under the strongest isolation run"
        return "not reproducible (not escalated)"

    @property
    def candidate_reproducible(self) -> bool | None:
        """Do all candidate runs have identical logits? (None with fewer than two.)"""
        flags = [r.candidate_self_exact for r in self.measured(CANDIDATE) if r.candidate_self_exact is not None]
        return all(flags) if flags else None

    def derived(self) -> dict[str, Any]:
        return {
            "aa": {"control_reproducible": self.control_reproducible, "diagnosis": self.aa_diagnosis,
                   "escalations": [dataclasses.asdict(e) for e in self.escalations]},
            "candidate_reproducible": self.candidate_reproducible,
            "vacuous": self.vacuous,
        }

    @property
    def vacuous(self) -> str | None:
        """Why the A/B could not have shown a difference: ``--self-check``'s planted token was not seen in the
        candidate's logits (they do not follow its input); None otherwise (or not checked)."""
        missed = [c for c in self.controls if not c.caught]
        return f"inverse control not caught ({missed[0].evidence})" if missed else None

    # -- what the result supplies beyond its JSON (see ResultRecord) -----------------------------
    @property
    def verdict_word(self) -> str | None:
        """The A/B verdict's word (the worst over the candidate runs); None when no candidate run was judged."""
        return self.verdict.word if self.verdict else None

    def history_metrics(self) -> Metrics:
        """What the history keeps of an ``ab`` run: variant -> metric name -> :class:`~logitlab.perf.metrics.Metric`.

        ``control`` and ``candidate``: ``decode``, ``prefill`` (tokens/s, higher
        is better; value: the geometric mean over the measured slots, samples:
        per block the geometric mean of the variant's two slots) and ``logits``
        (fingerprint: SHA-256 of the logits' bits of its first measured run).
        ``candidate`` also: ``kld_mean``, ``kld_p99`` (nats, lower is better) and
        ``bit_exact_share`` (% of positions whose logits are bit-identical with
        the reference, higher is better) of the verdict's run, or ``crashed``
        (its phase and status) when that run's engine crashed; ``ratio``:
        ``decode``, ``prefill`` (candidate/control geometric-mean ratio, samples:
        each block's ratio) — the speed relative to a pinned control build.
        With ``--speed-design interleaved`` the ``ratio``'s ``decode`` is the
        interleaved blocks' call, and each variant's own ``decode`` stays its runs'
        (wall-clock tokens/s, comparable with the runs design's; the interleaved
        blocks' rates may be in the worker thread's CPU time).
        An A/A (the same variant on both sides) is one build: only ``control``,
        with every measured slot as a sample and ``bit_exact_share`` the % of
        compared runs that reproduce the reference bit for bit.
        """
        aa = _same_variant(self.config["control"], self.config["candidate"])
        out: Metrics = {}
        measured = [r for r in self.runs if r.block is not None]
        sides = ({CONTROL: measured} if aa else
                 {v: [r for r in measured if r.variant == v] for v in (CONTROL, CANDIDATE)})
        for variant, runs in sides.items():
            for phase in ("decode", "prefill"):
                per_block: dict[int, list[float]] = {}
                for r in runs:
                    per_block.setdefault(r.block, []).append(getattr(r, f"{phase}_tokens_per_second"))
                put_metric(out, variant, phase, speed_metric(per_block, "tokens/s", HIGHER))
            if variant in self.fingerprints:
                put_metric(out, variant, "logits", Metric(FINGERPRINT, self.fingerprints[variant]))
        compared = [r for r in measured if r.comparison is not None]
        if aa:
            if compared:
                share = sum(bool(r.comparison.bit_exact) for r in compared) / len(compared)
                put_metric(out, CONTROL, "bit_exact_share", Metric(HIGHER, 100.0 * share, "%"))
            return out
        worst = next((r for r in self.runs if r.slot == self.verdict_slot), None)
        put_crash(out, CANDIDATE, worst.crash if worst is not None else None)
        if worst is not None and worst.comparison is not None:
            put_comparison(out, CANDIDATE, worst.comparison)
        for phase, comparison in self.speed.items():
            put_metric(out, "ratio", phase, ratio_metric(comparison))
        return out

    @classmethod
    def from_run_log(cls, log: RunLogContents) -> AbResult:
        """The result an ``ab`` run log holds (:mod:`logitlab.runlog`).

        A log whose experiment finished holds everything the ``--json`` result
        holds (the end line carries the fields computed at the end): the
        result is that result. A log cut short by a kill holds the header and
        every run that finished: the result is partial, says so in ``error``,
        and carries the A/A, the A/B verdict over the candidate runs logged and
        the paired speed calls over the complete blocks. Run lines that do not
        load are left out, each with a note.

        Raises:
            InputError: not an ``ab`` log, a log without a header (written before
                logitlab 0.1's run-log format), or a damaged header.
        """
        log.require(cls.KIND, ("config", "manifest", "prompt_ids"))
        runs, notes = _logged_runs(log)
        data = {**{k: log.header.get(k) for k in LOG_HEADER_FIELDS if k in log.header},
                "generated_ids": log.header.get("generated_ids", []),
                "generated_text": log.header.get("generated_text", ""),
                **log.final, "runs": [], "kind": cls.KIND, "schema_version": cls.SCHEMA_VERSION}
        result = cls.from_dict(data)
        result.runs = runs
        if log.interrupted:
            result.error = log.interrupted_message("run(s)")
            result._recompute()
        result.notes = list(result.notes) + notes + log.notes
        return result

    def _recompute(self) -> None:
        """The A/B verdict and the speed calls from the runs alone (what ``ab`` computes at its end)."""
        import dacite

        from logitlab.errors import InputError
        from logitlab.numerics import Thresholds, classify

        cfg = self.config
        try:
            thresholds = dacite.from_dict(Thresholds, cfg.get("thresholds") or {}, config=_dacite_config())
        except (dacite.DaciteError, TypeError, ValueError) as exc:
            raise InputError(f"damaged ab run log: its config's thresholds do not load ({exc})") from None
        verdicts = [(r.slot, classify(r.comparison, thresholds)) for r in self.measured(CANDIDATE)
                    if r.comparison is not None]
        if verdicts:
            self.verdict_slot, self.verdict = worst_verdict(verdicts)
        margin, seed = cfg.get("margin"), cfg.get("seed", 0)
        self.speed = analyse_speed(self.runs, margin=margin if isinstance(margin, float) else None,
                                   seed=seed if isinstance(seed, int) else 0,
                                   interleaved_decode=self.interleaved_decode_blocks())

    @classmethod
    def sweep_cell(cls, results: Sequence[AbResult], experiment: Any) -> dict[str, Any]:
        """A sweep's matrix cell from its finished jobs' ``ab`` results (one per prompt): the
        :class:`~logitlab.experiments.sweep.summary.CellSummary` fields they give, by name.

        ``verdict``: the worst A/B verdict; ``aa``: ``ok`` when every control
        reproduced itself, ``NO`` when one did not (absent: none measured); from
        each job's verdict run (its worst candidate run), pooled over the
        prompts: ``positions``, ``rows_differing``, ``max_abs_diff``, ``flips``,
        ``kld_mean`` and ``kld_p99`` (nats, over every compared position, as
        :func:`~logitlab.numerics.compare.merge_comparisons` pools rows);
        ``detection_limit`` and ``detection_measured``: the largest ``argmax-up``
        detection limit of the verdict runs
        (:func:`~logitlab.numerics.detection.largest_limit`) and how many were
        measured; with ``experiment.speed`` (the matrix's ``[experiment]``: its ``speed``,
        ``margin``, ``seed``), ``speed``: per phase the paired comparison over
        every prompt's ABBA/BAAB blocks together.
        """
        import numpy as np

        cell: dict[str, Any] = {"verdict": _worst_word([r.verdict_word for r in results])}
        reproducible = [r.control_reproducible for r in results if r.control_reproducible is not None]
        cell["aa"] = None if not reproducible else "ok" if all(reproducible) else "NO"
        comparisons = []
        for r in results:
            run = next((run for run in r.runs if run.slot == r.verdict_slot), None)
            if run is not None and run.comparison is not None:
                comparisons.append(run.comparison)
        if comparisons:
            cell["positions"] = sum(c.n_positions for c in comparisons)
            cell["rows_differing"] = sum(c.differing_rows for c in comparisons)
            cell["max_abs_diff"] = max(c.max_abs_diff for c in comparisons)
            cell["flips"] = sum(len(c.flips) for c in comparisons)
            kld = np.array([x for c in comparisons for x in c.row_kld if x is not None], dtype=np.float64)
            if kld.size:
                cell["kld_mean"], cell["kld_p99"] = float(kld.mean()), float(np.percentile(kld, 99.0))
        cell["detection_limit"], cell["detection_measured"] = largest_limit(r.detection for r in results)
        if experiment.speed:
            speed = {}
            for phase, metric in PHASES:
                blocks: list[Block] = [b for r in results for b in speed_blocks(r.runs, metric)]
                if blocks:
                    speed[phase] = paired_comparison(blocks, higher_is_better=True, metric=f"{phase} tokens/s",
                                                     unit="tokens/s", margin=experiment.margin, seed=experiment.seed)
            cell["speed"] = speed
        return cell


def _dacite_config() -> Any:
    import dacite

    return dacite.Config(cast=[tuple], check_types=False)


def _same_variant(a: Any, b: Any) -> bool:
    return {k: v for k, v in a.items() if k != "label"} == {k: v for k, v in b.items() if k != "label"}


def _worst_word(words: Sequence[str | None]) -> str | None:
    """The worst of the verdict words that are not None (None when there is none)."""
    present = [w for w in words if w is not None]
    return max(present, key=VERDICTS.index) if present else None


def _logged_runs(log: RunLogContents) -> tuple[list[RunRecord], list[str]]:
    """The log's run lines as :class:`RunRecord` objects; lines that do not fit are left out with a note."""
    import dacite

    out, notes = [], []
    for i, record in enumerate(log.records, start=1):
        try:
            run = dacite.from_dict(RunRecord, record, config=_dacite_config())
        except (dacite.DaciteError, TypeError, ValueError, KeyError) as exc:
            notes.append(f"run {i} of the log is damaged ({exc}); left out")
            continue
        if not (run.comparison is None or isinstance(run.comparison, (LogitComparison, TopKComparison))):
            notes.append(f"run {i} of the log has a damaged comparison; left out")
            continue
        out.append(run)
    return out, notes


def worst_verdict(verdicts: Sequence[tuple[int, Verdict]]) -> tuple[int, Verdict]:
    """The A/B verdict: the worst of ``(slot, verdict)`` over the candidate runs (the first one on ties)."""
    return max(verdicts, key=lambda sv: (VERDICTS.index(sv[1].word), -sv[0]))


def speed_blocks(runs: Sequence[RunRecord], metric: str) -> list[Block]:
    """Group measured runs into ABBA/BAAB :class:`Block` s of one metric (tokens/s)."""
    by_block: dict[int, list[RunRecord]] = {}
    for run in runs:
        if run.block is not None:
            by_block.setdefault(run.block, []).append(run)
    blocks = []
    for block_runs in by_block.values():
        values = [getattr(r, metric) for r in sorted(block_runs, key=lambda r: r.position)]
        # A phase an engine does not time (a whole-sequence ``cmd`` run has no decode phase) is left out.
        if len(block_runs) == 4 and all(math.isfinite(v) and v > 0 for v in values):
            blocks.append(Block(min(block_runs, key=lambda r: r.position).pattern, tuple(values)))
    return blocks


def driving_blocks(runs: Sequence[RunRecord]) -> tuple[str, list[Block]]:
    """The metric whose sequential decision stops an auto run: decode tokens/s, or prefill where no decode is timed."""
    blocks = speed_blocks(runs, "decode_tokens_per_second")
    if blocks or not speed_blocks(runs, "prefill_tokens_per_second"):
        return "decode", blocks
    return "prefill", speed_blocks(runs, "prefill_tokens_per_second")


#: The phases of a run timed for speed, and the run field of each one's tokens/s.
PHASES = (("decode", "decode_tokens_per_second"), ("prefill", "prefill_tokens_per_second"))


def analyse_speed(runs: Sequence[RunRecord], *, margin: float | None, seed: int,
                  interleaved_decode: Sequence[Block] | None = None) -> dict[str, PairedComparison]:
    """Paired decode and prefill tokens/s decisions over the complete blocks of ``runs``, but decode's over
    ``interleaved_decode`` where given (``--speed-design interleaved``'s blocks: none, no decode call).

    ``margin`` None: δ from the blocks' A/A (:func:`~logitlab.perf.block_ratios.aa_margin`), but for interleaved
    decode blocks, whose A/A (the control's second half of the steps against its first, inside one engine object)
    leaves out what the design exists to carry, the instance effect: there the documented default
    (:data:`~logitlab.perf.prereg.DEFAULT_SEQUENTIAL_MARGIN`, 2 %, source ``default``). Measured at a load of 2x the
    cores (8 real A/As of 24 blocks): their A/A gave δ 3.1-5.0 %.
    """
    out = {}
    for name, metric in PHASES:
        interleaved = name == "decode" and interleaved_decode is not None
        blocks = list(interleaved_decode) if interleaved else speed_blocks(runs, metric)
        if not blocks:
            continue
        delta = PreregisteredMargin(DEFAULT_SEQUENTIAL_MARGIN, "default") if interleaved and margin is None \
            else margin
        out[name] = paired_comparison(blocks, higher_is_better=True, metric=f"{name} tokens/s", unit="tokens/s",
                                      margin=delta, seed=seed)
    return out
