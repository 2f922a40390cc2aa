"""Re-keying id-keyed top-k rows by token text (crafted rows, no engine).

An ``ab`` of a server that names tokens by text (llama-cpp-python's) against
one that names them by id (llama-server) matches the two by text:
:func:`~logitlab.engines.topk.rekey_by_text`.
"""

import pytest

from logitlab.engines.topk import TopKRows, key_kind, rekey_by_text
from logitlab.errors import InputError
from logitlab.numerics.topk import compare_topk

TEXT = {7: " the", 3: " a", 11: "\u00e9", 12: "", 13: "", 5: " an", 9: " The"}


def test_keys_become_text_values_and_order_kept():
    rows = TopKRows(((7, 3, 5), None, (9, 7)), ((-0.25, -1.5, -3.0), None, (-0.5, -0.75)), 3)
    out = rekey_by_text(rows, TEXT.__getitem__)
    assert out.keys == ((" the", " a", " an"), None, (" The", " the"))
    assert out.values == rows.values
    assert out.requested_k == 3


def test_ids_with_the_same_text_keep_the_first_most_likely_entry():
    # 12 and 13: two byte pieces that each decode to "" (as llama-cpp-python decodes with errors="ignore")
    rows = TopKRows(((7, 12, 3, 13, 5),), ((-0.5, -1.0, -2.0, -2.5, -4.0),), 5)
    out = rekey_by_text(rows, TEXT.__getitem__)
    assert out.keys == ((" the", "", " a", " an"),)
    assert out.values == ((-0.5, -1.0, -2.0, -4.0),)
    assert out.requested_k == 5  # the row now holds fewer than k entries, as a text-keyed server returns


def test_rekeyed_rows_meet_a_text_keyed_source():
    ids = TopKRows(((7, 3, 5), (9, 12, 13)), ((-0.25, -1.5, -3.0), (-0.5, -1.0, -1.25)), 3)
    text = TopKRows.from_mappings([{" the": -0.25, " a": -1.5, " an": -3.0}, {" The": -0.5, "": -1.0}], 3)
    before = compare_topk(text, ids, top_k=1)
    assert before.argmax_agreement == 0.0  # nothing shared: the bug
    after = compare_topk(text, rekey_by_text(ids, TEXT.__getitem__), top_k=1)
    assert after.argmax_agreement == 1.0 and after.differing_entries == 0 and bool(after)


def test_key_kind():
    assert key_kind(TopKRows((None, (4, 2)), (None, (-1.0, -2.0)), 2)) is int
    assert key_kind(TopKRows.from_mappings([None, {"x": -0.1}], 1)) is str
    assert key_kind(TopKRows((None,), (None,), 1)) is None


def test_text_keys_are_refused():
    rows = TopKRows.from_mappings([{"x": -0.1}], 1)
    with pytest.raises(InputError, match="token-id keys"):
        rekey_by_text(rows, str)
