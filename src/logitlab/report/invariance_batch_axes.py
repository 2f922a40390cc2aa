"""What the invariance matrix's two batch axes compared, in words: ``batch`` (its sizes, with those around the
engine's batch buckets) and ``batch-position`` (which slots and paddings differ from the prompt alone)."""

from __future__ import annotations

from typing import Any, Sequence

from logitlab.experiments.invariance_matrix import AxisResult

__all__ = ["batch_sizes_text", "batch_position_text", "batch_workload"]


def batch_sizes_text(axis: AxisResult, config: dict[str, Any]) -> str:
    """``B = 1..4 vs the prompt alone``; with buckets, ``B = 1..4 and 7, 8, 9 around the buckets 8 (first
    differing size: B=9) vs the prompt alone``."""
    text = f"B = 1..{config['max_batch']}"
    buckets = config.get("buckets") or []
    extra = _extra_sizes(axis, config)
    if buckets:
        text += (f" and {', '.join(map(str, extra))}" if extra else "") + \
            f" around the buckets {', '.join(map(str, buckets))}"
        differing = [c.details["batch_size"] for _, c in axis.checks()
                     if c.word != "bit-exact" and "batch_size" in c.details]
        if differing:
            text += f" (first differing size: B={min(differing)})"
    return text + " vs the prompt alone"


def _extra_sizes(axis: AxisResult, config: dict[str, Any]) -> list[int]:
    """The batch sizes the axis ran beyond 1..``max_batch`` (those around the engine's buckets)."""
    ran = {int(b) for probe in axis.probes for b in probe.config.get("batch_sizes", ())}
    return sorted(ran - set(range(1, int(config["max_batch"]) + 1)))


def batch_workload(axes: Sequence[AxisResult], config: dict[str, Any]) -> str:
    """The header's ``batch B = 1..4`` (``batch B = 1..2, 3`` with the sizes around the buckets)."""
    axis = next(a for a in axes if a.axis == "batch")
    return f"batch B = 1..{config['max_batch']}" + "".join(f", {b}" for b in _extra_sizes(axis, config))


def batch_position_text(axis: AxisResult, config: dict[str, Any]) -> str:
    """``the prompt in each of the 4 slots of a mixed batch of 4 vs the prompt alone; differing: slot 1, 3 (right
    padding)`` (``none`` when every slot is bit-exact)."""
    text = f"the prompt in each of the {config['max_batch']} slots of a mixed batch of {config['max_batch']}"
    paddings = sorted({p for probe in axis.probes for p in probe.details.get("paddings", []) if p != "none"})
    if paddings:
        text += f", {' and '.join(paddings)} padding"
    differing: dict[str, set[int]] = {}
    for _, check in axis.checks():
        if check.word != "bit-exact" and "slot" in check.details:
            differing.setdefault(check.details["padding"], set()).add(int(check.details["slot"]))
    found = "; ".join(f"slot {', '.join(map(str, sorted(slots)))}" + (f" ({pad} padding)" if pad != "none" else "")
                      for pad, slots in sorted(differing.items()))
    return f"{text} vs the prompt alone; differing: {found or 'none'}"
