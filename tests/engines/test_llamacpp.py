"""The llama.cpp adapter on the real embedded model."""

import numpy as np
import pytest

from logitlab.engines import engine_class
from logitlab.errors import InputError

from conftest import SHORT_PROMPT

pytestmark = pytest.mark.engine

LlamaCppEngine = engine_class("llamacpp")


@pytest.fixture(scope="module")
def engine():
    engine = LlamaCppEngine(model=None, options={})
    yield engine
    engine.close()


def test_prefill_and_decode_return_fresh_float32_rows(engine):
    ids = engine.tokenize(SHORT_PROMPT)
    with engine.open_session() as session:
        prefill = session.prefill(ids)
        first = session.decode([int(prefill[-1].argmax())])
        kept = first.copy()
        second = session.decode([int(first[-1].argmax())])
        block = session.decode([1, 2, 3])  # M=K: one row per appended token
    assert prefill.shape == (len(ids), engine.n_vocab) and prefill.dtype == np.float32
    assert first.shape == second.shape == (1, engine.n_vocab)
    assert block.shape == (3, engine.n_vocab)
    assert np.array_equal(first, kept), "a later call overwrote returned logits"
    assert not np.shares_memory(first, engine.llama.scores)
    assert [t.kind for t in session.timings] == ["prefill", "decode", "decode", "decode"]
    assert all(t.seconds > 0 for t in session.timings)


def test_new_session_reproduces_logits(engine):
    ids = engine.tokenize(SHORT_PROMPT)
    with engine.open_session() as s1:
        a = s1.prefill(ids)
    with engine.open_session() as s2:
        b = s2.prefill(ids)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_unknown_option_names_valid_ones():
    with pytest.raises(InputError, match=r"unknown llamacpp option 'flash'; valid options: .*flash_attn.*n_ubatch"):
        LlamaCppEngine(model=None, options={"flash": "1"})


def test_bad_option_value():
    with pytest.raises(InputError, match="bad value 'maybe' for llamacpp option 'flash_attn'"):
        LlamaCppEngine(model=None, options={"flash_attn": "maybe"})
    # the reason is ours, not Python's ("invalid literal for int() with base 10")
    with pytest.raises(InputError, match=r"^bad value 'abc' for llamacpp option 'n_ctx': expected an integer >= 1$"):
        LlamaCppEngine(model=None, options={"n_ctx": "abc"})


def test_missing_and_non_gguf_model(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        LlamaCppEngine(model=str(tmp_path / "missing.gguf"))
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(InputError, match="is not GGUF"):
        LlamaCppEngine(model=str(bogus))


def test_describe_has_version_hash_and_options(engine):
    info = engine.describe()
    assert info["engine_version"].startswith("llama-cpp-python ")
    assert len(info["model_sha256"]) == 64
    assert info["effective"]["n_ctx"] == 512


def test_truncate_rolls_back_the_kv_cache_bit_exactly(engine):
    ids = engine.tokenize(SHORT_PROMPT)
    with engine.open_session() as session:
        session.prefill(ids)
        straight = session.decode([11])
    with engine.open_session() as session:
        session.prefill(ids)
        session.decode([42, 43, 44])  # an M=K block, then thrown away
        session.truncate(len(ids))
        assert session.n_past == len(ids)
        again = session.decode([11])
    assert np.array_equal(straight.view(np.uint32), again.view(np.uint32))
    with engine.open_session() as session, pytest.raises(InputError, match="cannot roll back to position 999"):
        session.truncate(999)


def test_kv_types_by_ggml_enum_value_are_the_named_types():
    """llama_cpp.Llama takes type_k=8 (GGML_TYPE_Q8_0); the option takes the integer or the name."""
    from logitlab.engines.workload import run_workload

    by_name = LlamaCppEngine(model=None, options={"type_k": "q8_0", "type_v": "q8_0", "flash_attn": "1"})
    by_value = LlamaCppEngine(model=None, options={"type_k": "8", "type_v": "8", "flash_attn": "1"})
    plain = LlamaCppEngine(model=None, options={"flash_attn": "1"})
    try:
        assert by_value.options["type_k"] == "q8_0" and by_value.describe()["options"]["type_v"] == "q8_0"
        ids = by_name.tokenize(SHORT_PROMPT)
        runs = [run_workload(e, ids, 2, replay=[11, 12]) for e in (by_name, by_value, plain)]
        assert np.array_equal(runs[0].logits.view(np.uint32), runs[1].logits.view(np.uint32))
        assert not np.array_equal(runs[0].logits, runs[2].logits)  # the 8-bit KV cache really is in use
    finally:
        for e in (by_name, by_value, plain):
            e.close()


def test_unknown_kv_type_names_the_mapping():
    with pytest.raises(InputError, match=r"type_k.*valid types, by name or ggml enum value: f32 \(0\), f16 \(1\),.*"
                                         r"q8_0 \(8\)"):
        LlamaCppEngine(model=None, options={"type_k": "9"})


@pytest.mark.engine
def test_decode_rows_gives_the_bits_of_eval_with_logits_all(engine):
    """The engine's own decode (rows copied from llama.cpp's output buffer, ``logits_all=False``) against
    llama-cpp-python's ``eval`` on a ``logits_all=True`` model (its ``scores``): the prompt in two
    ``n_batch`` chunks, then M=1 and M=3 steps — the same bits."""
    import llama_cpp

    from logitlab.engines import llamacpp_repack as repack
    from logitlab.engines.llamacpp import decode_rows

    ids = engine.tokenize(" ".join([SHORT_PROMPT] * 4))[:40]
    with repack.loading(engine.repack.use_extra_bufts):
        reference = llama_cpp.Llama(model_path=engine.model, logits_all=True, verbose=False, n_ctx=128, n_batch=32)
        ours = llama_cpp.Llama(model_path=engine.model, logits_all=False, verbose=False, n_ctx=128, n_batch=32)
    try:
        got = [decode_rows(ours, ids), decode_rows(ours, [5]), decode_rows(ours, [6, 7, 8])]
        reference.eval(ids)
        reference.eval([5])
        reference.eval([6, 7, 8])
        want = np.array(reference.scores[: len(ids) + 4], dtype=np.float32)
        assert ours.n_tokens == reference.n_tokens == len(ids) + 4
        assert list(ours.input_ids[: ours.n_tokens]) == list(reference.input_ids[: reference.n_tokens])
    finally:
        reference.close()
        ours.close()
    assert [g.shape[0] for g in got] == [40, 1, 3]
    assert np.concatenate(got).tobytes() == want.tobytes()


@pytest.mark.engine
def test_a_long_prompt_leaves_no_copy_of_its_logits_in_the_engine():
    """The memory bound's mechanism on the engine side (#31): a 700-token prefill at n_ctx 1024 returns its
    rows, and llama-cpp-python holds no ``n_ctx × n_vocab`` ``scores`` of them (one ``n_batch`` chunk's
    worth, never written), so an engine's logits memory does not grow with the prompt."""
    engine = LlamaCppEngine(model=None, options={"n_ctx": 1024})
    try:
        ids = engine.tokenize(" ".join([SHORT_PROMPT] * 100))[:700]
        with engine.open_session() as session:
            rows = session.prefill(ids)
        assert rows.shape == (700, engine.n_vocab) and engine.n_ctx == 1024
        assert engine.llama.scores.shape == (engine.llama.n_batch, engine.n_vocab) == (512, 49152)
    finally:
        engine.close()


@pytest.mark.engine
def test_rows_are_written_into_the_callers_array(engine):
    """``prefill``/``decode`` with ``out=``: llama.cpp's rows go straight into the caller's array (a run's buffer,
    no second copy of the prompt's rows), the same bits as without it; ``run_workload`` gathers a run in place."""
    from logitlab.engines.workload import run_workload
    from logitlab.errors import InputError

    ids = engine.tokenize(SHORT_PROMPT)
    with engine.open_session() as session:
        plain = np.concatenate([session.prefill(ids), session.decode([5])])
    buffer = np.full((len(ids) + 1, engine.n_vocab), np.nan, dtype=np.float32)
    with engine.open_session() as session:
        assert session.prefill(ids, out=buffer[:-1]).base is buffer
        assert session.decode([5], out=buffer[-1:]).base is buffer
        with pytest.raises(InputError, match="out must be a writable C-contiguous float32 array of shape"):
            session.decode([6], out=np.empty((1, engine.n_vocab), dtype=np.float64))
    assert buffer.tobytes() == plain.tobytes()
    gathered = np.empty((len(ids) + 3, engine.n_vocab), dtype=np.float32)
    run = run_workload(engine, ids, 3, out=gathered)
    assert run.logits is gathered
    assert run.logits[: len(ids)].tobytes() == plain[: len(ids)].tobytes()
    assert run.generated == run_workload(engine, ids, 3).generated


def test_a_batch_hands_each_sequence_to_keep_as_soon_as_it_is_copied(engine):
    """``keep`` (invariance batch spills each sequence to disk with it): called once per sequence, in order, on
    the rows that would otherwise come back; its answer is what comes back."""
    ids = engine.tokenize(SHORT_PROMPT)
    other = ids[: len(ids) // 2]
    seen = []

    def keep(rows):
        seen.append(rows)
        return rows[:1].copy()

    with engine.open_batch(3, 3 * len(ids)) as backend:
        every = backend.run([ids, other, ids])
        kept = backend.run([ids, other, ids], keep=keep)
    assert [a.shape[0] for a in seen] == [len(ids), len(other), len(ids)]
    assert all(np.array_equal(a, b) for a, b in zip(seen, every))  # the rows themselves, bit for bit
    assert [a.shape for a in kept] == [(1, engine.n_vocab)] * 3 and all(np.array_equal(k, s[:1])
                                                                           for k, s in zip(kept, seen))


def test_a_batch_asked_for_its_last_rows_holds_one_row_a_sequence(engine):
    """``outputs="last"`` sets llama.cpp's output flag on each sequence's last token only (as its server does when
    it prefills): one row per sequence comes back and llama.cpp's output buffer holds B rows, not every token's.
    The row is a real one: bit-identical between two calls, and close to the same row with every flag set (the
    last layer's rows after attention then run for those tokens only: another matmul width, so not bit-exact
    everywhere)."""
    ids = engine.tokenize(SHORT_PROMPT)
    other = ids[: len(ids) // 2]
    with engine.open_batch(3, 3 * len(ids)) as backend:
        every = backend.run([ids, other, ids])
        last = backend.run([ids, other, ids], outputs="last")
        again = backend.run([ids, other, ids], outputs="last")
        # llama.cpp itself holds no row for a token without the flag (it answers NULL): not rows sliced afterwards
        assert not backend._lib.llama_get_logits_ith(backend.ctx, 0)
        assert backend._lib.llama_get_logits_ith(backend.ctx, len(ids) - 1)
        with pytest.raises(InputError, match=r"^unknown batch outputs 'first'; valid: all, last$"):
            backend.run([ids], outputs="first")
    assert [a.shape for a in every] == [(len(ids), engine.n_vocab), (len(other), engine.n_vocab),
                                        (len(ids), engine.n_vocab)]
    assert [a.shape for a in last] == [(1, engine.n_vocab)] * 3 and all(a.dtype == np.float32 for a in last)
    assert all(np.array_equal(a, b) for a, b in zip(last, again))
    for a, b in zip(every, last):
        assert int(a[-1].argmax()) == int(b[0].argmax())
        assert np.max(np.abs(a[-1] - b[0])) < 0.5  # the same row up to rounding, not another position's
    assert not np.allclose(last[0][0], last[1][0], atol=0.5)  # sequence 1's own last row, not sequence 0's
    print(f"\nlast rows vs every row's last, bit-identical: {[np.array_equal(a[-1], b[0]) for a, b in zip(every, last)]}")
