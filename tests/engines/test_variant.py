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
