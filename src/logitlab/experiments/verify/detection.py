"""``verify``'s detection limits: per K, of the comparison its verdict is judged on (every prompt's rows pooled).

The verdict of each K is judged on one comparison: every prompt's M=K rows
against their M=1 rows, pooled (:func:`~logitlab.numerics.compare.merge_comparisons`,
one noise floor over all prompts). Its detection limits
(:func:`~logitlab.numerics.detection.detection_limits`, judged as ``verify``
judges: :data:`~logitlab.experiments.verify.classify.VERIFY_JUDGE`) need the
rows themselves, and only after the last prompt, when that floor is known.
:class:`VerifyRows` keeps them meanwhile in unnamed temporary files (one per
array, written as the rows come; removed from the folder as they are made, so
that no exit of the process, a SIGKILL included, leaves them behind), so the run's memory stays at one
prompt's rows; :func:`k_detection` measures one K from them: every fault
shape for the K the classification is judged on (:func:`verdict_k`, the
first K with the most severe verdict), the ``argmax-up`` shape
(:data:`~logitlab.numerics.detection.HEADLINE`) for the others.

Disk: ``(1 + number of K) × prompts × tokens × n_vocab × 4`` bytes while the
run lasts (the defaults on the embedded model: 9 × 64 rows × 49,152 × 4 B ×
5 = 566 MB); memory during a measurement: about twice one K's rows. Time:
about 80 comparisons of one K's rows for every shape, 17 for one
(:mod:`logitlab.numerics.detection`).
"""

from __future__ import annotations

import tempfile
from typing import Sequence

import numpy as np

from logitlab.experiments.verify.classify import VERIFY_JUDGE
from logitlab.experiments.verify.results import RowPlace, SweepEntry, VerifyDetection
from logitlab.numerics import VERDICTS, LogitComparison, Thresholds
from logitlab.numerics.detection import SHAPES, detection_limits

__all__ = ["VerifyRows", "k_detection", "verdict_k"]

REFERENCE = "m1"


class VerifyRows:
    """Every prompt's M=1 decode rows and M=K rows, in unnamed temporary files until :meth:`close`.

    Args:
        ks: the K sweep.
        n_rows: rows per array: prompts × decode tokens (every prompt decodes the same number).
    """

    def __init__(self, ks: Sequence[int], n_rows: int):
        self.ks = tuple(ks)
        self.n_rows = n_rows
        self._files: list = []
        self._arrays: dict[str, np.ndarray] = {}
        self._filled: dict[str, int] = {}

    def _array(self, name: str, rows: np.ndarray) -> np.ndarray:
        if name not in self._arrays:
            # an unnamed file (O_TMPFILE where the system has it, else unlinked at once): only the mapping holds it
            file = tempfile.TemporaryFile(prefix=f"logitlab-verify-rows-{name}-")
            self._files.append(file)
            self._arrays[name] = np.memmap(file, mode="w+", dtype=np.float32, shape=(self.n_rows, rows.shape[1]))
            self._filled[name] = 0
        return self._arrays[name]

    def add(self, k: int | None, rows: np.ndarray) -> None:
        """Append one prompt's rows: ``k`` None for the M=1 decode rows, else M=K rows; ``(n, n_vocab)`` float32."""
        name = REFERENCE if k is None else f"k{k}"
        array = self._array(name, rows)
        start = self._filled[name]
        array[start:start + len(rows)] = rows
        self._filled[name] = start + len(rows)

    def pair(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The M=1 rows and the M=K rows added so far, as read-only views ``(rows, n_vocab)``."""
        name = f"k{k}"
        n = min(self._filled.get(REFERENCE, 0), self._filled.get(name, 0))
        return self._arrays[REFERENCE][:n], self._arrays[name][:n]

    def close(self) -> None:
        """Let the files go (idempotent): they have no name, so the last mapping's end frees their space."""
        self._arrays.clear()
        for file in self._files:
            file.close()
        self._files.clear()


def verdict_k(totals: Sequence[SweepEntry]) -> int:
    """The K whose pooled comparison the classification is judged on: the first with the most severe verdict
    (as :func:`~logitlab.experiments.verify.classify.classify_verify` picks it)."""
    return max(totals, key=lambda t: VERDICTS.index(t.verdict)).k


def k_detection(k: int, rows: VerifyRows, merged: LogitComparison, owners: Sequence[tuple[str, int, int]],
                thresholds: Thresholds, shapes: tuple[str, ...] = SHAPES) -> VerifyDetection:
    """The detection limits of K's pooled comparison ``merged`` (every prompt's rows, in prompt order).

    Args:
        k: the block size.
        rows: the kept rows (their first ``merged.n_positions`` rows are ``merged``'s).
        merged: the pooled M=K vs M=1 comparison the K verdict is judged on.
        owners: per pooled row, ``(prompt, output_index, position)``.
        thresholds: the verdict thresholds.
        shapes: the fault shapes to measure (default all).

    Returns:
        The :class:`~logitlab.experiments.verify.results.VerifyDetection`; each shape's hardest
        position is named by prompt in ``hardest``.
    """
    reference, observed = rows.pair(k)
    limits = detection_limits(reference, observed, merged, thresholds=thresholds, shapes=shapes,
                              judge=VERIFY_JUDGE)
    hardest = {s.shape: RowPlace(*owners[s.position]) for s in limits.shapes if s.position is not None}
    return VerifyDetection(k=k, limits=limits, hardest=hardest)
