"""Tokenizers that engines without their own share: a GGUF file's vocabulary.

The ``cmd`` engine (a command that takes token ids) and the ``openai`` engine
(with ``tokenizer=PATH.gguf``, for servers without a tokenize endpoint)
tokenize with the model file's vocabulary, exactly as the ``llamacpp`` engine
does.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Sequence

from logitlab.errors import InputError
from logitlab.models import check_gguf


class LlamaVocabulary:
    """llama.cpp's tokenization through a ``llama_cpp.Llama`` held as ``self.llama``: the llamacpp engine's and
    :class:`GgufTokenizer`'s, one implementation so that they tokenize alike (a BOS token first, special tokens
    as text)."""

    llama: Any

    def tokenize(self, text: str) -> list[int]:
        return list(self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=False))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llama.detokenize(list(tokens)).decode("utf-8", errors="replace")

    @property
    def n_vocab(self) -> int:
        return int(self.llama.n_vocab())


class GgufTokenizer(LlamaVocabulary):
    """Tokenizer of a GGUF file (llama.cpp's vocabulary-only load), as the llamacpp engine tokenizes.

    Raises:
        InputError: the file is not a readable GGUF, or llama-cpp-python is missing.
    """

    def __init__(self, path: str | Path):
        self.path = str(check_gguf(path))
        try:
            import llama_cpp
        except ImportError:
            raise InputError("tokenizing with a GGUF vocabulary needs llama-cpp-python: "
                             "pip install 'logitlab[llamacpp]'") from None
        try:
            from llama_cpp._utils import suppress_stdout_stderr

            quiet: Any = suppress_stdout_stderr(disable=False)
        except ImportError:  # pragma: no cover - other llama-cpp-python versions
            quiet = contextlib.nullcontext()
        try:
            # vocab_only still prints a context-size warning on stderr: silence it.
            with quiet:
                self.llama = llama_cpp.Llama(model_path=self.path, vocab_only=True, verbose=False, n_ctx=16)
        except Exception as exc:
            raise InputError(f"cannot load the vocabulary of {self.path}: {exc}") from None
