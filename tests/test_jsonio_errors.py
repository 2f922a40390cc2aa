"""The one-line messages for a JSON file that cannot be read (logitlab.jsonio)."""

import pytest

from logitlab.errors import InputError
from logitlab.jsonio import read_json


@pytest.mark.parametrize("text, expected", [
    ('{"kind": "ab", "x": "cut', "is not valid JSON: Unterminated string starting at line 1, column 21"),
    ("", "is not valid JSON: Expecting value at line 1, column 1"),
    ('{"a": 1,}', "is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 9"),
])
def test_a_bad_json_file_names_where_once(tmp_path, text, expected):
    """json's own messages that end in "at" ("Unterminated string starting at") get no second "at"."""
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_json(path, what="result file")
    assert str(info.value) == f"result file {path} {expected}"
    assert " at at " not in str(info.value)
