"""Built-once engine folders (hf's de-quantised weights, ORT GenAI models): build beside, publish in one rename."""

from __future__ import annotations

import json

import pytest

from logitlab.engines.build_cache import building, publish, read_meta
from logitlab.errors import EngineError


def test_a_build_is_published_in_one_rename_and_leaves_no_temporary_folder(tmp_path):
    folder = tmp_path / "cache" / "model"
    with building(folder, ".model-", "the test cache") as tmp:
        assert tmp.parent == folder.parent and tmp.name.startswith(".model-")
        (tmp / "weights.bin").write_bytes(b"new")
        publish(tmp, folder, {"format": 2})
    assert (folder / "weights.bin").read_bytes() == b"new" and read_meta(folder) == {"format": 2}
    assert sorted(p.name for p in folder.parent.iterdir()) == ["model"]
    # a stale folder (an older format) is replaced, not merged
    with building(folder, ".model-", "the test cache") as tmp:
        (tmp / "other.bin").write_bytes(b"newer")
        publish(tmp, folder, {"format": 3})
    assert sorted(p.name for p in folder.iterdir()) == ["logitlab.json", "other.bin"] and read_meta(folder)["format"] == 3


def test_a_failed_build_leaves_nothing_and_a_disk_error_is_one_engine_error(tmp_path):
    folder = tmp_path / "cache" / "model"
    with pytest.raises(ValueError, match="builder failed"):
        with building(folder, ".model-", "the test cache") as tmp:
            (tmp / "half.bin").write_bytes(b"x")
            raise ValueError("builder failed")
    assert list(folder.parent.iterdir()) == []  # the half-built folder is gone, nothing published
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(EngineError) as info:
        with building(blocker / "model", ".model-", "the test cache"):
            pass
    message = str(info.value)
    assert message.startswith(f"cannot write the test cache under {blocker}: ") and "LOGITLAB_CACHE" in message
    assert "\n" not in message


def test_meta_that_is_missing_or_not_a_json_object_reads_as_none(tmp_path):
    assert read_meta(tmp_path / "absent") is None
    for text in ("not json", "[1, 2]", "3"):
        (tmp_path / "logitlab.json").write_text(text)
        assert read_meta(tmp_path) is None, text
    (tmp_path / "logitlab.json").write_text(json.dumps({"format": 1}))
    assert read_meta(tmp_path) == {"format": 1}
