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
The grammar itself (:class:`Positions`, :func:`parse_positions`) lives in :mod:`logitlab.positions`, which
``dump`` and ``dump-diff`` share (re-exported here, the old import path); this module adds what an experiment does
with the rows: select them from a run's logits and record the selection.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from logitlab.engines.workload import RunOutput
from logitlab.errors import InputError
from logitlab.positions import ALL, KEYWORDS, Positions, parse_positions

__all__ = ["ALL", "KEYWORDS", "Positions", "Selected", "decode_selection", "parse_positions", "row_counter",
           "select_rows", "selection"]


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
