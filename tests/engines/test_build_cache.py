"""Built-once engine folders (hf's de-quantised weights, ORT GenAI models): build beside, publish in one rename."""

from __future__ import annotations

import json
import time

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


def test_exclusive_makes_a_second_process_wait_for_the_first(tmp_path):
    """A real second process holds the lock; this one is told it waits, and enters only after the holder left."""
    import subprocess
    import sys

    from logitlab.engines.build_cache import exclusive

    folder = tmp_path / "cache" / "build"
    state = tmp_path / "state"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from logitlab.engines.build_cache import exclusive\n"
        "state = Path(sys.argv[2])\n"
        "with exclusive(Path(sys.argv[1]), 'the test cache'):\n"
        "    state.write_text('held'); time.sleep(1.0); state.write_text('released')\n"), str(folder), str(state)])
    try:
        for _ in range(600):
            if state.exists() and state.read_text() == "held":
                break
            time.sleep(0.01)
        assert state.read_text() == "held"
        waited = []
        with exclusive(folder, "the test cache", on_wait=lambda: waited.append(state.read_text())):
            assert state.read_text() == "released"  # entered only once the holder had left its block
        assert waited == ["held"]
        with exclusive(folder, "the test cache", on_wait=lambda: waited.append("again")):
            pass  # nobody holds it now: no wait
        assert waited == ["held"]
    finally:
        holder.wait(timeout=30)
    assert holder.returncode == 0
    assert sorted(p.name for p in folder.parent.iterdir()) == [".build.lock"]


def test_exclusive_on_an_unwritable_cache_is_one_engine_error(tmp_path):
    from logitlab.engines.build_cache import exclusive

    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(EngineError, match="cannot write the test cache under .*LOGITLAB_CACHE"):
        with exclusive(blocker / "build", "the test cache"):
            pass
