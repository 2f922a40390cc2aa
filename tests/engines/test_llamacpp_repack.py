"""llama.cpp's weight repacking (``use_extra_bufts``): the option, its machine default, what a load used.

The rules (:func:`resolve`, the tools' flags, the log reader) on crafted inputs; the engine on real models:
the embedded Q4_1 model, and a Q4_0 copy made by ``llama-quantize``, which llama.cpp repacks on any x86 CPU
with AVX2 (``CPU_REPACK``; ``AMX`` on an AMX CPU with an AMX build) — so both settings are exercised on
every machine class, whatever ``auto`` picks here.
"""

from __future__ import annotations

import numpy as np
import pytest

from logitlab.device import cpu_flags, isa_classes
from logitlab.engines import engine_class
from logitlab.engines import llamacpp_repack as repack
from logitlab.errors import InputError

from conftest import SHORT_PROMPT

AMX_INFO = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | OPENMP = 1 |"
PLAIN_INFO = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | OPENMP = 1 |"
AMX_FLAGS = ["avx2", "avx512f", "amx_tile", "amx_int8", "amx_bf16"]


# -- the rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize("info, flags, expected", [
    (AMX_INFO, AMX_FLAGS, False),  # the known crash: both have AMX
    (AMX_INFO, ["avx2", "avx512f"], True),  # an AMX build on a CPU without it: llama.cpp registers no AMX type
    (PLAIN_INFO, AMX_FLAGS, True),  # an AMX CPU, a build without the AMX path
    (PLAIN_INFO, ["avx2"], True),
])
def test_auto_is_off_only_where_library_and_cpu_both_have_amx(info, flags, expected):
    choice = repack.resolve("auto", info, flags)
    assert choice.use_extra_bufts is expected and choice.setting == "auto"
    assert ("20824" in choice.reason) is (not expected)


def test_an_explicit_setting_wins_over_the_machine():
    assert repack.resolve("1", AMX_INFO, AMX_FLAGS).use_extra_bufts is True
    assert repack.resolve("0", PLAIN_INFO, ["avx2"]).use_extra_bufts is False


@pytest.mark.parametrize("text, expected", [("auto", "auto"), ("AUTO", "auto"), ("1", "1"), ("on", "1"),
                                            ("true", "1"), ("0", "0"), ("off", "0"), ("no", "0")])
def test_setting_spellings(text, expected):
    assert repack.parse_setting(text) == expected


def test_a_bad_setting_is_one_line_naming_the_option():
    with pytest.raises(InputError, match=r"^bad value 'sometimes' for llamacpp option 'use_extra_bufts': expected "
                                         r"auto, 1/0"):
        engine_class("llamacpp")(model=None, options={"use_extra_bufts": "sometimes"})


def test_tool_flags_are_each_tools_own_spelling():
    assert repack.tool_args("llama-server", False) == ["--no-repack"]
    assert repack.tool_args("/x/bin/llama-perplexity", False) == ["--no-repack"]
    assert repack.tool_args("llama-bench", False) == ["--repack", "0"]
    assert repack.tool_args("llama-quantize", False) == []
    assert repack.tool_args("llama-server", True) == []


def test_buffer_types_are_read_from_the_load_log():
    log = ("load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
           "load_tensors:   CPU_Mapped model buffer size =    31.06 MiB\n"
           "load_tensors:   CPU_REPACK model buffer size =    60.75 MiB\n"
           "load_tensors:          AMX model buffer size =     1.50 MiB\n")
    assert repack.buffer_types(log) == {"CPU_Mapped": 31.06, "CPU_REPACK": 60.75, "AMX": 1.5}
    assert repack.buffer_types("llama_context: n_ctx = 512\n") == {}


def test_isa_classes_name_the_kernel_paths():
    assert isa_classes(["sse4_2", "avx2", "avx512f", "avx512_vnni", "amx_int8"]) == ["AVX2", "AVX-512", "AVX-512 VNNI",
                                                                                    "AMX-INT8"]
    assert isa_classes(["asimd", "asimddp", "i8mm"]) == ["NEON", "DOTPROD", "I8MM"]
    assert isa_classes([]) == []


# -- real loads -----------------------------------------------------------------------------------
LlamaCppEngine = engine_class("llamacpp")


def _amx_here() -> bool:
    import llama_cpp

    return repack.library_has_amx(llama_cpp.llama_print_system_info().decode()) and repack.cpu_has_amx()


def _logits(engine, ids) -> np.ndarray:
    with engine.open_session() as session:
        return session.prefill(ids)


@pytest.mark.engine
def test_the_default_on_the_embedded_model_is_recorded_with_its_reason():
    engine = LlamaCppEngine(model=None, options={})
    try:
        facts = engine.describe()
        ids = engine.tokenize(SHORT_PROMPT)
        rows = _logits(engine, ids)  # batched prefill: the evaluation that crashes on a repacked AMX model
        n_vocab = engine.n_vocab
    finally:
        engine.close()
    weights = facts["weight_repacking"]
    assert weights["setting"] == "auto"
    assert weights["use_extra_bufts"] is (not _amx_here())
    assert facts["effective"]["use_extra_bufts"] is weights["use_extra_bufts"]
    # Q4_1 goes to no extra buffer type: not repacked on x86 without AMX, and auto turns AMX off
    assert weights["extra_buffer_types"] == ["none"] and facts["build_identity"] == {}
    assert sum(weights["model_buffers_mib"].values()) > 50  # the 98 MB file's tensors, all in plain CPU buffers
    assert "use_extra_bufts" not in facts["options"]  # a golden of an unset option stays as it was
    assert rows.shape == (len(ids), n_vocab) and np.isfinite(rows).all()


@pytest.fixture(scope="module")
def q4_0_model(model_path, tmp_path_factory):
    """The embedded model requantized to Q4_0 by llama.cpp's own llama-quantize (a peer tool)."""
    from peers import run_tool

    out = tmp_path_factory.mktemp("q4_0") / "smollm2-q4_0.gguf"
    run_tool("llama-quantize", "--allow-requantize", model_path, str(out), "Q4_0", "2")
    return str(out)


@pytest.mark.engine
@pytest.mark.peers
def test_repacking_on_and_off_on_a_q4_0_model_uses_and_records_its_buffer_type(q4_0_model):
    """On an AVX2 CPU llama.cpp repacks Q4_0 into CPU_REPACK (AMX with the AMX path); off, into none. The two
    kernel paths compute the same prefill in a different order: close logits, not the same bits."""
    if "AVX2" not in isa_classes(cpu_flags()):
        pytest.fail("this test needs an x86 CPU with AVX2 (Q4_0 has no repacked form here)")
    expected = "AMX" if _amx_here() else "CPU_REPACK"
    options = {"n_ubatch": "1"} if expected == "AMX" else {}  # the AMX path crashes on batched evaluation
    on = LlamaCppEngine(model=q4_0_model, options={**options, "use_extra_bufts": "1"})
    off = LlamaCppEngine(model=q4_0_model, options={**options, "use_extra_bufts": "0"})
    try:
        ids = on.tokenize(SHORT_PROMPT)
        a, b = _logits(on, ids), _logits(off, ids)
        facts_on, facts_off = on.describe(), off.describe()
    finally:
        on.close()
        off.close()
    assert facts_on["weight_repacking"]["extra_buffer_types"] == [expected]
    assert facts_on["build_identity"] == {"extra_buffer_types": expected}
    assert facts_on["options"]["use_extra_bufts"] == "1" and facts_on["weight_repacking"]["use_extra_bufts"] is True
    assert facts_off["weight_repacking"]["extra_buffer_types"] == ["none"] and facts_off["build_identity"] == {}
    assert a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all()
    assert not np.array_equal(a, b), "repacked and plain kernels gave the same bits: is the repack path active?"
    assert np.abs(a - b).max() < 2.0  # the same weights in another layout: rounding-sized, not a different model
    assert (a.argmax(-1) == b.argmax(-1)).mean() > 0.7


@pytest.mark.engine
def test_a_load_restores_llama_cpp_pythons_own_functions():
    import llama_cpp
    import llama_cpp.llama_cpp as lib

    before = lib.llama_model_default_params
    engine = LlamaCppEngine(model=None, options={"use_extra_bufts": "0"})
    engine.close()
    assert lib.llama_model_default_params is before
    assert bool(llama_cpp.llama_model_default_params().use_extra_bufts) is True  # the library's default, untouched


def test_a_crash_hint_names_the_repack_option_only_where_the_amx_path_is_taken():
    cls = engine_class("llamacpp")
    amx = _amx_here()
    forced = cls.crash_hint(cls.validate_options({"use_extra_bufts": "1"}))
    assert (forced == repack.CRASH_HINT) is amx and (forced is None) is (not amx)
    assert cls.crash_hint(cls.validate_options({})) is None  # auto is off where the path crashes
    assert cls.crash_hint(cls.validate_options({"use_extra_bufts": "0"})) is None
    assert cls.crash_hint(cls.validate_options({"use_extra_bufts": "1", "n_ubatch": "1"})) is None
    assert "use_extra_bufts=0" in repack.CRASH_HINT and "--no-repack" in repack.CRASH_HINT


@pytest.mark.engine
@pytest.mark.peers
def test_ab_repacking_off_vs_on_records_each_sides_buffer_types(q4_0_model):
    """``ab --control use_extra_bufts=0 --candidate use_extra_bufts=1``: a real A/B whose JSON says which buffer
    type each side's weights went to (the control's in ``manifest.engine``, the candidate's changes beside it)."""
    from logitlab.engines.variant import parse_variant
    from logitlab.experiments.ab import AbConfig, run_ab

    expected = "AMX" if _amx_here() else "CPU_REPACK"
    extra = "&n_ubatch=1" if expected == "AMX" else ""  # the AMX path crashes on batched evaluation

    def side(value: str, label: str):
        return parse_variant(f"{q4_0_model}?use_extra_bufts={value}{extra}", label, default_engine="llamacpp")

    cfg = AbConfig(control=side("0", "control"), candidate=side("1", "candidate"), prompt=SHORT_PROMPT,
                   n_decode=4, repeats=1, warmup=0)
    result = run_ab(cfg)
    assert result.control_reproducible
    assert result.manifest["engine"]["weight_repacking"]["extra_buffer_types"] == ["none"]
    changes = result.manifest["candidate_engine_changes"]
    assert changes["weight_repacking"]["extra_buffer_types"] == [expected]
    assert changes["options"]["use_extra_bufts"] == "1"
    assert result.verdict.word not in ("bit-exact", "divergent", "crashed")  # other kernels, the same weights
