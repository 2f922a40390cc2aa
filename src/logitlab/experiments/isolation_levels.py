"""The isolation levels of a slot, weakest first (what each means: :mod:`logitlab.experiments.isolation`).

Standard library only: the CLI's ``--isolation`` choices come from here without
loading numpy or an engine.
"""

from __future__ import annotations

__all__ = ["ISOLATION_LEVELS", "stronger_isolation"]

#: ``session``: a fresh session per slot on one engine per variant; ``engine``: a fresh engine
#: object per slot; ``process``: each slot in its own subprocess with the variant's environment.
ISOLATION_LEVELS = ("session", "engine", "process")


def stronger_isolation(level: str) -> str | None:
    """The next stronger isolation level, or None after ``process``."""
    index = ISOLATION_LEVELS.index(level)
    return ISOLATION_LEVELS[index + 1] if index + 1 < len(ISOLATION_LEVELS) else None
