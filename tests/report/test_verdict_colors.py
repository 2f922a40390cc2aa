"""The verdict colours of the sweep heatmap and the invariance matrix: one distinct colour per verdict word."""

from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from logitlab.numerics.verdict import VERDICTS
from logitlab.report.figures import NO_VERDICT_COLOR, VERDICT_COLORS
from logitlab.report.plot_sweep import sweep_heatmap


def test_one_distinct_colour_per_verdict():
    assert len(VERDICT_COLORS) == len(VERDICTS) == len(set(VERDICT_COLORS))
    assert NO_VERDICT_COLOR not in VERDICT_COLORS


def test_every_sweep_cell_gets_its_verdicts_colour():
    """The heatmap's colour map spans every verdict (it had 5 colours for 8 verdicts: neighbours shared one)."""
    n = len(VERDICTS)
    cells = [{"row": 0, "column": i, "verdict": VERDICTS[i], "status": "ok", "severity": i} for i in range(n)]
    cells.append({"row": 1, "column": 0, "verdict": None, "status": "failed", "severity": None})
    data = {"rows": ["a", "b"], "columns": [str(i) for i in range(n)], "verdicts": list(VERDICTS),
            "cells": cells, "row_axis": "r", "column_axes": ["c"]}
    fig = Figure()
    sweep_heatmap(fig, data)
    (image,) = fig.axes[0].images
    grid = image.get_array()
    colours = [[to_hex(image.cmap(image.norm(v))) for v in row] for row in grid]
    assert colours[0] == [c.lower() for c in VERDICT_COLORS]
    assert colours[1][0] == NO_VERDICT_COLOR
