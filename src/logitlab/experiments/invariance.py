"""Invariance probes: does an engine give the same logits when only the *way* it runs changes?

Three probes, each a list of :class:`Check` s (a reference array, an observed
array, their full-vocabulary :class:`~logitlab.numerics.LogitComparison` and
its verdict) ending in the worst verdict, as ``ab`` does:

``batch``
    The prompt alone (B=1) vs the same prompt inside a batch of B sequences,
    every prompt position compared. On ``hf`` the batch is padded (right and/or
    left, under an attention mask, position ids counting real tokens only); on
    ``llamacpp`` the sequences are parallel sequences (seq ids) of one
    ``llama_batch`` on one context, without padding. ``fill="same"`` repeats the
    prompt B times; ``fill="mixed"`` adds B-1 other sequences of other lengths
    (longer ones make the prompt padded).
``prefill-decode``
    Logits of position p from one prefill of the whole sequence vs from a
    prefill of the first p tokens plus one decode step (KV cache), for every
    position of the prompt plus ``n_decode`` greedy tokens (position 0, with
    nothing before it, from a one-token prefill); on engines that can,
    also vs recomputing position p without a KV cache (``hf``: one forward over
    p+1 tokens).
``determinism``
    The same greedy workload R times (fresh session, engine or process per
    run); distinct logit arrays and distinct greedy texts are counted, and each
    distinct array is compared with run 1 up to the first position whose input
    token differs.
``settings``
    The same greedy workload on the variant as given (the reference) and on the
    variant with each of ``settings`` merged into its options (a fresh engine
    each, replaying the reference's tokens): llama.cpp's ``n_ubatch`` (chunked
    prefill) or thread count. The option sweeps of the invariance matrix
    (:mod:`~logitlab.experiments.invariance_matrix`).
``verify`` and ``process``
    M=1 greedy decode vs M=K verify blocks (:mod:`~logitlab.experiments.invariance_verify`); a fresh engine
    process vs a warm one (:mod:`~logitlab.experiments.invariance_process`): the matrix's axes of those names.

The records (config, checks, result) are :mod:`~logitlab.experiments.invariance_results`; what the probes run
on the engine, :mod:`~logitlab.experiments.invariance_steps`. Both are re-exported here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from logitlab.engines.base import Engine, check_fits
from logitlab.engines.crash import CrashEvidence
from logitlab.engines.supervised import call_engine, engine_supports
from logitlab.errors import EngineCrashed, InputError, Interrupted
from logitlab.events import Event
from logitlab.experiments.base import Experiment
from logitlab.experiments.invariance_process import ProcessAxis
from logitlab.experiments.invariance_results import FILLS, PADDINGS, PROBES, Check, InvarianceConfig, InvarianceResult
from logitlab.experiments.invariance_steps import (
    batch_rows,
    engine_forward_rows,
    filler_sequences,
    planted_decode_row,
    prefill_decode_rows,
    setting_text,
)
from logitlab.experiments.invariance_verify import VerifyAxis
from logitlab.experiments.invariance_server import ServerProbes
from logitlab.experiments.inverse_controls import Control, control, planted_token, rows_text, same_shapes
from logitlab.experiments.isolation import SlotRunner
from logitlab.engines.spill import spill_run, spill_stack
from logitlab.engines.workload import RunOutput, environment, run_workload
from logitlab.manifest import build_manifest
from logitlab.numerics import classify, compare_logits
from logitlab.numerics.topk import compare_topk
from logitlab.numerics.compare import check_top_k
from logitlab.numerics.detection import detection_limits

__all__ = ["PROBES", "PADDINGS", "FILLS", "InvarianceConfig", "Check", "InvarianceResult", "InvarianceProbe",
           "run_invariance", "batch_rows", "prefill_decode_rows", "engine_forward_rows", "planted_decode_row",
           "filler_sequences", "setting_text"]


# -- helpers ---------------------------------------------------------------------------
def _check(name: str, reference_text: str, observed_text: str, reference: np.ndarray, observed: np.ndarray,
           config: InvarianceConfig, token_ids: Sequence[int], details: dict[str, Any] | None = None) -> Check:
    """One check: the two arrays compared (full vocabulary, ``config.top_k``) and classified."""
    comparison = compare_logits(reference, observed, top_k=config.top_k, token_ids=list(map(int, token_ids)))
    verdict = classify(comparison, config.thresholds)
    return Check(name, reference_text, observed_text, comparison, verdict, details or {})


def _topk_check(name: str, reference_text: str, observed_text: str, reference: RunOutput, observed: RunOutput,
                n_rows: int, config: InvarianceConfig, details: dict[str, Any]) -> Check:
    """A check of two runs of an engine that returns only top-k log-probabilities, on their first ``n_rows``
    positions (no detection limit: it needs full logits)."""
    comparison = compare_topk(reference.topk.head(n_rows), observed.topk.head(n_rows), top_k=config.top_k,
                              token_ids=list(map(int, reference.input_ids[:n_rows])))
    return Check(name, reference_text, observed_text, comparison, classify(comparison, config.thresholds), details)


# -- probes ------------------------------------------------------------------------------
class InvarianceProbe(VerifyAxis, ProcessAxis, ServerProbes, Experiment):
    """Runs an :class:`InvarianceConfig`; :func:`run_invariance` is the one-call form."""

    KIND = "invariance"

    def __init__(self, config: InvarianceConfig, *, on_event: Event | None = None):
        super().__init__(config, on_event=on_event)
        self._outputs: list[RunOutput] | None = None  # determinism's runs not yet compared
        self._texts: dict[tuple[int, ...], str] = {}  # determinism: each distinct greedy text, detokenized
        self._control: Control | None = None  # determinism's inverse control (--self-check)
        # each check's compared arrays, by id(check): kept until the worst check's detection limit is measured
        self._arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def run(self) -> InvarianceResult:
        """Run the probe.

        Raises:
            LogitlabError: bad input (a batch size below 1, an engine the probe does
                not support, a prompt too long for the context) or an engine failure; once the probe has
                started, its ``partial`` holds the result so far.
            Interrupted: Ctrl-C while the probe ran; its ``partial`` holds the result so far (determinism: the
                runs finished before it, compared).
        """
        cfg = self.config
        engine = self.load(cfg.variant)  # a crash of the engine under test is the verdict crashed
        try:
            try:
                result = self._start(engine)
            except EngineCrashed as crash:  # it died while loading
                result = InvarianceResult(probe=cfg.probe, config=cfg.to_dict(), manifest=build_manifest(
                    {"engine": cfg.variant.engine, "supervised": True}, cfg.variant), prompt_ids=[])
                return self._crashed(result, crash)

            def body() -> None:
                if cfg.probe == "determinism" and cfg.isolation != "session":
                    # process isolation: the loaded engine is the tokenizer (each run has its own process)
                    self._determinism(result, None, adopt=engine if cfg.isolation == "engine" else None)
                else:
                    {"batch": self._batch, "prefill-decode": self._prefill_decode,
                     "determinism": self._determinism, "settings": self._settings, "verify": self._verify,
                     "process": self._process, "concurrent": self._concurrent,
                     "prefix-cache": self._prefix_cache}[cfg.probe](result, engine)
                self._detect(result)

            return self.measure(result, body, on_stop=self._compare_runs_so_far, on_crash=self._crashed)
        except KeyboardInterrupt:  # before the probe ran (measure turns a later one into Interrupted)
            raise Interrupted("interrupted", partial=None) from None
        finally:
            self.close_engines()

    def _detect(self, result: InvarianceResult) -> None:
        """The detection limits of the worst check (:mod:`logitlab.numerics.detection`); the arrays go after."""
        worst = result.worst
        if self.config.detection and worst is not None and not result.crash:
            arrays = self._arrays.get(id(worst))
            if arrays is not None:
                self.on_event("step", {"what": "detection limits"})
                result.detection = detection_limits(*arrays, worst.comparison, thresholds=self.config.thresholds)
        self._arrays.clear()

    def _checked(self, name: str, reference_text: str, observed_text: str, reference: np.ndarray,
                 observed: np.ndarray, config: InvarianceConfig, token_ids: Sequence[int],
                 details: dict[str, Any] | None = None) -> Check:
        """:func:`_check`, keeping the two arrays for :meth:`_detect`."""
        check = _check(name, reference_text, observed_text, reference, observed, config, token_ids, details)
        self._arrays[id(check)] = (reference, observed)
        return check

    def _crashed(self, result: InvarianceResult, crash: EngineCrashed) -> InvarianceResult:
        """The engine died: its evidence on the result, whose verdict is then ``crashed``."""
        evidence = CrashEvidence.of(crash)
        evidence.variant = self.config.variant.label
        result.crash = evidence.to_dict()
        return result

    def _start(self, engine: Engine) -> InvarianceResult:
        cfg = self.config
        ids = engine.tokenize(cfg.prompt)
        if not ids:
            raise InputError("the prompt has no tokens")
        check_top_k(cfg.top_k, engine.n_vocab)
        # batch runs the prompt alone (no --tokens); the other probes append --tokens greedy tokens.
        check_fits(engine, len(ids), 0 if cfg.probe == "batch" else cfg.n_decode)
        self._detokenize = engine.detokenize
        manifest = build_manifest(engine.describe(), cfg.variant)
        return InvarianceResult(probe=cfg.probe, config=cfg.to_dict(), manifest=manifest, prompt_ids=list(ids))

    # batch ------------------------------------------------------------------------------
    def _batch(self, result: InvarianceResult, engine: Engine) -> InvarianceResult:
        cfg, ids = self.config, result.prompt_ids
        sizes = sorted(set(int(b) for b in cfg.batch_sizes))
        if not engine_supports(engine, "batch"):
            engine.require("batch", "invariance batch")
        fill = cfg.fill or ("mixed" if cfg.slots or engine_supports(engine, "padded-batch") else "same")
        batches = {}  # (B, the prompt's slot) -> the batch's sequences
        for b in sizes:
            others = [list(ids)] * (b - 1) if fill == "same" else filler_sequences(ids, b - 1)
            for slot in range(b) if cfg.slots and b > 1 else (0,):
                batches[(b, slot)] = others[:slot] + [list(ids)] + others[slot:]
        self.on_event("start", {"steps": 1})
        batched = call_engine(engine, batch_rows, ids, batches, cfg.padding, phase=f"batches B={sizes}")
        paddings, pads = batched["paddings"], batched["pads"]
        alone = batched["alone"]
        shapes = batched["forward_rows"]
        self.on_event("step", {"what": "batches"})
        for (b, slot), padding, rows in batched["runs"]:
            seqs = batches[(b, slot)]
            details = {"batch_size": b, "padding": padding, "fill": fill,
                       "lengths": [len(s) for s in seqs], "padded_to": max(len(s) for s in seqs)}
            reference, observed, token_ids = alone, rows[slot], ids
            name = f"B={b}" + (f", slot {slot}" if cfg.slots else "") + \
                (f", {padding} padding" if padding != "none" else "")
            if b == 1:
                name, text = "B=1 again", "the prompt alone, a second time"
            elif fill == "same":
                # Every copy is the prompt in a batch: all B are compared, stacked (copy c = rows c*n..).
                text = (f"all {b} copies of the prompt in one batch, stacked: row c×{len(ids)}+p is copy c, "
                        f"position p")
                # both stacks on disk where they are large (spill_stack): not 2 × B runs in memory
                reference, observed, token_ids = spill_stack([alone] * b), spill_stack(rows), list(ids) * b
                details["stacked"] = {"copies": b, "length": len(ids)}
                details["copies_bit_exact"] = [bool(np.array_equal(alone.view(np.uint32), r.view(np.uint32)))
                                               for r in rows]
            else:
                text = (f"the prompt as sequence {slot} of {b} ({fill}: lengths "
                        f"{', '.join(str(len(s)) for s in seqs)})")
                if cfg.slots:
                    details["slot"] = slot
            alone_rows, batch_rows_ = shapes["alone"], shapes["batches"][(b, slot)]
            details["exercised"] = f"the prompt alone: {rows_text(alone_rows)}; B={b}: {rows_text(batch_rows_)}"
            if b == 1:
                details["vacuous"] = "B=1 is the prompt alone, run again: no batch was exercised"
            elif same_shapes(alone_rows, batch_rows_):
                details["limited"] = ("the same forward row counts as the prompt alone: a kernel chosen by the "
                                      "number of rows ran the same; only the batch's attention (its KV cache, "
                                      "masks, padding) differed")
            result.checks.append(self._checked(name, "the prompt alone (B=1)", text, reference, observed, cfg,
                                               token_ids, details))
        result.details = {"fill": fill, "batch_sizes": sizes, "paddings": paddings, "backend": batched["params"]}
        if cfg.slots:
            result.details["slots"] = True
        if cfg.self_check:
            self._batch_control(result, engine, batches, batched)
        if not pads and cfg.padding is not None:
            result.notes.append(f"{engine.name} batches sequences without padding: --padding does not apply")
        return result

    def _batch_control(self, result: InvarianceResult, engine: Engine, batches: dict[tuple[int, int], list[list[int]]],
                       batched: dict[str, Any]) -> None:
        """The last batch run again with the prompt's last token planted in the prompt's sequence only."""
        ids = result.prompt_ids
        (b, slot), padding, rows = batched["runs"][-1]
        planted = [list(seq) for seq in batches[(b, slot)]]
        last = len(ids) - 1
        planted[slot][last] = planted_token(ids[last], rows[slot].shape[1])
        self.on_event("step", {"what": f"self-check B={b}"})
        again = call_engine(engine, batch_rows, ids, {(b, slot): planted}, [padding] if padding != "none" else None,
                            phase=f"self-check B={b}")
        name = f"B={b}" + (f", slot {slot}" if self.config.slots else "") + \
            (f", {padding} padding" if padding != "none" else "")
        result.controls.append(control(name, f"token {ids[last]} → {planted[slot][last]} at position {last} of "
                                       f"sequence {slot} in B={b}", rows[slot], again["runs"][-1][2][slot], last))

    # prefill vs decode ---------------------------------------------------------------------
    def _prefill_decode(self, result: InvarianceResult, engine: Engine) -> InvarianceResult:
        cfg = self.config
        self.on_event("start", {"steps": 1})
        measured = call_engine(engine, prefill_decode_rows, result.prompt_ids, cfg.n_decode,
                               phase="prefill vs decode")
        self.on_event("step", {"what": "prefill vs decode"})
        if measured["no_kv_cache"]:
            result.notes.append("the engine runs without a KV cache (kv_cache=0): each decode step recomputes "
                                "the whole sequence")
        generated, sequence, full = measured["generated"], measured["sequence"], measured["full"]
        positions = list(range(1, len(sequence)))
        prefill_rows = measured["forward_rows"]
        for name, text, rows in measured["paths"]:
            path_rows = [1] if name.startswith("decode") else None
            details = {"exercised": f"one prefill of all {len(sequence)} tokens: {rows_text(prefill_rows)}; "
                                    + ("each position then from a one-row decode step" if path_rows else
                                       "each position from a forward over tokens 0..p")}
            if path_rows and same_shapes(prefill_rows, path_rows):
                details["vacuous"] = (f"the prefill also ran one row per forward ({rows_text(prefill_rows)}), as "
                                      "the decode steps do: both sides are the same computation")
            result.checks.append(self._checked(
                name, f"one prefill of all {len(sequence)} tokens, row p",
                f"position p from {text} (p = 0: a one-token prefill)",
                full, rows, cfg, sequence,
                {"positions": [0, positions[-1]], "n_prompt": len(result.prompt_ids),
                 "n_generated": len(generated), **details}))
        result.details = {"sequence_ids": sequence, "generated_text": self._detokenize(generated),
                          "positions": [0, positions[-1]]}
        if cfg.self_check:
            last = len(sequence) - 1
            token = planted_token(sequence[last], full.shape[1])
            self.on_event("step", {"what": "self-check decode"})
            row = call_engine(engine, planted_decode_row, sequence, last, token, phase="self-check decode")
            decode = measured["paths"][0][2]
            planted = np.array(decode, copy=True)
            planted[last] = row
            result.controls.append(control("decode vs prefill", f"token {sequence[last]} → {token} in the decode "
                                           f"step at position {last}", decode, planted, last))
        return result

    # determinism -----------------------------------------------------------------------------
    def _determinism(self, result: InvarianceResult, engine: Engine | None, *,
                     adopt: Engine | None = None) -> InvarianceResult:
        """``engine``: session isolation's loaded engine; ``adopt``: engine isolation's supervised engine (a
        fresh engine object per run in its worker). A crash ends the runs: those before it are compared."""
        cfg, ids = self.config, result.prompt_ids
        self.on_event("start", {"steps": cfg.runs})
        outputs: list[RunOutput] = []
        self._outputs = outputs  # compared as they stand if the runs are stopped
        crash: EngineCrashed | None = None
        with SlotRunner({"control": cfg.variant}, cfg.isolation) as runner:
            if adopt is not None:
                runner.adopt("control", adopt)
            for index in range(cfg.runs):
                try:
                    # each run kept to be compared lives on disk where it is large (engines/spill.py): what is
                    # held that the kernel cannot drop is the run being made, not every run so far
                    if engine is not None:  # session isolation: a fresh session per run on the loaded engine
                        with environment(cfg.variant.env):
                            outputs.append(spill_run(run_workload(engine, ids, cfg.n_decode, None)))
                    else:
                        outputs.append(spill_run(runner.run("control", ids, cfg.n_decode, None, slot=index)))
                    generated = tuple(outputs[-1].generated)
                    if generated not in self._texts:  # now, so that a stopped probe needs no engine to report
                        self._texts[generated] = self._detokenize(list(generated))
                except EngineCrashed as exc:
                    crash = exc
                    break
                self.on_event("step", {"what": f"run {index + 1}"})
            if cfg.self_check and crash is None and outputs and outputs[0].topk is not None:
                result.notes.append("--self-check: no inverse control on an engine that returns only top-k "
                                    "log-probabilities (it plants a token in full logits)")
            elif cfg.self_check and crash is None and outputs:
                last = len(ids) - 1
                planted = list(ids)
                planted[last] = planted_token(ids[last], outputs[0].logits.shape[1])
                self.on_event("step", {"what": "self-check run"})
                try:
                    if engine is not None:
                        with environment(cfg.variant.env):
                            extra = run_workload(engine, planted, 0, None)
                    else:
                        extra = runner.run("control", planted, 0, None, slot=cfg.runs)
                except EngineCrashed as exc:
                    crash = exc
                else:
                    self._control = control("runs", f"token {ids[last]} → {planted[last]} at position {last} of "
                                            "one more run", outputs[0].logits[:last + 1], extra.logits, last)
        if crash is not None:
            self._crashed(result, crash)
            if not outputs:
                return result
        self._compare_runs(result, outputs)
        if self._control is not None:
            result.controls.append(self._control)
        return result

    # option settings ---------------------------------------------------------------------------
    def _settings(self, result: InvarianceResult, engine: Engine) -> InvarianceResult:
        """The variant as loaded (greedy) vs a fresh engine per setting (the variant's options with the setting
        merged in), replaying the reference's tokens; each engine is closed once its run is compared."""
        cfg, ids = self.config, result.prompt_ids
        self.on_event("start", {"steps": 1 + len(cfg.settings)})
        with environment(cfg.variant.env):
            reference = run_workload(engine, ids, cfg.n_decode, None)
        reference_rows = call_engine(engine, engine_forward_rows, len(ids), phase="forward rows")
        given = setting_text(cfg.variant.options) or "defaults"
        self.on_event("step", {"what": f"reference ({given})"})
        for setting in cfg.settings:
            name = setting_text(setting)
            variant = dataclasses.replace(cfg.variant, options={**cfg.variant.options, **setting})
            other = self.load(variant)
            try:
                with environment(cfg.variant.env):
                    observed = run_workload(other, ids, cfg.n_decode, reference.generated)
                rows = call_engine(other, engine_forward_rows, len(ids), phase=f"forward rows, {name}")
            finally:
                self.release(other)
            details = {"setting": dict(setting),
                       "exercised": f"the prompt's prefill, reference: {rows_text(reference_rows)}; "
                                    f"with {name}: {rows_text(rows)}"}
            result.checks.append(self._checked(name, f"the variant as given ({given})", f"the variant with {name}",
                                               reference.logits, observed.logits, cfg, reference.input_ids,
                                               details))
            self.on_event("step", {"what": name})
        result.details = {"settings": [dict(s) for s in cfg.settings], "reference": given,
                          "generated_text": self._detokenize(reference.generated)}
        return result

    def _compare_runs_so_far(self, result: InvarianceResult) -> None:
        """After Ctrl-C or an error: determinism's runs finished before it are compared (nothing else to do)."""
        if self._outputs:
            self._compare_runs(result, self._outputs)

    def _compare_runs(self, result: InvarianceResult, outputs: list[RunOutput]) -> None:
        """Determinism's checks and details over ``outputs``, the runs in order (run 1 the reference)."""
        self._outputs = None  # compared (a Ctrl-C from here on keeps what this got to)
        cfg, ids = self.config, result.prompt_ids
        groups: dict[str, list[int]] = {}
        for index, out in enumerate(outputs):
            groups.setdefault(out.bits_key(), []).append(index + 1)  # runs of the same bits, one group
        texts: dict[tuple[int, ...], list[int]] = {}
        for index, out in enumerate(outputs):
            texts.setdefault(tuple(out.generated), []).append(index + 1)
        first = outputs[0]
        for runs in list(groups.values())[1:]:
            other = outputs[runs[0] - 1]
            diverge = next((j for j, (a, b) in enumerate(zip(first.generated, other.generated)) if a != b), None)
            n_rows = len(ids) + (diverge if diverge is not None else cfg.n_decode)
            details = {"runs": runs, "first_differing_token": diverge,
                       "rows_compared": n_rows, "same_text": diverge is None}
            observed_text = f"run {runs[0]}" + ("" if diverge is None else f" (compared up to its first different "
                                                                         f"greedy token, decode step {diverge})")
            name = f"runs {', '.join(map(str, runs))}"
            if first.topk is not None:
                result.checks.append(_topk_check(name, "run 1", observed_text, first, other, n_rows, cfg, details))
            else:
                result.checks.append(self._checked(name, "run 1", observed_text, first.logits[:n_rows],
                                                   other.logits[:n_rows], cfg, first.input_ids[:n_rows], details))
        if first.topk is not None:
            note = (f"the engine returns only the top-{first.topk.requested_k} log-probabilities per position: the "
                    "runs are compared on those (not on full logits), and no detection limit is measured")
            if note not in result.notes:
                result.notes.append(note)
        result.details = {
            "runs": len(outputs),
            "isolation": cfg.isolation,
            "distinct_logits": len(groups),
            "distinct_texts": len(texts),
            "logit_groups": list(groups.values()),
            "text_groups": [{"runs": runs, "text": self._texts[gen]} for gen, runs in texts.items()],
            "decode_tokens_per_second": [round(o.tokens_per_second("decode"), 2) for o in outputs],
        }
        prefill = [o.seconds("prefill") for o in outputs]
        if len(prefill) > 2 and prefill[0] > 0 and float(np.median(prefill[1:])) < prefill[0] / 10:
            result.notes.append(
                f"runs 2..{len(outputs)} prefilled the prompt in a median {float(np.median(prefill[1:])):.3g} s, "
                f"under a tenth of run 1's {prefill[0]:.3g} s: a cache may have answered them, so they may not "
                "have recomputed what this probe compares")
        if len(groups) == 1 and len(outputs) > 1:
            # One distinct array: record an explicit bit-exact check so the verdict reads like ab's.
            name, observed_text = f"runs 2..{len(outputs)}", f"runs 2..{len(outputs)} (all identical)"
            details = {"runs": list(range(2, len(outputs) + 1))}
            if first.topk is not None:
                result.checks.append(_topk_check(name, "run 1", observed_text, first, outputs[-1],
                                                 len(first.input_ids), cfg, details))
            else:
                result.checks.append(self._checked(name, "run 1", observed_text, first.logits,
                                                   outputs[-1].logits, cfg, first.input_ids, details))


def run_invariance(config: InvarianceConfig, **kwargs: Any) -> InvarianceResult:
    """Run one invariance probe; see :class:`InvarianceProbe`."""
    return InvarianceProbe(config, **kwargs).run()
