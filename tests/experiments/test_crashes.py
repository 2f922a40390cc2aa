"""An engine that crashes is a result: real segfaults in a supervised llamacpp engine, through ``ab``.

The engine is the llamacpp engine on the embedded model with a planted ``ctypes.string_at(0)``
(tests/crash_engine.py, registered as ``crashing-llamacpp``) at a chosen phase and run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from logitlab.engines.variant import parse_variant
from logitlab.errors import EngineCrashed
from logitlab.experiments.ab import AbConfig, run_ab

from conftest import SHORT_PROMPT

pytestmark = pytest.mark.engine

TESTS = Path(__file__).resolve().parents[1]
ENGINE = "crashing-llamacpp"


@pytest.fixture(autouse=True)
def worker_finds_the_engine(monkeypatch):
    """The supervised worker imports ``crash_engine`` by name: tests/ on its PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    import crash_engine

    crash_engine.register()
    yield
    crash_engine.unregister()


def config(control: str = "", candidate: str = "", **kwargs) -> AbConfig:
    kwargs = {"n_decode": 4, "repeats": 2, "warmup": 1, **kwargs}
    return AbConfig(control=parse_variant(control, "control", default_engine=ENGINE),
                    candidate=parse_variant(candidate, "candidate", default_engine=ENGINE),
                    prompt=SHORT_PROMPT, **kwargs)


def test_a_candidate_that_segfaults_is_the_verdict_crashed_and_every_other_slot_still_runs(tmp_path):
    # every 2nd run of a candidate worker crashes at decode step 2; the worker is started again after each
    result = run_ab(config(candidate="crash_phase=decode,crash_step=2,crash_run=2"), log_path=tmp_path / "r.jsonl")
    assert result.verdict.word == "crashed"
    assert len(result.runs) == 2 + 8  # warmups and both blocks: nothing was lost
    crashed = [r for r in result.runs if r.crash]
    compared = [r for r in result.measured("candidate") if r.crash is None]
    assert crashed and compared and all(r.variant == "candidate" and r.verdict == "crashed" for r in crashed)
    assert all(r.verdict == "bit-exact" for r in compared)  # the same engine when it does not crash
    assert result.control_reproducible  # the control's slots all ran
    evidence = crashed[0].crash
    assert evidence["phase"] == "decode step 2" and evidence["signal"] == 11, evidence
    assert evidence["status"] == "killed by SIGSEGV (signal 11)" and evidence["variant"] == "candidate"
    assert evidence["stack"][0].startswith("Fatal Python error: Segmentation fault"), evidence["stack"]
    assert any("crash_engine.py" in line and "segfault" in line for line in evidence["stack"]), evidence["stack"]
    assert "llama-cpp-python" in evidence["build"]["engine_version"]
    assert any("crashed in decode step 2" in line for line in result.verdict.evidence)
    logged = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sum(1 for entry in logged if (entry.get("crash") or {}).get("phase") == "decode step 2") == len(crashed)


def test_a_control_that_crashes_first_leaves_no_baseline():
    with pytest.raises(EngineCrashed, match=r"^no baseline: control slot 0 crashed in prefill \(killed by SIGSEGV "
                                           r"\(signal 11\)\)") as caught:
        run_ab(config(control="crash_phase=prefill"))
    partial = caught.value.partial
    assert partial is not None and partial.runs[0].crash["phase"] == "prefill"
    assert partial.error and "no baseline" in partial.error


def test_a_candidate_that_crashes_while_loading_is_crashed_and_the_control_is_still_measured():
    result = run_ab(config(candidate="crash_phase=load"))
    assert result.verdict.word == "crashed" and result.error is None
    candidate = [r for r in result.runs if r.variant == "candidate"]
    assert candidate and all(r.crash and r.crash["phase"] == "load" and r.crash["signal"] == 11 for r in candidate)
    assert result.control_reproducible and result.aa_diagnosis  # the control's slots ran: the A/A is measured
    assert any("crashed while loading" in note for note in result.notes)


def test_a_supervised_candidate_that_hangs_past_the_slot_timeout_is_a_crashed_run():
    result = run_ab(config(candidate="crash_phase=decode,crash_step=1,crash_how=hang", repeats=1, warmup=0,
                           slot_timeout=12))  # a slot here loads and runs in ~2 s
    assert result.verdict.word == "crashed"
    hung = [r.crash for r in result.runs if r.crash]
    assert [c["slot"] for c in hung] == [1, 2]
    assert all(c["phase"] == "decode step 1" and c["status"] == "hung: killed after 12 s" for c in hung), hung
    assert [r.variant for r in result.runs if not r.crash] == ["control", "control"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    launcher = "import sys, crash_engine; crash_engine.register(); from logitlab.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", launcher, *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_the_command_line_reports_crashed_and_require_fails_it(tmp_path):
    proc = _cli("ab", "--engine", ENGINE, "--candidate", "crash_phase=prefill", "--tokens", "4", "--repeats", "1",
                "--require", "divergent", "--json", str(tmp_path / "ab.json"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "A/B verdict: crashed" in proc.stdout, proc.stdout
    assert "crashed in prefill (killed by SIGSEGV (signal 11))" in proc.stdout
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["verdict"]["word"] == "crashed"
    assert [r["variant"] for r in data["runs"] if r["crash"]] and all(
        r["crash"]["phase"] == "prefill" for r in data["runs"] if r["crash"])


def test_the_command_line_says_no_baseline_in_one_line_and_keeps_the_json(tmp_path):
    proc = _cli("ab", "--engine", ENGINE, "--control", "crash_phase=prefill", "--tokens", "4", "--repeats", "1",
                "--json", str(tmp_path / "ab.json"), "--quiet", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [next(line for line in proc.stderr.splitlines() if line.startswith("error:"))]
    assert errors[0].startswith("error: no baseline: control slot 0 crashed in prefill (killed by SIGSEGV")
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["runs"][0]["crash"]["phase"] == "prefill" and "no baseline" in data["error"]


# -- golden -----------------------------------------------------------------------------------------
def test_golden_check_fails_on_a_prompt_that_crashes_the_engine_and_says_where(tmp_path):
    from logitlab.engines.variant import Variant
    from logitlab.experiments.golden.run import CheckConfig, RecordConfig, VariantOverrides, check_golden, record_golden
    from logitlab.experiments.prompts import Prompt
    from logitlab.report import markdown

    prompts = [Prompt("a", SHORT_PROMPT), Prompt("b", "Once upon a time"), Prompt("c", "The sky is")]
    record_golden(RecordConfig(Variant("golden", ENGINE), prompts, 3), tmp_path / "golden")
    # the 2nd run of the worker crashes in decode step 1: prompt a is compared, b crashed, c not run
    overrides = VariantOverrides(options={"crash_phase": "decode", "crash_step": "1", "crash_run": "2"})
    result = check_golden(CheckConfig(str(tmp_path / "golden"), overrides=overrides))
    assert not result.passed and result.verdict.word == "crashed" and result.verdict_prompt == "b"
    assert [p.name for p in result.prompts] == ["a", "b"]
    assert result.prompts[0].verdict.word == "bit-exact" and result.prompts[1].comparison is None
    assert result.prompts[1].crash["phase"] == "decode step 1" and result.prompts[1].crash["signal"] == 11
    assert result.gate.checks[0].line == "verdict crashed > allowed bit-exact"
    text = markdown(result)
    assert "the engine crashed on prompt 'b'" in text and "crashed in decode step 1" in text


def test_golden_record_names_the_crash_and_leaves_no_golden(tmp_path):
    from logitlab.engines.variant import Variant
    from logitlab.experiments.golden.run import RecordConfig, record_golden
    from logitlab.experiments.prompts import Prompt

    config = RecordConfig(Variant("golden", ENGINE, None, {"crash_phase": "prefill"}), [Prompt("a", SHORT_PROMPT)], 2)
    with pytest.raises(EngineCrashed, match=r"crashed in prefill \(killed by SIGSEGV \(signal 11\)\)"):
        record_golden(config, tmp_path / "golden")
    assert not any((tmp_path / "golden").glob("*/manifest.json"))


def test_golden_check_llamacpp_kld_keeps_the_chunks_before_a_crash_and_fails(tmp_path):
    from logitlab.engines.variant import Variant
    from logitlab.experiments.golden.run import RecordConfig, record_golden
    from logitlab.experiments.golden.kld import KldCheckResult, check_kld_base, export_kld_base
    from logitlab.experiments.prompts import Prompt
    from logitlab.numerics.gate import Bar
    from logitlab.report import markdown

    text = "The harbour town woke slowly on the first cold morning of the year, and the gulls argued."
    prompts = [Prompt(n, text.replace("harbour", n)) for n in ("river", "mountain", "desert")]
    manifest = record_golden(RecordConfig(Variant("golden", "llamacpp"), prompts, 0), tmp_path / "g")
    export_kld_base(manifest, tmp_path / "golden.kld")
    # the worker's 2nd run (chunk 2) segfaults in its prefill: chunk 1 is measured, chunk 3 is not run
    variant = Variant("current", ENGINE, None, {"crash_phase": "prefill", "crash_run": "2"})
    result = check_kld_base(tmp_path / "golden.kld", variant, bar=Bar(max_kld_mean=1e-4))
    assert not result.passed and [c.chunk for c in result.chunks] == [0]
    assert result.crash["phase"] == "prefill" and result.crash["signal"] == 11
    assert result.gate.checks[0].name == "crashed" and result.gate.checks[0].line.startswith(
        "chunk 2 crashed in prefill (killed by SIGSEGV")
    assert result.gate.checks[1].passed and result.stats.count == result.chunks[0].count  # chunk 1's figures kept
    again = KldCheckResult.from_dict(json.loads(json.dumps(result.to_dict())))
    text = markdown(again)
    assert "FAIL" in text and "of the 1 chunk(s) run before it" in text and "phase: prefill" in text
    # a crash while loading: no chunk, no statistics, the check fails with the evidence
    loading = check_kld_base(tmp_path / "golden.kld", Variant("current", ENGINE, None, {"crash_phase": "load"}))
    assert not loading.passed and loading.stats is None and loading.chunks == []
    assert loading.crash["phase"] == "load" and "no chunk was run" in markdown(loading)


# -- verify -----------------------------------------------------------------------------------------
def _verify_config(options: dict, **kwargs):
    from logitlab.engines.variant import Variant
    from logitlab.experiments.prompts import Prompt
    from logitlab.experiments.verify.run import VerifyConfig

    return VerifyConfig(variant=Variant("verify", ENGINE, None, options),
                        prompts=(Prompt("a", SHORT_PROMPT), Prompt("b", "Once upon a time")), ks=(1, 4),
                        n_decode=4, **kwargs)


def test_verify_on_an_engine_that_crashes_in_a_verify_block_is_crashed_and_keeps_what_ran(tmp_path):
    from logitlab.experiments.verify.run import run_verify
    from logitlab.report import markdown
    from logitlab.runlog import read_run_log

    # sessions of the worker: 1 the ability check, 2-4 prompt a (M=1, M=1 blocks, M=4 blocks), 5-7 prompt b
    result = run_verify(_verify_config({"crash_phase": "prefill", "crash_run": 6}), log_path=tmp_path / "v.jsonl")
    assert result.classification.word == "crashed" and result.classification.cause == "crashed"
    assert result.error is None
    assert result.crash["phase"] == "verify blocks M=1 (prompt b)" and result.crash["signal"] == 11, result.crash
    assert any("crash_engine.py" in line for line in result.crash["stack"])
    assert [(e.prompt, e.k) for e in result.sweep] == [("a", 1), ("a", 4)]  # prompt a's sweep is kept
    assert [p.name for p in result.prompts] == ["a", "b"]  # b's M=1 run finished before the crash
    assert [t.k for t in result.totals] == [1, 4]
    assert "crashed in verify blocks M=1 (prompt b)" in markdown(result)
    assert read_run_log(tmp_path / "v.jsonl").ending == "complete"


def test_verify_on_an_engine_that_crashes_while_loading_is_crashed(tmp_path):
    from logitlab.experiments.verify.run import run_verify

    result = run_verify(_verify_config({"crash_phase": "load"}))
    assert result.classification.word == "crashed" and result.crash["phase"] == "load"
    assert result.prompts == [] and result.sweep == []


def test_verify_cli_require_fails_on_a_crash(tmp_path):
    proc = _cli("verify", "--engine", ENGINE, "--options", "crash_phase=decode,crash_step=1,crash_run=2",
                "--prompt", SHORT_PROMPT, "--tokens", "4", "--k", "1", "2", "--require", "divergent",
                "--json", str(tmp_path / "v.json"), "--quiet", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "require divergent: the verify verdict is crashed" in proc.stderr
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["crash"]["phase"] == "M=1 greedy (prompt prompt-1)" and data["classification"]["word"] == "crashed"


# -- sweep ------------------------------------------------------------------------------------------
def test_a_sweep_cell_whose_candidate_crashes_is_a_crashed_cell_not_a_failed_job():
    from logitlab.experiments.engine_cache import EngineCache
    from logitlab.experiments.sweep.matrix_file import parse_matrix
    from logitlab.experiments.sweep.job import run_job
    from logitlab.experiments.sweep.summary import summarize
    from logitlab.report import markdown

    matrix = parse_matrix({"name": "t", "prompts": [SHORT_PROMPT],
                           "control": {"engine": ENGINE, "options": {"n_threads": 1, "n_threads_batch": 1}},
                           "axes": {"options.crash_phase": ["none", "decode"]},
                           "experiment": {"tokens": 4}})
    specs = matrix.jobs()
    cache = EngineCache(2)  # the sweep worker's cache: the crashed engine's worker starts again for the next job
    results = {spec.key: run_job(spec, cache=cache) for spec in specs}
    cache.close()
    assert [r.status for r in results.values()] == ["ok", "ok"], [r.error for r in results.values()]
    summary = summarize("t", matrix.to_dict(), {}, specs, results)
    assert [(c.status, c.verdict) for c in summary.cells] == [("ok", "bit-exact"), ("ok", "crashed")]
    crashed = results[specs[1].key].experiment_result()
    assert {r.crash["phase"] for r in crashed.runs if r.crash} == {"decode step 0"}
    assert "crashed" in markdown(summary)


# -- history ----------------------------------------------------------------------------------------
def test_history_records_a_crash_as_such():
    from logitlab.experiments.history.metrics import record_from_result

    result = run_ab(config(candidate="crash_phase=decode,crash_step=1", repeats=1, warmup=0))
    record = record_from_result(result, machine="m", commit="a" * 40, commit_date="2026-12-01T00:00:00+00:00")
    crashed = record.metrics["candidate"]["crashed"]
    assert crashed.kind == "fingerprint" and crashed.value == "decode step 1: killed by SIGSEGV (signal 11)"
    assert record.metrics["control"]["decode"].value > 0  # the control's runs are recorded beside it


# -- invariance -------------------------------------------------------------------------------------
def _invariance(probe: str, options: str, **kwargs):
    from logitlab.experiments.invariance import InvarianceConfig, run_invariance

    return run_invariance(InvarianceConfig(probe=probe, variant=parse_variant(options, "variant", default_engine=ENGINE),
                                           prompt=SHORT_PROMPT, n_decode=3, **kwargs))


def test_invariance_prefill_decode_on_an_engine_that_crashes_is_crashed_with_the_phase():
    from logitlab.report import markdown

    result = _invariance("prefill-decode", "crash_phase=prefill,crash_run=3")  # 1 greedy run, 2 full prefill
    assert result.verdict.word == "crashed" and not result.invariant
    assert result.crash["phase"] == "prefill vs decode" and result.crash["signal"] == 11
    assert "crashed in prefill vs decode (killed by SIGSEGV (signal 11))" in markdown(result)


def test_invariance_determinism_keeps_the_runs_before_the_crash():
    # session isolation: one engine object in the worker counts its runs; the 3rd crashes
    result = _invariance("determinism", "crash_phase=decode,crash_step=1,crash_run=3", runs=4, isolation="session")
    assert result.verdict.word == "crashed" and result.crash["phase"] == "decode step 1"
    assert result.details["runs"] == 2 and result.details["distinct_logits"] == 1
    assert [c.word for c in result.checks] == ["bit-exact"]


# -- explain ----------------------------------------------------------------------------------------
def test_explain_on_an_engine_that_crashes_is_crashed_with_the_step():
    from logitlab.experiments.explain import ExplainConfig, run_explain
    from logitlab.report import markdown

    # sessions of the worker: 1 the M=1 greedy run, 2 its M=4 verify blocks (crashes in their prefill)
    result = run_explain(ExplainConfig(control=parse_variant("crash_phase=prefill,crash_run=2", "control",
                                                             default_engine=ENGINE),
                                       candidate=None, prompt=SHORT_PROMPT, n_decode=4, k=4))
    assert result.verdict.word == "crashed" and result.error is None
    assert result.crash["phase"] == "verify blocks M=4 (the pair)" and result.crash["signal"] == 11
    assert "crashed in verify blocks M=4 (the pair)" in markdown(result)


# -- dump -------------------------------------------------------------------------------------------
def test_dump_names_the_crash_and_keeps_the_steps_written_before_it(tmp_path):
    from logitlab.dumps.run import dump_variant
    from logitlab.engines.variant import Variant

    events = []
    variant = Variant("control", ENGINE, None, {"crash_phase": "decode", "crash_step": 2})
    with pytest.raises(EngineCrashed, match=r"crashed in dump capture \(control\) \(killed by SIGSEGV \(signal 11\)\); "
                                            r"the dump in .* is kept: [1-9]\d* whole step file\(s\)") as caught:
        dump_variant(variant, SHORT_PROMPT, 4, tmp_path / "dump", on_event=lambda kind, data: events.append(kind))
    assert caught.value.evidence.signal == 11
    assert "estimate" in events and "step" in events  # the capture's progress came back from the worker
    from logitlab.dumps.readers import open_dump

    dump = open_dump(tmp_path / "dump")
    assert dump.refs and dump.manifest is not None and not dump.manifest.complete  # read back, marked incomplete
