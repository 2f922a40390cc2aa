"""models.file_sha256: the digest of a file, cached per file identity in this process and on disk."""

from __future__ import annotations

import hashlib
import os

import pytest

from logitlab import models


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache; files count as settled at once (the default waits SETTLED_NS after a write)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "SETTLED_NS", -10**12)
    monkeypatch.setattr(models, "_DIGESTS", {})
    return tmp_path / "cache" / "logitlab" / "sha256"


def test_the_digest_is_hashlib_s_and_is_kept_on_disk(tmp_path, cache):
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(3 << 20))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert models.file_sha256(str(path)) == expected
    entries = list(cache.iterdir())
    assert [e.read_text() for e in entries] == [expected]


def test_another_process_reads_the_digest_from_disk_without_reading_the_file(tmp_path, cache, monkeypatch):
    path = tmp_path / "model.bin"
    path.write_bytes(b"x" * 1000)
    models.file_sha256(str(path))
    (entry,) = cache.iterdir()
    entry.write_text("0" * 64)  # what a new process finds there is what it returns: the file is not read again
    monkeypatch.setattr(models, "_DIGESTS", {})
    assert models.file_sha256(str(path)) == "0" * 64


def test_a_rewritten_file_of_the_same_size_is_hashed_again(tmp_path, cache):
    path = tmp_path / "model.bin"
    path.write_bytes(b"a" * 4096)
    os.utime(path, ns=(10**9, 10**9))  # written long ago: the rewrite below changes its modification time
    first = models.file_sha256(str(path))
    path.write_bytes(b"b" * 4096)
    assert models.file_sha256(str(path)) == hashlib.sha256(b"b" * 4096).hexdigest() != first
    assert len(list(cache.iterdir())) == 2


def test_a_file_changed_just_now_is_not_cached_anywhere(tmp_path, monkeypatch):
    """A write in the same tick of the file system's clock keeps size, times and inode: such a file is hashed
    each time until it has settled (SETTLED_NS), as git treats "racy" index entries."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_DIGESTS", {})
    path = tmp_path / "model.bin"
    path.write_bytes(b"a" * 4096)
    assert models.file_sha256(str(path)) == hashlib.sha256(b"a" * 4096).hexdigest()
    st = os.stat(path)
    path.write_bytes(b"b" * 4096)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same identity but for ctime, as in one tick
    assert models.file_sha256(str(path)) == hashlib.sha256(b"b" * 4096).hexdigest()
    assert not (tmp_path / "cache").exists() and not models._DIGESTS


def test_a_damaged_entry_is_not_trusted_and_an_unwritable_cache_is_skipped(tmp_path, cache, monkeypatch):
    path = tmp_path / "model.bin"
    path.write_bytes(b"c" * 10)
    models.file_sha256(str(path))
    (entry,) = cache.iterdir()
    entry.write_text("not a digest")
    monkeypatch.setattr(models, "_DIGESTS", {})
    assert models.file_sha256(str(path)) == hashlib.sha256(b"c" * 10).hexdigest()
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache folder cannot be made under a file
    monkeypatch.setattr(models, "_DIGESTS", {})
    assert models.file_sha256(str(path)) == hashlib.sha256(b"c" * 10).hexdigest()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ignored, as the XDG spec says
    assert models.sha256_cache_dir() == models.Path.home() / ".cache" / "logitlab" / "sha256"
