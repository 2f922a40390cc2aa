"""Dump folders a failed dump made are removed again; anything that existed before, or holds a file, stays."""

import pytest

from logitlab.dumps.run import removed_if_unused
from logitlab.errors import InputError


def test_folders_made_by_a_failed_block_are_removed(tmp_path):
    with pytest.raises(InputError):
        with removed_if_unused(tmp_path / "new" / "control", tmp_path / "new" / "candidate"):
            (tmp_path / "new" / "control").mkdir(parents=True)
            (tmp_path / "new" / "candidate").mkdir()
            raise InputError("bad option")
    assert list(tmp_path.iterdir()) == []


def test_folders_that_existed_or_hold_a_file_stay(tmp_path):
    (tmp_path / "old").mkdir()
    with pytest.raises(KeyboardInterrupt):
        with removed_if_unused(tmp_path / "old", tmp_path / "out" / "control", tmp_path / "out" / "candidate"):
            (tmp_path / "out" / "control").mkdir(parents=True)
            (tmp_path / "out" / "control" / "step-0000-prefill.safetensors").write_bytes(b"x")
            (tmp_path / "out" / "candidate").mkdir()
            raise KeyboardInterrupt
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "old", "out", "out/control", "out/control/step-0000-prefill.safetensors"]


def test_nothing_is_removed_when_the_block_succeeds(tmp_path):
    with removed_if_unused(tmp_path / "d"):
        (tmp_path / "d").mkdir()
    assert (tmp_path / "d").is_dir()
