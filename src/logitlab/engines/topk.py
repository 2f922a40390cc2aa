"""Top-k log-probability rows: what an engine that cannot return full logits returns.

Servers (the ``openai`` engine) return, per position, the k most likely
tokens with their log-probabilities. :class:`TopKRows` is that data, part of
the engine contract (:class:`~logitlab.engines.workload.RunOutput` carries
it); :mod:`logitlab.numerics.topk` compares two of them.

JSON format history (``schema_version``): 1 — first version.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

from logitlab.errors import InputError

__all__ = ["Key", "TopKRows", "float64_bits", "key_kind", "rekey_by_text", "SCHEMA_VERSION"]

#: Version of the JSON form of :class:`TopKRows`.
SCHEMA_VERSION = 1

#: A token key: the token id when the source gives ids, else the token text it returned.
Key = Union[int, str]


def float64_bits(x: float) -> int:
    """The IEEE-754 binary64 bit pattern of ``x`` as an unsigned int."""
    return struct.unpack("<Q", struct.pack("<d", x))[0]


@dataclass(frozen=True)
class TopKRows:
    """Top-k log-probabilities of every position of one run.

    Attributes
    ----------
    keys : tuple of (tuple of Key) or None
        Per position, the returned tokens, most likely first; ``None`` where
        the source returned nothing for that position (e.g. the first token of
        an echoed prompt). A key is a token id (int) or, when the source only
        gives text, the token's text (str).
    values : tuple of (tuple of float) or None
        The matching natural-log probabilities (nats), same shape as ``keys``.
    requested_k : int
        The k asked for; a row may hold fewer entries (a source that merges
        tokens with the same text returns fewer).
    """

    keys: tuple
    values: tuple
    requested_k: int

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.values):
            raise InputError(f"TopKRows: {len(self.keys)} key rows but {len(self.values)} value rows")
        for i, (k, v) in enumerate(zip(self.keys, self.values)):
            if (k is None) != (v is None) or (k is not None and len(k) != len(v)):
                raise InputError(f"TopKRows: row {i} has {k!r} keys for {v!r} values")

    @classmethod
    def from_mappings(cls, rows: Sequence[Mapping[Key, float] | None], k: int) -> "TopKRows":
        """Build from one ``{key: logprob}`` mapping (or None) per position.

        Each row keeps its ``k`` largest values, most likely first (ties keep
        the mapping's order). Extra entries some servers add (llama-cpp-python
        adds the input token's own log-probability) fall outside the top k
        and are dropped.
        """
        keys, values = [], []
        for row in rows:
            if row is None:
                keys.append(None)
                values.append(None)
                continue
            items = sorted(row.items(), key=lambda kv: -kv[1] if not math.isnan(kv[1]) else math.inf)[:k]
            keys.append(tuple(key for key, _ in items))
            values.append(tuple(float(v) for _, v in items))
        return cls(tuple(keys), tuple(values), int(k))

    @classmethod
    def from_logits(cls, logits: Any, k: int, key: Callable[[int], Key] | None = None) -> "TopKRows":
        """The top-k log-probabilities of full logits, as an engine returning only those would give them.

        Args:
            logits: ``(n_positions, n_vocab)`` float array of raw logits.
            k: entries kept per position.
            key: token id -> the key a top-k source uses (its token text); default the id itself.

        Returns:
            Per position the ``k`` largest ``log_softmax`` values (nats, computed in float64; ties keep the
            lower token id first), keyed by ``key(id)``.
        """
        import numpy as np

        x = np.asarray(logits, dtype=np.float64)
        top = np.argsort(-x, axis=1, kind="stable")[:, :k]
        peak = x.max(axis=1, keepdims=True)
        logz = peak[:, 0] + np.log(np.exp(x - peak).sum(axis=1))
        to_key = key or int
        keys = tuple(tuple(to_key(int(t)) for t in row) for row in top)
        values = tuple(tuple(float(x[i, t] - logz[i]) for t in row) for i, row in enumerate(top))
        return cls(keys, values, int(k))

    @property
    def n_positions(self) -> int:
        return len(self.keys)

    def head(self, n: int) -> "TopKRows":
        """The first ``n`` positions' rows (all of them when there are fewer)."""
        return TopKRows(tuple(self.keys[:n]), tuple(self.values[:n]), self.requested_k)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": [None if k is None else list(k) for k in self.keys],
                "values": [None if v is None else list(v) for v in self.values],
                "requested_k": self.requested_k, "schema_version": SCHEMA_VERSION}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TopKRows":
        return cls(tuple(None if k is None else tuple(k) for k in data["keys"]),
                   tuple(None if v is None else tuple(float(x) for x in v) for v in data["values"]),
                   int(data["requested_k"]))

    def same_bits(self, other: "TopKRows") -> bool:
        """True iff every row has the same keys in the same order with identical value bits."""
        return self.keys == other.keys and all(
            a == b or (a is not None and b is not None and [float64_bits(x) for x in a] == [float64_bits(y) for y in b])
            for a, b in zip(self.values, other.values)
        )


def key_kind(rows: TopKRows) -> type | None:
    """How ``rows`` names its tokens: ``int`` (token ids), ``str`` (token text), or None when no row has an entry."""
    for keys in rows.keys:
        if keys:
            return int if isinstance(keys[0], int) else str
    return None


def rekey_by_text(rows: TopKRows, text: Callable[[int], str]) -> TopKRows:
    """``rows`` keyed by token id, re-keyed by token text, as a source that names tokens by text returns them.

    Args:
        rows: id-keyed top-k rows (int keys).
        text: token id -> its text (one token detokenized, e.g. ``lambda t: engine.detokenize([t])``).

    Returns:
        The same positions and values with every key replaced by ``text(key)``. Where two ids of a row give
        the same text (byte pieces of one character, tokens that differ only in a special flag) only the
        first, most likely, entry is kept: a text-keyed server cannot return both either, so such a row
        holds fewer than ``requested_k`` entries. ``None`` rows stay ``None``.

    Raises:
        InputError: a key is not a token id.
        Whatever ``text`` raises (an engine without a detokenizer).
    """
    keys, values = [], []
    for row_keys, row_values in zip(rows.keys, rows.values):
        if row_keys is None:
            keys.append(None)
            values.append(None)
            continue
        merged: dict[str, float] = {}
        for key, value in zip(row_keys, row_values):
            if isinstance(key, bool) or not isinstance(key, int):
                raise InputError(f"rekey_by_text: expected token-id keys, got {key!r}")
            merged.setdefault(text(key), value)
        keys.append(tuple(merged))
        values.append(tuple(merged.values()))
    return TopKRows(tuple(keys), tuple(values), rows.requested_k)
