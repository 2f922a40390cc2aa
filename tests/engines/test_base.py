"""The engine layer's one context-length check, :func:`logitlab.engines.base.check_fits`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from logitlab.engines.base import check_fits
from logitlab.errors import InputError
from conftest import FakeEngine

WITH_N_CTX = {"n_ctx": (int, "context length in tokens")}


def test_fits_and_no_known_context_pass():
    check_fits(SimpleNamespace(n_ctx=121, OPTIONS={}), 57, 64)
    check_fits(SimpleNamespace(n_ctx=None, OPTIONS={}), 10**9, 10**9, extra=1)


def test_one_wording_names_the_prompt_the_side_and_the_option():
    engine = SimpleNamespace(n_ctx=64, OPTIONS=WITH_N_CTX)
    with pytest.raises(InputError, match=r"^the prompt 'story' \(57 tokens\) \+ --tokens 64 = 121 exceeds the "
                                         r"control's context of 64 tokens; shorten the prompt or --tokens, or pass a "
                                         r"larger n_ctx=\.\.\. in the variant$"):
        check_fits(engine, 57, 64, name="story", side="control")


def test_a_supervised_engine_names_its_adapters_option():
    engine = SimpleNamespace(n_ctx=64, engine_cls=SimpleNamespace(OPTIONS=WITH_N_CTX))
    with pytest.raises(InputError, match=r"; shorten the prompt, or pass a larger n_ctx=\.\.\. in the variant$"):
        check_fits(engine, 65)


def test_without_an_n_ctx_option_only_the_inputs_can_shrink():
    engine = SimpleNamespace(n_ctx=64, OPTIONS={})
    with pytest.raises(InputError, match=r"^the prompt \(57 tokens\) \+ --tokens 7 \+ 1 more = 65 exceeds the "
                                         r"context of 64 tokens; shorten the prompt or --tokens$"):
        check_fits(engine, 57, 7, extra=1)


def test_fixed_tokens_get_only_the_advice_of_a_larger_context():
    with pytest.raises(InputError, match=r"^a chunk of b\.kld \(512 tokens\) exceeds the context of 64 tokens; "
                                         r"pass a larger n_ctx=\.\.\. in the variant$"):
        check_fits(SimpleNamespace(n_ctx=64, OPTIONS=WITH_N_CTX), 512, what="a chunk of b.kld", fixed=True)
    with pytest.raises(InputError, match=r"; use an engine with a larger context$"):
        check_fits(SimpleNamespace(n_ctx=64, OPTIONS={}), 512, what="a chunk of b.kld", fixed=True)


def test_a_session_checks_each_append_before_the_engine_runs():
    engine = FakeEngine(model="fake")
    with engine.open_session() as session:
        with pytest.raises(InputError, match=r"^the prompt \(4097 tokens\) exceeds the context of 4096 tokens; "
                                             r"shorten the prompt$"):
            session.prefill([1] * 4097)
        session.prefill([1] * 4090)
        with pytest.raises(InputError, match=r"^the session \(4090 tokens\) \+ 7 more = 4097 exceeds the context of "
                                             r"4096 tokens; shorten the prompt or --tokens$"):
            session.decode([1] * 7)
        assert session.n_past == 4090 and len(session.timings) == 1
