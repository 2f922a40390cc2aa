"""The ``--positions`` grammar: which positions (rows) of a run a command keeps.

A run of a prompt of N tokens followed by D decode steps has N + D positions: 0 … N-1 are the prompt's (one
prefill), N … N+D-1 the decode steps'. For ``ab``, ``verify``, ``golden`` … a position is a row of logits; for
``dump`` and ``dump-diff`` it is the token position a tensor belongs to (the same numbering). A spec string names
the positions a command keeps; items are joined by commas and their positions united:

- ``all``: every position (the default: nothing is selected away);
- ``prompt``: the prompt's positions, 0 … N-1; ``decode``: the decode steps', N … N+D-1;
- ``last``: the run's last position, N+D-1 (with no decode steps, the prompt's last);
- ``every:K``: every K-th position from 0 (0, K, 2K, …), K ≥ 1;
- ``A``, ``A-B``, ``A-``: position A, positions A … B (inclusive), positions A … the last one.

:func:`parse_positions` checks the spelling (before any engine loads or any file is read);
:meth:`Positions.rows` gives the positions once N and D are known, and refuses numbers past the run's last
position and an empty selection. This module needs no engine and no experiment, so every layer that takes
``--positions`` parses it here (:mod:`logitlab.experiments.positions` adds what experiments do with the rows;
:mod:`logitlab.dumps.filters` what a dump does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from logitlab.errors import InputError

__all__ = ["ALL", "KEYWORDS", "SPLIT_KEYWORDS", "Positions", "parse_positions"]

#: The spec that selects every row.
ALL = "all"
#: The named items of a spec, and what each selects.
KEYWORDS = {"all": "every row", "prompt": "the prompt's rows", "decode": "the decode steps' rows",
            "last": "the run's last row"}
#: The words that need to know where the prompt ends (N): a spec with one cannot be applied to positions alone.
SPLIT_KEYWORDS = ("prompt", "decode")

_RANGE = re.compile(r"(\d+)(-(\d*))?")
_EVERY = re.compile(r"every:(\d+)")
_HELP = "valid: all, prompt, decode, last, every:K, A, A-B, A- (comma-separated)"


@dataclass(frozen=True)
class Positions:
    """A parsed ``--positions`` spec (:func:`parse_positions`).

    Attributes:
        spec: the spec as given, stripped (``"all"``, ``"last"``, ``"0-15,40,100-"``, ...).
        items: one tuple per comma-separated item: ``(keyword,)``, ``("every", K)`` or ``("range", A, B)``
            with ``B`` None for an open end (``A`` alone is ``("range", A, A)``).
    """

    spec: str
    items: tuple[tuple, ...]

    @property
    def is_all(self) -> bool:
        """Does the spec select every row whatever N and D are (``all``)?"""
        return any(item == ("all",) for item in self.items)

    @property
    def split_words(self) -> tuple[str, ...]:
        """The words of the spec that need to know where the prompt ends (``prompt``, ``decode``), in order."""
        return tuple(dict.fromkeys(item[0] for item in self.items if item[0] in SPLIT_KEYWORDS))

    def rows(self, n_prompt: int, n_decode: int, *, run: str | None = None) -> np.ndarray:
        """The selected rows of a run of ``n_prompt`` prompt rows and ``n_decode`` decode rows.

        ``run`` describes the run in messages (default ``"N prompt + D decode rows"``), for a caller whose run
        is not split that way (dump-diff of raw files: ``"the dumps have positions 0-12"``).

        Returns:
            Sorted, distinct row indices, int64, shape ``(n_selected,)``, each in ``[0, n_prompt + n_decode)``.

        Raises:
            InputError: a row number or range start past the run's last row, or an empty selection (the
                message names ``--positions``, the item and the run's rows).
        """
        run = run or f"{n_prompt} prompt + {n_decode} decode rows"
        rows = np.flatnonzero(self._picked(n_prompt, n_decode, strict=True, run=run)).astype(np.int64)
        if rows.size == 0:
            raise InputError(f"--positions {self.spec!r} selects no row of a run of {run}")
        return rows

    def count(self, n_prompt: int, n_decode: int) -> int:
        """How many rows :meth:`rows` would select, without its checks (numbers past the run count for nothing):
        for an estimate made before the prompt is tokenized (:mod:`logitlab.experiments.memory`)."""
        return int(self._picked(n_prompt, n_decode, strict=False).sum())

    def _picked(self, n_prompt: int, n_decode: int, *, strict: bool, run: str = "") -> np.ndarray:
        """Boolean mask of the selected rows, shape ``(n_prompt + n_decode,)``; ``strict``: refuse numbers past the
        run (InputError, ``run`` describing it)."""
        total = n_prompt + n_decode
        picked = np.zeros(total, dtype=bool)
        for item in self.items:
            kind = item[0]
            if kind == "all":
                picked[:] = True
            elif kind == "prompt":
                picked[:n_prompt] = True
            elif kind == "decode":
                picked[n_prompt:] = True
            elif kind == "last":
                picked[max(total - 1, 0):] = True
            elif kind == "every":
                picked[::item[1]] = True
            else:
                start, stop = item[1], item[2]
                last = stop if stop is not None else start
                if last >= total and strict:
                    text = f"{start}" if stop == start else f"{start}-{'' if stop is None else stop}"
                    raise InputError(f"--positions {self.spec!r}: {text} is past the run's last row {total - 1} "
                                     f"({run})")
                picked[start:(total if stop is None else stop + 1)] = True
        return picked


def parse_positions(spec: str) -> Positions:
    """Parse a ``--positions`` spec (see the module notes).

    Raises:
        InputError: an empty spec or item, an unknown word, ``every:0``, a range whose end is before its start
            (one line naming ``--positions``, the bad item and the valid forms).
    """
    text = (spec or "").strip()
    if not text:
        raise InputError(f"--positions is empty; {_HELP}")
    items = []
    for raw in text.split(","):
        part = raw.strip().lower()
        if part in KEYWORDS:
            items.append((part,))
            continue
        if every := _EVERY.fullmatch(part):
            step = int(every.group(1))
            if step < 1:
                raise InputError(f"--positions {text!r}: {part!r} needs a step of at least 1")
            items.append(("every", step))
            continue
        found = _RANGE.fullmatch(part)
        if found is None:
            what = repr(part) if part else "an empty item"
            raise InputError(f"--positions {text!r}: {what} is not a position spec; {_HELP}")
        start = int(found.group(1))
        stop = start if found.group(2) is None else (int(found.group(3)) if found.group(3) else None)
        if stop is not None and stop < start:
            raise InputError(f"--positions {text!r}: {part!r} ends before it starts")
        items.append(("range", start, stop))
    return Positions(text, tuple(items))
