"""The invariance matrix: every axis an engine supports, on llama.cpp, a planted batch bucket, and a fake engine."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from logitlab import report
from logitlab.engines.variant import parse_variant
from logitlab.errors import InputError
from logitlab.experiments.invariance_matrix import (AXES, InvarianceMatrixResult, MatrixConfig, run_invariance_matrix,
                                                    skip_reason)
from logitlab.experiments.prompts import DEFAULT_PROMPT, Prompt

from conftest import CPU_AVX512, SHORT_PROMPT, FakeEngine

TESTS = Path(__file__).resolve().parent.parent
LLAMA = "n_threads=1,n_threads_batch=1"  # 2 batch threads on a busy 2-core machine spin for seconds
#: The first 17 tokens of the built-in prompt: n_ubatch=4 cuts them 4+4+4+4+1, and the last one-row chunk runs
#: other kernels than one 17-row forward (measured: 3 of its 19 rows differ with 2 greedy tokens; a 12-, 16-, 20-
#: or 57-token prompt: none, at 1 and at 2 threads).
#: The axes an in-process engine can have (the rest are a server's).
LOCAL_AXES = ("determinism", "batch", "batch-position", "prefill-decode", "chunked-prefill", "threads", "verify",
              "process")
PROMPT_17 = "The lighthouse keeper had kept a journal for thirty years. Every evening he wrote down the"


def matrix(spec=LLAMA, engine="llamacpp", prompts=(("p", SHORT_PROMPT),), **kwargs):
    kwargs.setdefault("n_decode", 2)
    kwargs.setdefault("runs", 2)
    return run_invariance_matrix(MatrixConfig(
        variant=parse_variant(spec, "probe", default_engine=engine),
        prompts=tuple(Prompt(name, text) for name, text in prompts), **kwargs))


def by_axis(result):
    return {a.axis: a for a in result.axes}


def check_words(axis):
    return {check.name: check.word for _, check in axis.checks()}


# -- what runs where -----------------------------------------------------------------------------------
def test_engines_declare_their_axes():
    from logitlab.engines.hf import HfEngine
    from logitlab.engines.llamacpp import LlamaCppEngine

    assert [a for a in AXES if skip_reason(LlamaCppEngine, a) is None] == list(LOCAL_AXES)
    assert [a for a in AXES if skip_reason(HfEngine, a) is None] == ["determinism", "batch", "batch-position",
                                                                      "prefill-decode", "threads", "verify", "process"]
    assert skip_reason(HfEngine, "chunked-prefill").startswith(
        "the hf engine does not declare the 'chunked-prefill' ability")
    assert [a for a in AXES if skip_reason(FakeEngine, a) is None] == ["determinism", "prefill-decode", "verify",
                                                                         "process"]
    from logitlab.engines.openai import OpenAIEngine

    # a server: whole requests, top-k log-probabilities; determinism and the server axes
    assert [a for a in AXES if skip_reason(OpenAIEngine, a) is None] == ["determinism", "concurrent", "prefix-cache"]
    # a local engine: the server axes skipped, each with its reason
    assert skip_reason(LlamaCppEngine, "concurrent") == ("the llamacpp engine does not declare the "
                                                         "'concurrent-requests' ability")
    assert skip_reason(HfEngine, "prefix-cache") == "the hf engine does not declare the 'prefix-cache' ability"
    assert skip_reason(OpenAIEngine, "prefill-decode") == "the openai engine does not declare the 'sessions' ability"
    assert skip_reason(OpenAIEngine, "verify") == "the openai engine does not declare the 'sessions' ability"


def test_axis_settings_are_options_of_their_engine():
    from logitlab.engines.base import SETTING_ABILITIES
    from logitlab.engines.hf import HfEngine
    from logitlab.engines.llamacpp import LlamaCppEngine

    for cls in (LlamaCppEngine, HfEngine):
        for ability in SETTING_ABILITIES:
            settings = cls.AXIS_SETTINGS.get(ability, ())
            assert cls.supports(ability) == (len(settings) >= 2), (cls.name, ability)
            for setting in settings:
                cls.validate_options(setting)  # InputError for an unknown option or a bad value


@pytest.mark.parametrize("kwargs, message", [
    ({"axes": ("batch", "speed")}, "unknown invariance axis 'speed'; valid: determinism, batch, batch-position, "
                                   "prefill-decode, chunked-prefill, threads, verify, process"),
    ({"axes": ()}, "--axes needs at least one axis"),
    ({"axes": ("batch", "batch")}, "--axes names 'batch' twice"),
    ({"max_batch": 1}, "--max-batch must be at least 2"),
    ({"runs": 1}, "--runs must be at least 2, got 1"),
    ({"speed_repeats": 0}, "--speed-repeats must be at least 1, got 0"),
    ({"buckets": (0, 2)}, "--buckets sizes must be at least 1, got 0"),
    ({"bucket_cap": 256}, "--bucket-cap must be below 256 (a batch runs at most 256 sequences), got 256"),
    ({"prompts": ()}, "the matrix needs at least one prompt"),
    ({"prompts": (Prompt("a", "x"), Prompt("a", "y"))}, "two prompts are named 'a'"),
])
def test_bad_config_is_one_clear_error(kwargs, message):
    config = {"variant": parse_variant("", "probe", default_engine="fake"), "prompts": (Prompt("p", "x"),),
              **kwargs}
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_invariance_matrix(MatrixConfig(**config))


def test_batch_sizes_straddle_the_buckets_and_batch_position_holds_the_size():
    """``batch``: 1..--max-batch and b-1, b, b+1 around every bucket b up to the cap (vLLM's capture sizes give
    its 15/16/17); ``batch-position``: one batch size, the prompt moved through its slots (the batch probe's
    ``slots``, on a mixed batch)."""
    from logitlab.experiments.batch_buckets import engine_buckets, straddling_sizes
    from logitlab.engines.llamacpp import LlamaCppEngine

    assert straddling_sizes(4, (1, 2, 4, 8, 16, 32), 16) == (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17)
    assert straddling_sizes(2, (2,), 16) == (1, 2, 3) and straddling_sizes(3, (), 16) == (1, 2, 3)
    assert engine_buckets(LlamaCppEngine) == ()  # llama.cpp declares none
    config = MatrixConfig(variant=parse_variant("", "probe", default_engine="fake"), prompts=(Prompt("p", "x"),),
                          max_batch=2)
    assert config.probe_config("batch", Prompt("p", "x"), buckets=(8, 64)).batch_sizes == (1, 2, 7, 8, 9)
    position = config.probe_config("batch-position", Prompt("p", "x"))
    assert (position.probe, position.batch_sizes, position.slots, position.fill) == ("batch", (2,), True, None)


def test_fake_engine_runs_what_it_can_skips_the_rest_and_round_trips(tmp_path):
    result = matrix("", engine="fake", prompts=(("a", "hello world"), ("b", "another prompt")), runs=3)
    axes = by_axis(result)
    assert list(axes) == list(AXES)
    assert [a.axis for a in result.ran] == ["determinism", "prefill-decode", "verify", "process"]
    assert axes["batch"].skipped.startswith("the fake engine does not declare the 'batch' ability")
    assert axes["threads"].status == "skipped" and not axes["threads"].probes
    assert axes["determinism"].prompts == ["a", "b"] and len(axes["determinism"].probes) == 2
    assert axes["determinism"].distinct() == [{"prompt": "a", "runs": 3, "logits": 1, "texts": 1},
                                              {"prompt": "b", "runs": 3, "logits": 1, "texts": 1}]
    assert result.verdict_word == "bit-exact" and result.status == "invariant"
    identical, total = axes["prefill-decode"].rows
    assert identical == total == (11 + 2) + (14 + 2)  # every position of both prompts, 2 greedy tokens each
    assert axes["prefill-decode"].first_divergence is None
    # JSON round trip, and the same report again from the file
    data = result.to_dict()
    assert data["kind"] == "invariance-matrix" and data["status"] == "invariant"
    assert [s["axis"] for s in data["axes_summary"]] == list(AXES)
    assert data["axes_summary"][0]["distinct"][0] == {"prompt": "a", "runs": 3, "logits": 1, "texts": 1}
    again = report.load_result(json.loads(json.dumps(data)))
    assert isinstance(again, InvarianceMatrixResult) and again.to_dict() == data
    md = report.markdown(result)
    assert md == report.markdown(again)
    assert md.startswith("## logitlab invariance matrix: **bit-exact**")
    assert "| determinism | **bit-exact** | 100.0 % (29/29) |" in md.replace("\\", "")
    assert "| determinism | 1 unique logit array of 3 runs, 1 unique greedy text |" in md
    assert "- batch: the fake engine does not declare the 'batch' ability" in md
    assert "status: invariant" in md.replace("*", "")
    # --record: one series per axis that ran
    from logitlab.experiments.history.metrics import record_from_result

    record = record_from_result(result, machine="test-machine", commit="0123456789abcdef", commit_date=None)
    metrics = record.metrics
    assert sorted(metrics) == ["determinism", "prefill-decode", "process", "verify"]
    assert metrics["determinism"]["bit_exact_share"].value == 100.0
    assert metrics["prefill-decode"]["argmax flips"].value == 0.0 and metrics["prefill-decode"]["kld_p99"].value == 0
    assert record.manifest["result_kind"] == "invariance-matrix"


# -- llama.cpp: the known facts ----------------------------------------------------------------------------
@pytest.mark.engine
def test_llamacpp_threads_are_bit_exact_and_a_one_row_chunk_is_not():
    result = matrix(prompts=(("17", PROMPT_17),), axes=("chunked-prefill", "threads"))
    axes = by_axis(result)
    assert [a.axis for a in result.axes] == ["chunked-prefill", "threads"]
    assert check_words(axes["threads"]) == {"n_threads=2, n_threads_batch=2": "bit-exact"}
    assert axes["threads"].status == "invariant" and axes["threads"].rows == (19, 19)
    chunks = {check.name: check for _, check in axes["chunked-prefill"].checks()}
    assert list(chunks) == ["n_ubatch=32", "n_ubatch=4"]
    assert "with n_ubatch=4: 5 forwards (4, 4, 4, 4, 1 rows)" in chunks["n_ubatch=4"].details["exercised"]
    assert chunks["n_ubatch=32"].word == "bit-exact"  # one forward of 17 rows, as with 512
    if CPU_AVX512:  # measured on AVX-512 (AMD EPYC, 2026-12-05): 3 of 19 rows differ, no flip
        assert chunks["n_ubatch=4"].word != "bit-exact" and chunks["n_ubatch=4"].comparison.differing_rows == 3
        assert axes["chunked-prefill"].status == "not invariant"
        assert axes["chunked-prefill"].first_divergence == {"prompt": "17", "check": "n_ubatch=4", "position": 16}
    assert chunks["n_ubatch=4"].word in ("bit-exact", "ulp-noise", "noise", "near-tie")
    assert axes["chunked-prefill"].detection is not None  # the worst check's detection limit
    assert result.notes == ["threads: the variant's n_threads=1, n_threads_batch=1 is replaced by each setting "
                            "of the axis"]


def moved_by_the_bump(check, bump: float) -> None:
    """A check of the bucket engine's batch above its bucket: every row moved by the planted ``bump`` (at every 7th
    logit) — a shift shared by the positions, never bit-exact — except rows that this CPU's own batching moves
    further, which llama.cpp's batches of 2 move too. On AVX-512 there are none (its batches of this prompt are
    bit-exact). On an AVX2-only AMD EPYC (measured 2026-12-05) llama.cpp's own batch moves the second sequence's
    last 4 rows by up to 0.89; beside the plant's uniform 1e-3 those rows stand ~380x outside the noise floor the
    plant sets, and the rules read `divergent` there: that is right (a few rows moved far more than all the others),
    and it must be those rows alone."""
    row_max = np.asarray(check.comparison.row_max_abs_diff)
    own = np.flatnonzero(row_max > 4 * bump).tolist()  # rows this CPU's batching moved, beyond the plant
    planted = np.delete(row_max, own)
    assert planted.size and np.all((planted >= bump / 2) & (planted <= 2 * bump)), (check.name, row_max)
    if check.word == "divergent":
        assert own and sorted(check.verdict.outside) == own, (check.name, check.verdict.outside, own)
    else:
        assert check.word in ("noise", "near-tie", "systematic-offset"), (check.name, check.word)


@pytest.mark.engine
def test_a_planted_batch_bucket_is_found_on_the_batch_axis_alone(monkeypatch):
    """llama.cpp whose batches of more than 2 sequences move (tests/bucket_engine.py): every axis runs, and only the
    batch axis's B=3 and B=4 checks differ."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    import bucket_engine

    bucket_engine.register()
    try:
        result = matrix(engine=bucket_engine.NAME, max_batch=4)
    finally:
        bucket_engine.unregister()
    axes = by_axis(result)
    assert [a.axis for a in result.ran] == list(LOCAL_AXES)  # every local axis: the adapter's abilities are llama.cpp's
    batch = axes["batch"]
    words = check_words(batch)
    assert list(words) == ["B=1 again", "B=2", "B=3", "B=4"]
    # the bump raises every 7th logit of every row by 1e-3: each row's mean moves by the same 1e-3 / 7, a shift shared
    # by the positions (systematic-offset; noise or near-tie where a CPU's own batch rounding scatters it more)
    checks = {check.name: check for _, check in batch.checks()}
    moved_by_the_bump(checks["B=3"], bucket_engine.BUMP)
    moved_by_the_bump(checks["B=4"], bucket_engine.BUMP)
    assert batch.status == "not invariant" and result.worst is batch
    assert batch.first_divergence["check"] == "B=3"
    if CPU_AVX512:  # llama.cpp's own batches of this 12-token prompt are bit-exact there (test_invariance.py)
        assert words["B=1 again"] == words["B=2"] == "bit-exact"
        assert words["B=3"] == words["B=4"] == "systematic-offset"  # the bump alone (measured 2026-12-05)
        assert batch.first_divergence == {"prompt": "p", "check": "B=3", "position": 0}
        assert all(c.comparison.max_abs_diff <= 2 * bucket_engine.BUMP for _, c in batch.checks())  # the bump alone
    # the axes that run no batch: llama.cpp's own bits (prefill-decode: its own difference, not planted; measured:
    # 2 of 14 rows on this prompt)
    # batch-position runs batches of max_batch = 4 > 2 sequences too: every slot moves
    for _, check in axes["batch-position"].checks():
        moved_by_the_bump(check, bucket_engine.BUMP)
    others = {a.axis: a.status for a in result.ran
              if a.axis not in ("batch", "batch-position", "prefill-decode", "verify")}
    assert others == {"determinism": "invariant", "chunked-prefill": "invariant", "threads": "invariant",
                      "process": "invariant"}
    # verify blocks (M=4 vs M=1): llama.cpp's own kernels, not planted — bit-exact on AVX-512; on an AVX2-only CPU
    # they round differently (measured 2026-12-05: `noise`, test_llamacpp_verify_and_process_axes_report_their_numbers)
    assert {c.word for _, c in axes["verify"].checks()} <= {"bit-exact", "ulp-noise", "noise", "near-tie"}
    if CPU_AVX512:
        assert axes["verify"].status == "invariant"
    assert result.status == "not invariant"


@pytest.mark.engine
def test_the_first_failing_batch_size_is_the_one_just_above_the_bucket(monkeypatch):
    """The bucket engine declares its bucket (BATCH_BUCKETS = (2,)): with --max-batch 2 the batch axis still runs
    B=3, and that is where it first differs."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    import bucket_engine

    bucket_engine.register()
    try:
        result = matrix(engine=bucket_engine.NAME, max_batch=2, axes=("batch",))
    finally:
        bucket_engine.unregister()
    batch = by_axis(result)["batch"]
    assert result.config["buckets"] == [2] and list(check_words(batch)) == ["B=1 again", "B=2", "B=3"]
    # the bump moves every row's mean alike (as in the test above)
    moved_by_the_bump(dict((c.name, c) for _, c in batch.checks())["B=3"], bucket_engine.BUMP)
    assert batch.first_divergence["check"] == "B=3"
    if CPU_AVX512:  # llama.cpp's own B=2 of this prompt is bit-exact there (measured 2026-12-05)
        assert check_words(batch)["B=2"] == "bit-exact"
        assert "| batch | B = 1..2 and 3 around the buckets 2 (first differing size: B=3) vs the prompt alone |" in \
            report.markdown(result)


@pytest.mark.engine
def test_llamacpp_batch_position_moves_the_prompt_through_every_slot():
    """batch-position on llama.cpp (parallel sequences, no padding): B=4, the prompt in slot 0..3 among three
    other sequences of other lengths; the JSON reads back and renders the same reports byte for byte."""
    result = matrix(prompts=(("17", PROMPT_17),), axes=("batch-position",), max_batch=4)
    axis = by_axis(result)["batch-position"]
    checks = [check for _, check in axis.checks()]
    assert [c.name for c in checks] == ["B=4, slot 0", "B=4, slot 1", "B=4, slot 2", "B=4, slot 3"]
    n = len(axis.probes[0].prompt_ids)
    for slot, check in enumerate(checks):
        assert check.details["slot"] == slot and check.details["fill"] == "mixed" and check.details["padding"] == "none"
        assert check.details["lengths"][slot] == n and len(check.details["lengths"]) == 4
    if CPU_AVX512:  # measured 2026-12-05 (AMD EPYC): slots 1 and 3 differ from the prompt alone (1 of 17 rows
        # each, the last), 0 and 2 do not; the 12-token SHORT_PROMPT: every slot bit-exact
        assert [c.comparison.differing_rows for c in checks] == [0, 1, 0, 1]
        assert axis.first_divergence == {"prompt": "17", "check": "B=4, slot 1", "position": 16}
    data = result.to_dict()
    again = report.load_result(json.loads(json.dumps(data)))
    assert again.to_dict() == data and data["axes_summary"][0]["axis"] == "batch-position"
    assert report.markdown(again) == report.markdown(result) and report.html(again) == report.html(result)
    assert "the prompt in each of the 4 slots of a mixed batch of 4 vs the prompt alone; differing: " + (
        "slot 1, 3" if CPU_AVX512 else "") in report.markdown(result)


@pytest.mark.engine
def test_hf_runs_threads_and_skips_chunked_prefill():
    pytest.importorskip("transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    result = matrix("threads=1", engine="hf", axes=("chunked-prefill", "threads"))
    axes = by_axis(result)
    assert axes["chunked-prefill"].skipped == "the hf engine does not declare the 'chunked-prefill' ability"
    assert [a.axis for a in result.ran] == ["threads"]
    assert list(check_words(axes["threads"])) == ["threads=2"]
    # torch float32 on 1 vs 2 threads: rounding at most (measured: 2 of 14 rows differ, ulp-noise, no flip)
    assert axes["threads"].verdict_word in ("bit-exact", "ulp-noise", "noise")
    assert axes["threads"].rows[1] == 14 and result.notes == [
        "threads: the variant's threads=1 is replaced by each setting of the axis"]


def test_html_report_draws_the_matrix_figure_one_cell_per_axis():
    """The HTML page holds the ``invariance-matrix`` figure as inline SVG: one cell per axis (skipped ones grey, with
    their reason), then one per check of the axes that ran."""
    import re

    from logitlab.report.document import Figure
    from logitlab.report.invariance_matrix import matrix_figure_data

    result = matrix("", engine="fake", prompts=(("a", "hello world"), ("b", "another prompt")), runs=3)
    data = matrix_figure_data(result)
    assert [r["axis"] for r in data["rows"]] == list(AXES)
    rows = {r["axis"]: r for r in data["rows"]}
    assert rows["determinism"]["cells"] == [{"check": "runs 2..3", "verdict": "bit-exact", "severity": 0,
                                             "identical": 29, "rows": 29}]  # both prompts' checks in one cell
    assert rows["batch"]["skipped"].startswith("the fake engine does not declare") and rows["batch"]["cells"] == []
    pd = rows["prefill-decode"]
    assert (pd["identical"], pd["rows"]) == by_axis(result)["prefill-decode"].rows
    (figure,) = [b for b in report.document(result).blocks if isinstance(b, Figure)]
    assert figure.kind == "invariance-matrix" and figure.data == data and len(figure.caption) > 80
    page = report.html(result)
    assert '<figure class="plot" id="figure-1" data-kind="invariance-matrix"><svg' in page
    assert re.findall(r'id="figure-1-axis-(\d+)"', page) == [str(i) for i in range(len(AXES))]
    checks = re.findall(r'id="figure-1-check-(\d+)-(\d+)"', page)
    assert checks == [(str(r), str(c)) for r, row in enumerate(data["rows"])
                      for c in range(1, len(row["cells"]) + 1)] and checks
    assert ">the fake engine does not declare the 'batch' ability</text>" in page  # the skipped row's reason
    assert "figure invariance-matrix could not be drawn" not in page
    assert "figure-" not in report.markdown(result)  # text formats leave the figure out


@pytest.mark.engine
def test_a_server_runs_determinism_on_its_top_k_and_skips_the_rest():
    """The openai engine against a stub server (``tests/engines/server_stubs.py``): determinism runs, compared on
    the returned top-k; every other axis is skipped with its reason; the JSON reads back with top-k checks."""
    import sys

    sys.path.insert(0, str(TESTS / "engines"))
    from server_stubs import Stub, stub_server

    from logitlab.numerics.topk import TopKComparison

    with stub_server(Stub) as (url, _):
        result = matrix("", engine=f"openai:{url}", prompts=(("p", "hello"),), runs=3, n_decode=3, axes=LOCAL_AXES)
    axes = by_axis(result)
    assert [a.axis for a in result.ran] == ["determinism"]
    assert {a.axis: a.skipped for a in result.axes if a.skipped} == {
        "batch": "the openai engine does not declare the 'batch' ability",
        "batch-position": "the openai engine does not declare the 'batch' ability",
        "prefill-decode": "the openai engine does not declare the 'sessions' ability",
        "chunked-prefill": "the openai engine does not declare the 'chunked-prefill' ability",
        "threads": "the openai engine does not declare the 'threads' ability",
        "verify": "the openai engine does not declare the 'sessions' ability",
        "process": "the openai engine runs each workload out of process by itself (a command run, a server request): "
                   "there is no engine process of logitlab's to start fresh or keep warm"}
    (_, check), = axes["determinism"].checks()
    assert isinstance(check.comparison, TopKComparison) and check.word == "bit-exact"
    assert result.status == "invariant" and axes["determinism"].rows == (5 + 3, 5 + 3)
    assert axes["determinism"].distinct() == [{"prompt": "p", "runs": 3, "logits": 1, "texts": 1}]
    assert axes["determinism"].detection is None  # needs full logits
    again = report.load_result(json.loads(json.dumps(result.to_dict())))
    assert isinstance(again.axes[0].probes[0].checks[0].comparison, TopKComparison)
    md = report.markdown(again)
    assert "determinism: on the returned top-k log-probabilities only (KLD a lower bound)" in md
    assert "the runs are compared on those (not on full logits)" in md


@pytest.mark.engine
def test_a_stub_server_runs_concurrent_and_skips_prefix_cache_without_llama_server():
    """The server axes against a stub (not llama-server): ``concurrent`` runs (run 1 alone, runs 2..3 beside 2
    background requests, which the threaded stub answers), bit-exact on the returned top-k; ``prefix-cache`` needs
    llama-server's per-request switch and is skipped with that reason, not an error."""
    import sys

    sys.path.insert(0, str(TESTS / "engines"))
    from server_stubs import Stub, stub_server

    with stub_server(Stub) as (url, _):
        result = matrix("", engine=f"openai:{url}", prompts=(("p", "hello"),), runs=3, n_decode=3, background=2,
                        axes=("concurrent", "prefix-cache"))
    axes = by_axis(result)
    assert [a.axis for a in result.ran] == ["concurrent"]
    assert axes["prefix-cache"].skipped.startswith("a prefix-cache miss on demand needs llama-server (cache_prompt)")
    (probe,) = axes["concurrent"].probes
    assert probe.details["alone"] == [1] and probe.details["under_load"] == [2, 3]
    assert [load["count"] for load in probe.details["loads"]] == [2, 2]
    assert all(load["completed"] >= 1 and not load["errors"] for load in probe.details["loads"])
    assert axes["concurrent"].verdict_word == "bit-exact" and axes["concurrent"].status == "invariant"
    assert axes["concurrent"].distinct() == [{"prompt": "p", "runs": 3, "logits": 1, "texts": 1}]
    md = report.markdown(result)
    assert "| concurrent | run 1 alone vs runs 2..3 each beside 2 other requests in flight: 1 unique logit array " \
           "of 3 runs, 1 unique greedy text |" in md
    assert "- prefix-cache: a prefix-cache miss on demand needs llama-server" in md


def test_speed_measures_the_cost_of_the_mode():
    """``--speed``: the fake engine sleeps per token, the mode (sleep=0.004) twice as long as without it (0.002):
    ab's paired design calls it slower at about half the tokens/s, and the report, the JSON and its round trip say
    so."""
    result = matrix("sleep=0.004", engine="fake", prompts=(("p", "hello world"),), axes=("determinism",), n_decode=4,
                    speed=parse_variant("sleep=0.002", "control", default_engine="fake"), speed_repeats=3)
    ab = result.speed_result
    assert ab.config["control"]["options"] == {"sleep": "0.002"} and ab.config["candidate"]["options"] == {
        "sleep": "0.004"}
    decode = ab.speed["decode"]
    assert decode.call == "slower" and 0.3 < decode.ratio < 0.75 and decode.ci_high < 1
    assert len({r.block for r in ab.runs if r.block is not None}) == 3
    assert result.verdict_word == "bit-exact"  # the speed run judges nothing of the matrix
    data = result.to_dict()
    assert data["config"]["speed"]["options"] == {"sleep": "0.002"} and data["speed"]["kind"] == "ab"
    again = report.load_result(json.loads(json.dumps(data)))
    assert again.to_dict() == data and again.speed_result.speed["decode"].ratio == decode.ratio
    md = report.markdown(again)
    assert "### the mode's cost (--speed)" in md
    assert "candidate: the variant (fake: sleep=0.004); control: without the mode (fake: sleep=0.002)" in md
    assert "| decode |" in md and "slower" in md.split("### the mode's cost")[1]
    # the cost apart: throughput (decode), latency (prefill time, the inverse of its tokens/s ratio), load time
    from logitlab.report.invariance_matrix import cost_rows

    rows = dict(cost_rows(again))
    assert list(rows) == ["throughput", "latency", "load time"]
    assert rows["throughput"].startswith(f"decode tokens/s, candidate / control: {decode.ratio:.3f} [")
    prefill = ab.speed["prefill"]
    assert rows["latency"].startswith(f"prefill time (≈ time to first token), candidate / control: "
                                      f"{1 / prefill.ratio:.3f} [{1 / prefill.ci_high:.3f}, {1 / prefill.ci_low:.3f}]")
    loads = ab.manifest["load_seconds"]
    assert set(loads) == {"control", "candidate"} and all(v >= 0 for v in loads.values())
    assert rows["load time"].endswith("(one load each: no interval)")
    assert "| throughput | decode tokens/s" in md and "| load time | control " in md
    # --record: the mode's cost as a history series beside the axes'
    from logitlab.experiments.history.metrics import record_from_result

    metrics = record_from_result(result, machine="m", commit="0123456789abcdef", commit_date=None).metrics
    assert sorted(metrics) == ["determinism", "speed"] and set(metrics["speed"]) == {"decode", "prefill"}
    assert metrics["speed"]["decode"].value == pytest.approx(decode.ratio) and metrics["speed"]["decode"].samples


# -- verify (M=1 vs M=K) and process (a fresh process vs a warm one) ---------------------------------------
def test_verify_and_process_axes_declare_what_they_need():
    """verify needs sessions, process full logits from an engine process of logitlab's own; checked on the classes
    (no model loaded)."""
    from logitlab.engines.command import CommandEngine
    from logitlab.engines.ortgenai import OrtGenAiEngine

    assert [a for a in AXES if skip_reason(OrtGenAiEngine, a) is None] == ["determinism", "prefill-decode", "verify",
                                                                           "process"]
    assert skip_reason(CommandEngine, "verify") is None  # sessions: one command run per call
    assert skip_reason(CommandEngine, "process") == (
        "the cmd engine runs each workload out of process by itself (a command run, a server request): there is no "
        "engine process of logitlab's to start fresh or keep warm")
    with pytest.raises(InputError, match=r"--tokens must be at least 2 \(the verify axis scores greedy tokens in "
                                         r"blocks of K; leave it out of --axes for fewer\), got 1"):
        matrix("", engine="fake", n_decode=1)
    matrix("", engine="fake", n_decode=1, axes=("process",))  # fewer tokens without the verify axis


@pytest.mark.engine
def test_llamacpp_verify_and_process_axes_report_their_numbers():
    """llama.cpp on two prompts, 8 greedy tokens: M=4 verify blocks vs M=1 decode, and a fresh engine process vs one
    that served another prompt first. Measured on this CPU (AMD EPYC, AVX-512, 2026-12-05): verify bit-exact on the
    12-token prompt, 3 of 8 rows differ on the 57-token built-in one (the second block's rows 1-3, positions 62-64;
    max |Δ| 0.79, noise, no argmax flip); process bit-exact on both (20 and 65 rows). On an AVX2-only AMD EPYC
    (2026-12-05) verify reads `noise` on the short prompt too; process is bit-exact there as well."""
    result = matrix(prompts=(("short", SHORT_PROMPT), ("built-in", DEFAULT_PROMPT)), axes=("verify", "process"),
                    n_decode=8)
    axes = by_axis(result)
    verify, process = axes["verify"], axes["process"]
    assert [a.axis for a in result.ran] == ["verify", "process"]
    assert [c.name for _, c in verify.checks()] == ["M=4 vs M=1", "M=4 vs M=1"]
    assert verify.rows[1] == 8 + 8  # one row per greedy token, per prompt
    assert all(p.details["k"] == 4 for p in verify.probes) and verify.detection is not None
    assert [c.name for _, c in process.checks()] == ["warm vs fresh", "warm vs fresh"]
    assert process.rows == (12 + 8 + 57 + 8, 12 + 8 + 57 + 8)  # every position of both runs, bit-exact
    assert process.status == "invariant" and process.first_divergence is None
    (_, short), (_, builtin) = verify.checks()
    rounding = ("bit-exact", "ulp-noise", "noise", "near-tie")
    assert short.word in rounding and builtin.word in rounding  # rounding at most, on every CPU
    if CPU_AVX512:
        assert short.word == "bit-exact"
        assert builtin.word == "noise" and builtin.comparison.differing_rows == 3 and not builtin.comparison.flips
        assert verify.first_divergence == {"prompt": "built-in", "check": "M=4 vs M=1", "position": 5}
        assert verify.status == "not invariant" and result.worst is verify
    md = report.markdown(result)
    assert "| verify | M=4 verify blocks vs M=1 decode calls |" in md
    assert "| process | a warm engine process (after another prompt's run) vs a freshly started one |" in md
    if CPU_AVX512:
        assert "| verify | **noise** | 81.2 % (13/16) |" in md.replace("\\", "")
        assert "built-in, M=4 vs M=1, pos 62 |" in md  # decode row 5 after the 57-token prompt


def test_planted_faults_are_found_on_their_axis_alone():
    """A verify kernel that moves every 7th logit (fake-verify) is caught by the verify axis alone; state that
    follows the widest forward an engine process has run (fake-widest) by the process axis alone
    (tests/planted_engines.py). Both results round-trip through JSON and render again byte for byte."""
    import planted_engines

    with planted_engines.registered():
        bumped = matrix("", engine="fake-verify", prompts=(("p", "hello world"),), n_decode=6, runs=2)
        widest = matrix("", engine="fake-widest", prompts=(("p", "hello world"),), n_decode=6, runs=2)
    statuses = {a.axis: a.status for a in bumped.ran}
    assert statuses == {"determinism": "invariant", "prefill-decode": "invariant", "verify": "not invariant",
                        "process": "invariant"}
    verify = by_axis(bumped)["verify"]
    (_, check), = verify.checks()
    assert check.name == "M=4 vs M=1" and check.comparison.differing_rows == 6  # every verify row moved
    assert check.comparison.max_abs_diff == pytest.approx(float(planted_engines.BUMP), rel=1e-2)
    assert verify.first_divergence == {"prompt": "p", "check": "M=4 vs M=1", "position": 0}
    assert bumped.worst is verify
    statuses = {a.axis: a.status for a in widest.ran}
    assert statuses == {"determinism": "invariant", "prefill-decode": "invariant", "verify": "invariant",
                        "process": "not invariant"}
    process = by_axis(widest)["process"]
    (_, check), = process.checks()
    assert check.comparison.differing_rows == 11 + 6  # every row: the warm process ran a 15-token prompt first
    assert check.details["warmup_prompt_tokens"] == 11 + 4 and widest.worst is process
    for result in (bumped, widest):
        data = result.to_dict()
        again = report.load_result(json.loads(json.dumps(data)))
        assert again.to_dict() == data and report.markdown(again) == report.markdown(result)
        assert report.html(again) == report.html(result)
