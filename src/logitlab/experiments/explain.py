"""``logitlab explain``: a ladder of controls that names one cause per flipped or divergent position.

Engine developers assemble the same evidence by hand when a greedy token
changes: rerun with identical inputs, the row alone vs in its batch (prefill
vs decode), M=1 vs M=K, the tie-break convention on an exact tie, and the
margin against the noise. This experiment runs those controls on the real
engines, position by position.

The pair
    ``ab`` mode: the control's greedy run (the reference) and the candidate
    replaying its tokens, every position compared. Each side's environment
    knobs are set around its runs in this process (the ``cmd`` engine starts
    a process per run, so its knobs always apply; an in-process engine that
    reads a knob at start-up does not see it, as in ``ab --isolation session``). ``verify`` mode (``k``
    set): one variant, M=1 greedy decode rows (the reference) and the same
    tokens replayed as M=K verify blocks (the seed report's probe).

The positions
    every argmax flip and every position the verdict found outside the
    pair's noise floor (:attr:`~logitlab.numerics.Verdict.outside`), in
    order, at most ``max_positions``.

The controls (each on the variant of each side, where the engine can)
    - **rerun**: the same variant, the same token ids, a fresh session:
      is the row bit-identical?
    - **prefill vs decode**: row p computed by one prefill of tokens 0..p
      (a batch of p+1 rows) instead of the run's path (prompt rows: a
      prefill of 0..p-1 and one decode step);
    - **alone vs in a batch** (engines with batches): tokens 0..p alone vs
      as the last of ``batch`` copies (llama.cpp's parallel sequences) or
      next to other sequences (padded engines), the last token's row of
      each, with outputs on the last tokens only, as a server prefills a
      batch (so the worker holds ``batch`` rows, not ``batch`` runs);
    - **M=1 vs M=K**: the M=1 row vs the row of a verify replay in blocks of
      ``width_k`` (decode positions only);
    - **exact tie**: are the top-2 logits of either row bit-identical (then
      the argmax is the tie-break convention's: the first index wins in
      numpy, logitlab and llama.cpp's greedy sampler);
    - **margin vs noise floor**: both margins, the position's top-k Δ spread
      against the pair's floor (:mod:`logitlab.numerics.floor`);
    - **first divergent tensor** (``ab`` mode, engines with dump capture):
      the dump-diff's first differing tensor at that position.

The cause (first that holds; see :data:`CAUSES`)
    1. ``nondeterministic`` — a same-input rerun of either side differs at p;
    2. ``tie-break`` — an exact tie at the top of either row;
    3. ``bug`` — a NaN/Inf mismatch, a change confined to a few entries
       (the verdict's localized-change rule), or p outside the floor with the
       observed argmax outside the reference top-k;
    4. ``batch-variant`` — prefill vs decode, or alone vs in a batch, of the
       same variant changes the argmax at p (a flip), or moves p by at least
       1/floor_factor of the pair's own spread there (a position outside the
       floor);
    5. ``width-variant`` — the same for M=1 vs M=K;
    6. ``kernel-path`` — p outside the floor, every control consistent: a
       different code path (another kernel branch) at that position;
    7. ``near-tie`` — inside the floor, every control consistent.

Nothing here prints; progress leaves through ``on_event``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from logitlab.engines.base import Engine, check_fits
from logitlab.engines.crash import CrashEvidence
from logitlab.engines.supervised import call_engine, engine_supports
from logitlab.engines.variant import Variant
from logitlab.engines.workload import RunOutput, environment, run_workload
from logitlab.errors import EngineCrashed, InputError, Interrupted
from logitlab.events import Event
from logitlab.experiments import crossengine
from logitlab.experiments.base import Experiment
from logitlab.experiments.invariance_steps import filler_sequences
from logitlab.engines.spill import spill, spill_run
from logitlab.experiments.verify.run import greedy_m1, replay_mk
from logitlab.manifest import build_manifest
from logitlab.numerics import Thresholds, Verdict, classify, compare_logits
from logitlab.numerics.compare import check_top_k
from logitlab.numerics.floor import spread_ulps, topk_spread
from logitlab.numerics.verdict import LOCALIZED_FRACTION

__all__ = ["CAUSES", "MODES", "ExplainConfig", "ControlCheck", "PositionEvidence", "ExplainResult",
           "ExplainExperiment", "run_explain"]

from logitlab.experiments.explain_results import (  # noqa: F401  (re-exported)
    CAUSES,
    MODES,
    TIE_BREAK,
    ControlCheck,
    ExplainConfig,
    ExplainResult,
    PositionEvidence,
)


@dataclass
class _Side:
    """One side of the pair: its variant, engine, rows (absolute positions from ``first``) and how they were made."""

    name: str
    variant: Variant
    engine: Engine
    rows: np.ndarray
    path: str  # "m1" (prefill + M=1 decode) or "mk" (prefill + M=K verify blocks)


class ExplainExperiment(Experiment):
    """Runs an :class:`ExplainConfig`; :func:`run_explain` is the one-call form."""

    KIND = "explain"

    def __init__(self, config: ExplainConfig, *, on_event: Event | None = None):
        super().__init__(config, on_event=on_event)

    def run(self) -> ExplainResult:
        """Run the pair, classify it, and the controls at each position.

        Raises:
            LogitlabError: bad input or an engine failure; ``partial`` holds what was measured.
            Interrupted: Ctrl-C; ``partial`` holds what was measured (None before the pair ran).
        """
        cfg = self.config
        try:
            control = self.load(cfg.control)
            candidate = self.load(cfg.candidate) if cfg.mode == "ab" else control
            result = self._start(control, candidate)
            return self.measure(result, lambda: self._run(result, control, candidate), on_crash=self._crashed)
        except KeyboardInterrupt:  # before the pair ran (measure turns a later one into Interrupted)
            raise Interrupted("interrupted", partial=None) from None
        finally:
            self.close_engines()

    # -- steps ----------------------------------------------------------------------
    def _crashed(self, result: ExplainResult, crash: EngineCrashed) -> None:
        """The verdict ``crashed`` with the evidence; the pair's verdict (when it was measured) becomes a note,
        and the positions explained before the crash are kept."""
        evidence = CrashEvidence.of(crash)
        result.crash = evidence.to_dict()
        if result.verdict is not None:
            result.notes.append(f"the pair's verdict before the crash: {result.verdict.word}")
        result.verdict = Verdict("crashed", evidence=[evidence.summary()] + evidence.lines())

    def _start(self, control: Engine, candidate: Engine) -> ExplainResult:
        cfg = self.config
        ids = control.tokenize(cfg.prompt)
        if not ids:
            raise InputError("the prompt tokenizes to no tokens")
        if cfg.mode == "ab" and crossengine.needs_check(cfg.control, cfg.candidate):
            crossengine.check_tokenizers(control, candidate, cfg.prompt)
        sides = {id(control): ("control", control), id(candidate): ("candidate", candidate)}
        for side, engine in sides.values():
            check_top_k(cfg.top_k, engine.n_vocab)
            # extra=1: the margin of one position this check has always kept
            check_fits(engine, len(ids), cfg.n_decode, side=side if len(sides) > 1 else None, extra=1)
        if cfg.mode == "verify":
            control.require("sessions", "explain --k (M=1 vs M=K verify blocks)")
        manifest = build_manifest(control.describe(), cfg.control, cfg.candidate or cfg.control)
        if cfg.mode == "ab":
            pair = [f"control ({cfg.control.label})", f"candidate ({cfg.candidate.label})"]
        else:
            pair = ["M=1 greedy decode", f"M={cfg.k} verify blocks"]
        self._detokenize = control.detokenize
        return ExplainResult(config=cfg.to_dict(), manifest=manifest, mode=cfg.mode, pair=pair, prompt_ids=ids,
                             generated_ids=[], generated_text="", first_position=0)

    def _run(self, result: ExplainResult, control: Engine, candidate: Engine) -> None:
        cfg = self.config
        ids = result.prompt_ids
        self.on_event("step", {"what": "the pair"})
        if cfg.mode == "ab":
            # each side of the pair is kept on disk where it is large (engines/spill.py): what explain holds
            # that the kernel cannot drop is then the run being made, never the pair beside it (issue #31)
            with environment(cfg.control.env):
                ref = spill_run(run_workload(control, ids, cfg.n_decode))
            with environment(cfg.candidate.env):
                obs = spill_run(run_workload(candidate, ids, cfg.n_decode, ref.generated))
            result.generated_ids = list(ref.generated)
            result.first_position = 0
            self._check_shapes(ref, obs)
            sides = (_Side("reference", cfg.control, control, ref.logits, "m1"),
                     _Side("observed", cfg.candidate, candidate, obs.logits, "m1"))
            sequence = ref.input_ids
        else:
            with environment(cfg.control.env):
                m1 = call_engine(control, greedy_m1, ids, cfg.n_decode, phase="M=1 greedy (the pair)")
                m1_rows, tokens = spill(m1.decode_rows), list(m1.tokens)
                del m1  # its rows now on disk where they are large
                mk = spill(call_engine(control, replay_mk, ids, tokens, cfg.k,
                                       phase=f"verify blocks M={cfg.k} (the pair)")[0])
            result.generated_ids = tokens
            result.first_position = len(ids)
            sides = (_Side("reference", cfg.control, control, m1_rows, "m1"),
                     _Side("observed", cfg.control, control, mk, "mk"))
            sequence = list(ids) + tokens
        result.generated_text = self._detokenize(result.generated_ids)
        self._n_prompt = len(ids)
        first = result.first_position
        comparison = compare_logits(sides[0].rows, sides[1].rows, top_k=cfg.top_k,
                                    token_ids=sequence[first:first + len(sides[0].rows)])
        verdict = classify(comparison, cfg.thresholds, judge_topk=cfg.mode == "ab")
        result.comparison, result.verdict = comparison, verdict
        chosen = sorted({f["position"] for f in comparison.flips} | set(verdict.outside))
        result.candidates = len(chosen)
        chosen = chosen[:cfg.max_positions]
        if not chosen:
            result.notes.append("no argmax flip and no position outside the noise floor: nothing to explain")
            return
        self.on_event("start", {"steps": 2 + len(chosen)})
        reruns = self._reruns(result, sides, chosen)
        widths = self._widths(result, sides, [first + i for i in chosen])
        for i in chosen:
            self.on_event("step", {"what": f"position {first + i}"})
            evidence = self._position(result, sides, sequence, i, reruns, widths)
            evidence.cause, evidence.reason = decide(evidence, cfg.thresholds)
            result.positions.append(evidence)
        if cfg.mode == "ab" and cfg.dump:
            self._locate(result, [p.position for p in result.positions])

    def _check_shapes(self, ref: RunOutput, obs: RunOutput) -> None:
        if ref.topk is not None or obs.topk is not None:
            raise InputError("explain needs full logits; this engine returns only top-k log-probabilities "
                             "(openai): compare it with ab")
        if ref.logits.shape != obs.logits.shape:
            raise InputError(f"the two variants returned logits of shapes {ref.logits.shape} and "
                             f"{obs.logits.shape}; explain compares engines with one vocabulary")

    # -- shared controls (one run per side) ----------------------------------------------------
    def _reruns(self, result: ExplainResult, sides: Sequence[_Side],
                chosen: Sequence[int]) -> dict[str, dict[int, np.ndarray]]:
        """Each side again with the same token ids, in a fresh session: its rows at the ``chosen`` positions (by
        row of the pair). Only those rows are kept: each rerun goes as soon as they are copied, so the pair's
        two runs are the only whole runs held (a long prompt's explain held four)."""
        self.on_event("step", {"what": "rerun with identical inputs"})
        out = {}
        ids, gen = result.prompt_ids, result.generated_ids
        for side in sides:
            with environment(side.variant.env):
                if side.path == "mk":
                    rows = call_engine(side.engine, replay_mk, ids, gen, self.config.k,
                                       phase=f"rerun of the {side.name} side")[0]
                elif result.mode == "verify":
                    rows = call_engine(side.engine, _replay_m1, ids, gen, phase=f"rerun of the {side.name} side")
                else:
                    rows = run_workload(side.engine, ids, len(gen), gen).logits
            out[side.name] = {i: np.array(rows[i]) for i in chosen}
            del rows
        return out

    def _widths(self, result: ExplainResult, sides: Sequence[_Side], positions: Sequence[int]) -> dict[str, Any]:
        """Per side: the decode rows of the same variant at the other width (M=K for an M=1 side, M=1 for an
        M=K side) — the pair's own rows, or of a replay only the rows at the decode ``positions`` explained (by
        decode step), each replay let go once they are copied — or a note when the engine has no sessions."""
        cfg = self.config
        out: dict[str, Any] = {}
        ids, gen = result.prompt_ids, result.generated_ids
        steps = [p - len(ids) for p in positions if p >= len(ids)]
        self.on_event("step", {"what": f"M=1 vs M={cfg.width_k} replays"})
        for side in sides:
            if not engine_supports(side.engine, "sessions"):
                out[side.name] = f"{side.engine.name} runs whole workloads: no M=K verify blocks"
            elif side.path == "mk":
                out[side.name] = sides[0].rows  # the M=1 rows of the same variant: the pair itself
            elif result.mode == "verify" and cfg.width_k == cfg.k:
                out[side.name] = sides[1].rows
            else:
                with environment(side.variant.env):
                    rows = call_engine(side.engine, replay_mk, ids, gen, cfg.width_k,
                                       phase=f"M={cfg.width_k} replay of the {side.name} side")[0]
                out[side.name] = {j: np.array(rows[j]) for j in steps}
                del rows
        return out

    # -- one position -------------------------------------------------------------------------
    def _position(self, result: ExplainResult, sides: Sequence[_Side], sequence: list[int], i: int,
                  reruns: dict[str, dict[int, np.ndarray]], widths: dict[str, Any]) -> PositionEvidence:
        cfg, c = self.config, result.comparison
        p = result.first_position + i
        ref, obs = sides[0].rows[i], sides[1].rows[i]
        k = cfg.top_k
        top_r, top_o = _top(ref, k), _top(obs, k)
        floor = result.verdict.floor or {}
        floor_value = floor.get("value") if floor.get("measured") else None
        spread = c.row_topk_spread[i] if c.row_topk_spread else None
        flip = c.row_argmax_ref[i] != c.row_argmax_obs[i]
        outside = i in result.verdict.outside
        kind = "flip outside the floor" if flip and outside else "flip" if flip else "outside the floor"
        evidence = PositionEvidence(
            position=p, input_token=int(sequence[p]), kind=kind,
            token_ref=int(c.row_argmax_ref[i]), token_obs=int(c.row_argmax_obs[i]),
            margin_ref=c.row_margin_ref[i], margin_obs=c.row_margin_obs[i],
            spread=spread, spread_ulps=spread_ulps(c, i), floor=floor_value,
            floor_factor=spread / floor_value if spread is not None and floor_value else None,
            top_ref=[[t, v] for t, v in top_r], top_obs=[[t, v] for t, v in top_o],
            texts={}, exact_tie_ref=_exact_tie(ref), exact_tie_obs=_exact_tie(obs),
            differing_entries=int(c.row_differing[i]),
            localized=bool(c.row_differing[i] and c.row_scaled_ulp[i] > cfg.thresholds.max_ulp
                           and c.row_differing[i] < LOCALIZED_FRACTION * c.n_vocab),
            nonfinite_mismatch=int(np.count_nonzero(np.isfinite(ref) != np.isfinite(obs))
                                   + np.count_nonzero(~np.isfinite(ref) & ~np.isfinite(obs)
                                                      & (ref.view(np.uint32) != obs.view(np.uint32)))),
        )
        tokens = {t for t, _ in top_r} | {t for t, _ in top_o} | {int(sequence[p])}
        evidence.texts = {int(t): self._detokenize([int(t)]) for t in sorted(tokens)}
        pair_spread = spread or 0.0
        for side in sides:
            row = side.rows[i]
            evidence.controls.append(self._check("rerun", side.name, row, reruns[side.name][i], flip, pair_spread,
                                                 "the same variant and token ids, a fresh session"))
            evidence.controls.append(self._path_control(side, sequence, p, row, flip, pair_spread))
            evidence.controls.append(self._batch_control(side, sequence, p, flip, pair_spread))
            evidence.controls.append(self._width_control(side, widths[side.name], result.first_position, p, i,
                                                         result.prompt_ids, row, flip, pair_spread))
        return evidence

    def _check(self, control: str, side: str, row: np.ndarray, other: np.ndarray, flip: bool, pair_spread: float,
               note: str) -> ControlCheck:
        a, b = np.asarray(row, np.float32), np.asarray(other, np.float32)
        spread = float(topk_spread(a[None], b[None], self.config.top_k)[0])
        kept = int(np.argmax(a)) == int(np.argmax(b))
        exact = bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
        if control == "rerun":
            accounts = not exact
        elif flip:
            accounts = not kept
        else:
            accounts = spread >= pair_spread / self.config.thresholds.floor_factor and spread > 0
        return ControlCheck(control, side, True, exact, kept, int(np.argmax(b)), spread, accounts, note)

    def _path_control(self, side: _Side, sequence: list[int], p: int, row: np.ndarray, flip: bool,
                      pair_spread: float) -> ControlCheck:
        name = "prefill vs decode"
        engine = side.engine
        if not engine_supports(engine, "sessions"):
            return ControlCheck(name, side.name, False, note=f"{engine.name} runs whole workloads: no session")
        if side.path == "mk":
            return ControlCheck(name, side.name, False, note="an M=K verify row: the M=1 side's control compares "
                                                              "prefill with M=1 decode")
        if p >= self._n_prompt:
            with environment(side.variant.env):
                other = call_engine(engine, _prefill_row, sequence, p, phase=f"prefill control at position {p}")
            note = f"row {p} of one prefill of tokens 0..{p} vs the run's row"
        elif p == 0:
            return ControlCheck(name, side.name, False, note="position 0 has no shorter prefill")
        else:
            with environment(side.variant.env):
                other = call_engine(engine, _decode_row, sequence, p, phase=f"decode control at position {p}")
            note = f"prefill of tokens 0..{p - 1} and one decode step vs the run's prefill row"
        return self._check(name, side.name, row, other, flip, pair_spread, note)

    def _batch_control(self, side: _Side, sequence: list[int], p: int, flip: bool,
                       pair_spread: float) -> ControlCheck:
        name = "alone vs in a batch"
        engine, b = side.engine, self.config.batch
        if not engine_supports(engine, "batch"):
            return ControlCheck(name, side.name, False, note=f"{engine.name} does not run batches of sequences")
        seq = list(sequence[:p + 1])
        padded = engine_supports(engine, "padded-batch")
        batch = [seq] + filler_sequences(seq, b - 1) if padded else [seq] * b
        with environment(side.variant.env):
            alone, inside = call_engine(engine, _alone_and_batched, seq, batch, 0 if padded else b - 1,
                                        phase=f"batch control at position {p}")
        note = (f"tokens 0..{p} alone vs " + (f"as sequence 0 of {b}, left-padded among other lengths" if padded
                                               else f"as the last of {b} copies in one batch")
                + ", the last token's row of each (outputs on the last tokens, as a server prefills a batch)")
        return self._check(name, side.name, alone, inside, flip, pair_spread, note)

    def _width_control(self, side: _Side, width: Any, first: int, p: int, i: int, prompt_ids: list[int],
                       row: np.ndarray, flip: bool, pair_spread: float) -> ControlCheck:
        name = f"M=1 vs M={self.config.width_k if side.path == 'm1' else self.config.k}"
        if isinstance(width, str):
            return ControlCheck(name, side.name, False, note=width)
        n_prompt = len(prompt_ids)
        if p < n_prompt:
            return ControlCheck(name, side.name, False, note="a prompt position: no verify block holds it")
        j = p - n_prompt  # row of the decode replays (their first row is position n_prompt)
        k = self.config.width_k if side.path == "m1" else self.config.k
        note = (f"the M=1 decode row vs the row in an M={k} verify block (in-block row {j % k})" if side.path == "m1"
                else f"the M={k} verify row (in-block row {j % k}) vs the M=1 decode row")
        return self._check(name, side.name, row, width[j], flip, pair_spread, note)

    # -- dumps ---------------------------------------------------------------------------------
    def _locate(self, result: ExplainResult, positions: list[int]) -> None:
        cfg = self.config
        from logitlab.engines import engine_class

        if not all(engine_class(v.engine).supports("dump") for v in (cfg.control, cfg.candidate)):
            result.notes.append("first divergent tensor: not located (the engines cannot dump tensors)")
            return
        from logitlab.dumps import localize
        from logitlab.dumps.filters import TensorFilter

        self.on_event("step", {"what": "dumping both sides"})
        n_prompt = len(result.prompt_ids)
        steps = min(max(1, max(positions) - n_prompt + 1), len(result.generated_ids))
        try:
            summary = localize(cfg.control, dataclasses.replace(cfg.candidate, label="candidate"),
                               result.prompt_ids, result.generated_ids[:steps],
                               select=TensorFilter(positions=frozenset(positions)))
        except EngineCrashed as crash:  # the positions are explained: a crash of the tensor dumps is a note
            result.notes.append(f"first divergent tensor: not located: {crash}")
            return
        by_position = {int(k): v for k, v in (summary.get("first_by_position") or {}).items()}
        for evidence in result.positions:
            evidence.first_divergent_tensor = by_position.get(evidence.position)
        result.dump = {k: summary.get(k) for k in ("verdict", "n_compared", "n_differing", "first_divergence")}


def _prefill_row(engine: Engine, sequence: Sequence[int], p: int) -> np.ndarray:
    """Row ``p`` of one prefill of tokens 0..p (``(n_vocab,)`` float32)."""
    with engine.open_session() as session:
        return session.prefill(list(sequence[:p + 1]))[-1]


def _decode_row(engine: Engine, sequence: Sequence[int], p: int) -> np.ndarray:
    """Row ``p`` from a prefill of tokens 0..p-1 and one decode step (``(n_vocab,)`` float32)."""
    with engine.open_session() as session:
        session.prefill(list(sequence[:p]))
        return session.decode([int(sequence[p])])[0]


def _alone_and_batched(engine: Engine, seq: list[int], batch: list[list[int]],
                       which: int) -> tuple[np.ndarray, np.ndarray]:
    """The last row of ``seq`` alone and of ``batch[which]`` in the batch, left-padded, on one batch backend
    (two ``(n_vocab,)`` float32 rows).

    Both runs ask for the last token's row of each sequence only (``BatchRun.run(outputs="last")``): the worker
    holds B rows, not B runs, and two rows cross back (before issue #31 every row of every sequence did: B + 1
    runs, explain's peak on a long prompt)."""
    backend = engine.open_batch(len(batch), sum(len(s) for s in batch))
    try:
        alone = backend.run([seq], "left", outputs="last")[0][-1]
        return alone, backend.run(batch, "left", outputs="last")[which][-1]
    finally:
        backend.close()


def _replay_m1(engine: Engine, prompt_ids: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """M=1 decode rows of ``tokens`` after the prompt (``(len(tokens), n_vocab)``), as :func:`greedy_m1` keeps them."""
    with engine.open_session() as session:
        session.prefill(prompt_ids)
        return np.concatenate([session.decode([int(t)]) for t in tokens])


def _top(row: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k largest entries, value descending, lower id first on ties (np.argmax's rule)."""
    order = np.lexsort((np.arange(row.size), -row.astype(np.float64)))[:k]
    return [(int(t), float(row[t])) for t in order]


def _exact_tie(row: np.ndarray) -> bool:
    top = _top(row, 2)
    return bool(len(top) == 2 and np.float32(top[0][1]).view(np.uint32) == np.float32(top[1][1]).view(np.uint32))


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def decide(e: PositionEvidence, thresholds: Thresholds) -> tuple[str, str]:
    """The cause of one position (see the module notes) and the line that decided it."""
    reruns = [c for c in e.controls if c.control == "rerun" and c.available and not c.bit_exact]
    if reruns:
        return "nondeterministic", (f"a rerun with identical inputs changes the {reruns[0].side} row (top-k Δ spread "
                                    f"{_g(reruns[0].spread)}): the engine does not reproduce itself here")
    if e.exact_tie_ref or e.exact_tie_obs:
        which = "reference" if e.exact_tie_ref else "observed"
        top = e.top_ref if e.exact_tie_ref else e.top_obs
        return "tie-break", (f"the {which} row's top-2 tokens {top[0][0]} and {top[1][0]} tie exactly at "
                             f"{top[0][1]:.6g}: the argmax is the tie-break convention's ({TIE_BREAK})")
    outside = e.kind != "flip"
    if e.nonfinite_mismatch:
        return "bug", f"{e.nonfinite_mismatch} entries are NaN/Inf on one side only"
    if e.localized:
        return "bug", (f"the change is confined to {e.differing_entries} entries of the row (< "
                       f"{100 * LOCALIZED_FRACTION:g} %): arithmetic noise moves every logit of a row")
    top_ref = [t for t, _ in e.top_ref]
    if outside and e.token_obs != e.token_ref and e.token_obs not in top_ref:
        return "bug", (f"outside the noise floor, and the observed argmax {e.token_obs} is not among the reference "
                       f"top-{len(top_ref)}: not a swap of competing tokens")
    for family, label in (("prefill vs decode", "batch-variant"), ("alone vs in a batch", "batch-variant"),
                          ("M=1", "width-variant")):
        hits = [c for c in e.controls if c.control.startswith(family) and c.available and c.accounts]
        if hits:
            c = hits[0]
            what = (f"changes the argmax to {c.argmax_other}" if not c.argmax_kept else
                    f"moves it by {_g(c.spread)} (≥ 1/{_g(thresholds.floor_factor)} of the pair's {_g(e.spread)})")
            return label, f"{c.control} on the {c.side} side alone {what} at this position"
    if outside:
        return "kernel-path", (f"top-k Δ spread {_g(e.spread)} = {_g(e.floor_factor)}× the pair's noise floor "
                               f"{_g(e.floor)} (> floor_factor {_g(thresholds.floor_factor)}), reproducible, and no "
                               "control moves it: another code path at this position")
    margin = "inside the noise floor" if e.floor is not None else "at a margin below near_tie_margin (no floor)"
    return "near-tie", (f"margin {_g(e.margin_ref)} {margin} (spread {_g(e.spread)}"
                        + (f" = {_g(e.floor_factor)}× the floor {_g(e.floor)}" if e.floor else "")
                        + "), reproducible, and no control flips it alone")


def run_explain(config: ExplainConfig, **kwargs: Any) -> ExplainResult:
    """Run ``explain``; see :class:`ExplainExperiment`."""
    return ExplainExperiment(config, **kwargs).run()
