"""``ab --speed-design interleaved`` on the real embedded model: the decode speed call from interleaved blocks, each
with a new pair of engines; a planted slowdown read at its size; the run log; a crash in the phase is a result."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from logitlab import report
from logitlab.cli import main
from logitlab.engines.supervised import load_supervised
from logitlab.engines.variant import parse_variant
from logitlab.errors import EngineCrashed, InputError
from logitlab.experiments.ab import AbConfig, AbExperiment, run_ab
from logitlab.experiments.ab_interleaved import interleaved_blocks, plan
from logitlab.experiments.ab_results import AbResult, InterleavedSpeed
from logitlab.perf.block_ratios import block_log_ratios
from logitlab.runlog import read_run_log

from conftest import SHORT_PROMPT

TESTS = Path(__file__).resolve().parents[1]


def config(candidate: str = "", *, engine: str = "llamacpp", **kwargs) -> AbConfig:
    kwargs = {"n_decode": 8, "repeats": 2, "warmup": 0, "speed_design": "interleaved", **kwargs}
    return AbConfig(control=parse_variant("", "control", default_engine=engine),
                    candidate=parse_variant(candidate, "candidate", default_engine=engine),
                    prompt=SHORT_PROMPT, **kwargs)


@pytest.mark.engine
def test_decode_speed_comes_from_the_interleaved_blocks_and_the_verdict_from_one_block_of_runs(tmp_path):
    log = tmp_path / "runs.jsonl"
    cpus = os.sched_getaffinity(0)
    result = run_ab(config(repeats=3), log_path=log)  # 3 blocks: rounded up to 4 (as many ABBA as BAAB)
    assert os.sched_getaffinity(0) == cpus  # this process's CPUs given back after the phase
    assert [r.variant for r in result.runs] == ["control", "candidate", "candidate", "control"]
    assert result.verdict.word == "bit-exact" and result.control_reproducible
    speed = result.interleaved
    assert [b.pattern for b in speed.blocks] == ["ABBA", "BAAB", "ABBA", "BAAB"]
    assert all(b.steps == 8 and b.load_seconds > 0 and len(b.rates) == 4 for b in speed.blocks)
    # the plan follows what the engine says of its threads, on this machine's CPUs
    described = _describe()
    single = described["effective"]["n_threads"] == 1
    assert (speed.clock, speed.cpus) == (("cpu", [max(cpus)]) if single else ("wall", None)), described["effective"]
    assert any("rounded" in n or "an even count" in n for n in result.notes)
    decode = result.speed["decode"]
    assert decode.n_blocks == 4 and decode.block_log_ratios == pytest.approx(
        list(block_log_ratios([b.speed_block() for b in speed.blocks])))
    assert result.speed["prefill"].n_blocks == 1  # the one block of runs
    # δ: the documented default, not the A/A of halves inside one engine object (which misses the instance effect)
    assert (decode.margin, decode.margin_source) == (0.02, "default")
    text = report.markdown(result)
    assert "decode speed from 4 interleaved blocks" in text and "1 ABBA block of runs, then 3 interleaved" in text
    assert AbResult.from_dict(result.to_dict()).interleaved == speed
    # the log holds the blocks as they end: a log cut before its end line gives the same decode call; one cut
    # after the second block (the phase's first update is its plan, then one a block) the call over those two
    lines = log.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(line for line in lines if '"log_end"' not in line) + "\n")
    again = AbResult.from_run_log(read_run_log(cut))
    assert again.interleaved is not None and len(again.interleaved.blocks) == 4
    assert again.speed["decode"].ratio == pytest.approx(decode.ratio)
    updates = [i for i, line in enumerate(lines) if '"interleaved"' in line and '"log_update"' in line]
    assert len(updates) == 5
    cut.write_text("\n".join(lines[:updates[2] + 1]) + "\n" + lines[updates[3]][:40])  # and a torn last line
    two = AbResult.from_run_log(read_run_log(cut))
    assert two.error and len(two.interleaved.blocks) == 2 and two.speed["decode"].n_blocks == 2
    first = AbResult.from_run_log(read_run_log(_write(tmp_path / "none.jsonl", lines[:updates[0] + 1])))
    assert "decode" not in first.speed  # no interleaved block yet: no decode call from the one block of runs
    assert json.loads(json.dumps(result.to_dict()))["interleaved"]["clock"] == speed.clock


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _describe() -> dict:
    from logitlab.engines import engine_class

    engine = engine_class("llamacpp")(model=None, options={})
    try:
        return engine.describe()
    finally:
        engine.close()


@pytest.mark.engine
def test_the_load_order_follows_the_pattern_so_a_first_loaded_workers_advantage_cancels():
    # the pair's first-loaded engine is the pattern's first arm: control in ABBA, candidate in BAAB
    cfg = config()
    loads: list[str] = []

    def load(variant):
        loads.append(variant.label)
        return load_supervised(variant)

    speed = interleaved_blocks(cfg.control, cfg.candidate, [1, 2, 3], [4, 5, 6, 7], load=load,
                               speed=InterleavedSpeed(clock="wall", cpus=None, reason="test"),
                               stop=lambda blocks: blocks >= 4)
    assert loads == ["control", "candidate", "candidate", "control"] * 2 and not speed.stopped
    assert [(b.pattern, b.first_loaded) for b in speed.blocks] == [("ABBA", "control"), ("BAAB", "candidate")] * 2


@pytest.mark.engine
@pytest.mark.parametrize("dies, side", [(2, "candidate"), (3, "control")])
def test_a_crash_while_loading_a_baab_pair_names_its_side_and_closes_what_was_loaded(dies, side):
    # block 1 is BAAB: the candidate is loaded first (load 2), then the control (load 3)
    cfg = config()
    loaded: list[int] = []
    closed: list[int] = []
    crashes: list[str] = []

    def load(variant):
        if len(loaded) == dies:
            raise EngineCrashed(f"the {variant.label}'s worker died while loading (test)")
        engine = load_supervised(variant)
        loaded.append(key := len(loaded))
        close = engine.close

        def recording_close(wait=False):
            closed.append(key)
            close(wait=wait)

        engine.close = recording_close
        return engine

    speed = interleaved_blocks(cfg.control, cfg.candidate, [1, 2, 3], [4, 5, 6, 7], load=load,
                               speed=InterleavedSpeed(clock="wall", cpus=None, reason="test"),
                               stop=lambda blocks: blocks >= 4, on_crash=lambda s, crash: crashes.append(s))
    assert len(speed.blocks) == 1 and speed.stopped.startswith("block 1: ") and "died while loading" in speed.stopped
    assert speed.stopped_side == side and crashes == [side]
    assert len(loaded) == dies and set(loaded) <= set(closed)


@pytest.mark.engine
def test_a_planted_slowdown_is_read_at_its_size():
    # the candidate busy-waits half of each decode step's own time more: 1/1.5 of the control's decode tokens/s
    # in the CPU clock (exactly, but for the two engines' own step times), at least that in the wall clock
    result = AbExperiment(config(n_decode=16, repeats=4), plant=0.5).run()
    decode = result.speed["decode"]
    assert decode.ratio < 0.8 and decode.call == "slower", decode
    assert all(b.candidate_seconds > 1.3 * b.control_seconds for b in result.interleaved.blocks)


@pytest.mark.engine
def test_a_crash_in_the_interleaved_phase_is_a_result_and_keeps_the_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    import crash_engine

    crash_engine.register()
    try:
        # every 2nd session of a candidate worker crashes at decode step 2: in the runs its first measured slot;
        # in the interleaved phase the block's session (the warm-up is the first)
        result = run_ab(config("crash_phase=decode,crash_step=2,crash_run=2", engine=crash_engine.NAME, warmup=1),
                        log_path=tmp_path / "r.jsonl")
    finally:
        crash_engine.unregister()
    assert result.verdict.word == "crashed"
    speed = result.interleaved
    assert speed.blocks == [] and speed.stopped.startswith("block 0: ") and speed.stopped_side == "candidate"
    assert "decode" not in result.speed and result.notes[0].startswith("interleaved speed: stopped at block 0")
    assert "(the candidate's engine)" in result.notes[0]
    # the warm-ups, the block of runs and the interleaved phase's crash, a crashed run with its evidence
    assert len(result.runs) == 2 + 4 + 1
    crashed = result.runs[-1]
    assert crashed.pattern == "interleaved" and crashed.variant == "candidate" and crashed.verdict == "crashed"
    assert crashed.crash["signal"] == 11 and crashed.crash["phase"] == "interleaved candidate decode steps 0-3"


@pytest.mark.engine
def test_repeats_auto_looks_at_the_interleaved_blocks_in_pairs():
    result = run_ab(config(repeats="auto", max_repeats=4, n_decode=8))
    decision = result.sequential["decode"]
    assert set(result.sequential) == {"decode"}  # the one block of runs is no sequential design's
    assert len(result.interleaved.blocks) in (4,) and decision.n_blocks == 4 and decision.stop
    assert "looked after every pair of blocks" in report.markdown(result)


def test_speed_design_is_checked_before_any_engine_loads():
    with pytest.raises(InputError, match="--speed-design must be one of runs, interleaved"):
        config(speed_design="steps").validate()
    with pytest.raises(InputError, match="sessions; the control's engine openai has none"):
        config(engine="openai:http://127.0.0.1:9/v1").validate()
    with pytest.raises(InputError, match="--tokens must be at least 2, got 1"):
        config(n_decode=1).validate()
    for budget in (3, 5):
        with pytest.raises(InputError, match=f"--max-repeats must be an even number of at least 4, got {budget}"):
            config(repeats="auto", max_repeats=budget).validate()
    with pytest.raises(InputError, match="a planted slowdown is a setting of --speed-design interleaved"):
        AbExperiment(config(speed_design="runs"), plant=0.1)


def test_the_command_line_refuses_an_engine_without_sessions_in_one_line():
    out = CliRunner().invoke(main, ["ab", "--speed-design", "interleaved", "--engine", "openai:http://127.0.0.1:9/v1",
                                    "--control-model", "m", "--quiet"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines()[-1].startswith("error: --speed-design interleaved alternates"), out.output


@pytest.mark.engine
def test_the_command_line_writes_the_blocks_and_refuses_a_noise_file_of_the_other_design(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["ab", "--speed-design", "interleaved", "--tokens", "4", "--repeats", "2", "--quiet",
                               "--json", str(tmp_path / "il.json")])
    assert out.exit_code == 0, out.output
    saved = json.loads((tmp_path / "il.json").read_text())
    assert saved["config"]["speed_design"] == "interleaved" and len(saved["interleaved"]["blocks"]) == 2
    shown = runner.invoke(main, ["report", str(tmp_path / "il.json")])
    assert shown.exit_code == 0 and "decode speed from 2 interleaved blocks" in shown.output, shown.output
    out = runner.invoke(main, ["ab", "--tokens", "4", "--repeats", "3", "--quiet", "--json", str(tmp_path / "aa.json")])
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["ab", "--speed-design", "interleaved", "--tokens", "4", "--repeats", "auto",
                               "--max-repeats", "6", "--noise", str(tmp_path / "aa.json"), "--quiet"])
    assert out.exit_code == 2
    assert "--noise files measured --speed-design runs; this run has --speed-design interleaved" in out.output


def test_plan_times_single_threaded_cpu_engines_by_cpu_time_on_the_last_cpu():
    one = {"effective": {"n_threads": 1}, "options": {}}
    assert plan(one, one, [0, 1, 2])[:2] == ("cpu", [2])
    assert plan(one, {"effective": {"n_threads": 2}, "options": {}}, [0, 1])[:2] == ("wall", None)
    assert plan(one, {"effective": {"n_threads": 1}, "options": {"n_gpu_layers": 99}}, [0, 1])[:2] == ("wall", None)
    assert plan({}, one, [0, 1])[:2] == ("wall", None)  # an engine that does not say
