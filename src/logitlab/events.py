"""Progress events: how long work reports what it is doing without printing.

Experiments, dump captures and ``bench run`` take an optional ``on_event``
callback and call it as ``on_event(kind, data)`` — ``kind`` a short word
(``"start"``, ``"slot"``, ``"step"``, ...), ``data`` a dict of what the
command line needs to draw a progress bar. The library itself never prints.
"""

from __future__ import annotations

from typing import Any, Callable

#: ``on_event(kind, data)``.
Event = Callable[[str, dict[str, Any]], None]


def ignore_event(kind: str, data: dict[str, Any]) -> None:
    """The default ``on_event``: does nothing."""


__all__ = ["Event", "ignore_event"]
