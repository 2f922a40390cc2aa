"""``logitlab ab``: counterbalanced A/B of two engine variants.

Order of work: tokenize the prompt; untimed warmups; ``repeats`` ABBA/BAAB
blocks. The first measured control run decodes greedily and is the reference;
every other run replays its token ids and is compared with it, full vocabulary,
every position. Control runs give the A/A check (does the control reproduce
itself?), candidate runs the A/B verdict, and the slot timings the paired
speed decision. Each run is appended to a JSONL log as soon as it finishes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from logitlab.engines.base import Engine, check_fits
from logitlab.engines.supervised import load_supervised
from logitlab.engines.crash import CrashEvidence
from logitlab.engines.topk import TopKRows, key_kind, rekey_by_text
from logitlab.engines.variant import Variant
from logitlab.engines.workload import RunOutput
from logitlab.errors import EngineCrashed, EngineError, InputError
from logitlab.events import Event
from logitlab.experiments import crossengine
from logitlab.experiments.ab_config import AbConfig
from logitlab.experiments.ab_interleaved import interleaved_blocks, plan
from logitlab.experiments.base import Experiment
from logitlab.experiments.explain import ExplainConfig, ExplainExperiment
from logitlab.experiments.inverse_controls import control, planted_token
from logitlab.experiments.isolation import SlotRunner, load_supervised, stronger_isolation
from logitlab.experiments.positions import select_rows, selection
from logitlab.engines.spill import SPILL_BYTES, is_spilled, spill_run
from logitlab.manifest import build_manifest, busy_machine_note  # noqa: F401  (re-exported)
from logitlab.numerics import LogitComparison, Verdict, classify, compare_logits
from logitlab.numerics.compare import check_top_k
from logitlab.numerics.detection import DetectionLimits, detection_limits
from logitlab.numerics.topk import TopKComparison, compare_topk
from logitlab.numerics.topk_offsets import RowOffsets, on_normaliser, row_offsets
from logitlab.perf.autostop import AutoStop
from logitlab.perf.design import CANDIDATE, CONTROL, Slot, ab_schedule

from logitlab.experiments.ab_results import (  # noqa: F401  (re-exported)
    LOG_HEADER_FIELDS,
    PHASES,
    AbResult,
    Escalation,
    InterleavedRecord,
    InterleavedSpeed,
    RunRecord,
    analyse_speed,
    driving_blocks,
    speed_blocks,
    worst_verdict,
)


#: Rows of the reference checked for NaN/Inf at once (the masks of a block, not of the run).
_CHECK_ROWS = 64


class AbExperiment(Experiment):
    """Runs an :class:`AbConfig`; :func:`run_ab` is the one-call form."""

    KIND = AbResult.KIND
    LOG_END_EXCLUDE = ("config", "manifest", "prompt_ids", "runs", "kind", "schema_version")

    def __init__(self, config: AbConfig, *, log_path: str | Path | None = None, on_event: Event | None = None,
                 loader: Callable[[Variant], Engine] | None = None, keep_first_candidate: bool = False,
                 plant: float = 0.0):
        """``loader``: loads a variant's engine; a sweep worker passes one that keeps engines loaded between jobs
        (``session`` isolation). Default: :func:`load_supervised` (an in-process engine runs in a worker
        process, so that its crash, in its load too, is a ``crashed`` run, not the end of logitlab; at
        ``process`` isolation the loaded engines only tokenize and describe, and each slot has its own
        subprocess). ``keep_first_candidate``: keep the first measured candidate run's logits in
        :attr:`first_candidate` (a sweep digests them); otherwise they are kept only for ``self_check``, and
        later candidate runs are checked against its fingerprint: at most the reference and the run being
        compared are held, never a third run. ``plant``: with ``--speed-design interleaved``, the candidate's
        decode steps busy-wait this fraction of their own time more (a known slowdown, for validity benchmarks;
        :func:`~logitlab.experiments.interleave.step_stream`)."""
        super().__init__(config, on_event=on_event, log_path=log_path)
        self._load = loader or functools.partial(load_supervised, timeout=config.slot_timeout)
        self.reference: RunOutput | None = None
        self.first_candidate: RunOutput | None = None  # whole only when kept (see __init__), else without logits
        self._keep_first_candidate = keep_first_candidate or config.self_check
        self._first_candidate_whole = False
        self._first_candidate_key: str | None = None  # RunOutput.bits_key of the first candidate run, when not kept
        self.candidate_verdicts: list[tuple[int, Verdict]] = []
        self.detection: dict[int, DetectionLimits] = {}  # slot -> limits, for runs that were the worst so far
        self.autostop: AutoStop | None = None
        self._texts: dict[int, str] = {}  # token id -> text (the control's detokenizer), for text-keyed top-k
        self._rekeyed_reference: TopKRows | None = None
        self._rekey_note: str | None = None  # set when an id-keyed side was matched by token text
        self._load_crash: EngineCrashed | None = None  # the candidate's engine crashed while loading
        self.rows: np.ndarray | None = None  # --positions: the rows of each run kept and compared (None: all)
        if plant and config.speed_design != "interleaved":
            raise InputError("a planted slowdown is a setting of --speed-design interleaved's decode steps")
        self._plant = plant
        self._described: dict[str, dict[str, Any]] = {}  # side -> its engine's describe(), for the speed design

    # -- public -------------------------------------------------------------
    def run(self) -> AbResult:
        """Run the experiment.

        Raises:
            LogitlabError: bad input or an engine failure; :class:`~logitlab.errors.Interrupted`
                on Ctrl-C. The exception's ``partial`` holds the :class:`AbResult` measured so far.
        """
        cfg = self.config
        variants = {CONTROL: cfg.control, CANDIDATE: cfg.candidate}
        with SlotRunner(variants, cfg.isolation, slot_timeout=cfg.slot_timeout) as runner:
            # Both engines load before any run: bad options, a context too small or another
            # tokenizer fail here, not after the control has run.
            probe = self._load(cfg.control)  # tokenizer, manifest; detokenizes the greedy text
            engines = [probe]
            try:
                engines.append(candidate := self._load(cfg.candidate))
                if cfg.isolation in ("session", "engine"):  # the runner closes them; engine: fresh objects in
                    # a supervised engine's worker (an unsupervised one is loaded again per slot)
                    runner.adopt(CONTROL, probe)
                    runner.adopt(CANDIDATE, candidate)
                result = self._start(probe, candidate)

                def body() -> None:
                    self.open_log({k: v for k, v in result.to_dict().items() if k in LOG_HEADER_FIELDS})
                    self._run_blocks(runner, result)
                    if cfg.speed_design == "interleaved":
                        self._run_interleaved(result)
                    self._finish(result)
                    if cfg.self_check:
                        self._self_check(runner, result)

                return self.measure(result, body, on_stop=self._summarize_partial)
            finally:
                if not runner.adopted(CONTROL):
                    for engine in engines:
                        engine.close()
                self.close_log()

    # -- steps --------------------------------------------------------------
    def _start(self, probe: Engine, candidate: Engine) -> AbResult:
        cfg = self.config
        prompt_ids = probe.tokenize(cfg.prompt)
        loaded = [(CONTROL, probe)]
        try:
            candidate.n_vocab  # noqa: B018 - a supervised candidate's load is waited for here
            loaded.append((CANDIDATE, candidate))
        except EngineCrashed as crash:  # a result: each candidate slot starts it again and records its crash
            self._load_crash = crash
        for label, engine in loaded:
            check_top_k(cfg.top_k, engine.n_vocab)
            check_fits(engine, len(prompt_ids), cfg.n_decode, side=label)
            if label == CANDIDATE:
                self._described[CANDIDATE] = engine.describe()
        self._probe_describe = probe.describe()
        self._described[CONTROL] = self._probe_describe
        self._detokenize = probe.detokenize
        manifest = build_manifest(self._probe_describe, cfg.control, cfg.candidate)
        manifest["load_seconds"] = {label: round(engine.load_seconds, 4) for label, engine in loaded}
        result = AbResult(config=cfg.to_dict(), manifest=manifest, prompt_ids=prompt_ids,
                          generated_ids=[], generated_text="")
        self.rows, result.positions = selection(cfg.positions, {CONTROL: probe, CANDIDATE: candidate},
                                                len(prompt_ids), cfg.n_decode)
        if self._load_crash is not None:
            evidence = self._load_crash.evidence
            result.notes.append(f"the candidate's engine crashed while loading ({evidence.status if evidence else ''}):"
                                " each candidate slot loads it again; the control's runs and the A/A are measured")
            return result
        if crossengine.needs_check(cfg.control, cfg.candidate):
            self._check_cross_engine(probe, candidate, result)
        else:  # same engine and model: what the candidate's load did differently (options, effective, repacking)
            described = candidate.describe()
            result.manifest["candidate_engine_changes"] = {
                k: v for k, v in described.items() if k != "load_seconds" and self._probe_describe.get(k) != v}
        full = [engine.supports("logits") for engine in (probe, candidate)]
        if full[0] != full[1]:
            topk_side, full_side = ("candidate", "control") if full[0] else ("control", "candidate")
            result.notes.append(
                f"the {full_side} returns full logits, the {topk_side} only top-k log-probabilities: they are "
                f"compared on the top-k the {topk_side} returned (log-softmax of the {full_side}'s logits, moved "
                f"per row onto the {topk_side}'s normaliser: the anchor token, its top-1, takes its value), so "
                "the statistics are top-k only and a per-row constant is not counted as a difference; the "
                "constants are reported as the per-row offsets")
        if (cfg.control.env or cfg.candidate.env) and cfg.isolation != "process":
            if self._probe_describe.get("supervised"):
                result.notes.append(
                    f"environment knobs are set for the whole life of each variant's engine worker (--isolation "
                    f"{cfg.isolation}, supervised): a knob read at start-up takes effect; one read once per "
                    "process stays as the first run left it (--isolation process starts a process per slot)")
            else:
                result.notes.append(
                    f"environment knobs are set around each slot inside this process (--isolation "
                    f"{cfg.isolation}): a knob the engine reads at start-up (most GGML_* variables) only takes "
                    "effect with --isolation process")
        return result

    def _check_cross_engine(self, probe: Engine, candidate: Engine, result: AbResult) -> None:
        """Other engine or model: same token ids (else InputError), vocab and arithmetic notes."""
        crossengine.check_tokenizers(probe, candidate, self.config.prompt)
        described = candidate.describe()
        vocab = crossengine.vocab_note(probe.n_vocab, candidate.n_vocab)
        result.manifest["candidate_engine"] = described
        result.notes += ([vocab] if vocab else []) + crossengine.cross_engine_notes(self._probe_describe, described)

    def _run_blocks(self, runner: SlotRunner, result: AbResult) -> None:
        cfg = self.config
        interleaved = cfg.speed_design == "interleaved"  # one block of runs: the A/A, the verdict, prefill speed
        slots = ab_schedule(1 if interleaved else cfg.max_repeats if cfg.auto else cfg.repeats, warmup=cfg.warmup,
                            randomize=cfg.randomize, seed=cfg.seed)
        self.on_event("start", {"slots": len(slots)})
        for slot in slots:
            if cfg.auto and not interleaved and self.autostop is None and not slot.is_warmup:  # the clock starts
                self.autostop = AutoStop(max_blocks=cfg.max_repeats, max_time=cfg.max_time, margin=cfg.margin,
                                         calibration=cfg.calibration,
                                         metric="decode tokens/s", unit="tokens/s")
            # Every run after the reference replays its tokens (a server may return fewer, merged tokens).
            n_decode = self.config.n_decode if self.reference is None else len(self.reference.generated)
            try:
                output = runner.run(slot.variant, result.prompt_ids, n_decode,
                                    None if self.reference is None else self.reference.generated, slot=slot.index)
            except EngineCrashed as crash:
                self._crashed(slot, crash, result)
                continue
            record = self._record(slot, output, result)
            output = None  # let go before the next slot's run is made: never two runs beside the reference
            result.runs.append(record)
            self._log(record)
            self.on_event("slot", {"slot": slot, "record": record})
            self._check_reference(record, slot)
            if self.autostop is not None and slot.position == 3 and self._stop_now(result, slot.block + 1):
                break

    def _run_interleaved(self, result: AbResult) -> None:
        """``--speed-design interleaved``: the decode speed's blocks (:mod:`~logitlab.experiments.ab_interleaved`),
        each logged as it ends; with ``--repeats auto`` the sequential rule looks after every two blocks.

        The runs' engines stay loaded meanwhile, and the whole phase is logged again after each block: logging one
        line a block instead (with or without closing the runs' engines first) was tried, and real quiet A/As then
        called decode ``slower`` in 6 of 12 runs against 0 of 7 without it (2026-12-08). The suspect: this process's
        garbage collector coming due inside a block (off inside each block, 0 of 5); the statistics page, "Tried and
        held back".
        """
        cfg = self.config
        if self.reference is None or CANDIDATE not in self._described:
            result.notes.append("interleaved speed: not run (no reference run, or the candidate's engine did not load)")
            return
        clock, cpus, reason = plan(self._described[CONTROL], self._described[CANDIDATE],
                                   sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [])
        result.interleaved = speed = InterleavedSpeed(clock=clock, cpus=cpus, reason=reason, plant=self._plant)
        self.log_update(interleaved=dataclasses.asdict(speed))
        if cfg.auto:
            self.autostop = AutoStop(max_blocks=cfg.max_repeats, max_time=cfg.max_time, margin=cfg.margin,
                                     calibration=cfg.calibration, metric="decode tokens/s", unit="tokens/s",
                                     look_every=2)
        total = cfg.max_repeats if cfg.auto else cfg.repeats + cfg.repeats % 2
        if not cfg.auto and cfg.repeats % 2:
            result.notes.append(f"--repeats {cfg.repeats} with --speed-design interleaved: {total} interleaved blocks "
                                "(an even count: as many ABBA as BAAB)")
        if cfg.randomize:
            result.notes.append("--randomize orders the block of runs only: the interleaved blocks alternate ABBA "
                                "and BAAB")
        if self._plant:
            result.notes.insert(0, f"a planted slowdown: the candidate's decode steps busy-wait {100 * self._plant:g} "
                                   "% of their own time more (a validity benchmark, not a measurement of the candidate)")
        self.on_event("interleaved", {"blocks": total, "speed": speed})

        def stop(blocks: int) -> bool:
            if not blocks:
                return False
            if self.autostop is None:
                return blocks >= total
            decision = self.autostop.look(speed.speed_blocks(), blocks_run=blocks)
            self.on_event("look", {"decision": decision})
            return decision.stop

        def logged(record: InterleavedRecord) -> None:
            self.log_update(interleaved=dataclasses.asdict(speed))
            self.on_event("interleaved block", {"record": record})

        def crashed(side: str, crash: EngineCrashed) -> None:  # a crashed run of that side, after the runs
            index = max((r.slot for r in result.runs), default=-1) + 1
            self._crashed(Slot(index=index, variant=side, block=None, position=None, pattern="interleaved"), crash,
                          result)

        interleaved_blocks(cfg.control, cfg.candidate, result.prompt_ids, self.reference.generated, speed=speed,
                           load=functools.partial(load_supervised, timeout=cfg.slot_timeout), stop=stop,
                           on_block=logged, on_crash=crashed)
        if speed.stopped:
            self.log_update(interleaved=dataclasses.asdict(speed))
            result.notes.insert(0, f"interleaved speed: stopped at {speed.stopped} (the {speed.stopped_side}'s "
                                   f"engine); the decode call is over the {len(speed.blocks)} blocks before it")

    def _self_check(self, runner: SlotRunner, result: AbResult) -> None:
        """The inverse control: the candidate once more with the prompt's last token planted (prefill only)."""
        first = self.first_candidate
        if first is None or first.topk is not None:
            result.notes.append("self-check: not run (no candidate run with full logits to plant into)")
            return
        ids = result.prompt_ids
        last = len(ids) - 1
        planted = list(ids)
        planted[last] = planted_token(ids[last], first.logits.shape[1])
        self.on_event("self-check", {})
        try:
            output = runner.run(CANDIDATE, planted, 0, None)
        except EngineCrashed as crash:
            result.notes.append(f"self-check: the candidate crashed on the planted run ({crash})")
            return
        result.controls.append(control("candidate", f"token {ids[last]} → {planted[last]} at position {last}",
                                       first.logits[:last + 1], output.logits, last))
        if result.verdict is not None and result.verdict.word == "bit-exact" and not self.config.candidate.env \
                and not result.manifest.get("candidate_engine_changes", {}) and \
                not crossengine.needs_check(self.config.control, self.config.candidate):
            result.notes.append("self-check: the candidate's engine describes itself exactly as the control's "
                                "(no option, effective setting or buffer differs): the A/B may have compared the "
                                "control with itself")

    def _crashed(self, slot: Slot, crash: EngineCrashed, result: AbResult) -> None:
        """A run whose engine died: a ``crashed`` run (a candidate's is the verdict ``crashed``); the next slot
        of that variant starts the engine again. Without a reference yet (the control crashed first) there is
        no baseline: the crash is raised again, with the evidence, after it is logged."""
        evidence = CrashEvidence.of(crash)
        evidence.slot, evidence.variant = slot.index, slot.variant
        record = RunRecord(slot=slot.index, variant=slot.variant, block=slot.block, position=slot.position,
                           pattern=slot.pattern, isolation=self.config.isolation, prefill_tokens=0,
                           prefill_seconds=0.0, decode_tokens=0, decode_seconds=0.0, crash=evidence.to_dict(),
                           verdict="crashed" if slot.variant == CANDIDATE else None)
        result.runs.append(record)
        self._log(record)
        self.on_event("slot", {"slot": slot, "record": record})
        if slot.variant == CANDIDATE:
            self.candidate_verdicts.append((slot.index, Verdict("crashed", evidence=[evidence.summary()]
                                                                + evidence.lines())))
            return
        if self.reference is None:
            raise EngineCrashed(f"no baseline: {evidence.summary()}; nothing can be compared"
                                + (f"; {evidence.hint}" if evidence.hint else ""), evidence=evidence)
        note = f"{evidence.summary()}: the control is not reliable on this machine"
        if note not in result.notes:
            result.notes.insert(0, note)

    def _stop_now(self, result: AbResult, blocks_run: int) -> bool:
        """--repeats auto: after a block, ask the sequential rule about the blocks so far."""
        phase, blocks = driving_blocks(result.runs)
        self.autostop.metric = f"{phase} tokens/s"
        decision = self.autostop.look(blocks, blocks_run=blocks_run)
        self.on_event("look", {"decision": decision})
        return decision.stop

    def _record(self, slot: Slot, output: RunOutput, result: AbResult) -> RunRecord:
        record = RunRecord(
            slot=slot.index, variant=slot.variant, block=slot.block, position=slot.position,
            pattern=slot.pattern, isolation=self.config.isolation,
            prefill_tokens=output.n_tokens("prefill"), prefill_seconds=output.seconds("prefill"),
            decode_tokens=output.n_tokens("decode"), decode_seconds=output.seconds("decode"),
            scoring=output.scoring,
        )
        if slot.is_warmup:
            return record
        output = select_rows(output, self.rows)
        if self.reference is None:
            record.is_reference = True
            result.fingerprints[CONTROL] = output.fingerprint()
            # a large reference lives in a file on disk (page cache), so that the one run held in memory that the
            # kernel cannot drop is the run being compared: engines/spill.py
            self.reference = spill_run(output)
            if output.topk is None and output.logits.nbytes > SPILL_BYTES and not is_spilled(self.reference.logits):
                result.notes.append(f"the reference run ({output.logits.nbytes / 1e9:.2f} GB) is held in memory, "
                                    "not on disk (LOGITLAB_SPILL=off, a memory file system, too little room on the "
                                    "disk, or the write failed): two runs are held at once")
            result.generated_ids = list(output.generated)
            result.generated_text = self._detokenize(output.generated)
            return record
        comparison, record.row_offsets = self._compare(self.reference.logits, output.logits, slot, output.topk)
        if self._rekey_note and self._rekey_note not in result.notes:
            result.notes.append(self._rekey_note)
        vocab = crossengine.vocab_note(self.reference.logits.shape[1], output.logits.shape[1])
        if output.topk is None and vocab and vocab not in result.notes:
            result.notes.insert(0, vocab)
        if slot.variant == CANDIDATE:
            if self.first_candidate is None:
                result.fingerprints[CANDIDATE] = output.fingerprint()
                whole = self._keep_first_candidate or output.topk is not None  # top-k data: rows of k, kept
                # later candidate runs are checked against a fast key, not the SHA-256 fingerprint kept in the
                # result (0.022 s against 0.252 s a 2k-position run: workload.RunOutput.bits_key)
                self._first_candidate_key = None if whole else output.bits_key()
                # not a slice of the run: a view would keep the whole run's pages (its mapping) alive
                self.first_candidate = spill_run(output) if whole else dataclasses.replace(
                    output, logits=np.empty((0, output.logits.shape[1]), dtype=output.logits.dtype))
                self._first_candidate_whole = whole
            elif self._first_candidate_whole:
                record.candidate_self_exact = self.first_candidate.same_bits(output)
            else:  # its logits were not kept: the same bits iff the same key (XXH3-128 of shape and bits)
                record.candidate_self_exact = self._first_candidate_key == output.bits_key()
        record.comparison = comparison
        verdict = classify(comparison, self.config.thresholds)
        record.verdict = verdict.word
        if slot.variant == CANDIDATE:
            if self.config.detection and comparison.scope == "full" and self._worst_so_far(verdict):
                reference, observed = self.reference.logits, output.logits
                if reference.shape[1] != observed.shape[1]:  # compared on the common prefix: so are the faults
                    reference, observed = crossengine.common_vocab(reference, observed)
                self.detection[slot.index] = detection_limits(reference, observed, comparison,
                                                              thresholds=self.config.thresholds)
            self.candidate_verdicts.append((slot.index, verdict))
        return record

    def _worst_so_far(self, verdict: Verdict) -> bool:
        """Is ``verdict`` worse than every candidate verdict before it (the run the A/B verdict may name)?"""
        return all(verdict.worse_than(v) for _, v in self.candidate_verdicts)

    def _compare(self, reference: np.ndarray, observed: np.ndarray, slot: Slot,
                 observed_topk: TopKRows | None = None) -> tuple[LogitComparison | TopKComparison, RowOffsets | None]:
        """The comparison with the reference, and for top-k data the per-row offsets (the softmax normaliser)."""
        ref_topk = self.reference.topk
        if (ref_topk is None) != (observed_topk is None):
            # Full logits on one side, top-k log-probabilities on the other: the full logits hold the top-k,
            # so both sides are compared on the top-k the top-k side returned (the report says so), with the
            # full side's log-softmax moved per row onto the top-k side's normaliser (its own float order
            # differs by a per-row constant, reported as the offsets).
            returned = ref_topk or observed_topk
            key = self._topk_key(returned)
            if ref_topk is None:
                ref_topk = TopKRows.from_logits(reference, returned.requested_k, key)
                offsets = row_offsets(ref_topk, observed_topk)
                ref_topk = on_normaliser(ref_topk, observed_topk)
            else:
                observed_topk = TopKRows.from_logits(observed, returned.requested_k, key)
                offsets = row_offsets(ref_topk, observed_topk)
                observed_topk = on_normaliser(observed_topk, ref_topk)
            return compare_topk(ref_topk, observed_topk, top_k=self.config.top_k,
                                token_ids=self.reference.input_ids), offsets
        if observed_topk is not None:
            ref_topk, observed_topk = self._same_keys(ref_topk, observed_topk, slot)
            return compare_topk(ref_topk, observed_topk, top_k=self.config.top_k,
                                token_ids=self.reference.input_ids), row_offsets(ref_topk, observed_topk)
        if reference.shape[1] != observed.shape[1]:  # the common prefix; result.notes says so loudly
            reference, observed = crossengine.common_vocab(reference, observed)
        if reference.shape != observed.shape:
            raise EngineError(f"{slot.variant} returned {observed.shape[0]} rows, the reference {reference.shape[0]}")
        ids = self.reference.input_ids
        if self.rows is None:
            return compare_logits(reference, observed, top_k=self.config.top_k, token_ids=ids), None
        return compare_logits(reference, observed, top_k=self.config.top_k,
                              token_ids=[ids[i] for i in self.rows]).at_positions(self.rows), None

    def _topk_key(self, rows: TopKRows) -> Any:
        """How a top-k source names tokens: by id (None: the id itself), or by text (the control's tokenizer)."""
        return self._token_text if key_kind(rows) is str else None

    def _token_text(self, token: int) -> str:
        """One token's text by the control's detokenizer (cached: a server detokenizes over HTTP)."""
        if token not in self._texts:
            self._texts[token] = self._detokenize([token])
        return self._texts[token]

    def _same_keys(self, reference: TopKRows, observed: TopKRows, slot: Slot) -> tuple[TopKRows, TopKRows]:
        """Two top-k sources, one keyed by token id, the other by token text (a server that returns only text): the
        id side re-keyed by text with the control's detokenizer (:func:`~logitlab.engines.topk.rekey_by_text`),
        so that the keys can meet; sources keyed alike are returned as they are."""
        kinds = key_kind(reference), key_kind(observed)
        if None in kinds or kinds[0] is kinds[1]:
            return reference, observed
        id_side, text_side = (CONTROL, slot.variant) if kinds[0] is int else (slot.variant, CONTROL)
        self._rekey_note = (
            f"the {text_side} keys its top-k log-probabilities by token text, the {id_side} by token id: the two "
            f"runs were matched by token text (the {id_side}'s ids detokenized one by one with the control's "
            "tokenizer; where two ids give the same text only the more likely entry is kept: a text-keyed server "
            "returns one entry for them too)")
        if kinds[0] is int:
            if self._rekeyed_reference is None:
                self._rekeyed_reference = rekey_by_text(reference, self._token_text)
            return self._rekeyed_reference, observed
        return reference, rekey_by_text(observed, self._token_text)

    def _check_reference(self, record: RunRecord, slot: Slot) -> None:
        """A reference with NaN/Inf logits leaves nothing to compare against: stop (what ran is kept).

        NaN/Inf in any other run is measured like any difference: its comparison counts them and
        its verdict is ``divergent``.
        """
        if not record.is_reference:
            return
        logits = self.reference.logits
        first, count = None, 0
        for start in range(0, logits.shape[0], _CHECK_ROWS):  # in blocks: the masks stay small
            bad = ~np.isfinite(logits[start:start + _CHECK_ROWS])
            if bad.any():
                count += int(bad.sum())
                if first is None:
                    first = tuple(int(i) for i in np.argwhere(bad)[0])
                    first = (first[0] + start, first[1])
        if first is not None:
            row, token = first
            row = row if self.rows is None else int(self.rows[row])
            raise EngineError(f"the reference run (control, slot {slot.index}) produced {count} NaN/Inf "
                              f"logits, the first at position {row}, token id {token}: nothing can be compared "
                              "against it")

    def _summarize(self, result: AbResult) -> None:
        """The verdict (worst over the candidate runs compared) and the speed calls (complete blocks) of the
        runs measured so far; runs nothing."""
        if self.candidate_verdicts:
            result.verdict_slot, result.verdict = worst_verdict(self.candidate_verdicts)
            result.detection = self.detection.get(result.verdict_slot)
        result.speed = analyse_speed(result.runs, margin=self.config.margin, seed=self.config.seed,
                                     interleaved_decode=result.interleaved_decode_blocks())
        if self.config.auto:
            self._restate_speed(result)

    def _summarize_partial(self, result: AbResult) -> None:
        """:meth:`_summarize` for a run that stopped early (an error, Ctrl-C): what was measured keeps its
        verdict and speed calls. A failure here leaves the runs as they are and never hides the first error."""
        try:
            self._summarize(result)
        except Exception as exc:  # noqa: BLE001 - the run's own error is the one to report
            result.notes.append(f"the runs measured before the stop could not be summarised: {exc}")

    def _finish(self, result: AbResult) -> None:
        cfg = self.config
        if not result.control_reproducible and cfg.escalate:
            self._escalate(result)
        self._summarize(result)
        busy = busy_machine_note()
        if busy:
            result.notes.append(busy)
        if cfg.localize:
            self._localize(result)
        if cfg.explain and result.verdict is not None and (
                result.verdict.outside or any(r.comparison.flips for r in result.measured(CANDIDATE)
                                              if r.comparison is not None)):
            self._explain(result)

    def _explain(self, result: AbResult) -> None:
        """The controls of ``explain`` on this pair (it runs the pair again: the runs are not kept)."""
        cfg = self.config
        self.on_event("explain", {})
        config = ExplainConfig(control=cfg.control, candidate=cfg.candidate, prompt=cfg.prompt,
                               n_decode=cfg.n_decode, max_positions=cfg.explain, top_k=cfg.top_k,
                               thresholds=cfg.thresholds, dump=cfg.localize)
        forward = lambda kind, data: self.on_event("explain", data) if kind == "step" else None  # noqa: E731
        result.explanation = ExplainExperiment(config, on_event=forward).run()

    def _restate_speed(self, result: AbResult) -> None:
        """--repeats auto: the speed calls and CIs valid at the stop (repeated CIs) and their decisions."""
        if self.autostop is None:
            return
        for phase, _ in PHASES:
            if phase == "prefill" and self.config.speed_design == "interleaved":
                continue  # one block of runs: not a sequential design's
            if phase in result.speed:
                result.speed[phase], result.sequential[phase] = self.autostop.restate(
                    result.speed[phase], result.phase_blocks(phase))

    def _localize(self, result: AbResult) -> None:
        """Dump-diff the first pair that is not bit-exact: control/control (A/A) first, else control/candidate."""
        from logitlab.dumps import localize

        differing = [r for r in result.measured(CONTROL) if r.bit_exact is False]
        pair = (self.config.control, self.config.control)
        if not differing:
            differing = [r for r in result.measured(CANDIDATE) if r.bit_exact is False]
            pair = (self.config.control, self.config.candidate)
        if not differing:
            return
        position = differing[0].comparison.first_mismatch["position"]
        steps = min(max(1, position - len(result.prompt_ids) + 1), len(result.generated_ids))
        self.on_event("localize", {"pair": [v.label for v in pair], "decode_steps": steps})
        try:
            summary = localize(pair[0], dataclasses.replace(pair[1], label="candidate"), result.prompt_ids,
                               result.generated_ids[:steps])
        except EngineCrashed as crash:  # the runs are measured: a crash of the tensor dumps is a note
            result.notes.append(f"first divergent tensor: not located: {crash}")
            return
        result.localization = {"pair": [pair[0].label, pair[1].label], "slot": differing[0].slot,
                               "first_mismatch_position": position, "decode_steps": steps, **summary}

    def _escalate(self, result: AbResult) -> None:
        level = self.config.isolation
        while (level := stronger_isolation(level)) is not None:
            self.on_event("escalate", {"isolation": level})
            timeout = self.config.slot_timeout if level == "process" else None
            with SlotRunner({CONTROL: self.config.control}, level, slot_timeout=timeout) as runner:
                outputs = [runner.run(CONTROL, result.prompt_ids, len(result.generated_ids), result.generated_ids)
                           for _ in range(3)]
            exact = sum(outputs[0].same_bits(o) for o in outputs[1:])
            escalation = Escalation(isolation=level, runs=len(outputs) - 1, bit_exact_runs=int(exact))
            result.escalations.append(escalation)
            if escalation.reproducible:
                return

    # -- the run log (logitlab.runlog): one line per run -------------------------------------
    def _log(self, record: RunRecord) -> None:
        if not self.has_log:
            return
        self.log_run(record.to_dict())
        if record.is_reference:
            self.log_update(generated_ids=list(self.reference.generated),
                            generated_text=self._detokenize(self.reference.generated))


def run_ab(config: AbConfig, **kwargs: Any) -> AbResult:
    """Run an A/B experiment; see :class:`AbExperiment`."""
    return AbExperiment(config, **kwargs).run()
