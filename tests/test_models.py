"""models.file_sha256: the digest of a file, cached per file identity in this process and on disk."""

from __future__ import annotations

import hashlib
import os

import pytest

from logitlab import models


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    models._file_sha256.cache_clear()
    yield tmp_path / "cache" / "logitlab" / "sha256"
    models._file_sha256.cache_clear()


def test_the_digest_is_hashlib_s_and_is_kept_on_disk(tmp_path, cache):
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(3 << 20))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert models.file_sha256(str(path)) == expected
    entries = list(cache.iterdir())
    assert [e.read_text() for e in entries] == [expected]


def test_another_process_reads_the_digest_from_disk_without_reading_the_file(tmp_path, cache):
    path = tmp_path / "model.bin"
    path.write_bytes(b"x" * 1000)
    models.file_sha256(str(path))
    (entry,) = cache.iterdir()
    entry.write_text("0" * 64)  # what a new process finds there is what it returns: the file is not read again
    models._file_sha256.cache_clear()
    assert models.file_sha256(str(path)) == "0" * 64


def test_a_rewritten_file_of_the_same_size_is_hashed_again(tmp_path, cache):
    path = tmp_path / "model.bin"
    path.write_bytes(b"a" * 4096)
    first = models.file_sha256(str(path))
    path.write_bytes(b"b" * 4096)
    assert models.file_sha256(str(path)) == hashlib.sha256(b"b" * 4096).hexdigest() != first
    assert len(list(cache.iterdir())) == 2


def test_a_damaged_entry_is_not_trusted_and_an_unwritable_cache_is_skipped(tmp_path, cache, monkeypatch):
    path = tmp_path / "model.bin"
    path.write_bytes(b"c" * 10)
    models.file_sha256(str(path))
    (entry,) = cache.iterdir()
    entry.write_text("not a digest")
    models._file_sha256.cache_clear()
    assert models.file_sha256(str(path)) == hashlib.sha256(b"c" * 10).hexdigest()
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache folder cannot be made under a file
    models._file_sha256.cache_clear()
    assert models.file_sha256(str(path)) == hashlib.sha256(b"c" * 10).hexdigest()
