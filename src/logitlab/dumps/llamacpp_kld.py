"""The file ``llama-perplexity --kl-divergence-base FILE`` writes: tokens and 16-bit log-probabilities.

Layout (little-endian; ``tools/perplexity/perplexity.cpp``, ``perplexity()``
writes it, ``kl_divergence()`` reads it)::

    "_logits_"                      8 bytes, the magic
    n_ctx                           int32: tokens per chunk
    n_vocab                         int32
    n_chunk                         int32
    tokens                          int32 × n_chunk × n_ctx: every chunk's tokens, as tokenized
                                    (llama.cpp puts BOS in place of a chunk's first token when
                                    the vocabulary adds one, at evaluation time, not in the file)
    for each chunk:
      for each scored position j in n_ctx/2 … n_ctx-2:
        row                         uint16 × row_width(n_vocab): float32 scale, float32
                                    min_log_prob, then the quantised log-probabilities
                                    (see :func:`logitlab.numerics.llamacpp_kld.quantize_log_probs`)

Position ``j``'s row predicts token ``j + 1`` of its chunk. Each chunk is
evaluated from an empty KV cache. Memory: the reader maps the rows
(``numpy.memmap``) and reads one chunk at a time.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from logitlab.errors import InputError
from logitlab.jsonio import reading
from logitlab.numerics.llamacpp_kld import row_width

__all__ = ["MAGIC", "KldBaseFile", "read_kld_base", "write_kld_base", "kld_base_size"]

MAGIC = b"_logits_"
_HEADER = struct.Struct("<iii")  # n_ctx, n_vocab, n_chunk after the magic


def _scored(n_ctx: int) -> int:
    return n_ctx - 1 - n_ctx // 2


def kld_base_size(n_ctx: int, n_vocab: int, n_chunk: int) -> int:
    """Bytes of a base file with these dimensions."""
    return len(MAGIC) + _HEADER.size + 4 * n_chunk * n_ctx + 2 * n_chunk * _scored(n_ctx) * row_width(n_vocab)


@dataclass(frozen=True)
class KldBaseFile:
    """An opened ``--kl-divergence-base`` file.

    Attributes:
        path: the file.
        n_ctx: tokens per chunk.
        n_vocab: vocabulary size of the base model.
        n_chunk: chunks.
        tokens: ``(n_chunk, n_ctx)`` int32, every chunk's tokens.
        rows: ``(n_chunk, n_scored, row_width(n_vocab))`` uint16, memory-mapped.
    """

    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray
    rows: np.ndarray

    @property
    def first(self) -> int:
        """The first scored position of a chunk (``n_ctx // 2``)."""
        return self.n_ctx // 2

    @property
    def n_scored(self) -> int:
        """Scored positions per chunk (``n_ctx - 1 - n_ctx // 2``)."""
        return _scored(self.n_ctx)

    def next_tokens(self, chunk: int) -> np.ndarray:
        """The tokens the chunk's scored rows predict (positions first+1 … n_ctx-1)."""
        return self.tokens[chunk, self.first + 1:]


def read_kld_base(path: str | Path) -> KldBaseFile:
    """Open a file written by ``llama-perplexity --kl-divergence-base``.

    Raises:
        InputError: missing or unreadable; not such a file (magic); dimensions
            out of range; a size that does not match its dimensions (truncated
            or with trailing bytes; the message gives both sizes).
    """
    path = Path(path)
    what = f"llama.cpp KL-divergence base file {path}"
    with reading(what):
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(len(MAGIC) + _HEADER.size)
    if head[:len(MAGIC)] != MAGIC:
        raise InputError(f"{path} is not a llama.cpp KL-divergence base file (it does not start with "
                         f"{MAGIC.decode()!r}; write one with llama-perplexity --kl-divergence-base)")
    if len(head) < len(MAGIC) + _HEADER.size:
        raise InputError(f"{what} is truncated: {size} bytes, too short for its header")
    n_ctx, n_vocab, n_chunk = _HEADER.unpack(head[len(MAGIC):])
    if n_ctx < 3 or n_vocab < 2 or n_chunk < 1:
        raise InputError(f"{what} has impossible dimensions: n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}")
    expected = kld_base_size(n_ctx, n_vocab, n_chunk)
    if size != expected:
        kind = "truncated" if size < expected else "longer than its header says"
        raise InputError(f"{what} is {kind}: {size} bytes, expected {expected} for {n_chunk} chunks of {n_ctx} "
                         f"tokens and a vocabulary of {n_vocab}")
    offset = len(MAGIC) + _HEADER.size
    tokens = np.fromfile(path, dtype="<i4", count=n_chunk * n_ctx, offset=offset).reshape(n_chunk, n_ctx)
    if tokens.min() < 0 or tokens.max() >= n_vocab:
        raise InputError(f"{what} holds token ids outside its vocabulary of {n_vocab}")
    rows = np.memmap(path, dtype="<u2", mode="r", offset=offset + tokens.nbytes,
                     shape=(n_chunk, _scored(n_ctx), row_width(n_vocab)))
    return KldBaseFile(path=path, n_ctx=int(n_ctx), n_vocab=int(n_vocab), n_chunk=int(n_chunk),
                       tokens=tokens.astype(np.int32), rows=rows)


def write_kld_base(path: str | Path, tokens: np.ndarray, n_vocab: int, chunk_rows: Iterable[np.ndarray]) -> Path:
    """Write a file ``llama-perplexity --kl-divergence --kl-divergence-base PATH`` reads.

    Args:
        path: the file (written via a temporary file and a rename).
        tokens: ``(n_chunk, n_ctx)`` token ids.
        n_vocab: vocabulary size.
        chunk_rows: per chunk, its ``(n_ctx - 1 - n_ctx // 2, row_width(n_vocab))`` uint16 rows
            (:func:`~logitlab.numerics.llamacpp_kld.quantize_log_probs` of the logits at positions
            ``n_ctx // 2 … n_ctx - 2``), one chunk at a time.

    Raises:
        InputError: shapes that do not fit, or the file cannot be written.
    """
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] < 3 or tokens.shape[0] < 1:
        raise InputError(f"tokens must have shape (n_chunk, n_ctx) with n_ctx >= 3, got {tokens.shape}")
    n_chunk, n_ctx = tokens.shape
    want = (_scored(n_ctx), row_width(n_vocab))
    tmp = path.with_name(f".{path.name}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            f.write(MAGIC + _HEADER.pack(n_ctx, n_vocab, n_chunk))
            f.write(tokens.astype("<i4").tobytes())
            written = 0
            for rows in chunk_rows:
                rows = np.asarray(rows)
                if rows.dtype != np.uint16 or rows.shape != want:
                    raise InputError(f"chunk {written}: rows must be uint16 of shape {want}, got {rows.dtype} "
                                     f"{rows.shape}")
                f.write(rows.astype("<u2").tobytes())
                written += 1
        if written != n_chunk:
            raise InputError(f"{written} chunks of rows for {n_chunk} chunks of tokens")
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path
