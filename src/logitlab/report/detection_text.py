"""Detection limits (:mod:`logitlab.numerics.detection`) as report lines: one per fault shape."""

from __future__ import annotations

from logitlab.numerics.detection import DetectionLimits, ShapeLimit

__all__ = ["DETECTION_TITLE", "detection_lines", "SHAPE_TEXT"]

DETECTION_TITLE = ("detection limit: faults planted into a copy of this run, the smallest size (logits) that reads "
                   "divergent wherever it lands")
#: What each shape is, as the report says it.
SHAPE_TEXT = {
    "argmax-up": "one logit (the argmax token) raised",
    "argmax-down": "one logit (the argmax token) lowered",
    "tail-up": "one logit (a median-ranked token) raised",
    "row-noise": "every logit of one position + s × N(0, 1)",
    "top2-swap": "the top-2 of one confident position swapped",
    "all-rows-shift": "every logit of every position + s",
}


def _g(x: float) -> str:
    return f"{x:.4g}"


def _line(s: ShapeLimit) -> str:
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
    where = f" (hardest at position {s.position}; median {_g(s.median)})" if s.position is not None else ""
    below = f"; half of it reads {s.below}" if s.below else ""
    return f"{what}: ≥ {_g(s.limit)} reads {word}{where}{below}"


def detection_lines(limits: DetectionLimits) -> list[str]:
    """One line per shape, then the notes (what no shape can show); empty for a ``divergent`` pair."""
    if not limits.shapes:
        return []
    return [_line(s) for s in limits.shapes] + list(limits.notes)
