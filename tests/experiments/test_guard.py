"""The near-tie guard: block decisions, rollback, the spread bound, calibration, and guarded loops.

Synthetic engines come from ``test_verify`` (``ToyEngine``): ``noise`` perturbs only
in-block rows (a re-decode on the same KV fixes it), ``history`` perturbs every row
after a batched write (only an M=1-written history fixes it — llama.cpp's case).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from logitlab.engines.variant import Variant
from logitlab.errors import InputError
from logitlab.experiments.verify import guard as G
from logitlab.experiments.verify import guard_calibration as GC
from logitlab.experiments.prompts import builtin_prompts
from logitlab.experiments.verify.run import VerifyConfig, greedy_m1, replay_mk, run_verify
from logitlab.numerics.floor import topk_spread

from conftest import FakeEngine
from test_verify import ONE_BATCH_THREAD, ToyEngine


def rows_with_margins(margins, argmaxes, vocab=8):
    rows = np.zeros((len(margins), vocab), np.float32)
    for i, (m, a) in enumerate(zip(margins, argmaxes)):
        rows[i, a] = 5.0
        rows[i, (a + 1) % vocab] = 5.0 - m
    return rows


def test_check_block_accepts_rejects_and_triggers():
    inputs = [9, 1, 2, 3]
    rows = rows_with_margins([1.0, 1.0, 1.0, 1.0], [1, 2, 3, 4])
    d = G.check_block(rows, inputs, tau=0.5)
    assert d.tokens == [1, 2, 3, 4] and d.keep == 4 and not d.redecode  # all drafts right, bonus token 4
    d = G.check_block(rows_with_margins([1.0, 1.0, 1.0, 1.0], [1, 5, 3, 4]), inputs, tau=0.5)
    assert d.tokens == [1, 5] and d.keep == 2 and not d.redecode  # draft 2 rejected after row 1
    d = G.check_block(rows_with_margins([1.0, 0.1, 1.0, 1.0], [1, 2, 3, 4]), inputs, tau=0.5)
    assert d.tokens == [1] and d.keep == 1 and d.redecode and d.trigger_row == 1
    d = G.check_block(rows_with_margins([0.1, 0.1, 0.1, 0.1], [1, 2, 3, 4]), inputs, tau=None)
    assert d.tokens == [1, 2, 3, 4] and not d.redecode  # unguarded
    nan_rows = rows.copy()
    nan_rows[0, 0] = np.nan
    assert G.check_block(nan_rows, inputs, tau=0.5).trigger_row == 0
    with pytest.raises(InputError, match="4 inputs but logits of shape"):
        G.check_block(rows[:3], inputs, tau=0.5)


def test_row_margins_and_topk_spread():
    rows = rows_with_margins([0.25, 2.0], [3, 0])
    assert G.row_margins(rows).tolist() == [0.25, 2.0]
    ref = np.array([[3.0, 2.0, 0.0, -1.0]], np.float32)
    obs = ref + np.array([[0.1, -0.2, 5.0, 0.0]], np.float32)
    # top-2 of ref {0, 1}, of obs {2, 0}: Δ over {0, 1, 2} = {0.1, -0.2, 5.0}
    assert topk_spread(ref, obs, k=2)[0] == pytest.approx(5.2)
    assert topk_spread(ref, obs, k=1)[0] == pytest.approx(4.9)


def test_a_row_whose_spread_is_below_its_margin_never_flips():
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, (4000, 32)).astype(np.float32)
    obs = ref + rng.normal(0, 0.3, ref.shape).astype(np.float32)
    spread = topk_spread(ref, obs, k=5)
    margin = G.row_margins(obs)
    flips = ref.argmax(1) != obs.argmax(1)
    covered = spread < margin
    assert flips.any() and covered.any()
    assert not (flips & covered).any()


def test_rollback_uses_truncate_and_refuses_engines_without_it():
    engine = ToyEngine(model="toy", options={})
    with engine.open_session() as session:
        session.prefill([1, 2, 3])
        session.decode([4, 5])
        G.rollback(session, 3)
        assert session.n_past == 3 and session.batched == [False, False, False]
        with pytest.raises(InputError, match="cannot roll back to position 7"):
            G.rollback(session, 7)
    fake = FakeEngine(model="fake", options={})
    with fake.open_session() as session:
        assert not G.supports_rollback(session)
        with pytest.raises(InputError, match=r"fake sessions cannot roll back.*Session\._truncate"):
            G.rollback(session, 0)


def test_unguarded_loop_with_exact_verify_does_the_ideal_work():
    engine = ToyEngine(model="toy", options={"mode": "exact"})
    ref = greedy_m1(engine, [1, 2, 3], 20)
    with engine.open_session() as session:
        run = G.speculative_greedy(session, [1, 2, 3], 20, k=4, draft=G.oracle_draft(ref.tokens))
    assert run.tokens == ref.tokens
    assert run.forward_rows == 19 and run.forward_calls == 5 and run.discarded_rows == 0 and not run.triggers
    ev = GC.evaluate_run(run, ref.tokens, ref.rows)
    assert ev.identical and ev.bit_exact_rows == 20


def calibrated(engine, k=4, n=48, **safety):
    """A calibration replay on two toy prompts."""
    pairs = []
    for ids in ([7, 8, 9], [10, 11, 12, 13]):
        ref = greedy_m1(engine, ids, n)
        pairs.append((ref.decode_rows, replay_mk(engine, ids, ref.tokens, k)[0]))
    return GC.calibrate(pairs, k=k, **safety)


def guarded(engine, prompt, tau, fallback, n=48, k=4):
    ref = greedy_m1(engine, prompt, n)
    with engine.open_session() as session:
        run = G.speculative_greedy(session, prompt, n, k=k, draft=G.oracle_draft(ref.tokens), tau=tau,
                                   fallback=fallback)
    return run, GC.evaluate_run(run, ref.tokens, ref.rows)


def test_calibration_sets_tau_from_the_noise_floor_of_the_verdicts():
    cal = calibrated(ToyEngine(model="toy", options={"mode": "noise", "eps": 0.1}), safety=4.0)
    assert cal.rows == 96 and cal.safety == 4.0 and cal.floor_positions >= 8
    # the floor is the verdict's: p99 of the top-k Δ spread over the rows that differ and kept their argmax
    assert cal.floor is not None and cal.tau == pytest.approx(4 * cal.floor)
    assert cal.floor_reason.startswith("noise floor: p99 of the top-5 Δ spread over the ")
    assert 0 < cal.p50_topk_spread <= cal.floor <= cal.max_topk_spread
    assert cal.tau_full_vocab == pytest.approx(2 * cal.max_abs_diff) and 0 < cal.trigger_rate <= 1
    with pytest.raises(InputError, match="--guard-safety must be > 0"):
        GC.calibrate([], k=4, safety=0)


def test_calibration_without_a_floor_falls_back_on_the_largest_spread():
    ref = np.random.default_rng(0).normal(0, 2, (6, 40)).astype(np.float32)
    obs = ref.copy()
    obs[2] += np.random.default_rng(1).normal(0, 0.01, 40).astype(np.float32)  # 1 differing row < 8
    cal = GC.calibrate([(ref, obs)], k=2, safety=3.0)
    assert cal.floor is None and cal.floor_positions == 1
    assert cal.tau == pytest.approx(3 * cal.max_topk_spread) and "τ = safety × the largest spread" in cal.floor_reason
    exact = GC.calibrate([(ref, ref.copy())], k=2)
    assert exact.tau == 0 and exact.floor is None


def test_redecode_restores_identity_when_only_in_block_numerics_differ():
    engine = ToyEngine(model="toy", options={"mode": "noise", "eps": 0.1})
    tau = 2 * calibrated(engine).max_topk_spread  # τ above every spread the toy makes
    prompt = list(range(1, 30))
    plain, plain_ev = guarded(engine, prompt, None, "redecode")
    run, ev = guarded(engine, prompt, tau, "redecode")
    assert not plain_ev.identical  # the toy flips a near-tie
    assert ev.identical and run.triggers
    assert not any(t.fallback_bit_exact for t in run.triggers if t.block_row >= 1)
    assert run.forward_rows == 47 + run.discarded_rows
    assert ev.verify_rows_over_tau == 0 and ev.redecode_rows_uncovered == 0


def test_history_differences_defeat_redecode_but_not_resync():
    engine = ToyEngine(model="toy", options={"mode": "history", "eps": 0.1})
    tau = 2 * calibrated(engine).max_topk_spread  # τ above every spread the toy makes
    prompt = list(range(1, 30))
    run, ev = guarded(engine, prompt, tau, "redecode")
    # the M=1 re-decode reads KV that M=K rows wrote: it reproduces the M=K row bit for bit
    assert run.triggers and all(t.fallback_bit_exact for t in run.triggers)
    exact, exact_ev = guarded(engine, prompt, tau, "resync")
    assert exact_ev.identical
    redone = [i for i, s in enumerate(exact.sources) if s == G.REDECODE]
    assert redone and exact_ev.redecode_rows_uncovered == 0
    # resync replays M=1, so it feeds more rows than re-decoding one position
    assert exact.forward_rows > run.forward_rows


@pytest.mark.engine
def test_guard_auto_is_token_identical_on_the_default_prompt_set():
    prompts = tuple(builtin_prompts("default"))
    assert len(prompts) >= 8 and {p.kind for p in prompts} >= {"prose", "code", "list", "numbers", "dialogue"}
    config = VerifyConfig(variant=Variant("verify", "llamacpp", options=ONE_BATCH_THREAD), prompts=prompts,
                          ks=(4,), n_decode=16, guard="auto", guard_k=4, detection=False)  # not the subject here
    result = run_verify(config)
    guard = result.guard
    assert guard.source == "auto" and guard.tau > 0
    assert guard.calibration["prompts"] == ["fable", "sql", "interview"]
    resync = [r for r in guard.results if r.fallback == "resync"]
    assert len(resync) == len(prompts) and all(r.identical for r in resync)
    totals = guard.totals["resync"]
    assert totals["identical_prompts"] == len(prompts)
    assert 0 < totals["trigger_rate"] < 1 and totals["extra_rows"] > 0
    assert math.isfinite(totals["overhead_vs_unguarded"]) and totals["m1_seconds_per_token"] > 0
    assert totals["verify_rows_over_tau"] == 0 and totals["corrections"] == 0
    # the cheap re-decode is measured too: on llama.cpp it mostly reproduces the M=K row bit for bit,
    # because the KV entries earlier M=K rows wrote differ from M=1's (it need not be identical)
    redecode = guard.totals["redecode"]
    assert redecode["triggers"] > 0 and redecode["triggers_fallback_exact"] > 0


def test_verify_with_guard_auto_on_a_history_engine_reports_what_is_exact(tmp_path):
    from rich.console import Console

    from logitlab.experiments.prompts import Prompt
    from logitlab.experiments.verify.run import VerifyExperiment
    from logitlab.jsonio import write_json
    from logitlab import report

    engine = ToyEngine(model="toy", options={"mode": "history", "eps": 0.1})
    prompts = tuple(Prompt(f"p{i}", text) for i, text in enumerate(("hello world", "lorem ipsum dolor", "abc")))
    calibration = (Prompt("c1", "calibrate me"), Prompt("c2", "and me too"))
    config = VerifyConfig(variant=Variant("verify", "toy"), prompts=prompts, ks=(1, 4), n_decode=32,
                          guard="auto", guard_k=4, calibration_prompts=calibration)
    result = VerifyExperiment(config, engine=engine).run()
    g = result.guard
    assert g.source == "auto" and g.calibration["prompts"] == ["c1", "c2"] and g.tau > 0
    assert {r.fallback for r in g.results} == {"redecode", "resync"} and len(g.results) == 6
    resync, redecode = g.totals["resync"], g.totals["redecode"]
    assert resync["identical_prompts"] == 3
    assert redecode["triggers_fallback_exact"] == redecode["triggers"] > 0
    assert resync["extra_rows"] > 0 and redecode["extra_rows"] > 0
    # the unguarded baseline comes from the K=4 replay: identity there matches the replay's flips
    for r in g.results:
        flips = [f.output_index for f in result.flips if f.prompt == r.prompt and f.k == 4 and f.output_index < 31]
        assert r.unguarded_identical == (not flips)
    write_json(tmp_path / "v.json", result.to_dict())
    md = report.markdown(result)
    assert "### Near-tie guard" in md and "target — token identity on every prompt" in md
    sweep_header = next(line for line in md.splitlines() if line.startswith("| K | rows"))
    assert sweep_header.count(" | ") == 10 and "max \\|Δ\\|" in sweep_header  # 11 columns, pipes escaped
    # the toy's history differences stay below the margins: redecode repairs every prompt, and the report
    # keeps its warning for when it does not
    assert redecode["identical_prompts"] == 3
    assert "redecode cannot repair a difference that lives in the KV history" not in md
    console = Console(record=True, width=160)
    report.display(result, console)
    text = console.export_text()
    assert "K sweep — all prompts" in text and "guarded speculative greedy, K = 4" in text


def test_a_bit_exact_guarded_run_says_bit_exact_and_names_a_given_tau():
    """M=K rows equal to M=1's, τ given (``--guard 0.5``, no calibration): the report says the logits ARE
    bit-exact and that τ bounds the accepted rows by itself; the K scaling says the batched path computes
    rows the way M=1 does (a new user's report read "not bit-exact ... 4/4 rows bit-exact" and "just not the
    way M=1 does" on such a run)."""
    from logitlab.experiments.verify.run import VerifyExperiment
    from logitlab.report.verify import guard_guarantee_lines
    from test_verify import PROMPTS

    engine = ToyEngine(model="toy", options={"mode": "exact"})
    config = VerifyConfig(variant=Variant("verify", "toy"), prompts=PROMPTS, ks=(1, 2, 4), n_decode=8,
                          guard=0.5, guard_k=2)
    result = VerifyExperiment(config, engine=engine).run()
    assert result.guard.calibration is None
    lines = guard_guarantee_lines(result)
    exact = [line for line in lines if "bit-exact with M=1 greedy:" in line]
    assert len(exact) == 2 and all("logits are bit-exact with M=1" in line for line in exact), lines
    assert all("not bit-exact" not in line for line in lines)
    bounded = [line for line in lines if "rows over τ" in line]
    assert bounded and all("bounded by the given τ only (set with --guard, not calibrated)" in line
                           for line in bounded)
    scaling = result.classification.scaling
    assert "batch-size invariant), and the way M=1 does" in scaling and "just not" not in scaling, scaling
