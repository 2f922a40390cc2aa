import pytest

from logitlab.engines import engine_class
from logitlab.engines.variant import parse_env, parse_options, parse_variant
from logitlab.errors import InputError


def test_options_shorthand():
    v = parse_variant("n_ubatch=4,flash_attn=1", "candidate", default_engine="llamacpp")
    assert (v.engine, v.model, v.options) == ("llamacpp", None, {"n_ubatch": "4", "flash_attn": "1"})


def test_engine_prefix_model_and_query():
    v = parse_variant("llama.cpp:/m/x.gguf?flash_attn=1&n_threads=2", "control", default_engine="fake")
    assert (v.engine, v.model, v.options) == ("llamacpp", "/m/x.gguf", {"flash_attn": "1", "n_threads": "2"})


def test_engine_prefix_alone_and_empty_spec_use_defaults():
    assert parse_variant("llamacpp:", "c", default_engine="fake").engine == "llamacpp"
    v = parse_variant("", "c", default_engine="llamacpp", default_model="m.gguf")
    assert (v.engine, v.model, v.options) == ("llamacpp", "m.gguf", {})


def test_model_path_alone():
    assert parse_variant("models/a.gguf", "c", default_engine="llamacpp").model == "models/a.gguf"


def test_env_knobs():
    assert parse_env(["A", "B=2", "C="]) == {"A": "1", "B": "2", "C": ""}
    with pytest.raises(InputError, match="bad environment knob '1X'"):
        parse_env(["1X"])


def test_bad_option_item():
    with pytest.raises(InputError, match="expected KEY=VALUE"):
        parse_options("a=1,b")


def test_unknown_engine_lists_valid_ones():
    with pytest.raises(InputError, match="unknown engine 'nope'; valid engines: .*llamacpp"):
        engine_class("nope")


def test_unknown_engine_prefix_names_the_engine_and_lists_the_known_ones():
    message = (r"^unknown engine 'nosuch' in --candidate spec 'nosuch:' \(engines: cmd, .*hf, llamacpp, openai, ortgenai\); "
               r"a model path with ':' must exist$")
    with pytest.raises(InputError, match=message):
        parse_variant("nosuch:", "candidate", default_engine="llamacpp")
    with pytest.raises(InputError, match=r"^unknown engine 'lamacpp' in --options spec 'lamacpp:m.gguf\?a=1'"):
        parse_variant("lamacpp:m.gguf?a=1", "verify", default_engine="llamacpp", option="--options")


def test_model_paths_with_colons_still_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run:2.gguf").write_bytes(b"")
    assert parse_variant("run:2.gguf", "c", default_engine="llamacpp").model == "run:2.gguf"
    v = parse_variant("run:2.gguf?flash_attn=1", "c", default_engine="llamacpp")
    assert (v.model, v.options) == ("run:2.gguf", {"flash_attn": "1"})
    assert parse_variant("models/a:b.gguf", "c", default_engine="llamacpp").model == "models/a:b.gguf"
    assert parse_variant("timing_regex=t:([0-9.]+)", "c", default_engine="cmd").options == {
        "timing_regex": "t:([0-9.]+)"}


def test_repeated_option_keys_and_environment_knobs_are_errors():
    with pytest.raises(InputError, match=r"^option 'flash_attn' given twice in 'flash_attn=1,flash_attn=0'"):
        parse_variant("flash_attn=1,flash_attn=0", "candidate", default_engine="llamacpp")
    with pytest.raises(InputError, match="option 'a' given twice"):
        parse_variant("llamacpp:m.gguf?a=1&a=1", "candidate", default_engine="llamacpp")
    with pytest.raises(InputError, match=r"^environment knob 'X' given twice \(X=1, X=2\)"):
        parse_env(["X=1", "X=2"])
    with pytest.raises(InputError, match="environment knob 'X' given twice"):
        parse_env(["X", "X=1"])
