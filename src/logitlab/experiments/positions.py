"""``--positions``: which rows of a run are compared and stored (the positions of interest).

A run of a prompt of N tokens followed by D decode steps has N + D rows of logits: rows 0 … N-1 come from
the prefill, rows N … N+D-1 from the decode steps. A spec string names the rows a command keeps; items are
joined by commas and their rows united:

- ``all``: every row (the default: nothing is selected away);
- ``prompt``: the prefill's rows, 0 … N-1; ``decode``: the decode steps' rows, N … N+D-1;
- ``last``: the run's last row, N+D-1 (with no decode steps, the prompt's last row);
- ``every:K``: every K-th row from row 0 (0, K, 2K, …), K ≥ 1;
- ``A``, ``A-B``, ``A-``: row A, rows A … B (inclusive), rows A … the last one.

A long-prefill comparison at the frontier (the first source report compared the last row of an 8,192-token
prefill) is ``--positions last`` (the run's last row) or the prompt's last row by its number: one row a run
instead of N + D.
:func:`parse_positions` checks the spelling (before any engine loads); :meth:`Positions.rows` gives the rows
once N and D are known, and refuses numbers past the run's last row and an empty selection.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from logitlab.engines.workload import RunOutput
from logitlab.errors import InputError

__all__ = ["ALL", "KEYWORDS", "Positions", "Selected", "decode_selection", "parse_positions", "row_counter",
           "select_rows", "selection"]

#: The spec that selects every row.
ALL = "all"
#: The named items of a spec, and what each selects.
KEYWORDS = {"all": "every row", "prompt": "the prompt's rows", "decode": "the decode steps' rows",
            "last": "the run's last row"}

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

    def rows(self, n_prompt: int, n_decode: int) -> np.ndarray:
        """The selected rows of a run of ``n_prompt`` prompt rows and ``n_decode`` decode rows.

        Returns:
            Sorted, distinct row indices, int64, shape ``(n_selected,)``, each in ``[0, n_prompt + n_decode)``.

        Raises:
            InputError: a row number or range start past the run's last row, or an empty selection (the
                message names ``--positions``, the item and the run's rows).
        """
        rows = np.flatnonzero(self._picked(n_prompt, n_decode, strict=True)).astype(np.int64)
        if rows.size == 0:
            raise InputError(f"--positions {self.spec!r} selects no row of a run of {n_prompt} prompt + {n_decode} "
                             "decode rows")
        return rows

    def count(self, n_prompt: int, n_decode: int) -> int:
        """How many rows :meth:`rows` would select, without its checks (numbers past the run count for nothing):
        for an estimate made before the prompt is tokenized (:mod:`logitlab.experiments.memory`)."""
        return int(self._picked(n_prompt, n_decode, strict=False).sum())

    def _picked(self, n_prompt: int, n_decode: int, *, strict: bool) -> np.ndarray:
        """Boolean mask of the selected rows, shape ``(n_prompt + n_decode,)``; ``strict``: refuse numbers past the
        run (InputError)."""
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
                                     f"({n_prompt} prompt + {n_decode} decode rows)")
                picked[start:(total if stop is None else stop + 1)] = True
        return picked


@dataclass(frozen=True)
class Selected:
    """The positions a result rests on, as its JSON records them (``--positions`` other than ``all``).

    Attributes:
        spec: the ``--positions`` spec.
        compared: the rows of each run kept and compared.
        of: the rows of a whole run (prompt tokens + decode tokens).
    """

    spec: str
    compared: int
    of: int

    def line(self) -> str:
        """``"compared 1 of 81 positions (last)"``: what reports print."""
        return f"compared {self.compared} of {self.of} positions ({self.spec})"


def select_rows(output: RunOutput, rows: np.ndarray | None) -> RunOutput:
    """``output`` with only ``rows`` of its logits (a copy: the whole run's array goes with ``output``); itself
    when ``rows`` is None. ``input_ids`` stay whole (the tokens of the run, replayed by the next runs)."""
    return output if rows is None else dataclasses.replace(output, logits=output.logits[rows])


def selection(spec: str, engines: Mapping[str, Any], n_prompt: int,
              n_decode: int) -> tuple[np.ndarray | None, Selected | None]:
    """The rows of every run of ``n_prompt`` + ``n_decode`` rows that ``spec`` keeps, and their record; ``(None,
    None)`` for ``all`` (nothing is selected away). ``engines``: the variants' engines by label.

    Raises:
        InputError: a bad spec, rows past the run, an empty selection, or an engine that returns top-k
            log-probabilities only (rows are selected from full logits).
    """
    positions = parse_positions(spec)
    if positions.is_all:
        return None, None
    topk = [label for label, engine in engines.items() if not engine.supports("logits")]
    if topk:
        raise InputError(f"--positions selects rows of full logits; the {topk[0]} returns top-k log-probabilities "
                         "only: drop --positions")
    rows = positions.rows(n_prompt, n_decode)
    return rows, Selected(positions.spec, len(rows), n_prompt + n_decode)


def decode_selection(spec: str, n_prompt: int, n_decode: int, *, name: str) -> np.ndarray | None:
    """For a command that compares only the decode steps' rows (``verify``: M=K vs M=1): the decode steps
    ``spec`` keeps of a run of ``n_prompt`` prompt rows and ``n_decode`` decode rows, as decode-step indices
    (output index i is run position ``n_prompt + i``); None for ``all``. ``name``: the prompt, for messages.

    Returns:
        Sorted, distinct int64 indices in ``[0, n_decode)``, shape ``(n_selected,)``, or None.

    Raises:
        InputError: a bad spec, rows past the run, or a selection with no decode row (``prompt``, or row numbers
            inside the prompt only).
    """
    positions = parse_positions(spec)
    if positions.is_all:
        return None
    rows = positions.rows(n_prompt, n_decode)
    steps = rows[rows >= n_prompt] - n_prompt
    if steps.size == 0:
        raise InputError(f"--positions {positions.spec!r} selects no decode row of prompt {name!r}: the rows "
                         f"compared are the decode steps', positions {n_prompt}-{n_prompt + n_decode - 1} "
                         f"({n_prompt} prompt tokens)")
    return steps


def row_counter(spec: str | None, n_decode: int) -> Callable[[int], int] | None:
    """For a memory estimate (:func:`logitlab.experiments.memory.check_memory`): the rows ``spec`` keeps of a run
    of N positions, its last ``n_decode`` the decode steps' (:meth:`Positions.count`); None for ``all`` or no spec.

    Raises:
        InputError: a bad spec.
    """
    if spec is None or parse_positions(spec).is_all:
        return None
    positions = parse_positions(spec)
    return lambda n: positions.count(max(n - n_decode, 0), min(n_decode, n))


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
