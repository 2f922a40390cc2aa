"""Which rows of each prompt's run a golden stores (``golden record --positions``) and a check compares
(``golden check --positions``; :mod:`logitlab.experiments.positions` reads the spec).

A golden recorded with a selection stores only those rows, and lists their run positions per prompt
(:attr:`~logitlab.dumps.golden_format.GoldenPrompt.positions`); an older golden (or one of ``all``) stores every
row. A check compares the rows the golden stores, or the ``--positions`` it is given when the golden stores them
all; a spec that asks for a row the golden did not store is refused before any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from logitlab.dumps.golden_format import GoldenManifest
from logitlab.errors import InputError
from logitlab.experiments.positions import Selected, parse_positions

__all__ = ["CheckRows", "check_rows", "record_rows", "stored_selection"]


def record_rows(spec: str, prompt_ids: Sequence[Sequence[int]], n_decode: int) -> list[np.ndarray | None]:
    """Per prompt, the run rows ``golden record --positions spec`` stores (sorted int64); None for ``all``.

    Raises:
        InputError: a bad spec, rows past a prompt's run, or an empty selection.
    """
    positions = parse_positions(spec)
    if positions.is_all:
        return [None] * len(prompt_ids)
    return [positions.rows(len(ids), n_decode) for ids in prompt_ids]


@dataclass(frozen=True)
class CheckRows:
    """The rows one prompt's check compares.

    Attributes:
        run: the run positions compared, sorted int64 ``(n,)``; None: every position.
        stored: their indices among the rows the golden stores, int64 ``(n,)`` (``run`` itself in a golden of
            every row); None with ``run``.
    """

    run: np.ndarray | None
    stored: np.ndarray | None


def check_rows(manifest: GoldenManifest, spec: str | None) -> list[CheckRows]:
    """Per prompt of ``manifest``, the rows a check with ``--positions spec`` compares (``spec`` None: the rows
    the golden stores).

    Raises:
        InputError: a bad spec, rows past a prompt's run, or rows the golden did not store (one line naming the
            golden, the prompt, the first missing position and the positions stored).
    """
    positions = None if spec is None else parse_positions(spec)
    out = []
    for prompt in manifest.prompts:
        n_prompt, n_decode = len(prompt.prompt_ids), len(prompt.generated_ids)
        stored = None if prompt.positions is None else np.asarray(prompt.positions, dtype=np.int64)
        if positions is None or positions.is_all and stored is None:
            out.append(CheckRows(stored, None if stored is None else np.arange(len(stored))))
            continue
        wanted = positions.rows(n_prompt, n_decode)
        if stored is None:
            out.append(CheckRows(wanted, wanted))
            continue
        missing = np.setdiff1d(wanted, stored)
        if missing.size:
            raise InputError(f"--positions {positions.spec!r} asks for position {int(missing[0])} of prompt "
                             f"{prompt.name!r}, which golden {manifest.folder} did not store (recorded with "
                             f"--positions {manifest.positions!r}: {_listed(stored)}); check --positions within "
                             "those, or record a golden of them")
        out.append(CheckRows(wanted, np.searchsorted(stored, wanted)))
    return out


def stored_selection(manifest: GoldenManifest, spec: str | None, rows: Sequence[CheckRows]) -> Selected | None:
    """The record of the positions a check compared (reports: "compared N of M positions (SPEC)"); None when
    every position of every prompt was compared."""
    if all(r.run is None for r in rows):
        return None
    compared = sum(len(p.input_ids) if r.run is None else len(r.run) for p, r in zip(manifest.prompts, rows))
    return Selected(spec if spec is not None else str(manifest.positions), compared, manifest.n_positions)


def _listed(rows: np.ndarray, most: int = 6) -> str:
    """``"positions 11, 19"``, the first ``most`` of many then ``…``."""
    shown = ", ".join(str(int(r)) for r in rows[:most])
    return f"position{'s' if len(rows) > 1 else ''} {shown}{', …' if len(rows) > most else ''}"
