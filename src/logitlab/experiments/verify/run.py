"""``logitlab verify``: speculative-decoding verify probe (M=1 vs M=K) and the near-tie guard.

Method (the seed report's ``verify_logits_probe``): for each prompt, decode N
tokens greedily with M=1 and keep every position's full logits. Then replay
the same continuation as M=K verify blocks whose draft tokens are the greedy
tokens themselves: block b feeds ``g[bK : bK+K]``, so verify row j of block b
has exactly the causal inputs of the M=1 forward of ``g[bK+j]``, and any logit
difference is the engine's numerics. Rows are compared with the comparison
core, per K (the K sweep), per prompt and in total; flips are recorded with
both argmaxes, logits, margins and top-k lists; the whole is classified with
evidence (:func:`classify_verify`). With a guard, a speculative greedy loop
runs under the near-tie guard (:mod:`logitlab.experiments.verify.guard`) and is
checked token by token against M=1 greedy.

Positions: ``output_index`` i is the i-th decode row (input token ``g[i]``,
predicting ``g[i+1]``); ``position`` is its absolute position in the sequence
(``n_prompt + i``); ``block_start`` = ``i - i % K``; ``row`` = ``i % K``
(the seed report's "K-block P=24 row 3").
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.engines.base import Engine, Session, check_fits
from logitlab.engines.crash import CrashEvidence
from logitlab.engines.supervised import call_engine
from logitlab.errors import EngineCrashed, InputError
from logitlab.events import Event
from logitlab.experiments.base import Experiment
from logitlab.experiments.positions import Selected, decode_selection, parse_positions
from logitlab.experiments.verify import guard as G
from logitlab.experiments.verify import guard_calibration as GC
from logitlab.experiments.verify.classify import Part, classify_verify, in_block_rows, pool_rows, sweep_entry
from logitlab.experiments.verify.config import DEFAULT_KS, FALLBACKS, VerifyConfig  # noqa: F401 (imported from here)
from logitlab.experiments.verify.detection import VerifyRows, k_detection, verdict_k
from logitlab.experiments.verify.results import (
    FlipRecord,
    GuardPromptResult,
    GuardReport,
    PromptRecord,
    SweepEntry,
    VerifyClassification,
    VerifyDetection,
    VerifyResult,
)
from logitlab.manifest import build_manifest
from logitlab.numerics import LogitComparison, compare_logits
from logitlab.numerics.compare import check_top_k, merge_comparisons
from logitlab.numerics.detection import HEADLINE, SHAPES

# -- the replay ------------------------------------------------------------------
@dataclass
class GreedyRun:
    """M=1 greedy decode of one prompt: tokens and rows.

    ``rows[0]`` is the prefill's last row (decides ``tokens[0]``); ``rows[i+1]``
    is the M=1 decode row of input ``tokens[i]``.
    """

    prompt_ids: list
    tokens: list
    rows: np.ndarray
    decode_seconds: float

    @property
    def decode_rows(self) -> np.ndarray:
        """``(N, n_vocab)``: the rows the verify replay is compared with."""
        return self.rows[1:]


def verify_call(session: Session) -> Callable[[Sequence[int]], np.ndarray]:
    """The session's M=K path: its ``verify(tokens)`` method if the adapter has a
    distinct verify kernel, else ``decode(tokens)`` of K tokens."""
    hook = getattr(session, "verify", None)
    return hook if callable(hook) else session.decode


def greedy_m1(engine: Engine, prompt_ids: Sequence[int], n_decode: int) -> GreedyRun:
    """Prefill, then ``n_decode`` greedy M=1 decode calls; keep every row."""
    with engine.open_session() as session:
        rows = [session.prefill(prompt_ids)[-1]]
        tokens: list[int] = []
        start = time.perf_counter()
        for _ in range(n_decode):
            tokens.append(int(np.argmax(rows[-1])))
            rows.append(session.decode([tokens[-1]])[0])
        seconds = time.perf_counter() - start
    return GreedyRun(list(prompt_ids), tokens, np.stack(rows), seconds)


def replay_mk(engine: Engine, prompt_ids: Sequence[int], tokens: Sequence[int], k: int) -> tuple[np.ndarray, float]:
    """Prefill, then feed ``tokens`` as M=K verify blocks; return ``(len(tokens), n_vocab)`` rows and seconds."""
    with engine.open_session() as session:
        session.prefill(prompt_ids)
        call = verify_call(session)
        start = time.perf_counter()
        blocks = [call(list(tokens[b:b + k])) for b in range(0, len(tokens), k)]
        seconds = time.perf_counter() - start
    return np.concatenate(blocks), seconds


# -- the experiment ----------------------------------------------------------------
class VerifyExperiment(Experiment):
    """Runs a :class:`VerifyConfig`; :func:`run_verify` is the one-call form."""

    KIND = VerifyResult.KIND
    LOG_END_EXCLUDE = ("config", "manifest", "prompts", "sweep", "flips", "kind", "schema_version", "positions")

    def __init__(self, config: VerifyConfig, *, on_event: Event | None = None, engine: Engine | None = None,
                 log_path: str | Path | None = None):
        super().__init__(config, on_event=on_event, log_path=log_path)
        self._engine = engine
        #: SHA-256 over the bits of every M=1 and M=K logit row, in run order (a sweep's logits hash)
        self.logits_digest = hashlib.sha256()
        self._parts: dict[int, list[Part]] = {k: [] for k in config.ks}
        #: every prompt's rows, for the detection limits at the end (None: not measured)
        self._rows = VerifyRows(config.ks, len(config.prompts) * config.n_decode) if config.detection else None
        #: --positions: per prompt, the output indices of the decode rows compared (absent: every row)
        self._selected: dict[str, np.ndarray | None] = {}

    def run(self) -> VerifyResult:
        """Run the probe (and the guard).

        Raises:
            LogitlabError: bad input or an engine failure; the exception's
                ``partial`` attribute holds the :class:`VerifyResult` so far.
            Interrupted: Ctrl-C; its ``partial`` holds the :class:`VerifyResult` so far.
        """
        cfg = self.config
        engine = self._engine or self.load(cfg.variant)  # a given engine is the caller's to close
        try:
            crash = None
            try:
                described = engine.describe()
            except EngineCrashed as exc:  # the engine under test died while loading: a result
                described, crash = {"engine": cfg.variant.engine, "supervised": True}, exc
            if crash is None:  # refused before any run, report or log, as ab refuses it
                self._check_contexts(engine)
            positions = None if crash is not None else self._select(engine)  # refused before any run or log
            result = VerifyResult(config=cfg.to_dict(), manifest=build_manifest(described, cfg.variant),
                                  positions=positions)
            self._result = result

            def body() -> None:
                self.open_log({"config": result.config, "manifest": result.manifest,
                               **({"positions": dataclasses.asdict(positions)} if positions else {})})
                if crash is not None:
                    raise crash
                self._run(engine, result)

            return self.measure(result, body, on_crash=self._crashed)
        finally:
            if self._rows is not None:
                self._rows.close()
            self.close_engines()
            self.close_log()

    def _select(self, engine: Engine) -> Selected | None:
        """``--positions``: each prompt's decode rows compared (:attr:`_selected`, by prompt name) and their record;
        None for ``all``.

        Raises:
            InputError: a spec that selects rows past a prompt's run or no decode row of a prompt.
        """
        cfg = self.config
        if parse_positions(cfg.positions).is_all:
            return None
        self._selected = {p.name: decode_selection(cfg.positions, len(engine.tokenize(p.text)), cfg.n_decode,
                                                   name=p.name) for p in cfg.prompts}
        return Selected(cfg.positions, sum(len(rows) for rows in self._selected.values()),
                        len(cfg.prompts) * cfg.n_decode)

    def _log_prompt(self, result: VerifyResult, name: str) -> None:
        """One run-log line per finished prompt: its M=1 run, sweep entries, flips and guarded runs."""
        if not self.has_log:
            return
        self.log_run({
            "prompt": next(p for p in result.prompts if p.name == name).to_dict(),
            "sweep": [e.to_dict() for e in result.sweep if e.prompt == name],
            "flips": [f.to_dict() for f in result.flips if f.prompt == name],
            "guard_results": [r.to_dict() for r in result.guard.results if r.prompt == name] if result.guard else [],
            "batch_invariant": result.batch_invariant,
        })

    def _run(self, engine: Engine, result: VerifyResult) -> None:
        cfg = self.config
        prompt_ids = {p.name: engine.tokenize(p.text) for p in cfg.prompts}
        cal_ids = {p.name: engine.tokenize(p.text) for p in cfg.calibration_prompts} if cfg.guard == "auto" else {}
        engine.require("sessions", "verify (decode of K tokens in a session)")
        call_engine(engine, check_sessions, cfg.guard is not None, phase="opening a session")
        n_guard = len(cfg.guard_fallbacks) + (cfg.guard_k not in cfg.ks) if cfg.guard is not None else 0
        n_detection = len(cfg.ks) if self._rows is not None else 0
        self.on_event("start", {"steps": len(cfg.prompts) * (1 + len(cfg.ks) + n_guard) + 2 * len(cal_ids)
                                + n_detection})

        guard = None
        if cfg.guard is not None:
            guard = GuardReport(tau=0.0, source="fixed", k=cfg.guard_k, calibration=None)
            if cfg.guard == "auto":
                guard.calibration = self._calibrate(engine, cal_ids).to_dict()
                guard.tau, guard.source = guard.calibration["tau"], "auto"
            else:
                guard.tau = float(cfg.guard)
            result.guard = guard
            if self.has_log:
                self.log_update(guard={k: v for k, v in guard.to_dict().items() if k not in ("results", "totals")})

        parts = self._parts
        for prompt in cfg.prompts:
            ids = prompt_ids[prompt.name]
            replays: dict[int, tuple[float, list[int]]] = {}
            first_batched: np.ndarray | None = None  # rows of the smallest K >= 2, to test batch invariance
            self.on_event("step", {"description": f"{prompt.name}: M=1 greedy"})
            ref = call_engine(engine, greedy_m1, ids, cfg.n_decode, phase=f"M=1 greedy (prompt {prompt.name})")
            self.logits_digest.update(np.ascontiguousarray(ref.rows, dtype=np.float32).tobytes())
            result.prompts.append(PromptRecord(prompt.name, prompt.kind, len(ids), ref.tokens,
                                               engine.detokenize(ref.tokens), ref.decode_seconds))
            rows = self._selected.get(prompt.name)
            outputs = list(range(cfg.n_decode)) if rows is None else [int(i) for i in rows]
            ref_rows = ref.decode_rows if rows is None else ref.decode_rows[rows]
            if self._rows is not None:
                self._rows.add(None, ref_rows)
            for k in cfg.ks:
                self.on_event("step", {"description": f"{prompt.name}: M={k} verify"})
                obs, seconds = call_engine(engine, replay_mk, ids, ref.tokens, k,
                                           phase=f"verify blocks M={k} (prompt {prompt.name})")
                self.logits_digest.update(np.ascontiguousarray(obs, dtype=np.float32).tobytes())
                part = self._compare(prompt.name, len(ids), ref_rows, obs if rows is None else obs[rows],
                                     [ref.tokens[i] for i in outputs], outputs)
                c = part.comparison
                result.sweep.append(sweep_entry(prompt.name, k, c, len(ids), cfg.thresholds, seconds,
                                                outputs=outputs))
                result.flips += self._flips(engine, k, part, ref_rows, obs if rows is None else obs[rows])
                parts[k].append(part)
                if self._rows is not None:
                    self._rows.add(k, obs if rows is None else obs[rows])
                if rows is None:  # the guard's unguarded baseline follows from every row's flips
                    replays[k] = (seconds, [f["position"] for f in c.flips])
                if k >= 2:
                    if first_batched is None:
                        first_batched = obs
                    else:
                        same = np.array_equal(obs.view(np.uint32), first_batched.view(np.uint32))
                        result.batch_invariant = same and result.batch_invariant is not False
                del obs
            if guard is not None:
                self._guard_prompt(engine, prompt.name, ids, ref, guard, replays.get(cfg.guard_k))
            self._log_prompt(result, prompt.name)
            self.on_event("prompt", {"prompt": prompt.name})

        for k in cfg.ks:
            result.totals.append(self._total(k, parts[k]))
        result.classification = classify_verify(result.totals, result.flips, cfg.thresholds,
                                                batch_invariant=result.batch_invariant, sweep=result.sweep)
        if guard is not None:
            guard.totals = guard_totals(guard.results, cfg.guard_fallbacks)
        if self._rows is not None:
            every = verdict_k(result.totals)
            for k in cfg.ks:
                self.on_event("step", {"description": f"K={k}: detection limit"})
                result.detection.append(self._detection(k, parts[k], SHAPES if k == every else (HEADLINE,)))

    def _compare(self, name: str, n_prompt: int, ref: np.ndarray, obs: np.ndarray, tokens: list[int],
                 outputs: list[int]) -> Part:
        """Compare M=1 rows ``ref`` with M=K rows ``obs`` (both ``(len(outputs), n_vocab)`` float32), the decode
        rows ``outputs`` of prompt ``name``."""
        return Part(compare_logits(ref, obs, top_k=self.config.top_k, token_ids=tokens), name, n_prompt, outputs)

    def _detection(self, k: int, parts: list[Part], shapes: tuple[str, ...]) -> VerifyDetection:
        """The detection limits of K's pooled comparison (the one its total's verdict is judged on)."""
        merged = merge_comparisons([p.comparison for p in parts])
        owners = [(p.prompt, *p.owner(i)) for p in parts for i in range(p.comparison.n_positions)]
        return k_detection(k, self._rows, merged, owners, self.config.thresholds, shapes)

    # -- pieces ---------------------------------------------------------------
    def _check_contexts(self, engine: Engine) -> None:
        """Each prompt (and ``--guard auto`` calibration prompt) fits the context (else :meth:`_check_context`)."""
        cfg, ids = self.config, lambda prompts: {p.name: engine.tokenize(p.text) for p in prompts}
        self._check_context(engine, ids(cfg.prompts), "the prompt")
        if cfg.guard == "auto":
            self._check_context(engine, ids(cfg.calibration_prompts), "the calibration prompt")

    def _check_context(self, engine: Engine, ids: dict[str, list[int]], what: str) -> None:
        check_top_k(self.config.top_k, engine.n_vocab)
        for name, tokens in ids.items():
            if not tokens:
                raise InputError(f"{what} {name!r} tokenizes to no tokens")
            check_fits(engine, len(tokens), self.config.n_decode, what=what, name=name)

    def _crashed(self, result: VerifyResult, crash: EngineCrashed) -> None:
        """The engine died: the verdict is ``crashed``, with the evidence; the totals cover the prompts that ran."""
        evidence = CrashEvidence.of(crash)
        evidence.variant = self.config.variant.label
        result.crash = evidence.to_dict()
        result.totals = [self._total(k, parts) for k, parts in self._parts.items() if parts]
        result.classification = VerifyClassification(
            word="crashed", cause="crashed", summary=f"the engine crashed in {evidence.phase} ({evidence.status}); "
            f"{len(result.prompts)} prompt(s) reached before it", evidence=evidence.lines(),
            scaling="not measured (the engine crashed)", tau=self.config.thresholds.near_tie_margin)
        if result.guard is not None:
            result.guard.totals = guard_totals(result.guard.results, self.config.guard_fallbacks)

    def _calibrate(self, engine: Engine, cal_ids: dict[str, list[int]]) -> GC.Calibration:
        cfg = self.config
        pairs = []
        for name, ids in cal_ids.items():
            self.on_event("step", {"description": f"calibration {name}: M=1 greedy"})
            ref = call_engine(engine, greedy_m1, ids, cfg.n_decode, phase=f"M=1 greedy (calibration {name})")
            self.on_event("step", {"description": f"calibration {name}: M={cfg.guard_k} verify"})
            obs, _ = call_engine(engine, replay_mk, ids, ref.tokens, cfg.guard_k,
                                 phase=f"verify blocks M={cfg.guard_k} (calibration {name})")
            pairs.append((ref.decode_rows, obs))
        safety = cfg.thresholds.floor_factor if cfg.guard_safety is None else cfg.guard_safety
        return GC.calibrate(pairs, k=cfg.guard_k, safety=safety, top_k=cfg.top_k, prompts=list(cal_ids),
                           min_positions=cfg.thresholds.min_positions, floor_factor=cfg.thresholds.floor_factor)

    def _flips(self, engine: Engine, k: int, part: Part, ref: np.ndarray, obs: np.ndarray) -> list[FlipRecord]:
        """The flips of ``part``; ``ref``/``obs``: its compared rows."""
        out = []
        for f in part.comparison.flips:
            i, a, b = f["position"], f["token_ref"], f["token_obs"]
            at, position = part.owner(i)
            out.append(FlipRecord(
                prompt=part.prompt, k=k, output_index=at, position=position, block_start=at - at % k, row=at % k,
                token_ref=a, token_obs=b, text_ref=engine.detokenize([a]), text_obs=engine.detokenize([b]),
                logit_ref_at_ref=float(ref[i, a]), logit_ref_at_obs=float(ref[i, b]),
                logit_obs_at_ref=float(obs[i, a]), logit_obs_at_obs=float(obs[i, b]),
                margin_ref=f["margin_ref"], margin_obs=f["margin_obs"],
                topk_ref=f["topk_ref"], topk_obs=f["topk_obs"],
            ))
        return out

    def _total(self, k: int, parts: list[Part]) -> SweepEntry:
        merged = merge_comparisons([p.comparison for p in parts])
        owners = [p.owner(i) for p in parts for i in range(p.comparison.n_positions)]
        entry = sweep_entry("all", k, merged, None, self.config.thresholds, index_of=lambda r: owners[r])
        # in-block statistics pooled over prompts (each prompt's blocks start at its output index 0)
        by_row: dict[int, list] = {}
        for p in parts:
            for row in in_block_rows(p.comparison, k, self.config.thresholds, p.outputs):
                by_row.setdefault(row.row, []).append(row)
        entry.in_block = [pool_rows(by_row[j], self.config.thresholds, tests=k) for j in sorted(by_row)]
        entry.first_divergence = None
        for p in parts:
            first = next((p.outputs[i] for i, d in enumerate(p.comparison.row_differing) if d), None)
            if first is not None and (entry.first_divergence is None
                                      or first < entry.first_divergence["output_index"]):
                entry.first_divergence = {"prompt": p.prompt, "output_index": first, "position": p.n_prompt + first,
                                          "block_start": first - first % k, "row": first % k}
        entry.decode_seconds = sum(e.decode_seconds for e in self._sweep_entries(k))
        return entry

    def _sweep_entries(self, k: int) -> list[SweepEntry]:
        return [e for e in self._result.sweep if e.k == k]

    def _guard_prompt(self, engine: Engine, name: str, ids: list[int], ref: GreedyRun, guard: GuardReport,
                      replay: tuple[float, list[int]] | None) -> None:
        """Guarded loops on one prompt, against M=1 greedy and unguarded speculative decoding.

        The unguarded baseline is the K sweep's replay at ``guard_k`` when there
        is one: with the greedy tokens as drafts, an unguarded speculative loop
        feeds exactly the replay's blocks up to its first flip (flip at output
        index i → first differing token i + 1), so its identity follows from
        the replay and its time is the replay's time per row. Otherwise the
        unguarded loop runs.
        """
        cfg = self.config
        n, k = cfg.n_decode, cfg.guard_k
        if replay is not None:
            seconds, flip_rows = replay
            plain_seconds = seconds * (n - 1) / n
            first = next((i + 1 for i in sorted(flip_rows) if i + 1 < n), None)
            plain_identical, plain_first = first is None, first
        else:
            self.on_event("step", {"description": f"{name}: unguarded speculative K={k}"})
            plain = call_engine(engine, speculative_run, ids, n, k, ref.tokens, None, "redecode",
                                phase=f"unguarded speculative K={k} (prompt {name})")
            plain_eval = GC.evaluate_run(plain, ref.tokens, ref.rows, top_k=cfg.top_k)
            plain_seconds = plain.decode_seconds
            plain_identical, plain_first = plain_eval.identical, plain_eval.first_divergence
        ideal_rows = n - 1
        ideal_calls = math.ceil(ideal_rows / k)
        per = max(ideal_rows, 1)
        for fallback in cfg.guard_fallbacks:
            self.on_event("step", {"description": f"{name}: guarded ({fallback}) K={k}"})
            run = call_engine(engine, speculative_run, ids, n, k, ref.tokens, guard.tau, fallback,
                              phase=f"guarded ({fallback}) K={k} (prompt {name})")
            ev = GC.evaluate_run(run, ref.tokens, ref.rows, top_k=cfg.top_k)
            decided = sum(1 for s in run.sources if s != G.PREFILL)
            guard.results.append(GuardPromptResult(
                prompt=name, fallback=fallback, k=k, tokens=len(run.tokens), ideal_rows=ideal_rows,
                ideal_calls=ideal_calls, decided_by_verify=decided,
                triggers=len(run.triggers), trigger_rate=GC.fraction(len(run.triggers), decided),
                forward_rows=run.forward_rows, forward_calls=run.forward_calls, discarded_rows=run.discarded_rows,
                corrections=run.corrections,
                extra_rows=GC.fraction(run.forward_rows - ideal_rows, ideal_rows),
                extra_calls=GC.fraction(run.forward_calls - ideal_calls, ideal_calls),
                seconds_per_token=run.decode_seconds / per, unguarded_seconds_per_token=plain_seconds / per,
                m1_seconds_per_token=ref.decode_seconds / n,
                overhead_vs_unguarded=GC.fraction(run.decode_seconds - plain_seconds, plain_seconds),
                identical=ev.identical, first_divergence=ev.first_divergence,
                unguarded_identical=plain_identical, unguarded_first_divergence=plain_first,
                triggers_fallback_exact=sum(t.fallback_bit_exact for t in run.triggers),
                triggers_token_changed=sum(t.token_verify != t.token_fallback for t in run.triggers),
                evaluation=ev.to_dict(),
            ))


def check_sessions(engine: Engine, guarded: bool) -> None:
    """Open one session (and for a guarded run check its rollback hook): bad abilities fail before any run.

    Raises:
        InputError: the engine has no sessions, or (``guarded``) no rollback.
    """
    engine.require("sessions", "verify (decode of K tokens in a session)")
    with engine.open_session() as session:
        if guarded and not G.supports_rollback(session):
            G.rollback(session, 0)  # raises the InputError that names the missing hook


def speculative_run(engine: Engine, prompt_ids: Sequence[int], n: int, k: int, reference: Sequence[int],
                    tau: float | None, fallback: str) -> G.SpeculativeRun:
    """One speculative greedy run in a new session, its drafts the M=1 greedy tokens ``reference``
    (:func:`~logitlab.experiments.verify.guard.oracle_draft`); ``tau`` None: unguarded."""
    with engine.open_session() as session:
        return guarded_loop(session, prompt_ids, n, k, G.oracle_draft(reference), tau, fallback)


def guarded_loop(session: Session, prompt_ids: Sequence[int], n: int, k: int, draft: G.Draft,
                 tau: float | None, fallback: str) -> G.SpeculativeRun:
    """One speculative greedy run with the guard's ``fallback`` (``redecode`` or ``resync``)."""
    return G.speculative_greedy(session, prompt_ids, n, k=k, draft=draft, tau=tau, fallback=fallback,
                                verify=verify_call(session))


def guard_totals(results: Sequence[GuardPromptResult], fallbacks: Sequence[str]) -> dict[str, Any]:
    """Per fallback: work, time, identity and the measured bound checks, summed over prompts."""
    out: dict[str, Any] = {}
    for fallback in fallbacks:
        rs = [r for r in results if r.fallback == fallback]
        if not rs:
            continue
        ideal_rows = sum(r.ideal_rows for r in rs)
        ideal_calls = sum(r.ideal_calls for r in rs)
        rows = sum(r.forward_rows for r in rs)
        calls = sum(r.forward_calls for r in rs)
        seconds = sum(r.seconds_per_token * max(r.ideal_rows, 1) for r in rs)
        plain = sum(r.unguarded_seconds_per_token * max(r.ideal_rows, 1) for r in rs)
        evs = [r.evaluation for r in rs]
        out[fallback] = {
            "prompts": len(rs),
            "identical_prompts": sum(r.identical for r in rs),
            "unguarded_identical_prompts": sum(r.unguarded_identical for r in rs),
            "triggers": sum(r.triggers for r in rs),
            "trigger_rate": GC.fraction(sum(r.triggers for r in rs), sum(r.decided_by_verify for r in rs)),
            "forward_rows": rows,
            "forward_calls": calls,
            "ideal_rows": ideal_rows,
            "ideal_calls": ideal_calls,
            "extra_rows": GC.fraction(rows - ideal_rows, ideal_rows),
            "extra_calls": GC.fraction(calls - ideal_calls, ideal_calls),
            "seconds_per_token": GC.fraction(seconds, sum(max(r.ideal_rows, 1) for r in rs)),
            "unguarded_seconds_per_token": GC.fraction(plain, sum(max(r.ideal_rows, 1) for r in rs)),
            "m1_seconds_per_token": GC.fraction(sum(r.m1_seconds_per_token for r in rs), len(rs)),
            "overhead_vs_unguarded": GC.fraction(seconds - plain, plain),
            "triggers_fallback_exact": sum(r.triggers_fallback_exact for r in rs),
            "triggers_token_changed": sum(r.triggers_token_changed for r in rs),
            "corrections": sum(r.corrections for r in rs),
            "rows_compared": sum(e["rows_compared"] for e in evs),
            "bit_exact_rows": sum(e["bit_exact_rows"] for e in evs),
            "max_abs_diff": max(e["max_abs_diff"] for e in evs),
            "max_topk_spread_verify": max(e["max_topk_spread_verify"] for e in evs),
            "max_topk_spread_redecode": max(e["max_topk_spread_redecode"] for e in evs),
            "verify_rows_over_tau": sum(e["verify_rows_over_tau"] or 0 for e in evs),
            "rows_uncovered": sum(e["rows_uncovered"] for e in evs),
            "redecode_rows_uncovered": sum(e["redecode_rows_uncovered"] for e in evs),
        }
    return out


def run_verify(config: VerifyConfig, **kwargs: Any) -> VerifyResult:
    """Run the verify probe; see :class:`VerifyExperiment`."""
    return VerifyExperiment(config, **kwargs).run()
