"""Could a comparison have failed? What a probe exercised, and the inverse controls of ``--self-check``.

Used by ``invariance`` (every probe) and ``ab`` (the candidate's inverse control).

A probe that reads ``bit-exact`` says two ways of running a request gave the
same bits. It says nothing if the two ways were one and the same computation:
a batch whose forward passes had the same shapes as the prompt alone cannot
show an effect of the batch size on a kernel chosen by the number of rows; a
prefill and a decode step that both ran one row per forward cannot show the
prefill kernels' difference. Such a probe is **vacuous** (not ``invariant``).
A public case: an engine's deterministic-attention test passed without the
fix, because its single-request mode could not fail; only another mode
caught it.

Two kinds of evidence, per check:

**Exercised** (always, from the engine's account of its forward passes:
:meth:`~logitlab.engines.base.BatchRun.forward_rows`,
:meth:`~logitlab.engines.base.Engine.forward_rows`): the rows of each forward
on both sides. A ``prefill-decode`` check whose prefill ran one row per
forward compares a computation with itself (llama.cpp with ``n_ubatch=1``):
vacuous. A ``batch`` check of B=1 is the prompt alone run again: vacuous. A
batch of B > 1 with the same row counts as the prompt alone (llama.cpp with
``n_ubatch=1``) is *limited*: kernels chosen by the number of rows ran the
same, but attention over the batch's KV cache did not (measured: such a
batch of 4 still reads ``near-tie`` on the embedded model), so it is not
vacuous. A probe that found a difference could fail, whatever it ran.

**Inverse controls** (``--self-check``, one extra engine run each): the same
path again with one planted input token on the observed side only (the last
token of the prompt as sequence 0 of the batch; the token of the decode step
at the last position; the last prompt token of one more determinism run; for
``ab``, the last prompt token of one more candidate run). A
probe that compares the rows it claims to must see the planted change at that
position and nowhere before it (causality); one that does not is vacuous, so
is its verdict. This is the inverse control of mutation testing: a planted
fault the check must catch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Control", "rows_text", "same_shapes", "planted_token", "control"]


@dataclass(frozen=True)
class Control:
    """One inverse control: a planted input on the observed side, and whether the probe saw it.

    Attributes:
        check: the check it controls (its name).
        planted: what was planted, in words.
        position: the position where the planted token is fed (the row that must differ).
        caught: the row at ``position`` differs from the unplanted observed row, and no row before it does.
        evidence: one line with the numbers.
    """

    check: str
    planted: str
    position: int
    caught: bool
    evidence: str


def rows_text(rows: Sequence[int] | None) -> str:
    """Forward-pass rows in words: ``one forward of 68 rows``, ``17 forwards of 1 row``, ``2 forwards (32, 4)``."""
    if rows is None:
        return "forward passes not reported by the engine"
    if len(set(rows)) == 1:
        n = rows[0]
        return f"one forward of {n} row{'s' if n != 1 else ''}" if len(rows) == 1 else \
            f"{len(rows)} forwards of {n} row{'s' if n != 1 else ''}"
    return f"{len(rows)} forwards ({', '.join(map(str, rows))} rows)"


def same_shapes(a: Sequence[int] | None, b: Sequence[int] | None) -> bool:
    """Did both sides run forwards of the same row counts (as multisets)? False when either is unknown."""
    return a is not None and b is not None and sorted(set(a)) == sorted(set(b))


def planted_token(token: int, n_vocab: int) -> int:
    """Another token id for a planted input: the next id (wrapping)."""
    return (int(token) + 1) % int(n_vocab)


def control(check: str, planted: str, unplanted: np.ndarray, with_plant: np.ndarray, position: int) -> Control:
    """Judge one inverse control: rows ``0..position`` of the observed side without and with the plant.

    Args:
        unplanted, with_plant: ``(n, n_vocab)`` float32, the observed side's rows (n > ``position``).
        position: where the planted token was fed.
    """
    a = np.ascontiguousarray(unplanted[: position + 1]).view(np.uint32)
    b = np.ascontiguousarray(with_plant[: position + 1]).view(np.uint32)
    before = int(np.count_nonzero((a[:position] != b[:position]).any(axis=1)))
    at = int(np.count_nonzero(a[position] != b[position]))
    caught = at > 0 and before == 0
    evidence = (f"{at} of {a.shape[1]} logits differ at position {position}, where the planted token is fed; "
                f"{before} earlier position(s) differ" + ("" if caught else
                                                        (": the probe's rows do not follow its input" if at == 0
                                                         else ": positions before the plant moved (not causal)")))
    return Control(check, planted, position, caught, evidence)
