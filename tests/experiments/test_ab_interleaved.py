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
from logitlab.engines.variant import parse_variant
from logitlab.errors import InputError
from logitlab.experiments.ab import AbConfig, AbExperiment, run_ab
from logitlab.experiments.ab_interleaved import plan
from logitlab.experiments.ab_results import AbResult
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
    result = run_ab(config(repeats=3), log_path=log)  # 3 blocks: rounded up to 4 (as many ABBA as BAAB)
    assert [r.variant for r in result.runs] == ["control", "candidate", "candidate", "control"]
    assert result.verdict.word == "bit-exact" and result.control_reproducible
    speed = result.interleaved
    assert [b.pattern for b in speed.blocks] == ["ABBA", "BAAB", "ABBA", "BAAB"]
    assert all(b.steps == 8 and b.load_seconds > 0 and len(b.rates) == 4 for b in speed.blocks)
    # the plan follows what the engine says of its threads, on this machine's CPUs
    described = _describe()
    assert (speed.clock, speed.cpus) == plan(described, described, sorted(os.sched_getaffinity(0)))[:2]
    decode = result.speed["decode"]
    assert decode.n_blocks == 4 and decode.block_log_ratios == pytest.approx(
        list(block_log_ratios([b.speed_block() for b in speed.blocks])))
    assert result.speed["prefill"].n_blocks == 1  # the one block of runs
    text = report.markdown(result)
    assert "decode speed from 4 interleaved blocks" in text
    # the log holds the blocks as they end: a log cut before its end line gives the same decode call
    lines = log.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(line for line in lines if '"log_end"' not in line) + "\n")
    again = AbResult.from_run_log(read_run_log(cut))
    assert again.interleaved is not None and len(again.interleaved.blocks) == 4
    assert again.speed["decode"].ratio == pytest.approx(decode.ratio)
    assert json.loads(json.dumps(result.to_dict()))["interleaved"]["clock"] == speed.clock


def _describe() -> dict:
    from logitlab.engines import engine_class

    engine = engine_class("llamacpp")(model=None, options={})
    try:
        return engine.describe()
    finally:
        engine.close()


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
    assert result.interleaved.blocks == [] and result.interleaved.stopped.startswith("block 0: ")
    assert "decode step 2" in result.interleaved.stopped or "decode steps" in result.interleaved.stopped
    assert "decode" not in result.speed and result.notes[0].startswith("interleaved speed: stopped at block 0")
    assert len(result.runs) == 2 + 4  # the warm-ups and the block of runs: nothing lost


def test_speed_design_is_checked_before_any_engine_loads():
    with pytest.raises(InputError, match="--speed-design must be one of runs, interleaved"):
        config(speed_design="steps").validate()
    with pytest.raises(InputError, match="interleaved alternates decode steps between two open sessions"):
        config(engine="openai:http://127.0.0.1:9/v1").validate()


def test_the_command_line_refuses_an_engine_without_sessions_in_one_line():
    out = CliRunner().invoke(main, ["ab", "--speed-design", "interleaved", "--engine", "openai:http://127.0.0.1:9/v1",
                                    "--control-model", "m", "--quiet"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines()[-1].startswith("error: --speed-design interleaved alternates"), out.output


def test_plan_times_single_threaded_cpu_engines_by_cpu_time_on_the_last_cpu():
    one = {"effective": {"n_threads": 1}, "options": {}}
    assert plan(one, one, [0, 1, 2])[:2] == ("cpu", [2])
    assert plan(one, {"effective": {"n_threads": 2}, "options": {}}, [0, 1])[:2] == ("wall", None)
    assert plan(one, {"effective": {"n_threads": 1}, "options": {"n_gpu_layers": 99}}, [0, 1])[:2] == ("wall", None)
    assert plan({}, one, [0, 1])[:2] == ("wall", None)  # an engine that does not say
