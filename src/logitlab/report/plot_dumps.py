"""Plots of the dump-diff figures: the layer × position heatmap and the error growth per layer.

Each function takes a matplotlib ``Figure`` and the ``data`` of a
:class:`~logitlab.report.document.Figure` block built by
:func:`logitlab.report.figure_blocks.dump_figures`, and draws.
"""

from __future__ import annotations

import math
from typing import Any

from logitlab.report.figures import COLORS, legend_above, log10_heatmap, plain

__all__ = ["dump_heatmap", "dump_growth"]


def dump_heatmap(fig: Any, data: dict[str, Any]) -> None:
    """Layers (rows, execution order top to bottom) × positions, log10 max |Δ|; the first divergence boxed."""
    from matplotlib.patches import Rectangle

    layers, positions, values = data["layers"], data["positions"], data["values"]
    fig.set_size_inches(7.5, min(9.0, max(2.4, 0.9 + 0.17 * len(layers))))
    ax = log10_heatmap(fig, values, len(positions), cmap="magma_r", identical="every tensor bit-identical")
    step = max(1, len(layers) // 30)
    ax.set_yticks(range(0, len(layers), step), layers[::step], fontsize=7)
    cstep = max(1, len(positions) // 30)
    ax.set_xticks(range(0, len(positions), cstep), [str(p) for p in positions[::cstep]], fontsize=7)
    ax.set_xlabel("position")
    ax.set_ylabel("layer")
    first = data.get("first")
    if first and first["layer"] in layers and first["position"] in positions:
        r, c = layers.index(first["layer"]), positions.index(first["position"])
        box = ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec=COLORS["flip"], lw=2.2, zorder=5))
        box.set_gid("first-divergence")
        ax.set_title(f"red box: the first divergence, {plain(first['label'])}", color=COLORS["flip"], fontsize=9)


def dump_growth(fig: Any, data: dict[str, Any]) -> None:
    """max |Δ| and 1 − cosine per layer (log), the first divergent layer marked."""
    ax = fig.add_subplot()
    labels = data["labels"]
    xs = list(range(len(labels)))

    def series(values: list[float | None]) -> list[float]:  # bit-exact layers (0) have no point on a log axis
        return [math.nan if v is None or v <= 0 else v for v in values]

    a = ax.plot(xs, series(data["max_abs_diff"]), marker="o", ms=3, color=COLORS["candidate"], label="max |Δ|")
    a[0].set_gid("growth-max-abs")
    b = ax.plot(xs, series(data["one_minus_cos"]), marker="s", ms=3, color=COLORS["control"],
                label="1 − min cosine")
    b[0].set_gid("growth-cosine")
    ax.set_yscale("log")
    first = data.get("first")
    if first is not None:
        line = ax.axvline(first, color=COLORS["flip"], ls="--", lw=1, label=f"first divergence (layer {labels[first]})")
        line.set_gid("first-divergence")
    step = max(1, len(labels) // 30)
    ax.set_xticks(xs[::step], labels[::step], fontsize=7)
    ax.set_xlabel("layer (execution order)")
    ax.set_ylabel("difference (log scale)")
    legend_above(ax, ncols=3)
