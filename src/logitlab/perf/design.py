"""The counterbalanced design: ABBA / BAAB blocks and the run order of an experiment.

A block has four slots in the pattern ``ABBA`` or ``BAAB`` (``A`` = control,
``B`` = candidate), and each slot yields one positive measurement (decode
tokens/s, wall seconds, ...). Within a block both variants occupy the same
mean slot position, so a linear drift of the machine cancels; alternating
``ABBA``/``BAAB`` balances a fixed penalty on one slot position (e.g. a cold
first slot) across blocks.

:func:`ab_schedule` is the run order ``ab`` and ``bench run`` follow:
untimed warmups, then the blocks. The first block is always ABBA, so the
first measured run is the control — the reference run every other run is
compared with.

Nothing here prints or logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from logitlab.errors import InputError

__all__ = ["PATTERNS", "CONTROL", "CANDIDATE", "SLOT_VARIANTS", "Block", "Slot", "block_patterns",
           "schedule_patterns", "ab_schedule", "as_blocks", "check_count", "log_slots"]

#: The two counterbalanced slot patterns (A = control, B = candidate).
PATTERNS = ("ABBA", "BAAB")


@dataclass(frozen=True, slots=True)
class Block:
    """One counterbalanced block: four measurements in slot order.

    Parameters
    ----------
    pattern : str
        ``'ABBA'`` or ``'BAAB'``; letter ``i`` says which variant ran in slot
        ``i`` (``A`` = control, ``B`` = candidate).
    values : tuple of 4 float
        The measurement of each slot, in slot (time) order, in the metric's
        unit (e.g. tokens/s or seconds). Each must be positive and finite.
        Any sequence of four real numbers is accepted and stored as a tuple of
        Python floats.

    Raises
    ------
    InputError
        If the pattern is unknown, there are not exactly four values, or a
        value is not a positive finite real number (the message names it).

    Examples
    --------
    >>> Block("ABBA", (100.0, 110.0, 110.0, 100.0)).candidate_slots
    (1, 2)
    """

    pattern: str
    values: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or self.pattern not in PATTERNS:
            raise InputError(
                f"Block pattern {self.pattern!r} is not valid: use one of "
                f"{', '.join(repr(p) for p in PATTERNS)}"
            )
        values = self.values
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise InputError(
                f"Block values {values!r} is not a sequence: give 4 slot measurements"
            )
        if len(values) != 4:
            raise InputError(
                f"Block values {tuple(values)!r} has {len(values)} slots: a "
                f"{self.pattern} block needs exactly 4, one per slot"
            )
        clean = []
        for slot, value in enumerate(values, start=1):
            is_real = isinstance(value, (int, float, np.integer, np.floating))
            if isinstance(value, (bool, np.bool_)) or not is_real:
                raise InputError(
                    f"Block slot {slot} value {value!r} is not a number: give a "
                    f"positive finite measurement"
                )
            number = float(value)
            if not math.isfinite(number) or number <= 0.0:
                raise InputError(
                    f"Block slot {slot} value {value!r} is not positive and finite: "
                    f"measurements must be > 0 (e.g. tokens/s or seconds)"
                )
            clean.append(number)
        object.__setattr__(self, "values", tuple(clean))

    @property
    def control_slots(self) -> tuple[int, int]:
        """0-based slot indices of the control (``A``), in time order."""
        return tuple(i for i, c in enumerate(self.pattern) if c == "A")  # type: ignore[return-value]

    @property
    def candidate_slots(self) -> tuple[int, int]:
        """0-based slot indices of the candidate (``B``), in time order."""
        return tuple(i for i, c in enumerate(self.pattern) if c == "B")  # type: ignore[return-value]


def block_patterns(
    n_blocks: int, *, order: str = "alternate", first: str = "ABBA", seed: Any = 0
) -> list[str]:
    """The slot patterns to run, one per block.

    Parameters
    ----------
    n_blocks : int
        Number of blocks (>= 0).
    order : {'alternate', 'random'}, optional
        ``'alternate'``: ``first``, then the other pattern, and so on.
        ``'random'``: a seeded random permutation of equally many ``ABBA`` and
        ``BAAB`` blocks (the odd one out, if ``n_blocks`` is odd, drawn at
        random). Defaults to ``'alternate'``.
    first : {'ABBA', 'BAAB'}, optional
        Pattern of the first block for ``'alternate'``. Defaults to ``'ABBA'``.
    seed : int or numpy.random.Generator, optional
        Seed for ``'random'``. Defaults to 0.

    Returns
    -------
    list of str
        ``n_blocks`` patterns.

    Raises
    ------
    InputError
        On a negative ``n_blocks`` or an unknown ``order`` or ``first``.
    """
    n = check_count(n_blocks, "n_blocks")
    if first not in PATTERNS:
        raise InputError(f"first pattern {first!r} is not valid: use 'ABBA' or 'BAAB'")
    other = PATTERNS[1] if first == PATTERNS[0] else PATTERNS[0]
    if order == "alternate":
        return [first if i % 2 == 0 else other for i in range(n)]
    if order == "random":
        rng = np.random.default_rng(seed)
        half = n // 2
        pool = [PATTERNS[0]] * half + [PATTERNS[1]] * half
        if n % 2:
            pool.append(PATTERNS[int(rng.integers(2))])
        return [pool[i] for i in rng.permutation(n)]
    raise InputError(f"order {order!r} is not valid: use 'alternate' or 'random'")


def check_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"{name} {value!r} is not a non-negative integer")
    return int(value)


def as_blocks(blocks: Iterable[Block]) -> list[Block]:
    if isinstance(blocks, (str, bytes, Block)) or not isinstance(blocks, Iterable):
        raise InputError(
            f"blocks {blocks!r} is not a sequence of Block: pass e.g. [Block('ABBA', (...)), ...]"
        )
    out = list(blocks)
    for i, block in enumerate(out):
        if not isinstance(block, Block):
            raise InputError(
                f"blocks[{i}] {block!r} is a {type(block).__name__}, not a Block: "
                f"wrap it as Block(pattern, values)"
            )
    return out


def log_slots(blocks: Sequence[Block]) -> tuple[np.ndarray, np.ndarray]:
    """Log of the slot values, shape (n, 4), and the candidate mask, shape (n, 4)."""
    n = len(blocks)
    logs = np.log(np.array([b.values for b in blocks], dtype=np.float64).reshape(n, 4))
    is_candidate = np.array([[c == "B" for c in b.pattern] for b in blocks], dtype=bool)
    return logs, is_candidate.reshape(n, 4)


# ---------------------------------------------------------------------------
# Run order

CONTROL, CANDIDATE = "control", "candidate"
SLOT_VARIANTS = {"ABBA": (CONTROL, CANDIDATE, CANDIDATE, CONTROL), "BAAB": (CANDIDATE, CONTROL, CONTROL, CANDIDATE)}


@dataclass(frozen=True)
class Slot:
    """One run in the schedule.

    Attributes:
        index: order of execution, 0-based, warmups included.
        variant: ``"control"`` or ``"candidate"``.
        block: block number, 0-based; ``None`` for a warmup.
        position: slot position within the block, 0..3; ``None`` for a warmup.
        pattern: ``"ABBA"``, ``"BAAB"`` or ``"warmup"``.
    """

    index: int
    variant: str
    block: int | None
    position: int | None
    pattern: str

    @property
    def is_warmup(self) -> bool:
        return self.block is None


def schedule_patterns(repeats: int, *, randomize: bool = False, seed: int = 0,
                      option: str = "--repeats") -> list[str]:
    """Patterns of ``repeats`` blocks: alternating, or ABBA then a seeded balanced random order.

    Raises:
        InputError: ``repeats`` < 1 (the message names it ``option``).
    """
    if repeats < 1:
        raise InputError(f"{option} must be at least 1, got {repeats}")
    if not randomize:
        return block_patterns(repeats)
    return ["ABBA"] + block_patterns(repeats - 1, order="random", first="BAAB", seed=seed)


def ab_schedule(repeats: int, *, warmup: int = 1, randomize: bool = False, seed: int = 0,
                repeats_option: str = "--repeats", warmup_option: str = "--warmup") -> list[Slot]:
    """The full slot order: ``warmup`` untimed runs per variant, then the blocks.

    Raises:
        InputError: ``repeats`` < 1 or ``warmup`` < 0 (the message names them ``repeats_option`` and
            ``warmup_option``).
    """
    if warmup < 0:
        raise InputError(f"{warmup_option} must be 0 or more, got {warmup}")
    slots: list[Slot] = []
    for _ in range(warmup):
        for variant in (CONTROL, CANDIDATE):
            slots.append(Slot(len(slots), variant, None, None, "warmup"))
    for block, pattern in enumerate(schedule_patterns(repeats, randomize=randomize, seed=seed,
                                                      option=repeats_option)):
        for position, variant in enumerate(SLOT_VARIANTS[pattern]):
            slots.append(Slot(len(slots), variant, block, position, pattern))
    return slots
