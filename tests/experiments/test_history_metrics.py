"""What each result kind puts into the history: metrics per variant, units, senses, per-block samples.

Every result here is a real run: ``ab`` on two builds of the small numpy
engine (``examples/numpy_cmd_engine.py``, one with a float64 norm), ``bench
run`` on shell commands, ``bench compare`` on files the real tools wrote, and
``verify`` on the embedded model through llama.cpp.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from logitlab.engines.variant import Variant, parse_variant
from logitlab.engines.workload import RunOutput
from logitlab.errors import InputError
from logitlab.experiments.ab import AbConfig, run_ab
from logitlab.experiments.history.store import HistoryRecord, HistoryStore
from logitlab.experiments.history.metrics import record_from_result, result_metrics

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "examples" / "numpy_cmd_engine.py"
PY = sys.executable
TEMPLATE = "cmd:{py} {script} --tokens {{tokens}} --logits {{logits}} --n-prompt {{n_prompt}} --n-decode {{n_decode}}"
PROMPT = "The history of the printing press begins in the fifteenth century, when"


def engine_spec(tmp_path: Path, name: str, *, float64: bool) -> str:
    script = tmp_path / f"{name}.py"
    text = ENGINE.read_text()
    script.write_text(text.replace("NORM_FLOAT64 = False", "NORM_FLOAT64 = True") if float64 else text)
    return TEMPLATE.format(py=PY, script=script) + "?vocab=4096"


def ab_run(control: str, candidate: str):
    return run_ab(AbConfig(control=parse_variant(control, "control", default_engine="cmd"),
                           candidate=parse_variant(candidate, "candidate", default_engine="cmd"),
                           prompt=PROMPT, n_decode=12, repeats=2, warmup=0))


@pytest.fixture(scope="module")
def numpy_ab(tmp_path_factory):
    """An A/B (float32 norm vs float64 norm) and an A/A of the numpy engine."""
    folder = tmp_path_factory.mktemp("engines")
    f32, f64 = engine_spec(folder, "f32", float64=False), engine_spec(folder, "f64", float64=True)
    return ab_run(f32, f64), ab_run(f32, f32)


def test_fingerprint_is_the_logits_bits():
    a = RunOutput(np.array([[1.0, 2.0]], dtype=np.float32), [1], [], [])
    same = RunOutput(a.logits.copy(), [1], [], [])
    one_ulp = RunOutput(np.nextafter(a.logits, np.float32(3)), [1], [], [])
    reshaped = RunOutput(a.logits.reshape(2, 1), [1], [], [])
    assert a.fingerprint() == same.fingerprint() and len(a.fingerprint()) == 64
    assert a.fingerprint() != one_ulp.fingerprint() and a.fingerprint() != reshaped.fingerprint()
    negative_zero = RunOutput(np.array([[-0.0, 2.0]], dtype=np.float32), [1], [], [])
    assert negative_zero.fingerprint() != RunOutput(np.array([[0.0, 2.0]], dtype=np.float32), [1], [],
                                                    []).fingerprint()


def test_bits_key_is_equal_iff_the_bits_are(tmp_path):
    """RunOutput.bits_key (XXH3-128) tells runs apart as same_bits does: one ulp, a sign of zero, a shape, a dtype;
    a view, a copy and a read-only mapping of the same bits share it."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((40, 3000)).astype(np.float32)
    a = RunOutput(logits, [1], [], [])
    path = tmp_path / "run.f32"
    logits.tofile(path)
    mapped = RunOutput(np.memmap(path, dtype=np.float32, mode="r", shape=logits.shape), [1], [], [])
    strided = RunOutput(np.asfortranarray(logits), [1], [], [])  # not C-contiguous: hashed as its C-order copy
    assert a.bits_key() == mapped.bits_key() == strided.bits_key() == RunOutput(logits.copy(), [], [], []).bits_key()
    one_ulp = logits.copy()
    one_ulp[39, 2999] = np.nextafter(one_ulp[39, 2999], np.float32(np.inf))
    signed = np.zeros((1, 2), np.float32)
    others = [one_ulp, logits.reshape(3000, 40), logits.astype(np.float64), signed, -signed]
    keys = {a.bits_key(), *(RunOutput(x, [1], [], []).bits_key() for x in others)}
    assert len(keys) == 1 + len(others)
    assert all(len(k) == 32 for k in keys) and a.bits_key() != a.fingerprint()


@pytest.mark.engine
def test_ab_records_both_builds_the_numerics_and_the_ratio(numpy_ab, tmp_path):
    ab, _ = numpy_ab
    m = result_metrics(ab)
    assert set(m) == {"control", "candidate", "ratio"}
    for variant in ("control", "candidate"):
        decode = m[variant]["decode"]
        assert (decode.kind, decode.unit, len(decode.samples)) == ("higher-is-better", "tokens/s", 2)
        runs = [r.decode_tokens_per_second for r in ab.measured(variant)]
        assert decode.value == pytest.approx(math.exp(np.mean(np.log(runs))))  # geometric mean of the slots
        assert m[variant]["logits"].kind == "fingerprint"
    # a float64 norm changes the bits: different fingerprints, KLD > 0, not every position bit-exact
    assert m["control"]["logits"].value != m["candidate"]["logits"].value
    assert m["control"]["logits"].value == ab.fingerprints["control"]
    assert 0 < m["candidate"]["kld_mean"].value <= m["candidate"]["kld_p99"].value + 1e-12
    assert m["candidate"]["kld_mean"].unit == "nats" and m["candidate"]["kld_mean"].kind == "lower-is-better"
    share = m["candidate"]["bit_exact_share"]
    worst = next(r for r in ab.runs if r.slot == ab.verdict_slot).comparison
    assert share.value == pytest.approx(100 * (1 - worst.differing_rows / worst.n_positions)) and share.value < 100
    ratio = m["ratio"]["decode"]
    assert ratio.value == pytest.approx(ab.speed["decode"].ratio) and len(ratio.samples) == 2
    # into a store and back
    record = record_from_result(ab, machine="box", commit="abc1234", commit_date=None)
    path = HistoryStore(tmp_path).add(record)
    assert HistoryStore(tmp_path).read(f"box/{path.name}") == record
    assert record.manifest["result_kind"] == "ab" and record.manifest["manifest"]["engine"]["engine"] == "cmd"


@pytest.mark.engine  # numpy_ab runs the cmd engine
def test_an_aa_is_one_build_with_every_slot_as_a_sample(numpy_ab):
    _, aa = numpy_ab
    m = result_metrics(aa)
    assert set(m) == {"control"}
    assert m["control"]["bit_exact_share"].value == 100.0 and m["control"]["bit_exact_share"].unit == "%"
    all_slots = [r.decode_tokens_per_second for r in aa.runs if r.block is not None]
    assert m["control"]["decode"].value == pytest.approx(math.exp(np.mean(np.log(all_slots))))


def test_bench_run_records_each_metric_in_its_sense(tmp_path):
    from logitlab.perf.commands import BenchRunConfig, bench_run

    result = bench_run(BenchRunConfig(control="sleep 0.01", candidate="sleep 0.03", blocks=3, warmup=0))
    m = result_metrics(result)
    assert set(m) == {"control", "candidate", "ratio"}
    wall = m["candidate"]["wall"]
    assert (wall.kind, wall.unit, len(wall.samples)) == ("lower-is-better", "s", 3)
    assert 0.025 < wall.value < 1.0 and m["control"]["wall"].value < wall.value
    assert m["ratio"]["wall"].value == pytest.approx(result.comparisons["wall"].ratio) and m["ratio"]["wall"].value > 1
    assert m["control"]["max_rss"].unit == "bytes"
    aa = bench_run(BenchRunConfig(control="sleep 0.01", candidate="sleep 0.01", blocks=2, warmup=0, aa=True))
    assert set(result_metrics(aa)) == {"control"} and len(result_metrics(aa)["control"]["wall"].samples) == 2


def test_bench_compare_records_the_candidate_and_the_ratio_not_the_base():
    from logitlab.perf.compare_files import compare_benchmarks
    from logitlab.perf.readers import read_benchmark_file

    folder = ROOT / "tests" / "data" / "bench" / "criterion"
    result = compare_benchmarks(read_benchmark_file(folder, baseline="main"), read_benchmark_file(folder,
                                                                                                  baseline="new"),
                                n_bootstrap=199)
    m = result_metrics(result)
    assert set(m) == {"candidate", "ratio"}
    for s in result.scenarios:
        assert m["candidate"][s.name].value == pytest.approx(s.candidate) and m["candidate"][s.name].unit == s.unit
        assert m["ratio"][s.name].value == pytest.approx(s.ratio)
        assert m["ratio"][s.name].kind == ("higher-is-better" if s.higher_is_better else "lower-is-better")


@pytest.mark.engine
def test_verify_records_per_k_numerics_m1_speed_and_the_greedy_tokens():
    from logitlab.experiments.prompts import Prompt
    from logitlab.experiments.verify.run import VerifyConfig, run_verify

    result = run_verify(VerifyConfig(variant=Variant("verify", "llamacpp", options={"n_threads_batch": "1"}),
                                     prompts=(Prompt("p", PROMPT),), ks=(1, 4), n_decode=8))
    m = result_metrics(result)["verify"]
    assert m["K=1 bit_exact_share"].value == 100.0  # K=1 is M=1 on llama.cpp
    k4 = result.total(4)
    assert m["K=4 bit_exact_share"].value == pytest.approx(100 * k4.bit_exact_rows / k4.rows)
    assert m["K=4 flips"].value == k4.flips and m["K=4 flips"].kind == "lower-is-better"
    assert m["m1 decode"].unit == "tokens/s" and m["m1 decode"].value > 0
    assert m["greedy"].kind == "fingerprint"


@pytest.mark.engine  # numpy_ab runs the cmd engine
def test_what_cannot_be_recorded_is_an_input_error(numpy_ab):
    from logitlab.perf.commands import BenchRunResult

    with pytest.raises(InputError, match="cannot be recorded in the history: results of ab, bench-compare"):
        result_metrics(object())
    empty = BenchRunResult(config={"aa": False}, runs=[], failed_blocks=[], comparisons={}, skipped_metrics={},
                           summaries={}, aa=None, host={})
    with pytest.raises(InputError, match="holds no metric to record"):
        result_metrics(empty)
    with pytest.raises(InputError, match="commit 'a b' is not valid"):
        record_from_result(numpy_ab[1], machine="box", commit="a b", commit_date=None)
    assert isinstance(record_from_result(numpy_ab[1], machine="box", commit="v1.2", commit_date=None),
                      HistoryRecord)
