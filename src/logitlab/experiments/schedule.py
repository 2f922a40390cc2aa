"""Counterbalanced run order: untimed warmups, then ABBA / BAAB blocks.

Each block holds both variants twice, mirrored (A B B A or B A A B), so a
linear drift within a block and a first-vs-second slot bias cancel in the
block's candidate/control ratio. Blocks alternate ABBA, BAAB (or are drawn in
a seeded, balanced random order); the first block is always ABBA so the first
measured run is the control — the reference run every other run is compared
with.
"""

from __future__ import annotations

from dataclasses import dataclass

from logitlab.errors import InputError
from logitlab.perf import block_patterns as perf_block_patterns

CONTROL, CANDIDATE = "control", "candidate"
PATTERNS = {"ABBA": (CONTROL, CANDIDATE, CANDIDATE, CONTROL), "BAAB": (CANDIDATE, CONTROL, CONTROL, CANDIDATE)}


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


def block_patterns(repeats: int, *, randomize: bool = False, seed: int = 0) -> list[str]:
    """Patterns of ``repeats`` blocks: alternating, or ABBA then a seeded balanced random order.

    Raises:
        InputError: ``repeats`` < 1.
    """
    if repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {repeats}")
    if not randomize:
        return perf_block_patterns(repeats)
    return ["ABBA"] + perf_block_patterns(repeats - 1, order="random", first="BAAB", seed=seed)


def ab_schedule(repeats: int, *, warmup: int = 1, randomize: bool = False, seed: int = 0) -> list[Slot]:
    """The full slot order: ``warmup`` untimed runs per variant, then the blocks.

    Raises:
        InputError: ``repeats`` < 1 or ``warmup`` < 0.
    """
    if warmup < 0:
        raise InputError(f"--warmup must be 0 or more, got {warmup}")
    slots: list[Slot] = []
    for _ in range(warmup):
        for variant in (CONTROL, CANDIDATE):
            slots.append(Slot(len(slots), variant, None, None, "warmup"))
    for block, pattern in enumerate(block_patterns(repeats, randomize=randomize, seed=seed)):
        for position, variant in enumerate(PATTERNS[pattern]):
            slots.append(Slot(len(slots), variant, block, position, pattern))
    return slots
