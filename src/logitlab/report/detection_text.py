"""Detection limits (:mod:`logitlab.numerics.detection`) as report lines: one per fault shape, and one table cell."""

from __future__ import annotations

from typing import Mapping

from logitlab.numerics.detection import HEADLINE, S_MAX, DetectionLimits, ShapeLimit

__all__ = ["DETECTION_TITLE", "HEADLINE_HEADER", "detection_title", "detection_lines", "headline_cell",
           "limit_cell", "SHAPE_TEXT"]


def detection_title(what: str = "this run") -> str:
    """The line above the bullets: what the faults were planted into (``what``) and what the sizes mean."""
    return (f"detection limit: faults planted into a copy of {what}, the smallest size (logits) that reads "
            "divergent wherever it lands")


DETECTION_TITLE = detection_title()
#: What each shape is, as the report says it.
SHAPE_TEXT = {
    "argmax-up": "one logit (the argmax token) raised",
    "argmax-down": "one logit (the argmax token) lowered",
    "tail-up": "one logit (a median-ranked token) raised",
    "row-noise": "every logit of one position + s × N(0, 1)",
    "top2-swap": "the top-2 of one confident position swapped",
    "all-rows-shift": "every logit of every position + s",
}
#: The header of a table column that shows one shape's limit (:data:`~logitlab.numerics.detection.HEADLINE`).
HEADLINE_HEADER = f"{HEADLINE} limit"


def _g(x: float) -> str:
    return f"{x:.4g}"


def _line(s: ShapeLimit, place: str | None) -> str:
    what = SHAPE_TEXT.get(s.shape, s.shape)
    if s.shape == "top2-swap":
        if not s.probed:
            return f"{what}: no position has a reference margin at or above near_tie_margin"
        missed = "" if s.missed_margin is None else f"; missed up to margin {_g(s.missed_margin)}"
        return f"{what}: caught at {s.caught} of {s.probed} confident positions{missed}"
    word = "systematic-offset" if s.shape == "all-rows-shift" else "divergent"
    if s.limit is None:
        if s.shape == "all-rows-shift":
            return f"{what}: no size reads {word} (the verdict is already as severe)"
        return f"{what}: caught at {s.caught} of {s.probed} positions up to 10⁴ (never at the others)"
    where = ""
    if s.position is not None:
        where = f" (hardest at {place or f'position {s.position}'}; median {_g(s.median)})"
    below = f"; half of it reads {s.below}" if s.below else ""
    return f"{what}: ≥ {_g(s.limit)} reads {word}{where}{below}"


def detection_lines(limits: DetectionLimits, places: Mapping[str, str] | None = None, *,
                    notes: bool = True) -> list[str]:
    """One line per shape, then (``notes``) the notes (what no shape can show); empty for a ``divergent`` pair.

    ``places``: shape -> how its hardest position is named (default ``position N``), e.g. a prompt and an
    output index where the comparison pools several prompts.
    """
    if not limits.shapes:
        return []
    places = places or {}
    return [_line(s, places.get(s.shape)) for s in limits.shapes] + (list(limits.notes) if notes else [])


def limit_cell(limit: float | None, measured: int) -> str:
    """A table cell for a limit in logits: ``—`` not measured, ``> 1e4`` measured but a position never caught."""
    if not measured:
        return "—"
    return f"> {S_MAX:g}" if limit is None else _g(limit)


def headline_cell(limits: DetectionLimits | None) -> str:
    """The :data:`~logitlab.numerics.detection.HEADLINE` shape's limit of one comparison as a table cell."""
    shape = next((s for s in limits.shapes if s.shape == HEADLINE), None) if limits is not None else None
    return "—" if shape is None else limit_cell(shape.limit, 1)
